"""P4: a kill -9 of the planner or of the log writer while `everchat --processes` runs an
import, a `compact` or an `ask` is survived. The supervisor restarts the actor; the session
waits for that and repeats its request (each one is idempotent: appends carry keys, the
rest only read or wait). The command exits 0 and the chat holds every message once
(R2, R3, R8: no duplicates, no gaps, `check` ok, the import's content equal to its file).

Every command is a real `everchat` process with every actor in its own process (ipc), and
each kill lands while a request to that actor is under way: the test watches the log grow
or asks the actors themselves (a probe node routed to their sockets) before it kills.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from cli_world import env, everchat  # noqa: F401  (env is a fixture)
from everchat.actors.folder import ChatStore, split_text
from everchat.actors.supervisor.actor import Supervisor
from everchat.frontends.cli.import_file import parts_of
from everchat.frontends.ops import NoSupervisor, fetch_rows
from everchat.transport import Node, TransportError, schema

_WORDS = ["amber-42", "tree", "view", "sawtooth", "ünïcode", "日本語", "emoji🙂", "line", "log", "zoom"]
_RUN_SECONDS = 300.0  # one command on a busy 2-core machine, restarts included
_ACTORS = ("--demo", "--processes", "--compaction-jobs", "2")  # every actor in its own process, 2 workers


def text_file(path: Path, size: int, seed: int = 4) -> str:
    """Lines of words (no part-long words: the demo model summarizes those slowly)."""
    import random

    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 14)))
        lines.append(line)
        total += len(line.encode()) + 1
    text = "\n".join(lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return text


class Command:
    """`everchat ARGS` running as a child process, its output in files (never a pipe that
    could fill and stall it)."""

    def __init__(self, env: dict, folder: Path, *args: str) -> None:
        self.out_path, self.err_path = folder / "out.txt", folder / "err.txt"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", *args], env=env,
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def running(self) -> bool:
        return self.process.poll() is None

    def finish(self, timeout: float = _RUN_SECONDS) -> tuple[int, str, str]:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the command did not end within {timeout:g} s: {self.err_path.read_text()}")
        return code, self.out_path.read_text(), self.err_path.read_text()

    def stop(self) -> None:
        if self.running():
            self.process.kill()
            self.process.wait()


@contextmanager
def running(env: dict, folder: Path, *args: str):
    folder.mkdir(exist_ok=True)
    command = Command(env, folder, *args)
    try:
        yield command
    finally:
        command.stop()  # the actor processes notice their supervisor is gone and stop too


def wait_for(condition, what: str, command: Command, timeout: float = _RUN_SECONDS):
    """Polls `condition()` until it returns something true (returned); fails once the
    command ended first or the deadline passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if not command.running():
            code, out, err = command.finish()
            raise AssertionError(f"the command ended (status {code}) before {what}:\n{out}\n{err}")
        time.sleep(0.02)  # polling a condition, not waiting for one to settle
    raise AssertionError(f"no {what} within {timeout:g} s")


def message_count(chat: Path) -> int:
    try:
        with ChatStore.open(chat, writer=False) as store:
            return store.message_count
    except Exception:  # not made yet, or caught between a part's bytes and its index entry
        return -1


def actor_pid(chat: Path, name: str) -> int | None:
    try:
        rows = fetch_rows(chat, timeout=2.0)
    except NoSupervisor:
        return None
    return next((row["pid"] for row in rows if row.get("name") == name and "error" not in row), None)


def kill(chat: Path, name: str, command: Command) -> int:
    """kill -9 the process hosting `name`, then wait until the supervisor runs it again;
    returns the old pid."""
    pid = wait_for(lambda: actor_pid(chat, name), f"a pid for {name}", command)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: actor_pid(chat, name) not in (None, pid), f"{name} restarted", command)
    return pid


@contextmanager
def probe(chat: Path):
    """A node of the test's own, routed to the actors' ipc sockets."""
    node = Node("probe").start()
    try:
        for name in ("log_writer", "planner", "turn_runner"):
            node.route(name, f"ipc://{chat / 'run' / (name + '.sock')}")
        yield node
    finally:
        node.stop()


def ask_or_none(node: Node, name: str, msg):
    try:
        return node.ask(name, msg, timeout=2.0)
    except TransportError:
        return None


def records(chat: Path) -> list:
    with ChatStore.open(chat, writer=False) as store:
        return [store.message(i) for i in range(store.message_count)]


def assert_healthy(env: dict, chat: Path) -> None:
    checked = everchat(env, "--data-dir", str(chat), "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def assert_imported_once(chat: Path, source: Path, text: str) -> None:
    logged = [r for r in records(chat) if r.key and r.key.startswith("import:")]
    assert "".join(r.text for r in logged) == text
    assert len(logged) == len(split_text(text))
    assert len({r.key for r in logged}) == len(logged)
    assert [r.meta["offset"] for r in logged] == [offset for offset, _ in parts_of(source)]  # in order, no gaps


_ACTOR_LOG = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ [\w.]+\[\d+\] ")


def assert_no_traceback_from_the_command(err: str) -> None:
    """The command's own process prints no traceback. (Actor processes share its stderr;
    their logged tracebacks begin under their own log line: P9, reported, not this test's.)"""
    lines = err.splitlines()
    for n, line in enumerate(lines):
        if line.startswith("Traceback"):
            assert n > 0 and _ACTOR_LOG.match(lines[n - 1]), f"a traceback from the command itself:\n{err}"


def pending_summaries(chat: Path) -> int:
    from everchat.actors.session.local import Chat

    with Chat.open(chat, writer=False) as reader:
        return reader.status()["unbuilt_lines"]


@pytest.mark.parametrize("victim", ["planner", "log_writer"])
def test_p4_a_summarized_import_survives_a_kill_of_the_planner_or_the_log_writer(tmp_path, env, victim):
    chat, source = tmp_path / "chat", tmp_path / "memories.txt"
    text = text_file(source, 2_000_000)
    parts = len(split_text(text))
    with running(env, tmp_path / "import", *_ACTORS, "--data-dir", str(chat), "import", str(source)) as command:
        at_kill = wait_for(lambda: (n := message_count(chat)) >= 40 and n, "40 parts logged", command)
        kill(chat, victim, command)
        code, out, err = command.finish()
    assert at_kill < parts, "the kill came after the import's last part"
    assert code == 0, err
    assert f"imported {source}: {parts} notes" in out
    assert_no_traceback_from_the_command(err)
    assert_imported_once(chat, source, text)
    assert pending_summaries(chat) == 0
    assert_healthy(env, chat)


def test_p4_compact_survives_a_kill_of_the_planner_while_it_waits_for_the_summaries(tmp_path, env):
    chat, source = tmp_path / "chat", tmp_path / "memories.txt"
    text_file(source, 4_000_000)
    logged = everchat(env, "--demo", "--data-dir", str(chat), "import", "--log-only", str(source))
    assert logged.returncode == 0, logged.stderr
    before = pending_summaries(chat)
    with running(env, tmp_path / "compact", *_ACTORS, "--data-dir", str(chat), "compact") as command, \
            probe(chat) as node:
        # "building N pending summaries ..." comes just before the settle is asked for;
        # a few summaries built after it mean the planner is answering that settle.
        wait_for(lambda: "building" in command.err_path.read_text(), "the compact's settle", command)
        wait_for(lambda: (state := ask_or_none(node, "planner", schema.PlannerStatus()))
                 and state.status["unbuilt_lines"] <= before - 4, "4 summaries built", command)
        kill(chat, "planner", command)
        code, out, err = command.finish()
    assert code == 0, err
    assert "every summary is built" in out
    assert_no_traceback_from_the_command(err)
    assert pending_summaries(chat) == 0
    assert_healthy(env, chat)


def test_p4_ask_survives_a_kill_of_the_planner_while_its_turn_settles_the_view(tmp_path, env):
    """R36: the turn settles its view before the person's message is logged; the planner
    dies during that settle. The session repeats the input (same key): the reply is
    printed, the message is logged once."""
    chat, source = tmp_path / "chat", tmp_path / "memories.txt"
    text_file(source, 4_000_000)
    logged = everchat(env, "--demo", "--data-dir", str(chat), "import", "--log-only", str(source))
    assert logged.returncode == 0, logged.stderr
    messages = message_count(chat)
    question = "What does amber-42 mean?"
    with running(env, tmp_path / "ask", *_ACTORS, "--settle-timeout", "600", "--data-dir", str(chat),
                 "ask", question) as command, probe(chat) as node:
        # The turn runs and has not logged its message yet: it waits in SettleView.
        wait_for(lambda: (state := ask_or_none(node, "turn_runner", schema.TurnStatus()))
                 and state.running and state.turn < 0, "the turn settling its view", command)
        kill(chat, "planner", command)
        assert message_count(chat) == messages, "the message was logged before the kill"
        code, out, err = command.finish()
    assert code == 0, err
    assert out.strip(), "no reply was printed"
    assert_no_traceback_from_the_command(err)
    users = [r for r in records(chat)[messages:] if r.kind == "user"]
    assert [r.text for r in users] == [question]
    assert pending_summaries(chat) == 0
    assert_healthy(env, chat)


# ---- the retry policy itself, on a stand-in supervisor and node -----------------------------------


class _Ref:
    def __init__(self) -> None:
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive


class _Supervisor(Supervisor):
    """The real `Supervisor`'s answers to the session (`running`, `incarnation`,
    `stopping`) over children that are plain objects: no sockets, no processes."""

    def __init__(self) -> None:  # the real one starts a node; these tests need none
        import threading

        from everchat.actors.supervisor.actor import Placement, _Child, actor_names

        self.placement = Placement()
        self.children = {name: _Child(name, ref=_Ref(), pid=os.getpid()) for name in actor_names(self.placement)}
        for child in self.children.values():
            child.registered.set()
        self._stopping = threading.Event()

    def restart(self, name: str) -> None:
        """What the supervisor does for a crashed actor: a new one runs."""
        child = self.children[name]
        child.restarts += 1
        child.ref = _Ref()


class _Node:
    """Answers asks from a script: each entry an exception to raise (after `then()`, the
    world's reaction) or a reply to return."""

    def __init__(self, *script) -> None:
        self.script = list(script)
        self.asked: list = []

    def ask(self, target, msg, timeout):
        self.asked.append((target, type(msg).__name__))
        outcome = self.script.pop(0)
        if isinstance(outcome, tuple):
            error, then = outcome
            then()
            raise error
        return outcome


def _session(node: _Node, supervisor: _Supervisor):
    from everchat.actors.session.session import ChatSession

    session = ChatSession.__new__(ChatSession)
    session.supervisor, session.node, session._closed = supervisor, node, False
    return session


def test_p4_a_request_whose_planner_was_lost_is_asked_again_once_the_planner_runs_again():
    from everchat.transport import PeerLost

    supervisor = _Supervisor()
    idle = schema.Idle(idle=True, running=0, queued=0)
    node = _Node((PeerLost("connection dropped"), lambda: supervisor.restart("planner")), idle)
    assert _session(node, supervisor).wait_backlog(16, timeout=5.0) == idle
    assert node.asked == [("planner", "WaitBacklog")] * 2


def test_p4_a_planner_that_lost_the_log_writer_says_so_and_is_asked_again_once_the_log_writer_runs():
    from everchat.transport import RemoteError

    supervisor = _Supervisor()
    state = schema.PlannerState(status={"messages": 3}, view="")
    node = _Node((RemoteError("PeerLost", "log writer gone"), lambda: supervisor.restart("log_writer")), state)
    assert _session(node, supervisor)._planner_state() == state
    assert len(node.asked) == 2


def test_p4_a_handler_error_is_not_a_loss_and_is_not_repeated():
    from everchat.transport import RemoteError

    node = _Node((RemoteError("ValueError", "SettleView until 9"), lambda: None))
    with pytest.raises(RemoteError, match="until 9"):
        _session(node, _Supervisor()).count_messages()
    assert len(node.asked) == 1


def test_p4_an_actor_the_supervisor_gave_up_on_ends_the_request_with_one_clear_error():
    from everchat.actors.supervisor.actor import GaveUp
    from everchat.transport import PeerLost

    supervisor = _Supervisor()

    def gave_up() -> None:
        supervisor.children["planner"].ref.alive = False
        supervisor.children["planner"].gave_up = "planner crashed 11 times within 60 s; giving up"

    node = _Node((PeerLost("connection dropped"), gave_up))
    with pytest.raises(GaveUp) as error:
        _session(node, supervisor).wait_backlog(16, timeout=5.0)
    assert str(error.value) == "planner crashed 11 times within 60 s; giving up (the chat cannot go on without it)"
    assert len(node.asked) == 1


def test_p4_a_timeout_of_an_actor_that_kept_running_is_a_timeout(monkeypatch):
    from everchat.actors.session import session as session_module
    from everchat.transport import AskTimeout

    monkeypatch.setattr(session_module, "_GRACE_SECONDS", 0.05)
    node = _Node((AskTimeout("no reply in time"), lambda: None))
    with pytest.raises(AskTimeout):
        _session(node, _Supervisor()).count_messages()
    assert len(node.asked) == 1


def test_p4_a_closing_session_does_not_wait_for_actors_it_stops_itself():
    from everchat.transport import ActorStopped

    supervisor = _Supervisor()
    node = _Node((ActorStopped("supervisor stopped"), lambda: supervisor._stopping.set()))
    with pytest.raises(ActorStopped):
        _session(node, supervisor).count_messages()
    assert len(node.asked) == 1


def test_p4_an_import_whose_planner_the_supervisor_gives_up_on_fails_in_one_line(tmp_path, env, monkeypatch, capsys):
    """In this process (so the supervisor's restart limit can be 0): the planner is killed
    mid-import, the supervisor gives up on it at once, and the import says so in one line."""
    import threading

    from everchat.actors.supervisor import actor as supervisor_module
    from everchat.frontends.cli.main import main

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(supervisor_module, "_RESTART_LIMIT", 0)
    chat, source = tmp_path / "chat", tmp_path / "memories.txt"
    text_file(source, 2_000_000)
    killed: dict = {}
    ended = threading.Event()

    def kill_the_planner_mid_import() -> None:
        while not ended.wait(0.02):  # polling the log's growth
            if message_count(chat) >= 40 and (pid := actor_pid(chat, "planner")):
                os.kill(pid, signal.SIGKILL)
                killed["pid"] = pid
                return

    killer = threading.Thread(target=kill_the_planner_mid_import, daemon=True)
    killer.start()
    try:
        code = main([*_ACTORS, "--data-dir", str(chat), "import", str(source)])
    finally:
        ended.set()
        killer.join(timeout=30)
    err = capsys.readouterr().err
    assert "pid" in killed and code == 1
    assert err.rstrip().splitlines()[-1] == (
        f"everchat: the chat in {chat} failed: planner crashed 1 times within 60 s; giving up "
        "(the chat cannot go on without it)")
    assert_no_traceback_from_the_command(err)
