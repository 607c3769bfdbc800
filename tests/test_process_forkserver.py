"""Issue 9: `--processes` forks every actor process from one preloaded fork server
(actors/supervisor/forkserver.py), started by the supervisor's launcher thread, so they all start at
once; the guarantees of the one-process-at-a-time start stay (P16: they die with it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from everchat.actors.supervisor import parts as supervisor_parts
from everchat.actors.tree import Budget
from everchat.actors.folder import ChatLocked, ChatStore
from everchat.actors.supervisor.actor import Placement, Supervisor
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


_SELF_FORK = textwrap.dedent("""
    import json, os, sys
    from everchat.actors.supervisor import parts as supervisor_parts
    from everchat.actors.tree import Budget
    from everchat.actors.supervisor.actor import Placement, Supervisor
    from everchat.transport import schema

    supervisor_parts.Launcher.fork_self = sys.argv[2] == "fork"
    kept = os.open(sys.argv[1] + ".marker", os.O_RDWR | os.O_CREAT, 0o600)   # ours alone
    supervisor = Supervisor(sys.argv[1], Placement("processes", workers=1, summarizer="scripted"), Budget()).start()
    try:
        def files(pid):
            return sorted(os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
        server = supervisor._launcher._server.process
        pongs = [supervisor.node.ask(f"node.{name}", schema.Ping(b"up"), timeout=30.0).payload.decode()
                 for name in supervisor.children]
        print(json.dumps({"kind": type(server).__name__, "server": files(server.pid), "pongs": pongs,
                          "children": {name: files(child.pid) for name, child in supervisor.children.items()},
                          "count": supervisor.node.ask("log_writer", schema.CountMessages(), timeout=30.0).messages}))
    finally:
        supervisor.stop()
    print(json.dumps({"server_exit": server.poll()}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks itself on Linux only")
@pytest.mark.parametrize("how", ["fork", "spawn"])
def test_issue9_a_supervisor_running_no_other_thread_forks_itself_as_the_fork_server_keeping_none_of_its_files(
        tmp_path, how):
    """Issue 9: a supervisor that runs no other thread (a command's, as `ask --processes`)
    is itself preloaded with the actors' code: its fork server is a fork of it, at once,
    instead of a new interpreter. That fork keeps none of the supervisor's files (its lock
    on the chat, the person's terminal) but stderr; its actors neither. `spawn`: the
    fork server of a supervisor that may not fork itself, the same but for the kind."""
    chat = tmp_path / "chat"
    done = subprocess.run([sys.executable, "-c", _SELF_FORK, str(chat), how], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    report, end = map(json.loads, done.stdout.splitlines())
    assert report["kind"] == {"fork": "_SelfFork", "spawn": "Popen"}[how]
    assert report["pongs"] == ["up"] * 6 and report["count"] == 0  # every actor: four, the devices, the agents
    ours = {str(chat) + ".marker", str(chat / "supervisor.lock")}
    for name, files in [("fork server", report["server"]), *report["children"].items()]:
        assert not ours & set(files), f"{name} holds {ours & set(files)}"
    assert end["server_exit"] is not None     # ended with the supervisor's stop
