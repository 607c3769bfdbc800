"""Issue 9: `--processes` forks every actor process from one preloaded fork server
(actors/forkserver.py), started by the supervisor's launcher thread, so they all start at
once; the guarantees of the one-process-at-a-time start stay (P16: they die with it)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from everchat.actors import supervisor_parts
from everchat.actors.memory import Budget
from everchat.actors.store import ChatLocked, ChatStore
from everchat.actors.supervisor import Placement, Supervisor
from everchat.transport import schema

_SECONDS = 60.0
PLACEMENT = Placement("processes", workers=2, summarizer="scripted")


def wait_until(condition, what: str) -> None:
    pause = threading.Event()
    deadline = time.monotonic() + _SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {_SECONDS} s")
        pause.wait(0.02)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rpartition(")")[2].split()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads parents from /proc")
def test_issue9_every_actor_process_is_a_child_of_one_fork_server_that_is_the_supervisors_child(tmp_path):
    with Supervisor(tmp_path / "chat", PLACEMENT, Budget()) as supervisor:
        server = supervisor._launcher._server.process.pid
        assert parent_of(server) == os.getpid()
        assert {name: parent_of(child.pid) for name, child in supervisor.children.items()} == \
            {name: server for name in supervisor.children}
        for child in supervisor.children.values():   # the server's pipes are not theirs
            assert [os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in (0, 1)] == ["/dev/null"] * 2
        for name in supervisor.children:
            assert supervisor.node.ask(f"node.{name}", schema.Ping(b"up"), timeout=10.0) == schema.Pong(b"up")


def test_p16_when_the_supervisors_pipe_closes_the_fork_server_stops_its_children_and_exits(tmp_path):
    """The fallback where no kernel signal follows the parent (macOS): the server reads
    the end of its pipe from the supervisor as the supervisor's end."""
    supervisor = Supervisor(tmp_path / "chat", PLACEMENT, Budget()).start()
    try:
        server = supervisor._launcher._server
        old = {name: child.process for name, child in supervisor.children.items()}
        server.process.stdin.close()   # as if the supervisor were gone
        assert server.process.wait(timeout=_SECONDS) == 0
        assert all(process.wait(timeout=_SECONDS) is not None for process in old.values())
        assert not [process.pid for process in old.values() if alive(process.pid)]
        # The supervisor restarts them from a new fork server, as after any crash (P4).
        wait_until(lambda: all(supervisor.running(name) and child.process not in old.values()
                               for name, child in supervisor.children.items()), "every actor running again")
        assert supervisor.node.ask("log_writer", schema.CountMessages(), timeout=10.0).messages == 0
    finally:
        supervisor.stop()


def test_p6_a_refused_start_leaves_no_fork_server_running(tmp_path, monkeypatch):
    chat = tmp_path / "chat"
    servers, started = [], []
    made = supervisor_parts._ForkServer.__init__
    monkeypatch.setattr(supervisor_parts._ForkServer, "__init__",
                        lambda self, process: servers.append(process) or made(self, process))
    with ChatStore.open(chat, create=True):      # another writer holds the chat
        refused = Supervisor(chat, PLACEMENT, Budget())
        launch = refused._launch
        refused._launch = lambda child: started.append(child.name) or launch(child)
        with pytest.raises(ChatLocked):
            refused.start()
    assert started == [] and refused._launcher is None
    assert len(servers) == 1 and servers[0].poll() is not None   # started early, ended with the start
    assert not (chat / "run").exists()
