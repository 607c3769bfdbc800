"""What the supervisor tells the session about its actors (P4: the session repeats a request
once a lost actor runs again): `stopping`, `running(name)` and `incarnation(name)`, with
the liveness rule the session used to copy from the supervisor's internals; and the
chat's lock, which the supervisor takes before any actor starts (R5, P6)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from everchat.actors.supervisor import actor as supervisor_module
from everchat.actors.settings import load
from everchat.actors.session.session import ChatSession
from everchat.actors.folder import ChatLocked
from everchat.actors.supervisor.actor import GaveUp, Placement, Supervisor
from everchat.actors.supervisor.parts import LOCK_NAME, ChatLock, Launcher
from everchat.transport import schema

_SECONDS = 60.0


def eventually(condition, what: str):
    """Polls `condition()` until it is true (returned); fails after _SECONDS."""
    deadline = time.monotonic() + _SECONDS
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)  # polling the supervisor's view of its children
    raise AssertionError(f"no {what} within {_SECONDS:g} s")


def test_p4_every_actor_runs_in_its_first_incarnation_until_the_supervisor_stops(tmp_path):
    supervisor = Supervisor(tmp_path / "chat", Placement(workers=1, summarizer="scripted")).start()
    try:
        assert not supervisor.stopping
        assert {name: supervisor.running(name) for name in supervisor.children} == dict.fromkeys(
            ["log_writer", "planner", "devices", "turn_runner", "agents", "compactor.0"], True)
        assert supervisor.incarnation("planner") == (0, os.getpid())
    finally:
        supervisor.stop()
    assert supervisor.stopping


def test_p4_a_killed_actor_process_runs_again_as_a_new_incarnation(tmp_path):
    supervisor = Supervisor(tmp_path / "chat", Placement("processes", workers=1, summarizer="scripted")).start()
    try:
        restarts, pid = supervisor.incarnation("planner")
        assert restarts == 0 and pid != os.getpid()
        os.kill(pid, signal.SIGKILL)
        eventually(lambda: supervisor.incarnation("planner")[0] == 1 and supervisor.running("planner"),
                   "planner running again")
        assert supervisor.incarnation("planner")[1] not in (pid, 0)
        assert supervisor.node.ask("planner", schema.PlannerStatus(), timeout=_SECONDS).status["messages"] == 0
    finally:
        supervisor.stop()


def test_p4_running_ends_with_gave_up_naming_the_actor_once_the_supervisor_gave_up(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor_module, "_RESTART_LIMIT", 0)
    supervisor = Supervisor(tmp_path / "chat", Placement(workers=1, summarizer="scripted")).start()
    try:
        supervisor.node.stop_actor("turn_runner")

        def gave_up() -> str:
            try:
                supervisor.running("turn_runner")
            except GaveUp as error:
                return str(error)
            return ""

        said = eventually(gave_up, "GaveUp")
        assert said == "turn_runner crashed 1 times within 60 s; giving up (the chat cannot go on without it)"
        assert supervisor.running("planner")
    finally:
        supervisor.stop()


def test_running_refuses_a_name_that_is_none_of_the_chats_actors(tmp_path):
    supervisor = Supervisor(tmp_path / "chat", Placement(workers=1))
    with pytest.raises(ValueError, match="no actor called 'compactor.5' belongs to this chat"):
        supervisor.running("compactor.5")


def test_r5_p6_a_session_on_a_chat_a_supervisor_runs_is_refused_naming_it_and_the_chat_runs_on(tmp_path):
    """The session's own look at the lock is gone: the supervisor takes the chat first."""
    supervisor = Supervisor(tmp_path / "chat", Placement(workers=1, summarizer="scripted")).start()
    try:
        with pytest.raises(ChatLocked, match=f"pid {os.getpid()} on host"):
            ChatSession.open(load({"demo": True}, env={}, home=tmp_path), chat=tmp_path / "chat")
        assert all(supervisor.running(name) for name in supervisor.children)
        assert not supervisor.stopping
    finally:
        supervisor.stop()


def test_the_lock_and_the_launcher_are_parts_of_their_own(tmp_path):
    """STYLE 2: the supervisor reads in one sitting; its lock and its launcher thread live
    beside it and keep their behaviour."""
    first, second = ChatLock(tmp_path), ChatLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(ChatLocked, match=f"pid {os.getpid()} on host"):
            second.acquire()
    finally:
        first.release()
    second.acquire()
    second.release()
    assert (tmp_path / LOCK_NAME).stat().st_mode & 0o777 == 0o600
    launcher = Launcher("test-launcher")
    try:
        child = launcher.popen(["true"], None)
        assert child.wait(timeout=_SECONDS) == 0
    finally:
        launcher.close()
    assert not launcher.thread.is_alive()
