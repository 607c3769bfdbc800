"""P6 (R5): `serve` takes the chat before it touches it. A second `serve` on a chat in use,
single or `--processes`, fails at once with the usual one line naming the owner and exits
1, and the running chat's `run/` (its supervisor.json, its sockets) is left exactly as it
was; a chat held by a plain writer (`note`, `import`) is refused the same way.

Real processes: the running chat is `everchat serve` (or this test holding the writer's
lock), the second is `everchat serve` too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from everchat.actors.tree import Budget
from everchat.actors.folder import ChatLocked, ChatStore
from everchat.actors.supervisor.actor import Placement, Supervisor
from everchat.transport import schema

EVERCHAT = [sys.executable, "-m", "everchat.frontends.cli.main"]
HOST = socket.gethostname()
TAIL = "; close that chat first (read-only commands such as `view` and `status` work meanwhile)"


@pytest.fixture
def env(tmp_path):
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    return dict(keep, EVERCHAT_HOME=str(tmp_path / "home"))


def serve(env: dict, chat: Path, *flags: str) -> subprocess.Popen:
    """`everchat serve` running; returns once it printed that it serves."""
    process = subprocess.Popen([*EVERCHAT, "--demo", *flags, "--data-dir", str(chat), "serve", "--workers", "1"],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    line = process.stdout.readline()
    if not line.startswith("everchat: serving"):
        process.kill()
        raise AssertionError(f"serve did not start: {line!r} {process.communicate()[1]}")
    return process


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_folder(chat: Path) -> dict:
    """What a second serve must not change: every entry of run/ with its inode, mode,
    mtime and (for files) content."""
    out = {}
    for entry in sorted((chat / "run").iterdir()):
        st = entry.lstat()
        content = entry.read_bytes() if entry.is_file() else None
        out[entry.name] = (st.st_ino, st.st_mode, st.st_mtime_ns, content)
    return out


@pytest.fixture
def running(env, tmp_path):
    """A chat served with every actor in its own process."""
    chat = tmp_path / "chat"
    first = serve(env, chat, "--processes")
    yield chat, first
    stop(first)


@pytest.mark.parametrize("mode", [["--processes"], []], ids=["processes", "single"])
def test_p6_a_second_serve_fails_at_once_in_one_line_and_leaves_the_running_chat_alone(env, running, mode):
    chat, first = running
    before = run_folder(chat)
    second = subprocess.run([*EVERCHAT, "--demo", *mode, "--data-dir", str(chat), "serve", "--workers", "1"],
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert (second.returncode, second.stdout) == (1, "")
    assert second.stderr == f"everchat: chat {chat} is locked by its writer, pid {first.pid} on host {HOST}{TAIL}\n"
    assert run_folder(chat) == before
    assert json.loads((chat / "run" / "supervisor.json").read_text())["pid"] == first.pid
    ops = subprocess.run([*EVERCHAT, "--data-dir", str(chat), "ops", "--once", "--json"], env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert ops.returncode == 0, ops.stderr
    rows = {row["name"]: row for row in json.loads(ops.stdout) if row["name"] != "gateway"}
    assert rows["supervisor"]["pid"] == first.pid
    assert first.poll() is None


def test_p6_serve_on_a_chat_a_plain_writer_holds_names_that_writer(env, tmp_path):
    chat = tmp_path / "chat"
    with ChatStore.open(chat, create=True):          # as `note` or `import --log-only` would
        second = subprocess.run([*EVERCHAT, "--demo", "--data-dir", str(chat), "serve", "--workers", "1"],
                                env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert (second.returncode, second.stdout) == (1, "")
    assert second.stderr == f"everchat: chat {chat} is locked by its writer, pid {os.getpid()} on host {HOST}{TAIL}\n"
    assert not (chat / "run").exists()


def test_p6_a_supervisor_refused_the_chat_binds_nothing_and_writes_no_run_file(tmp_path):
    chat = tmp_path / "chat"
    placement = Placement("processes", workers=1, summarizer="scripted")
    with Supervisor(chat, placement, Budget()) as first:
        before = run_folder(chat)
        second = Supervisor(chat, placement, Budget())
        with pytest.raises(ChatLocked, match=f"locked by its writer, pid {os.getpid()} on host {HOST}$"):
            second.start()
        assert second.node is None and all(child.process is None for child in second.children.values())
        assert run_folder(chat) == before
        assert first.node.ask("log_writer", schema.CountMessages(), timeout=10.0).messages == 0
    assert not (chat / "run" / "supervisor.json").exists()
