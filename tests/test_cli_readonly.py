"""R5: `view`, `zoom`, `date`, `status` and `check` never take the lock and never write.

They run as real processes against a chat held open by a running `everchat serve`
(its log writer holds the lock), and the folder's every file, byte and mtime is the
same afterwards; on a folder without a chat they fail clearly and make nothing; wrong
arguments exit 2 and change nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from everchat.actors.session.local import Chat
from everchat.frontends.cli.main import main


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder`: its bytes and mtime (ns)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_socket():
            out[str(path.relative_to(folder))] = (path.read_bytes(), path.stat().st_mtime_ns)
        elif path.is_dir():
            out[str(path.relative_to(folder)) + "/"] = (b"", path.stat().st_mtime_ns)
    return out


def everchat(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def chat(tmp_path):
    """A chat of short notes (free leaves, R11; the larger merges need compactions)."""
    folder = tmp_path / "chat"
    with Chat.open(folder, create=True) as writer:
        for k in range(40):
            writer.add("note", f"note {k}: the amber-{k} probe")
    return folder


@pytest.fixture
def served(chat):
    """`everchat serve` holding the chat (its log writer has the lock), with every
    summary built first so that the running chat has nothing to write meanwhile."""
    assert everchat("--demo", "compact", "--data-dir", str(chat)).returncode == 0
    server = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", "--demo", "serve",
                               "--data-dir", str(chat)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("everchat: serving"), line + server.stderr.read()
        yield chat
    finally:
        server.terminate()
        server.wait(timeout=60)
        server.stdout.close()
        server.stderr.close()


def test_r5_read_only_commands_work_while_the_chat_is_open_and_change_no_byte(served):
    chat = served
    assert Path(chat / "writer.lock").read_text()  # the server holds it and names itself there
    before = snapshot(chat)
    view = everchat("view", "--data-dir", str(chat))
    assert view.returncode == 0 and "0+1|note: note 0: the amber-0 probe" in view.stdout
    status = everchat("--data-dir", str(chat), "status")
    assert status.returncode == 0
    figures = json.loads(status.stdout)
    assert (figures["messages"], figures["pending"]) == (40, 0)
    assert figures["live"]["running"] is True and figures["live"]["pending"] == 0  # asked the served chat
    assert figures["live"]["view_lines"] == figures["view_lines"]  # the same figure under the same name
    assert figures["model"] == "demo" and set(figures["usage"]) >= {"input", "output", "cache_read", "cache_write"}
    assert figures["usage"]["compactions"]["calls"] > 0  # the compact run's calls, saved in usage.json
    assert set(figures["live"]["usage"]) >= {"input", "cache_read"}  # this run's, from the turn runner
    zoom = everchat("zoom", "8+8", "--data-dir", str(chat))
    assert zoom.returncode == 0 and zoom.stdout.startswith("8+4|")
    whole = everchat("zoom", "39", "--data-dir", str(chat))
    assert whole.stdout == "note: note 39: the amber-39 probe\n"
    date = everchat("date", "39", "--data-dir", str(chat))
    assert date.returncode == 0 and date.stdout[:4].isdigit()
    check = everchat("check", "--data-dir", str(chat))
    assert check.returncode == 0 and json.loads(check.stdout)["ok"] is True
    assert snapshot(chat) == before


@pytest.mark.parametrize("args, words", [
    (["zoom", "6", "4"], "No line 6+4. id must be a multiple of n, at least 0."),
    (["zoom", "0", "3"], "No line 0+3. n must be a power of two: 1, 2, 4, 8 …"),
    (["zoom", "32+16"], "No line 32+16. The chat has 40 messages (ids 0 to 39)."),
    (["zoom", "40"], "No line 40+1. The chat has 40 messages (ids 0 to 39)."),
    (["zoom", "0", "1", "--page", "2"], "Message 0 has 1 page, not page 2."),
    (["zoom", "0", "2", "--page", "2"], "--page pages a whole message (N = 1); zoom 0+2 shows two lines"),
    (["zoom", "8+8", "--page", "3"], "zoom 8+8 shows two lines and has no pages"),
    (["zoom", "1abc"], "ID is a message id (a whole number), not '1abc'"),
    (["zoom", "Scout"], "No agent named 'Scout'"),
    (["zoom", "Scout", "2"], "names an agent's transcript; it takes no N"),
    (["zoom", "4+4", "4"], "already names its line"),
    (["zoom", "-1"], "ID is a message id (0 or more), not -1"),
    (["date", "99"], "No message 99: the chat has 40 messages (ids 0 to 39)."),
    (["date", "today"], "not 'today'"),
    (["zoom"], "the following arguments are required: id"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_r35_wrong_arguments_exit_2_with_the_reason_and_change_nothing(chat, capsys, args, words):
    before = snapshot(chat)
    assert main([*args, "--data-dir", str(chat)]) == 2
    assert words in capsys.readouterr().err
    assert snapshot(chat) == before


@pytest.mark.parametrize("command", [["view"], ["status"], ["zoom", "0"], ["date", "0"], ["check"]])
def test_a_folder_without_a_chat_fails_clearly_and_stays_as_it_was(tmp_path, capsys, command):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a chat")
    before = snapshot(empty)
    assert main([*command, "--data-dir", str(empty)]) == 1
    assert f"everchat: {empty} holds no chat" in capsys.readouterr().err
    assert snapshot(empty) == before
    missing = tmp_path / "missing"
    assert main([*command, "--data-dir", str(missing)]) == 1
    assert "holds no chat" in capsys.readouterr().err
    assert not missing.exists()


def test_status_of_a_chat_that_is_not_running_has_no_live_figures(chat, capsys):
    (chat / "run").mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (chat / "run" / "supervisor.json").write_text(json.dumps(
        {"version": 1, "pid": int(dead.stdout), "host": os.uname().nodename, "endpoint": "ipc:///nowhere",
         "placement": "single", "transport": "ipc"}))  # left behind by a chat that died
    assert main(["status", "--data-dir", str(chat)]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["live"] == {"running": False}
    assert figures["usage"]["calls"] == 0 and figures["failures"] == 0  # usage.json: nothing used yet
    assert figures["messages"] == 40
