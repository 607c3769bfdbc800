"""P16: actor processes die with the process that started them, by the kernel's hand
(Linux's PR_SET_PDEATHSIG), not by noticing it later: after a kill -9 of `ask --processes`
or of a supervisor, no orphan keeps the chat's lock, so the next writer opens at once.

To show that the kernel, not the children's own polling, ends them, each test freezes the
children (SIGSTOP) before it kills their parent: a frozen process polls nothing, but
SIGKILL still ends it. And because the kernel's signal follows the *thread* that started a
child, children started from a thread that then ends must live on (the supervisor starts
them all from a thread of its own). The actors are forked by one fork server (issue 9), the
supervisor's child: frozen too, the kernel's chain (supervisor, server, actors) still holds.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from everchat.actors.tree import Budget
from everchat.actors.folder import ChatStore
from everchat.actors.supervisor.actor import Placement, Supervisor
from everchat.transport import schema

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux's; elsewhere children poll their parent")


def _state(pid: int) -> str | None:
    """The process's state letter (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return None


def _gone(pid: int) -> bool:
    """Ended: no process, or a zombie whose threads have all exited. A killed process's
    main thread can be a zombie while its other threads are still exiting, and their
    files (the chat's lock among them) are closed only when the last one is gone (a
    loaded run once saw 'locked by its writer' right after every child showed Z)."""
    state = _state(pid)
    if state in (None, "X"):
        return True
    if state != "Z":
        return False
    try:
        return os.listdir(f"/proc/{pid}/task") in ([], [str(pid)])
    except FileNotFoundError:
        return True


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rpartition(")")[2].split()[1]) == pid:
                        out.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return out


def _family(pid: int) -> list[int]:
    """Its children and theirs: the fork server and the actor processes it forked (issue 9)."""
    children = _children(pid)
    return children + [grandchild for child in children for grandchild in _children(child)]


def wait_until(condition, timeout: float, what: str) -> None:
    pause = threading.Event()
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout} s")
        pause.wait(0.02)


def freeze_then_kill_parent(parent: subprocess.Popen, children: list[int]) -> None:
    for pid in children:
        os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: all(_state(pid) in ("T", "t") for pid in children), 10, "children frozen")
    parent.kill()
    parent.wait(timeout=30)


def cleanup(children: list[int]) -> None:
    for pid in children:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def silent_model():
    """A model server that takes the connection and never answers: a turn waits there,
    after its input was logged (R36), for as long as the test likes."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(120)
    yield server
    server.close()


def test_p16_kill_9_of_ask_processes_right_after_its_input_is_logged_leaves_no_orphan_and_the_next_writer_opens(
        tmp_path, silent_model):
    chat = tmp_path / "chat"
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    env = dict(keep, EVERCHAT_HOME=str(tmp_path / "home"), ANTHROPIC_API_KEY="sk-test-p16")
    port = silent_model.getsockname()[1]
    ask = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", "--processes", "--data-dir", str(chat),
                            "--reply-provider", "anthropic", "--reply-model", "p16-model",
                            "--reply-base-url", f"http://127.0.0.1:{port}",
                            "--compaction-provider", "demo", "--compaction-jobs", "2",
                            "ask", "a message logged just before the crash"],
                           env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[int] = []
    try:
        call, _ = silent_model.accept()          # the turn called the model: its input is logged
        with call:
            children = _family(ask.pid)
            assert len(children) == 8            # the fork server; log writer, planner, devices, turn runner, agents, 2 compactors
            with ChatStore.open(chat, writer=False) as store:
                assert store.message(store.message_count - 1).text == "a message logged just before the crash"
            freeze_then_kill_parent(ask, children)
            wait_until(lambda: all(_gone(pid) for pid in children), 30, "every child of the killed ask gone")
        with ChatStore.open(chat, create=True) as store:     # the next writer: not "locked by pid N"
            assert store.message_count == 1
    finally:
        if ask.poll() is None:
            ask.kill()
            ask.wait()
        cleanup(children)


_SUPERVISE = textwrap.dedent("""
    import sys, threading
    from everchat.actors.tree import Budget
    from everchat.actors.supervisor.actor import Placement, Supervisor
    supervisor = Supervisor(sys.argv[1], Placement("processes", workers=1, summarizer="scripted"), Budget()).start()
    print(" ".join(str(child.pid) for child in supervisor.children.values()), flush=True)
    threading.Event().wait()
""")


def test_p16_kill_9_of_a_supervisor_takes_its_frozen_children_with_it(tmp_path):
    chat = tmp_path / "chat"
    parent = subprocess.Popen([sys.executable, "-c", _SUPERVISE, str(chat)], stdout=subprocess.PIPE, text=True)
    children: list[int] = []
    try:
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(children) == 6 and not any(_gone(pid) for pid in children)  # with the devices and the agents
        freeze_then_kill_parent(parent, children)
        wait_until(lambda: all(_gone(pid) for pid in children), 30, "every child of the killed supervisor gone")
        ChatStore.open(chat, create=True).close()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        cleanup(children)


def test_p16_children_live_as_long_as_the_supervisor_whichever_thread_started_it(tmp_path):
    started: list[Supervisor] = []
    starter = threading.Thread(target=lambda: started.append(
        Supervisor(tmp_path / "chat", Placement("processes", workers=1, summarizer="scripted"), Budget()).start()))
    starter.start()
    starter.join()
    native = starter.native_id
    wait_until(lambda: not os.path.exists(f"/proc/self/task/{native}"), 10, "the starting thread ended")
    supervisor = started[0]
    try:
        pids = {name: child.pid for name, child in supervisor.children.items()}
        for name in supervisor.children:          # each answers after the thread's end was signalled
            assert supervisor.node.ask(f"node.{name}", schema.Ping(b"alive"), timeout=10.0) == schema.Pong(b"alive")
        assert {name: (child.pid, child.restarts) for name, child in supervisor.children.items()} == \
            {name: (pid, 0) for name, pid in pids.items()}
    finally:
        supervisor.stop()


def test_p16_an_actor_process_whose_supervisor_died_before_it_started_does_not_start(tmp_path):
    """The race PR_SET_PDEATHSIG alone leaves: the parent died before the request was made."""
    done = subprocess.run([sys.executable, "-m", "everchat.actors.supervisor.process", "--name", "log_writer",
                           "--chat", str(tmp_path / "chat"), "--supervisor", f"ipc://{tmp_path}/none.sock",
                           "--bind", f"ipc://{tmp_path}/log_writer.sock", "--parent", str(2 ** 22 + 1)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert f"the supervisor (pid {2 ** 22 + 1}) is already gone; not starting" in done.stderr
    assert not (tmp_path / "chat").exists() and not (tmp_path / "log_writer.sock").exists()
