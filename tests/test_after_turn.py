"""The after-turn command (issue 13, actors/turns/after_turn.py, docs/GOALS.md): it runs after each
turn, one at a time and in order, without the model credentials, with nothing on its input;
the time limit kills its whole process group; a failure is shown apart and the reply stays
saved."""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time

import pytest

from everchat.actors.turns.after_turn import LIMIT, HookResult, HookRunner, hook_env, run_hook
from everchat.actors.settings import load
from everchat.actors.session.session import ChatSession
from everchat.actors.turns.actor import TurnRunnerActor
from everchat.tools.fakemodel import Gate, Reply, Text
from everchat.transport import schema

from cli_world import env, everchat  # noqa: F401 (env is a fixture)
from polling import wait_until
from test_turns_wire import configure, fake, server, until_end  # noqa: F401 (fixtures)

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-1", "OPENAI_API_KEY": "sk-2", "ANTHROPIC_AUTH_TOKEN": "tok-3",
        "CODEX_API_KEY": "c-4", "BRAVE_SEARCH_API_KEY": "b-5", "SOME_VENDOR_API_KEY": "v-6",
        "GITHUB_AUTH_TOKEN": "g-7"}

DUMP = f"{sys.executable} -c 'import json, os, sys; print(json.dumps({{\"env\": dict(os.environ), \"stdin\": sys.stdin.read()}}))'"


def test_the_limit_is_30_seconds():
    assert LIMIT == 30.0


def test_the_environment_has_no_keys_and_says_the_turn_and_the_chat(tmp_path):
    env = hook_env({"PATH": "/bin", **KEYS, "EVERCHAT_TURN_SETTINGS": "{}"}, 12, tmp_path / "chat", tmp_path)
    assert env == {"PATH": "/bin", "EVERCHAT_TURN": "12", "EVERCHAT_CHAT": str(tmp_path / "chat"),
                   "EVERCHAT_HOME": str(tmp_path)}


def test_the_cloud_and_header_credentials_a_cli_child_loses_are_gone_too(tmp_path):
    """One list for both (actors/models/credentials.py): a Bedrock token, a key in Claude Code's
    custom headers or its key file descriptor, an Azure secret."""
    paid = {"AWS_BEARER_TOKEN_BEDROCK": "b", "ANTHROPIC_CUSTOM_HEADERS": "x-api-key: sk-ant-3",
            "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR": "3", "AZURE_CLIENT_SECRET": "z", "anthropic_api_key": "lower"}
    env = hook_env({"PATH": "/bin", **paid}, 12, tmp_path / "chat", tmp_path)
    assert set(env) == {"PATH", "EVERCHAT_TURN", "EVERCHAT_CHAT", "EVERCHAT_HOME"}


def test_a_command_that_fails_or_cannot_start_says_so_with_its_output(tmp_path):
    result = run_hook("echo broken >&2; exit 3", {"PATH": os.environ["PATH"]})
    assert not result.ok and result.detail == "the after-turn command failed (exit code 3):\nbroken"
    assert run_hook("true", {"PATH": os.environ["PATH"]}).ok
    missing = run_hook("no-such-command-xyz", {"PATH": os.environ["PATH"]})
    assert not missing.ok and "exit code 127" in missing.detail


def _timed_run(command: str, limit: float) -> tuple[float, HookResult]:
    """`command` through a HookRunner (the turn runner's path) with `limit`: how long from
    its submit to its result, and the result."""
    done: queue.Queue = queue.Queue()
    runner = HookRunner(command, chat=".", home=".", on_failure=lambda turn, detail: None, limit=limit,
                        environ={"PATH": os.environ["PATH"]}, on_done=lambda turn, result: done.put(result))
    try:
        start = time.monotonic()
        runner.submit(1)
        result = done.get(timeout=limit * 20 + 30)
        took = time.monotonic() - start
    finally:
        assert runner.close(timeout=30)
    return took, result


def test_the_time_limit_is_the_limit_in_time_and_kills_the_whole_process_group(tmp_path):
    limit = 1.0
    pid_file = tmp_path / "child.pid"
    # a background child in the same group that would outlive the shell
    command = f"sleep 60 & echo $! > {pid_file}; echo started; wait"
    took, result = _timed_run(command, limit)
    assert not result.ok and result.detail == f"the after-turn command was killed after {limit:g} s:\nstarted"
    child = int(pid_file.read_text())
    try:
        assert limit <= took < 3 * limit, took  # the limit itself, not a word about it (ratio, not a fixed bound)
        wait_until(lambda: _gone(child), limit, "the background child killed with its group, at once")
    finally:
        _end(child)


def test_a_command_that_ends_in_time_is_not_killed_and_what_it_left_running_ends_with_it(tmp_path):
    limit = 5.0
    pid_file = tmp_path / "child.pid"
    took, result = _timed_run(f"sleep 60 & echo $! > {pid_file}; exit 0", limit)
    child = int(pid_file.read_text())
    try:
        assert result.ok and took < limit, took
        wait_until(lambda: _gone(child), limit, "the child it left behind ended with it")
    finally:
        _end(child)


@pytest.mark.parametrize("how", ["setsid", "double fork"])
def test_p16_what_left_the_commands_group_ends_with_it_at_the_limit_and_at_its_end(tmp_path, how):
    """The escape of P16 (issue 20): a child that leaves the command's process group
    (`setsid`), or that was orphaned on purpose, still ends with the command, both when the
    limit kills it and when it exits by itself (docs/GOALS.md)."""
    if how == "setsid":
        start = "setsid sleep 60 & echo $! > {pid}"
    else:
        start = "( (setsid sleep 60 & echo $! > {pid}) & )"
    for limit, rest, killed in ((1.0, "; echo started; sleep 30", True), (5.0, "; exit 0", False)):
        pid_file = tmp_path / f"child-{limit:g}.pid"
        command = start.format(pid=pid_file) + f"; while [ ! -s {pid_file} ]; do sleep 0.01; done" + rest
        took, result = _timed_run(command, limit)
        child = int(pid_file.read_text())
        try:
            assert result.ok is not killed, result
            wait_until(lambda: _gone(child), limit, f"the {how} child ended with the command")
        finally:
            _end(child)


def _end(pid: int) -> None:
    """A test's own leftover, ended if the code under test failed to (never another's)."""
    if not _gone(pid):
        os.kill(pid, signal.SIGKILL)


def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie waiting for init (Linux's /proc says so)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_commands_run_one_at_a_time_in_order(tmp_path):
    out = tmp_path / "order.txt"
    done: queue.Queue = queue.Queue()
    # each appends "start N" and "end N": overlapping runs would interleave them
    command = f'echo "start $EVERCHAT_TURN" >> {out}; sleep 0.05; echo "end $EVERCHAT_TURN" >> {out}'
    runner = HookRunner(command, chat=tmp_path, home=tmp_path, on_failure=lambda turn, detail: None,
                        on_done=lambda turn, result: done.put((turn, result.ok)))
    try:
        for turn in (3, 7, 11):
            runner.submit(turn)
        assert [done.get(timeout=30) for _ in range(3)] == [(3, True), (7, True), (11, True)]
    finally:
        runner.close()
    assert out.read_text().split("\n")[:-1] == ["start 3", "end 3", "start 7", "end 7", "start 11", "end 11"]


def test_after_each_turn_through_the_chat_without_keys_and_with_empty_input(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    dumps = tmp_path / "dumps.jsonl"
    done = tmp_path / "done"
    monkeypatch.setenv("EVERCHAT_AFTER_TURN", f"{DUMP} >> {dumps}; echo done >> {done}")
    settings = load()
    assert settings.after_turn.startswith(sys.executable)
    fake.script(Reply(Text("One.")), Reply(Text("Two.")))
    with ChatSession.open(settings) as session:
        first = session.send("Hello.")
        until_end(session, first)
        second = session.send("Again.")
        until_end(session, second)
        wait_until(lambda: done.exists() and done.read_text().count("done") == 2, 30, "two after-turn runs")
    records = [json.loads(line) for line in dumps.read_text().splitlines()]
    assert [r["env"]["EVERCHAT_TURN"] for r in records] == [str(first), str(second)]
    for record in records:
        assert not set(KEYS) & set(record["env"]) and record["stdin"] == ""
        assert record["env"]["EVERCHAT_CHAT"] == str(settings.chat_dir)
        assert record["env"]["EVERCHAT_HOME"] == str(settings.home)
        assert "EVERCHAT_TURN_SETTINGS" not in record["env"]


def test_a_failing_command_is_shown_apart_and_the_reply_stays_saved(monkeypatch, tmp_path, fake):
    monkeypatch.setenv("EVERCHAT_AFTER_TURN", "echo 'lint: 2 problems'; exit 1")
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    fake.script(Reply(Text("The reply.")))
    with ChatSession.open(settings) as session:
        turn = session.send("Hi.")
        events = until_end(session, turn)
        while not any(isinstance(e, schema.AfterTurnFailed) for e in events):
            event = session.next_event(timeout=30)
            assert event is not None, events
            events.append(event)
        failed = [e for e in events if isinstance(e, schema.AfterTurnFailed)]
        assert failed == [schema.AfterTurnFailed(turn, "the after-turn command failed (exit code 1):\nlint: 2 problems")]
        assert "lint" not in "".join(e.text for e in events if isinstance(e, schema.TurnText))
        assert session.zoom(turn + 1, 1) == "everchat: The reply."
        assert session.status()["messages"] == 2


def test_the_turn_runner_takes_a_shorter_limit_for_tests_and_30_s_by_default():
    import inspect

    assert inspect.signature(TurnRunnerActor).parameters["hook_limit"].default is None  # None: LIMIT


# -- closing (the chat exits, a one-shot `ask` ends) -----------------------------------------


def held_command(tmp_path):
    """A command whose first run waits until the test opens `release` (a FIFO); every run
    writes "start N" and "end N" to `order`. Returns (command, order, started, release)."""
    order, started, release = tmp_path / "order.txt", tmp_path / "started", tmp_path / "release"
    os.mkfifo(release)
    command = (f'echo "start $EVERCHAT_TURN" >> {order}; if [ ! -e {started} ]; then touch {started}; '
               f'cat {release} > /dev/null; fi; echo "end $EVERCHAT_TURN" >> {order}')
    return command, order, started, release


def open_release(release) -> None:
    """Let the held run go: opening the FIFO's write end (and closing it) ends its `cat`."""
    with open(release, "w"):
        pass


def test_close_lets_the_queued_commands_run_in_order_to_their_end(tmp_path):
    """Closing takes no new command, but the ones already queued are not dropped: the
    running one ends, then the next starts, and close() returns once they are done."""
    command, order, started, release = held_command(tmp_path)
    done: queue.Queue = queue.Queue()
    runner = HookRunner(command, chat=tmp_path, home=tmp_path, on_failure=lambda turn, detail: None,
                        on_done=lambda turn, result: done.put((turn, result.ok)))
    runner.submit(4)
    runner.submit(9)  # queued behind the held one
    wait_until(started.exists, 30, "the first command running")
    runner.close(timeout=0)  # closed: the two are still to finish
    runner.submit(12)  # after the close: not taken
    open_release(release)
    assert [done.get(timeout=30) for _ in range(2)] == [(4, True), (9, True)]
    assert runner.close() is True
    assert order.read_text().split("\n")[:-1] == ["start 4", "end 4", "start 9", "end 9"]
    assert done.empty()


def test_a_command_still_waiting_when_the_close_time_is_over_is_not_run_and_said(tmp_path):
    command, order, started, release = held_command(tmp_path)
    failed: queue.Queue = queue.Queue()
    runner = HookRunner(command, chat=tmp_path, home=tmp_path, start_within=0.0,
                        on_failure=lambda turn, detail: failed.put((turn, detail)))
    runner.submit(4)
    runner.submit(9)
    wait_until(started.exists, 30, "the first command running")
    runner.close(timeout=0)
    open_release(release)
    assert runner.close() is True
    assert failed.get(timeout=30) == (9, "the after-turn command was not run: the chat closed and it was still "
                                          "waiting 0 s later")
    assert order.read_text().split("\n")[:-1] == ["start 4", "end 4"]  # the running one was not cut


def test_the_failures_that_end_after_the_close_are_kept_for_the_closing_chat(tmp_path):
    """A failure before the close was published while the chat listened; those that end
    after it are kept, for the turn runner to hand to the closing session."""
    held, order, started, release = held_command(tmp_path)
    failed: queue.Queue = queue.Queue()
    runner = HookRunner(f'[ "$EVERCHAT_TURN" != 2 ] || exit 6; {held}; exit 7', chat=tmp_path, home=tmp_path,
                        on_failure=lambda turn, detail: failed.put(turn))
    runner.submit(2)
    assert failed.get(timeout=30) == 2
    runner.submit(4)
    wait_until(started.exists, 30, "the second command running")
    assert runner.failed_since_close() == []
    runner.close(timeout=0)
    open_release(release)
    assert runner.close() is True
    assert runner.failed_since_close() == [(4, "the after-turn command failed (exit code 7)")]


def test_the_supervisor_waits_for_the_turn_runner_as_long_as_its_commands_may_take():
    """The turn runner's stop may take a whole queued command started at the last moment;
    the supervisor's wait before it kills the process covers that."""
    import inspect

    from everchat.actors.supervisor import actor as supervisor

    from everchat.actors.turns import after_turn

    assert after_turn.STOP_SECONDS >= 5.0 + after_turn.CLOSE_START_SECONDS + LIMIT
    # the wait the stop gives each actor, in both placements (Supervisor.stop, _stop_hosted)
    assert supervisor._stop_wait("turn_runner") == after_turn.STOP_SECONDS
    assert "_stop_wait" in inspect.getsource(supervisor.Supervisor.stop)


def test_the_last_turns_command_of_ask_runs_before_ask_ends(monkeypatch, tmp_path, fake, capsys):
    """`everchat ask --goal` (two turns, then "Goal met."): the first turn's command is
    still running when ask closes the chat, the second's queued behind it; both run, in
    order, before ask returns (single placement: the supervisor stops the turn runner
    first and waits for it), and the failure of the last is said on stderr."""
    from everchat.actors.turns import after_turn
    from everchat.frontends.cli.main import main
    from test_goals_run import Script

    configure(monkeypatch, tmp_path, fake, "anthropic")
    command, order, started, release = held_command(tmp_path)
    monkeypatch.setenv("EVERCHAT_AFTER_TURN", command + '; [ "$EVERCHAT_TURN" = 0 ] || exit 5')
    fake.rule(Script(["Working.", "Working."], ["Not met: one more step.", "Goal met."]))
    closing = threading.Event()
    close = after_turn.HookRunner.close

    def watched_close(self, *args, **kwargs):
        closing.set()
        return close(self, *args, **kwargs)

    monkeypatch.setattr(after_turn.HookRunner, "close", watched_close)

    def release_once_closing() -> None:
        closing.wait(60)  # the test fails on its order, never hangs, if close never comes
        open_release(release)

    releaser = threading.Thread(target=release_once_closing, daemon=True)
    releaser.start()
    assert main(["ask", "--goal", "--no-wait", "Do two steps."]) == 0
    assert closing.is_set()
    assert order.read_text().split("\n")[:-1] == ["start 0", "end 0", "start 2", "end 2"]
    assert "turn 2: the after-turn command failed (exit code 5)" in capsys.readouterr().err
    releaser.join(10)


# -- said once at the close, in either placement ----------------------------------------------

ENDS_DURING_THE_CLOSE = "sleep 0.5; exit 3"  # the turn has ended, and ask is closing, when it fails


def after_turn_lines(stderr: str) -> list[str]:
    """The lines of `stderr` that speak of an after-turn command, in every form ask has used."""
    return [line for line in stderr.splitlines() if "after-turn" in line or "after turn" in line]


def test_a_command_failing_while_ask_closes_is_said_once_with_processes(env, tmp_path):
    """`everchat --processes ask`: the turn runner, whose log goes to run/turn_runner.log,
    hands the failure of the command it waited for at the close to ask, which says it."""
    done = everchat(env, "--demo", "--processes", "--after-turn", ENDS_DURING_THE_CLOSE, "ask", "--no-wait", "Hi.",
                    "--data-dir", str(tmp_path / "chat"))
    assert done.returncode == 0, done.stderr
    assert after_turn_lines(done.stderr) == ["everchat: warning: turn 0: the after-turn command failed (exit code 3)"]


def test_a_command_failing_while_ask_closes_is_said_once_in_one_process(env, tmp_path):
    """The single placement: the turn runner's log line and what the close hands to ask are
    the same line, said once."""
    done = everchat(env, "--demo", "--after-turn", ENDS_DURING_THE_CLOSE, "ask", "--no-wait", "Hi.",
                    "--data-dir", str(tmp_path / "chat"))
    assert done.returncode == 0, done.stderr
    assert after_turn_lines(done.stderr) == ["everchat: warning: turn 0: the after-turn command failed (exit code 3)"]


def test_a_failure_while_ask_goal_follows_its_turns_is_said_once(monkeypatch, tmp_path, fake, capsys):
    """`ask --goal` in one process: the first turn's command fails while ask follows the
    second turn (held until the failure is out), the second's as ask closes; each is said
    once, in the log's form."""
    from everchat.frontends.cli.main import main
    from test_goals_run import Script

    configure(monkeypatch, tmp_path, fake, "anthropic")
    monkeypatch.setenv("EVERCHAT_AFTER_TURN", 'echo "lint: $EVERCHAT_TURN"; exit 4')
    published = threading.Event()
    hook_failed = TurnRunnerActor._hook_failed

    def watched_hook_failed(self, turn, detail):
        hook_failed(self, turn, detail)
        published.set()

    monkeypatch.setattr(TurnRunnerActor, "_hook_failed", watched_hook_failed)
    gate = Gate()
    fake.rule(Script(["Working.", Reply(Text("Done."), gate=gate)], ["Not met: one more step.", "Goal met."]))
    opener = threading.Thread(target=lambda: published.wait(60) and gate.open(), daemon=True)
    opener.start()
    assert main(["ask", "--goal", "--no-wait", "Do two steps."]) == 0
    assert after_turn_lines(capsys.readouterr().err) == [
        "everchat: warning: turn 0: the after-turn command failed (exit code 4): lint: 0",
        "everchat: warning: turn 2: the after-turn command failed (exit code 4): lint: 2"]
    opener.join(10)
