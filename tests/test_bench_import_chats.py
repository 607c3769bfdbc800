"""The import-chats benchmark's accounting (performance review P3, P4), on tiny runs:
what it builds and that it measures a real process, never speed."""

from __future__ import annotations

from cli_world import clean_home
from everchat.actors.upkeep.importing import read_path
from everchat.actors.folder import ChatStore
from everchat.tools.bench.bench_import_chats import make_chat, make_export, measure


def test_the_export_and_the_big_chat_hold_what_the_bench_says(tmp_path, monkeypatch):
    clean_home(tmp_path, monkeypatch)
    size = make_export(tmp_path / "export.json", 120)
    (found,) = read_path(tmp_path / "export.json")
    assert [len(c.messages) for c in found.conversations] == [50, 50, 20] and size > 0
    make_chat(tmp_path / "chat", 7_500)
    with ChatStore.open(tmp_path / "chat", writer=False) as store:
        assert store.message_count == 7_500
        assert store.logged_keys(["big:0", "big:7499", "big:7500"]) == {"big:0", "big:7499"}
    took, rss = measure(tmp_path / "export.json", tmp_path / "chat", 1)
    assert took > 0 and rss > 10_000_000  # a whole interpreter's resident set, in bytes
