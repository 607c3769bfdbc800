"""R5: one writer per chat, held with an OS lock; readers never take it and never write."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest
from store_world import PNG, folder_bytes

from everchat.actors.folder import ChatLocked, ChatStore

_TRY_WRITER = """
import json, sys
from everchat.actors.folder import ChatStore, ChatLocked
try:
    ChatStore.open(sys.argv[1]).close()
    print(json.dumps({"opened": True}))
except ChatLocked as exc:
    print(json.dumps({"locked": str(exc), "pid": exc.pid, "host": exc.host}))
"""

_HOLD_WRITER = """
import sys
from everchat.actors.folder import ChatStore
store = ChatStore.open(sys.argv[1])
store.append_message("user", "from the child")
print("ready", flush=True)
sys.stdin.readline()
store.close()
"""


def _run(script: str, chat) -> dict:
    out = subprocess.run([sys.executable, "-c", script, str(chat)], capture_output=True,
                         text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def _hold(script: str, chat) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", script, str(chat)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    return child


@pytest.fixture
def chat(tmp_path):
    path = tmp_path / "chat"
    ChatStore.open(path, create=True).close()
    return path


def test_r5_a_second_writer_in_another_process_gets_chat_locked_naming_pid_and_host(chat):
    with ChatStore.open(chat):
        got = _run(_TRY_WRITER, chat)
    assert got["pid"] == os.getpid() and got["host"] == socket.gethostname()
    assert got["locked"] == (f"chat {chat} is locked by its writer, pid {os.getpid()} on "
                             f"host {socket.gethostname()}")
    assert _run(_TRY_WRITER, chat) == {"opened": True}  # closing released the lock


def test_r5_a_writer_in_another_process_locks_this_one_out(chat):
    child = _hold(_HOLD_WRITER, chat)
    try:
        with pytest.raises(ChatLocked) as err:
            ChatStore.open(chat)
        assert (err.value.pid, err.value.host) == (child.pid, socket.gethostname())
    finally:
        child.communicate("done\n", timeout=60)
    with ChatStore.open(chat) as s:
        assert s.message(0).text == "from the child"


def test_r5_the_lock_dies_with_its_owner_under_kill_9(chat):
    child = _hold(_HOLD_WRITER, chat)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    with ChatStore.open(chat) as s:
        assert s.message_count == 1


def test_r5_a_second_writer_in_the_same_process_is_refused_too(chat):
    with ChatStore.open(chat):
        with pytest.raises(ChatLocked, match=f"pid {os.getpid()}"):
            ChatStore.open(chat)


def test_r5_a_reader_opens_while_the_chat_is_locked_and_writes_nothing(chat):
    with ChatStore.open(chat) as w:
        digest = w.put_asset(PNG)
        w.append_messages([("user", f"m{n}", f"k{n}", [digest]) for n in range(10)])
        w.append_nodes([(0, 0, "user: m0"), (0, 1, "user: m1"), (1, 0, "m0 m1")])
        w.append_merge([(0, 0)], 10, False)
        w.save_views({"v": 1}, {"c": 1})
        with open(chat / "main" / os.listdir(chat / "main")[0], "ab") as f:
            f.write(b'{"i":10,"kind":"us')  # a write in flight, as the reader sees it
        before = folder_bytes(chat)
        with ChatStore.open(chat, writer=False) as r:
            assert r.message_count == 10 and len(r.repairs) == 1
            assert r.message(9).images == (digest,) and r.node(1, 0) == "m0 m1"
            assert r.merge_records() == [([(0, 0)], 10, False)]
            assert r.load_views() == ({"v": 1}, {"c": 1}) and r.asset(digest) == PNG
            assert r.check()["torn"] == 1
        assert folder_bytes(chat) == before


def test_r5_a_reader_checks_the_chat_as_far_as_it_opened_it_while_the_writer_goes_on(chat):
    with ChatStore.open(chat) as w:
        w.append_messages([("user", f"m{n}") for n in range(4)])
        with ChatStore.open(chat, writer=False) as r:
            w.append_messages([("user", f"later {n}") for n in range(4)])
            w.append_nodes([(0, 5, "user: later 1")])
            w.append_merge([], 8, True)
            assert r.message_count == 4
            assert r.check() == dict(r.check(), messages=4, nodes=0, merges=0)
        assert w.check()["messages"] == 8
