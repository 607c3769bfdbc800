"""The turn runner across losses and resends (R36, P4, P9): an input sent again with its
key reaches the model once, whether it joined a running call or waited for the turn's
view to settle; a turn whose planner is lost before its message is logged publishes no
end of a turn that never began, and says the loss in one log line, not a traceback.

A whole ChatSession in this process, the fake model server (turn_wire's fixtures), and
the real SDK on the wire."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from everchat.tools.fakemodel import Gate, Reply, Text, ToolCall
from everchat.actors.session.session import ChatSession
from everchat.transport import TransportError, schema

from test_turns_wire import configure, fake, server, turn_calls, until_end  # noqa: F401 (fixtures)

_SECONDS = 60.0


def eventually(condition, what: str):
    """Polls `condition()` until it is true (returned); fails after _SECONDS."""
    deadline = time.monotonic() + _SECONDS
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)  # polling an actor's state, not waiting for it to settle
    raise AssertionError(f"no {what} within {_SECONDS:g} s")


def held_compactions(gate: Gate):
    """Compactions wait for `gate`; turns answer "ok"."""
    def rule(request):
        if "Compaction: " in request.last_user_text:
            return Reply(Text("a long note, summarized"), gate=gate)
        return Reply(Text("ok"))
    return rule


def settling(session) -> bool:
    """A turn runs and has not logged its message yet: it waits for its view (R36)."""
    state = session.node.ask("turn_runner", schema.TurnStatus(), timeout=_SECONDS)
    return state.running and state.turn < 0


def answers(session, name: str, msg) -> bool:
    try:
        session.node.ask(name, msg, timeout=2.0)
    except TransportError:
        return False
    return True


def handled(session, name: str) -> int:
    return next(row.handled for row in session.node.statistics() if row.name == name)


class Asks:
    """Asks made from threads of their own (each waits for its answer); `replies()` once
    every one has its answer."""

    def __init__(self, session) -> None:
        self.session = session
        self.threads: list[threading.Thread] = []
        self.answers: dict[int, object] = {}

    def ask(self, msg) -> None:
        n = len(self.threads)

        def run() -> None:
            try:
                self.answers[n] = self.session.node.ask("turn_runner", msg, timeout=_SECONDS)
            except Exception as error:  # the test reads it
                self.answers[n] = error

        thread = threading.Thread(target=run, daemon=True)
        self.threads.append(thread)
        thread.start()

    def replies(self) -> list:
        for thread in self.threads:
            thread.join(_SECONDS)
        return [self.answers.get(n) for n in range(len(self.threads))]


def test_p4_an_input_sent_again_after_it_joined_the_running_call_reaches_the_model_once(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    gate = Gate()
    fake.script(Reply(ToolCall("zoom", {"id": 0, "n": 1}, id="call-1"), gate=gate), Reply(Text("Both seen.")))
    later = schema.UserInput(text="Also, hurry.", images=[], key="input-hurry")
    with ChatSession.open(settings) as session:
        session.note("the code is 7")
        turn = session.send("What is the code?")
        assert fake.wait_for_requests(1)
        first = session.node.ask("turn_runner", later, timeout=_SECONDS)
        again = session.node.ask("turn_runner", later, timeout=_SECONDS)  # as the session repeats it
        gate.open()
        events = until_end(session, turn)
        assert session.count_messages() == turn + 5  # m, the later input once, tool, echo, reply
    assert first == again == schema.InputLogged(ids=[turn + 1], turn=turn, joined=True)
    assert [e for e in events if isinstance(e, schema.TurnJoined)] == [schema.TurnJoined(turn=turn, message=turn + 1)]
    assert json.dumps(turn_calls(fake)[1].body).count("Also, hurry.") == 1


def test_p4_inputs_sent_again_while_the_turn_settles_its_view_reach_the_model_once(monkeypatch, tmp_path, fake):
    """The turn's own message and one typed meanwhile, each sent twice with its key before
    the view is settled: each is logged once, every ask gets its ids, and the model reads
    each once (R36)."""
    settings = configure(monkeypatch, tmp_path, fake, "anthropic", settle=_SECONDS)
    gate = Gate()
    fake.rule(held_compactions(gate))
    own = schema.UserInput(text="What did the note say?", images=[], key="input-own")
    later = schema.UserInput(text="And be brief.", images=[], key="input-later")
    with ChatSession.open(settings) as session:
        session.note("long " * 200)  # over 512 bytes: its leaf waits for a compaction
        asks = Asks(session)
        asks.ask(own)
        eventually(lambda: settling(session), "the turn settling its view")
        before = handled(session, "turn_runner")
        for msg in (own, later, later):
            asks.ask(msg)
        eventually(lambda: handled(session, "turn_runner") >= before + 3, "every input taken")
        gate.open()
        replies = asks.replies()
        until_end(session, 1)
        texts = [session.zoom(i, 1) for i in range(session.count_messages())]
    assert replies == [schema.InputLogged(ids=[1], turn=1, joined=False)] * 2 + \
        [schema.InputLogged(ids=[2], turn=1, joined=True)] * 2
    assert texts[1:3] == ["user: What did the note say?", "user: And be brief."]
    assert not [text for text in texts[3:] if text.startswith("user:")]
    body = json.dumps(turn_calls(fake)[0].body)
    assert body.count("What did the note say?") == 1 and body.count("And be brief.") == 1


def test_p9_a_turn_whose_planner_is_lost_while_it_settles_ends_no_turn_and_logs_one_line(
        monkeypatch, tmp_path, fake, caplog):
    """The planner stops while the turn waits for its view: the turn runner says so in one
    error line (no traceback: a lost actor is no bug), publishes no end of a turn that
    never began (the person's terminal would show "the reply failed" for a message that
    the session then sends again), and the session's repeat after the restart is the
    one turn there is."""
    settings = configure(monkeypatch, tmp_path, fake, "anthropic", settle=_SECONDS)
    gate = Gate()
    fake.rule(held_compactions(gate))
    sent: dict = {}
    with ChatSession.open(settings) as session, caplog.at_level(logging.WARNING):
        session.note("long " * 200)
        sender = threading.Thread(target=lambda: sent.update(turn=session.send("What did the note say?")),
                                  daemon=True)
        sender.start()
        eventually(lambda: settling(session), "the turn settling its view")
        session.supervisor.node.stop_actor("planner")
        eventually(lambda: answers(session, "planner", schema.PlannerStatus()), "the planner running again")
        gate.open()
        sender.join(_SECONDS)
        events = until_end(session, sent["turn"])
    assert sent["turn"] == 1
    assert [e for e in events if isinstance(e, schema.TurnEnded)] == [
        schema.TurnEnded(turn=1, reason="done", incomplete=False, detail="")]
    assert [e.turn for e in events if isinstance(e, schema.TurnStarted)] == [1]
    (failed,) = [r for r in caplog.records if r.name == "everchat.turn_runner" and "failed" in r.getMessage()]
    assert failed.levelno == logging.ERROR and failed.exc_info is None
    assert "the turn for 'What did the note say?' failed: ActorStopped: " in failed.getMessage()


def test_p9_a_turn_that_fails_after_its_message_is_logged_publishes_its_end_with_the_cause():
    """A turn broken outside the model call once its message is logged (the log writer
    lost mid-turn) ends with "error" for the front ends: `failed` publishes TurnEnded by
    name, as every other event (it once passed a built message and raised TypeError, so
    no end reached anyone and the front end waited for good)."""
    import types

    from everchat.actors.turns.actor import _Pending, _ShellIO

    published = []
    node = types.SimpleNamespace(publish=lambda topic, msg: published.append((topic, msg)))
    actor = types.SimpleNamespace(node=node, _lock=threading.Lock(), _unlogged=[], _joined=[], _inputs={},
                                  _active=True, _turn=7)
    io = _ShellIO(actor, _Pending(schema.UserInput(text="hi", key="k", images=[]), None, joined=False))
    io.turn, io.answered = 7, True
    io.failed(TransportError("log_writer is gone"))
    assert published == [("turn", schema.TurnEnded(turn=7, reason="error", incomplete=False,
                                                   detail="TransportError: log_writer is gone"))]
    assert actor._active is False and actor._turn == -1
