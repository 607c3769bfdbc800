"""P9 at the command line: with `--processes` the actors' processes share the person's
terminal, yet what they log goes to `run/<name>.log` in the chat folder: no traceback
reaches the terminal when an actor is lost, and the one line the command says about it
names the file to read. A real `everchat` process, every actor in its own (ipc)."""

from __future__ import annotations

import re

from cli_world import env, everchat  # noqa: F401  (env is a fixture)
from everchat.transport import schema
from test_session_restarts import _ACTORS, ask_or_none, kill, message_count, probe, running, text_file, wait_for


def test_p9_ask_whose_planner_is_killed_while_its_turn_settles_prints_no_traceback(tmp_path, env):
    """The turn runner's settle loses the planner (kill -9); before, the turn runner's
    traceback came out on the terminal between the command's own lines."""
    chat, source = tmp_path / "chat", tmp_path / "memories.txt"
    text_file(source, 4_000_000)
    logged = everchat(env, "--demo", "--data-dir", str(chat), "import", "--log-only", str(source))
    assert logged.returncode == 0, logged.stderr
    messages = message_count(chat)
    with running(env, tmp_path / "ask", *_ACTORS, "--settle-timeout", "600", "--data-dir", str(chat),
                 "ask", "What does amber-42 mean?") as command, probe(chat) as node:
        wait_for(lambda: (state := ask_or_none(node, "turn_runner", schema.TurnStatus()))
                 and state.running and state.turn < 0, "the turn settling its view", command)
        kill(chat, "planner", command)
        code, out, err = command.finish()
    assert code == 0, err
    assert out.strip(), "no reply was printed"
    assert "Traceback" not in err
    assert f"planner stopped (exit -9; its log: {chat / 'run' / 'planner.log'}); restarting in" in err
    turn_log = (chat / "run" / "turn_runner.log").read_text()
    assert re.search(r"^\S+ \S+ turn_runner\[\d+\] ERROR .*: the turn for 'What does amber-42 mean\?' failed: "
                     r"PeerLost: .*dropped while waiting for the reply$", turn_log, re.MULTILINE), turn_log
    assert "Traceback" not in turn_log  # a lost actor is no bug: one line
    assert message_count(chat) > messages
