"""P12 and performance review P3/P4: `import-chats` skips what it cannot read (one line
each) and imports the rest, says the ~2 MB cut of a message in its preview, parses each
file once as a stream with memory bounded by a conversation (not the file), finds what
was imported before in the key index without reading the chat's records, and logs at log
speed with `--log-only`. Every run is the real command (`cli.main`)."""

from __future__ import annotations

import io
import json
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from cli_world import clean_home
from everchat.actors.upkeep.importing import read_path
from everchat.actors.folder import MAX_TEXT_BYTES, ChatStore
from everchat.frontends.cli.main import main
from test_import_chats import ferns_export, records

DATA = Path(__file__).parent / "data" / "import_chats"
CHATGPT = DATA / "chatgpt" / "conversations.json"
CODEX = next((DATA / "codex").rglob("rollout-*.jsonl"))
CUT_CHARS = MAX_TEXT_BYTES // 4 - 1024  # the cut's length in characters (chat_sources.CUT_CHARS)


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    clean_home(tmp_path, monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))


def zip_of(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_p12_an_odd_conversation_is_skipped_in_one_line_and_the_others_imported(tmp_path, capsys):
    """The review's: a conversation whose `mapping` is a string, among good ones, refused
    the whole export (exit 2)."""
    export = json.loads(CHATGPT.read_text(encoding="utf-8"))
    export.insert(1, {"title": "Broken one", "mapping": "not a tree", "conversation_id": "odd"})
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    chat = tmp_path / "chat"
    assert main(["--demo", "import-chats", str(path), "--yes", "--data-dir", str(chat)]) == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "skipped" in line]
    assert said == [f"{path}: skipped conversation 1 has no message tree (`mapping`) ('Broken one')"]
    assert "imported 2 conversations: 8 messages" in out
    assert len(records(chat)) == 8


def test_p12_a_zip_member_that_holds_no_chat_is_skipped_and_the_export_imported(tmp_path, capsys):
    """The review's: 3,000 `.jsonl` members that are no chat beside a good
    conversations.json refused the whole ZIP. Each is said (up to 20, then counted)."""
    members = {f"s/{n}.jsonl": b'{"cpu": 0.4}\n' for n in range(25)}
    members["conversations.json"] = CHATGPT.read_bytes()
    archive = zip_of(tmp_path / "export.zip", members)
    assert main(["import-chats", str(archive), "--dry-run", "--data-dir", str(tmp_path / "chat")]) == 0
    lines = capsys.readouterr().out.splitlines()
    skipped = [line for line in lines if line.startswith("skipped ")]
    assert len(skipped) == 20 and skipped[0].startswith(f"skipped {archive}:s/0.jsonl: not a ChatGPT or Claude export")
    assert f"... and 5 more skipped in {archive}" in lines
    assert "  ChatGPT: 2 conversations, 8 messages" in lines
    only_junk = zip_of(tmp_path / "junk.zip", {"a.jsonl": b'{"cpu": 0.4}\n'})
    assert main(["import-chats", str(only_junk), "--dry-run", "--data-dir", str(tmp_path / "chat")]) == 2
    assert "junk.zip holds no chat: " in capsys.readouterr().err


def test_p12_unreadable_lines_in_a_session_log_are_counted_and_its_torn_last_line_is_not(tmp_path, capsys):
    lines = CODEX.read_bytes().splitlines()
    broken = b"\n".join(lines[:3] + [b'{"bad utf-8": "\xff"}', b"not json"] + lines[3:] + [b'{"torn": '])
    path = tmp_path / "rollout-2025-09-14T10-02-11-broken.jsonl"
    path.write_bytes(broken)
    assert main(["import-chats", str(path), "--dry-run", "--data-dir", str(tmp_path / "chat")]) == 0
    out = capsys.readouterr().out
    assert f"{path}: skipped 2 unreadable lines" in out.splitlines()
    assert "  Codex: 1 conversation, 5 messages" in out


def test_p12_the_2_mb_cut_of_a_message_is_said_in_the_preview_and_in_the_text(tmp_path, capsys):
    export = json.loads(CHATGPT.read_text(encoding="utf-8"))
    reply = export[1]["mapping"]["r1"]["message"]["content"]
    reply["parts"] = ["x" * (CUT_CHARS + 5000)]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    chat = tmp_path / "chat"
    assert main(["import-chats", str(path), "--dry-run", "--data-dir", str(chat)]) == 0
    out = capsys.readouterr().out
    assert f"  1 message over {CUT_CHARS:,} characters (about 2 MB): cut there, the rest not imported\n" in out
    assert main(["import-chats", str(path), "--yes", "--log-only", "--data-dir", str(chat)]) == 0
    said = "[ChatGPT replied] " + "x" * (CUT_CHARS + 5000)
    logged = "".join(r.text for r in records(chat) if r.key == "chat:chatgpt:67c3f1d2-8a4e-8000-9b1c-2f3e4d5c6b7a:r1")
    assert logged == said[:CUT_CHARS] + f"\n[… {len(said) - CUT_CHARS:,} more characters not imported]"


class _Counted:
    """json's parse entry points wrapped, counting the characters they are handed."""

    def __init__(self, monkeypatch) -> None:
        self.chars = 0
        real_loads, real_raw = json.loads, json.JSONDecoder.raw_decode

        def loads(s, *args, **kw):
            self.chars += len(s)
            return real_loads(s, *args, **kw)

        def raw_decode(decoder, s, idx=0):
            value, end = real_raw(decoder, s, idx)
            self.chars += end - idx
            return value, end

        monkeypatch.setattr(json, "loads", loads)
        monkeypatch.setattr(json.JSONDecoder, "raw_decode", raw_decode)


def test_p4_an_export_is_parsed_once(tmp_path, monkeypatch):
    """It was parsed twice, to tell its format and to import it (+272 MB on 110 MB)."""
    path = tmp_path / "conversations.json"
    ferns_export(path, 40, 5)
    size = len(path.read_text(encoding="utf-8"))
    counted = _Counted(monkeypatch)
    (found,) = read_path(path)
    assert len(found.conversations) == 40
    assert size * 0.95 <= counted.chars <= size * 1.05


def test_p4_p12_memory_is_bounded_by_a_conversation_not_by_the_export(tmp_path):
    """The review's 408 KB ZIP of 400 MB of white space peaked at 856 MB. Here 40 MB of
    white space between two conversations: the read's peak is a small share of it."""
    export = json.loads(CHATGPT.read_text(encoding="utf-8"))
    blank = " " * (40 << 20)
    data = ("[" + json.dumps(export[0]) + "," + blank + json.dumps(export[1]) + blank + "]").encode()
    archive = zip_of(tmp_path / "export.zip", {"conversations.json": data})
    tracemalloc.start()
    try:
        (found,) = read_path(archive)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [c.title for c in found.conversations] == ["Sourdough starter and a deploy key", "Trip to Kyoto"]
    assert peak < len(data) / 8, f"peak {peak:,} bytes for a {len(data):,}-byte member"


def test_p3_what_was_imported_before_is_found_in_the_key_index_without_reading_the_log(tmp_path, capsys, monkeypatch):
    """A dry run read and parsed every message of the chat for its key (1,000,044 reads on
    a 1M chat). Now only the latest few are read (for the last imported conversation),
    however many the chat holds, and a rerun still logs nothing twice."""
    chat = tmp_path / "chat"
    export = tmp_path / "conversations.json"
    ferns_export(export, 30, 5)
    assert main(["import-chats", str(export), "--yes", "--log-only", "--data-dir", str(chat)]) == 0
    with ChatStore.open(chat) as store:
        store.append_messages([{"kind": "note", "text": f"later {n}", "key": f"later:{n}"} for n in range(1500)])
    reads = []
    real = ChatStore.message
    monkeypatch.setattr(ChatStore, "message", lambda store, i: reads.append(i) or real(store, i))
    capsys.readouterr()
    assert main(["import-chats", str(export), "--dry-run", "--data-dir", str(chat)]) == 0
    assert "nothing new to import (330 messages imported before)" in capsys.readouterr().out
    assert len(reads) <= 256, f"{len(reads)} messages read"


def test_p3_a_log_only_import_logs_without_a_model_and_summarizes_later(tmp_path, capsys):
    """Replies over 512 bytes, each a leaf a model must summarize (R11): `--log-only`
    leaves them pending (no model call), and `compact` builds them later."""
    chat = tmp_path / "chat"
    export = tmp_path / "conversations.json"
    total = ferns_export(export, 12, 4)
    longer = json.loads(export.read_text(encoding="utf-8"))
    for conv in longer:
        for node in conv["mapping"].values():
            if node["message"] and node["message"]["author"]["role"] == "assistant":
                node["message"]["content"]["parts"][0] *= 4
    export.write_text(json.dumps(longer), encoding="utf-8")
    assert main(["import-chats", str(export), "--yes", "--log-only", "--data-dir", str(chat)]) == 0
    out = capsys.readouterr().out
    assert f"imported 12 conversations: {total} messages, messages 0-{total - 1}" in out
    assert "summaries are pending (--log-only)" in out
    assert [r.key for r in records(chat)][:2] == ["chat:chatgpt:ferns-0000", "chat:chatgpt:ferns-0000:m0"]
    assert main(["import-chats", str(export), "--yes", "--log-only", "--data-dir", str(chat)]) == 0
    assert f"nothing new to import ({total} messages imported before)" in capsys.readouterr().out
    assert main(["--demo", "compact", "--data-dir", str(chat)]) == 0
    from everchat.actors.session.local import Chat

    with Chat.open(chat, writer=False) as reader:
        assert reader.status()["unbuilt_lines"] == 0 and reader.store.message_count == total


def test_p12_a_stream_of_any_block_sizes_parses_as_json_does():
    """The streamed list reader against json.loads, with reads of every small size (a
    value, a number, an escape or a UTF-8 character cut at any block boundary)."""
    from everchat.actors.upkeep.importing import _stream

    value = [{"a": "é😀\\\"x" * 3, "n": [1, 22, 333.5, -4e10, True, None]}, 12345678, "tail\u2028", [], {}]
    data = json.dumps(value, ensure_ascii=False).encode()

    class Trickle(io.BytesIO):
        def __init__(self, data: bytes, size: int) -> None:
            super().__init__(data)
            self.size = size

        def read(self, n: int = -1) -> bytes:
            return super().read(self.size)

    for size in range(1, 40):
        assert list(_stream.json_list(Trickle(data, size), "x")) == value, size
