"""`everchat import-chats`: past chats logged into this one, summarized as they go.

The samples are tests/data/import_chats/ (see test_import_chats_formats.py for what
each format gives). The kill test runs the real command in a child process, polls the
chat folder (read-only, R5) until some messages are logged, kills it with SIGKILL and
runs it again: every message is then logged once, in order. Every run uses the offline
demo model.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from polling import folder_bytes, wait_until

from everchat.actors.folder import ChatStore
from everchat.frontends.cli.main import main
from cli_world import clean_home

DATA = Path(__file__).parent / "data" / "import_chats"
CHATGPT = DATA / "chatgpt" / "conversations.json"
CLAUDE_CODE = DATA / "claude-code" / "projects"


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    clean_home(tmp_path, monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))


def records(chat: Path) -> list:
    with ChatStore.open(chat, writer=False) as store:
        return [store.message(i) for i in range(store.message_count)]


def pending(chat: Path) -> int:
    from everchat.actors.session.local import Chat

    with Chat.open(chat, writer=False) as reader:
        return reader.status()["unbuilt_lines"]


def ferns_export(path: Path, conversations: int, pairs: int) -> int:
    """A ChatGPT export of `conversations` linear conversations of `pairs` questions and
    answers each; returns how many records importing it logs (a naming note each)."""
    convs = []
    for c in range(conversations):
        mapping = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
        parent, start = "root", 1_700_000_000.0 + c * 86_400
        for k in range(2 * pairs):
            role = "user" if k % 2 == 0 else "assistant"
            text = (f"How often do I water fern {c}-{k}?" if role == "user" else
                    f"Fern {c}-{k}: weekly; " + "keep the soil moist, the light bright but indirect. " * 3)
            mapping[f"m{k}"] = {"id": f"m{k}", "parent": parent, "children": [], "message": {
                "id": f"m{k}", "author": {"role": role}, "create_time": start + 60 * k,
                "content": {"content_type": "text", "parts": [text]}, "recipient": "all", "metadata": {}}}
            mapping[parent]["children"].append(f"m{k}")
            parent = f"m{k}"
        convs.append({"title": f"Ferns {c}", "create_time": start, "mapping": mapping, "current_node": parent,
                      "conversation_id": f"ferns-{c:04d}"})
    path.write_text(json.dumps(convs), encoding="utf-8")
    return conversations * (2 * pairs + 1)


def test_r1_r3_an_import_logs_each_conversation_named_then_its_messages_with_their_own_dates(tmp_path, capsys):
    chat = tmp_path / "chat"
    assert main(["--demo", "import-chats", str(CHATGPT), str(CLAUDE_CODE), "--yes", "--data-dir", str(chat)]) == 0
    out = capsys.readouterr().out
    assert "  ChatGPT: 2 conversations, 8 messages\n  Claude Code: 1 conversation, 6 messages\n" in out
    assert "imported 3 conversations: 14 messages, messages 0-13" in out
    logged = records(chat)
    expected = [
        ("note", 'ChatGPT conversation "Trip to Kyoto", from 2', "2025-03-02T09:15:30+00:00"),
        ("user", "[ChatGPT, 2025-03-02] I'm going to Kyoto for", "2025-03-02T09:15:30+00:00"),
        ("note", "[ChatGPT replied] Day 1: Fushimi Inari at da", "2025-03-02T09:15:45+00:00"),
        ("user", "[ChatGPT, 2025-03-02] [image]\nHere is my ra", "2025-03-02T09:18:20+00:00"),
        ("note", "[ChatGPT replied] The flat city-bus fare is ", "2025-03-02T09:18:30+00:00"),
        ("note", 'ChatGPT conversation "Sourdough starter and ', "2025-03-09T09:00:00+00:00"),
        ("user", "[ChatGPT, 2025-03-09] My starter smells like", "2025-03-09T09:00:01+00:00"),
        ("note", "[ChatGPT replied] Acetone means it is hungry", "2025-03-09T09:00:00+00:00"),
        ("note", 'Claude Code session "Fix the tile cache evict', "2025-08-04T14:02:10+00:00"),
        ("user", "[Claude Code, 2025-08-04] The tile cache evi", "2025-08-04T14:02:30+00:00"),
        ("note", "[Claude Code replied] I'll read the cache fir", "2025-08-04T14:02:36+00:00"),
        ("note", "[Claude Code replied] `evict` pops from the e", "2025-08-04T14:02:40+00:00"),
        ("user", "[Claude Code, 2025-08-04] Fix it with a dequ", "2025-08-04T14:04:00+00:00"),
        ("note", "[Claude Code replied] Done: `evict` now uses ", "2025-08-04T14:04:30+00:00"),
    ]
    assert [(r.kind, r.date) for r in logged] == [(kind, date) for kind, _, date in expected]
    assert all(r.text.startswith(start) for r, (_, start, _) in zip(logged, expected)), [r.text[:50] for r in logged]
    assert "[redacted]" in logged[6].text and "sk-proj-" not in "".join(r.text for r in logged)
    assert logged[1].key == "chat:chatgpt:67c3f1d2-8a4e-8000-9b1c-2f3e4d5c6b7a:u1"
    assert logged[1].meta == {"chat": "chatgpt", "conversation": "67c3f1d2-8a4e-8000-9b1c-2f3e4d5c6b7a"}
    assert pending(chat) == 0  # summarized as it went
    with ChatStore.open(chat, writer=False) as store:
        assert store.check()["messages"] == 14
        (digest,) = logged[12].images  # R9: the screenshot pasted into Claude Code
        assert store.asset(digest)[:8] == b"\x89PNG\r\n\x1a\n"


def test_importing_again_adds_nothing_and_a_grown_export_adds_only_what_is_new(tmp_path, capsys, monkeypatch):
    """Past the store's key horizon too: the command reads every record's key first."""
    monkeypatch.setattr(ChatStore, "KEY_HORIZON", 2)
    chat = tmp_path / "chat"
    assert main(["--demo", "import-chats", str(CHATGPT), "--yes", "--data-dir", str(chat)]) == 0
    logged = folder_bytes(chat / "main")
    capsys.readouterr()
    assert main(["--demo", "import-chats", str(CHATGPT), "--yes", "--data-dir", str(chat)]) == 0
    assert "nothing new to import (8 messages imported before)" in capsys.readouterr().out
    assert folder_bytes(chat / "main") == logged
    # the person went on in ChatGPT: a new answer under the kept branch
    export = json.loads(CHATGPT.read_text(encoding="utf-8"))
    kyoto = export[1]
    kyoto["mapping"]["r2b"]["children"] = ["u3"]
    kyoto["mapping"]["u3"] = {"id": "u3", "parent": "r2b", "children": [], "message": {
        "id": "u3", "author": {"role": "user"}, "create_time": 1743000000.0, "recipient": "all", "metadata": {},
        "content": {"content_type": "text", "parts": ["Is the Philosopher's Path nice in late March?"]}}}
    kyoto["current_node"] = "u3"
    grown = tmp_path / "grown.json"
    grown.write_text(json.dumps(export), encoding="utf-8")
    assert main(["--demo", "import-chats", str(grown), "--yes", "--data-dir", str(chat)]) == 0
    assert "(8 messages imported before are left out)" in capsys.readouterr().out
    new = records(chat)[8:]
    assert [(r.kind, r.text, r.date) for r in new] == [
        ("note", 'ChatGPT conversation "Trip to Kyoto", from 2025-03-02, continued, imported', "2025-03-26T14:40:00+00:00"),
        ("user", "[ChatGPT, 2025-03-26] Is the Philosopher's Path nice in late March?", "2025-03-26T14:40:00+00:00")]


def test_a_dry_run_says_what_it_would_import_and_writes_nothing(tmp_path, capsys):
    chat = tmp_path / "chat"
    assert main(["note", "before", "--data-dir", str(chat)]) == 0
    before = folder_bytes(chat)
    assert main(["--demo", "import-chats", str(CHATGPT), str(CLAUDE_CODE), "--dry-run", "--data-dir", str(chat)]) == 0
    out = capsys.readouterr().out
    assert folder_bytes(chat) == before
    assert (f"to import into {chat}:\n  ChatGPT: 2 conversations, 8 messages\n  Claude Code: 1 conversation, "
            "6 messages\n  14 records, 1,413 bytes, 1 image\n  summaries: up to about 13 model calls") in out
    assert out.endswith("dry run: nothing was written\n")
    assert main(["import-chats", str(CHATGPT), "--dry-run", "--data-dir", str(tmp_path / "new")]) == 0
    assert not (tmp_path / "new").exists()
    capsys.readouterr()
    assert main(["import-chats", str(CHATGPT), "--since", "2025-03-05", "--dry-run", "--data-dir", str(chat)]) == 0
    assert "  ChatGPT: 1 conversation, 3 messages\n" in capsys.readouterr().out  # the sourdough one, its note too
    assert folder_bytes(chat) == before


def test_without_yes_it_asks_and_a_no_logs_nothing(tmp_path, capsys, monkeypatch):
    chat = tmp_path / "chat"
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    assert main(["--demo", "import-chats", str(CHATGPT), "--data-dir", str(chat)]) == 0
    assert "nothing was imported (--yes imports without asking)" in capsys.readouterr().out
    assert not chat.exists()
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert main(["--demo", "import-chats", str(CHATGPT), "--data-dir", str(chat)]) == 0
    assert len(records(chat)) == 8


def test_with_no_path_it_reads_this_computers_claude_code_and_codex_logs(tmp_path, capsys):
    home = tmp_path / "user"
    shutil.copytree(CLAUDE_CODE, home / ".claude" / "projects")
    shutil.copytree(DATA / "codex" / "sessions", home / ".codex" / "sessions")
    assert main(["import-chats", "--dry-run", "--data-dir", str(tmp_path / "chat")]) == 0
    out = capsys.readouterr().out
    assert "  Claude Code: 1 conversation, 6 messages\n  Codex: 1 conversation, 5 messages\n" in out
    shutil.rmtree(home)
    assert main(["import-chats", "--dry-run", "--data-dir", str(tmp_path / "chat")]) == 2
    assert "no path given, and this computer has no Claude Code" in capsys.readouterr().err


def test_a_file_over_the_limit_or_not_a_chat_is_refused_and_nothing_is_made(tmp_path, capsys, monkeypatch):
    from everchat.actors.upkeep.importing import _files

    monkeypatch.setattr(_files, "MAX_BYTES", 1000)
    assert main(["import-chats", str(CHATGPT), "--yes", "--data-dir", str(tmp_path / "chat")]) == 2
    assert "over the 1,000-byte limit; nothing was imported" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("just notes\n")
    assert main(["import-chats", str(tmp_path / "notes.txt"), "--yes", "--data-dir", str(tmp_path / "chat")]) == 2
    assert "not a ChatGPT or Claude export, nor a Claude Code or Codex session log" in capsys.readouterr().err
    assert main(["import-chats", str(CHATGPT), "--since", "last week", "--data-dir", str(tmp_path / "chat")]) == 2
    assert not (tmp_path / "chat").exists()


def test_a_killed_import_run_again_logs_every_message_once_in_order(tmp_path):
    chat = tmp_path / "chat"
    export = tmp_path / "conversations.json"
    total = ferns_export(export, 200, 5)
    command = [sys.executable, "-m", "everchat.frontends.cli.main", "--demo", "import-chats", str(export), "--yes",
               "--data-dir", str(chat)]

    def logged() -> int:
        if not (chat / "chat.json").exists():
            return 0
        with ChatStore.open(chat, writer=False, quiet=True) as store:
            return store.message_count

    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: logged() >= 100 or child.poll() is not None, 120, "100 messages logged")
        assert child.poll() is None, "the import finished before it could be killed"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    first = logged()
    assert 100 <= first < total

    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"({first} messages imported before are left out)" in again.stdout
    final = records(chat)
    assert len(final) == total
    keys = [r.key for r in final]
    assert len(set(keys)) == total  # each once
    expected = []
    for c in range(200):
        expected.append(f"chat:chatgpt:ferns-{c:04d}")
        expected += [f"chat:chatgpt:ferns-{c:04d}:m{k}" for k in range(10)]
    assert keys == expected  # in order, the interrupted conversation going on without a second heading
    assert pending(chat) == 0
    # R19: summarized as it went, so the view ends within its budget (as `import`'s does)
    from everchat.actors.session.local import Chat

    with Chat.open(chat, writer=False) as reader:
        status = reader.status()
    assert status["view_bytes"] <= 128_000 < sum(len(r.text.encode()) for r in final)


def test_done_when_the_demo_model_finds_an_imported_conversation_through_zoom(tmp_path, capsys):
    """The issue's "done when": import a ChatGPT export and a Claude Code folder with
    --yes, then `ask` about an old conversation by its content."""
    chat = tmp_path / "chat"
    assert main(["--demo", "import-chats", str(CHATGPT), str(CLAUDE_CODE), "--yes", "--data-dir", str(chat)]) == 0
    capsys.readouterr()
    assert main(["--demo", "ask", "What is the city-bus fare to Ginkaku-ji in yen?", "--data-dir", str(chat)]) == 0
    reply = capsys.readouterr().out
    assert "230 yen" in reply and "(I zoomed " in reply, reply
    assert main(["--demo", "ask", "Which deque method fixed the tile cache evict bug?", "--data-dir", str(chat)]) == 0
    reply = capsys.readouterr().out
    assert "popleft()" in reply and "(I zoomed " in reply, reply


def test_ctrl_c_keeps_what_is_logged_and_the_same_command_then_finishes(tmp_path, capsys, monkeypatch):
    """Reusing `import`'s machinery: the first Ctrl-C commits the messages in hand and stops
    with status 130; the rerun logs the rest, each once."""
    from everchat.frontends.cli import import_chats as commands_import_chats

    chat = tmp_path / "chat"
    export = tmp_path / "conversations.json"
    total = ferns_export(export, 6, 3)
    real = commands_import_chats._as_items

    def interrupted(plans):
        for n, item in enumerate(real(plans)):
            if n == 20:
                os.kill(os.getpid(), signal.SIGINT)  # as a person's Ctrl-C: noted, not raised
            yield item

    monkeypatch.setattr(commands_import_chats, "_as_items", interrupted)
    assert main(["--demo", "import-chats", str(export), "--yes", "--data-dir", str(chat)]) == 130
    err = capsys.readouterr().err
    first = len(records(chat))
    assert 0 < first < total
    assert f"everchat: import interrupted after {first} messages; run the same command again" in err
    monkeypatch.setattr(commands_import_chats, "_as_items", real)
    assert main(["--demo", "import-chats", str(export), "--yes", "--data-dir", str(chat)]) == 0
    keys = [r.key for r in records(chat)]
    assert len(keys) == total == len(set(keys))


def test_the_progress_bar_says_how_long_the_rest_should_take():
    from everchat.frontends.cli.progress import Progress

    now = [100.0]
    stream = io.StringIO()
    bar = Progress("importing chats", 4000, stream, eta=True, clock=lambda: now[0])
    now[0] += 30.0
    bar.update(1000, "10 messages")
    now[0] += 100.0
    bar.update(2000, "20 messages")
    bar.finish(4000, "40 messages")
    assert stream.getvalue().splitlines() == [
        "importing chats [######..................]  25% 1000 B of 3.9 KB ETA 1m30s 10 messages",
        "importing chats [############............]  50% 2.0 KB of 3.9 KB ETA 2m10s 20 messages",
        "importing chats [########################] 100% 3.9 KB of 3.9 KB 40 messages",
    ]


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the server stops at SIGINT, as at a Ctrl-C


def test_r5_import_chats_attaches_to_a_running_serve_and_logs_through_it(tmp_path):
    """One chat, one server: the import logs through the server's log writer (the lock
    stays the server's) and its pool summarizes as it goes."""
    chat = tmp_path / "chat"
    cli = [sys.executable, "-m", "everchat.frontends.cli.main", "--data-dir", str(chat)]
    server = subprocess.Popen([*cli, "--demo", "serve", "--workers", "1"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default)
    try:
        assert server.stdout.readline().startswith("everchat: serving"), server.stderr.read()
        done = subprocess.run([*cli, "--demo", "import-chats", str(CHATGPT), "--yes"], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith(f"everchat: attached to the running chat (pid {server.pid})\n")
        assert "imported 2 conversations: 8 messages, messages 0-7" in done.stdout
        assert [r.date for r in records(chat)][:2] == ["2025-03-02T09:15:30+00:00", "2025-03-02T09:15:30+00:00"]
        assert server.poll() is None
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
        try:
            server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
    assert server.returncode == 0
