"""Goals through a whole ChatSession and the fake model server (issue 13, docs/GOALS.md):
a goal runs turns until its check says "Goal met.", /halt drops it, it survives a restart of
the chat's actors on the same folder, and the turn runner pauses it after 30 turns in a row."""

from __future__ import annotations

import inspect
import json
import threading

import pytest

from everchat.actors.turns import goals
from everchat.actors.session.session import ChatSession
from everchat.actors.turns.actor import TurnRunnerActor
from everchat.tools.fakemodel import Gate, Reply, Text
from everchat.transport import schema

from cli_world import env, everchat  # noqa: F401 (env is a fixture)
from test_turns_wire import configure, fake, server  # noqa: F401 (fixtures)


class Script:
    """The fake server's answers by kind of call: the turns' replies, the goal checks'
    answers (tool-less calls), and a summary for any compaction. An answer may be a
    `Gate`-held `Reply`. Records what each check was shown."""

    def __init__(self, turns, checks) -> None:
        self.turns = list(turns)
        self.checks = list(checks)
        self.shown: list[str] = []
        self.checking = threading.Event()  # set at the first check
        self.lock = threading.Lock()

    def __call__(self, request):
        with self.lock:
            if "Compaction: " in request.last_user_text:
                return Reply(Text("A summary."))
            if not request.tool_names:  # the goal's check: no tools
                self.shown.append(request.last_user_text)
                self.checking.set()
                answer = self.checks.pop(0) if self.checks else "Not met: nothing scripted."
                return answer if isinstance(answer, Reply) else Reply(Text(answer))
            answer = self.turns.pop(0) if self.turns else "A reply."
            return answer if isinstance(answer, Reply) else Reply(Text(answer))


def goal_events(session, until, timeout=30.0):
    """Events until a GoalEvent whose `event` is in `until`; returns them all."""
    seen = []
    while True:
        event = session.next_event(timeout=timeout)
        assert event is not None, f"no goal event {until}; saw {seen}"
        seen.append(event)
        if isinstance(event, schema.GoalEvent) and event.event in until:
            return seen


def user_messages(session):
    count = session.status()["messages"]
    out = []
    for i in range(count):
        text = session.zoom(i, 1)
        if text.startswith("user: "):
            out.append(text.removeprefix("user: "))
    return out


def read_meta(chat, text):
    """The meta of the logged `user` messages whose text is `text` (from the day files)."""
    metas = []
    for day in sorted((chat / "main").rglob("*.jsonl")):
        for line in day.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "user" and record.get("text") == text:
                metas.append(record.get("meta"))
    return metas


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_goal_runs_three_turns_and_stops_on_goal_met(monkeypatch, tmp_path, fake, provider):
    settings = configure(monkeypatch, tmp_path, fake, provider)
    script = Script(["First try.", "Second try.", "Third try: done."],
                    ["Not met: the tests fail.", "Not met: one test fails.", "Goal met."])
    fake.rule(script)
    with ChatSession.open(settings) as session:
        logged = session.goal("Make the tests pass.")
        events = goal_events(session, ("met", "paused"))
        assert events[-1] == schema.GoalEvent("met", "Make the tests pass.", 3, goals.MET)
        kinds = [e.event for e in events if isinstance(e, schema.GoalEvent)]
        assert kinds == ["set", "continuing", "continuing", "met"]
        ended = [e for e in events if isinstance(e, schema.TurnEnded)]
        assert [e.reason for e in ended] == ["done"] * 3 and ended[0].turn == logged.turn
        assert user_messages(session) == ["Make the tests pass.", goals.CONTINUE, goals.CONTINUE]
        assert session.goal_status() is None
    assert read_meta(settings.chat_dir, goals.CONTINUE) == [{"goal": "continue"}] * 2
    assert read_meta(settings.chat_dir, "Make the tests pass.") == [{"goal": "set"}]
    assert len(script.shown) == 3 and "<goal>\nMake the tests pass.\n</goal>" in script.shown[0]
    assert "everchat: Second try." in script.shown[1] and "First try." not in script.shown[1]
    checks = [x for x in fake.model_calls if x.headers.get("x-everchat-call") == "goal-check"]
    assert len(checks) == 3
    assert all(x.body.get("max_tokens", x.body.get("max_output_tokens")) == goals.CHECK_MAX_TOKENS for x in checks)
    assert all("tools" not in x.body or not x.body["tools"] for x in checks)
    assert not (settings.chat_dir / goals.GOAL_NAME).exists()


def test_halt_drops_the_goal_while_its_check_runs_and_no_turn_follows(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    gate = Gate()
    script = Script(["Working on it."], [Reply(Text("Not met: more."), gate=gate)])
    fake.rule(script)
    with ChatSession.open(settings) as session:
        session.goal("Write the report.")
        assert script.checking.wait(30)  # the check is on its way (held by the gate)
        assert session.goal_status()["state"] == "active"
        session.halt_goal()
        gate.open()
        events = goal_events(session, ("halted",))
        assert events[-1].detail == "Goal dropped."
        assert session.goal_status() is None
        assert session.next_event(timeout=1) is None  # no continuation, no other turn
        assert user_messages(session) == ["Write the report."]
    assert not (settings.chat_dir / goals.GOAL_NAME).exists()


def test_a_goal_survives_a_restart_between_turns_and_goes_on(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    gate = Gate()
    script = Script(["One.", "Two."], [Reply(Text("Not met."), gate=gate), "Not met: go on.", "Goal met."])
    fake.rule(script)
    with ChatSession.open(settings) as session:
        session.goal("Count to two.")
        assert script.checking.wait(30)
    # closed while the check waited: the goal is saved between turns
    saved = json.loads((settings.chat_dir / goals.GOAL_NAME).read_text())
    assert saved == {"version": 1, "text": "Count to two.", "state": "active", "turns": 1, "running": False,
                     "detail": ""}
    gate.open()
    with ChatSession.open(settings) as session:  # a real restart of the chat's actors on the folder
        assert session.goal_status()["text"] == "Count to two."
        events = goal_events(session, ("met", "paused"))
        assert events[-1].event == "met"
        assert user_messages(session) == ["Count to two.", goals.CONTINUE]
    assert not (settings.chat_dir / goals.GOAL_NAME).exists()


def test_a_goal_whose_turn_was_cut_by_closing_the_chat_waits_for_the_person_after_a_restart(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    gate = Gate()
    script = Script([Reply(Text("Slow."), gate=gate), "Now done."], ["Goal met."])
    fake.rule(script)
    with ChatSession.open(settings) as session:
        session.goal("Finish it.")
        assert isinstance(session.next_event(timeout=30), schema.GoalEvent)
        assert isinstance(session.next_event(timeout=30), schema.TurnStarted)
    # Closing stops the running turn (as /stop would): the goal pauses (a crash, which
    # leaves `running` saved, pauses it at the next start: test_goals.py).
    saved = json.loads((settings.chat_dir / goals.GOAL_NAME).read_text())
    assert saved["state"] == "paused" and saved["running"] is False and saved["detail"] == "the turn was stopped"
    gate.open()
    with ChatSession.open(settings) as session:
        goal = session.goal_status()
        assert goal["state"] == "paused" and goal["text"] == "Finish it."
        early = []
        while (event := session.next_event(timeout=1)) is not None:
            early.append(event)
        # the start says it waits (if this session listened in time); no turn, no check unasked
        assert set(early) <= {schema.GoalEvent("paused", "Finish it.", 1, "the turn was stopped")}
        assert not script.shown
        session.send("Go on.")
        events = goal_events(session, ("met",))
        kinds = [e.event for e in events if isinstance(e, schema.GoalEvent)]
        assert kinds[-2:] == ["resumed", "met"]


def test_a_failed_check_pauses_the_goal_and_never_loops(monkeypatch, tmp_path, fake):
    from everchat.tools.fakemodel import ServerError

    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    monkeypatch.setenv("EVERCHAT_REPLY_BASE_URL", fake.base_url)
    calls = []

    def rule(request):
        if not request.tool_names:
            calls.append(request)
            return ServerError()
        return Reply(Text("Tried."))

    fake.rule(rule)
    with ChatSession.open(settings) as session:
        session.goal("Do it.")
        events = goal_events(session, ("paused", "met"), timeout=60)
        assert events[-1].event == "paused" and events[-1].detail.startswith("the goal check failed: ")
        assert session.goal_status()["state"] == "paused"
        assert user_messages(session) == ["Do it."]


def test_the_turn_runner_pauses_a_goal_after_30_turns_in_a_row(tmp_path):
    from everchat.actors.supervisor.catalog import build_actor
    from everchat.actors.tree import Budget
    from everchat.actors.settings import load

    assert goals.TURN_LIMIT == 30
    assert inspect.signature(TurnRunnerActor).parameters["goal_limit"].default == 30
    assert goals.GoalBook().limit == 30
    # the chat's supervisor builds the turn runner with its settings and tools only: the default
    cls, args = build_actor("turn_runner", tmp_path / "chat", Budget(), settings=load({"demo": True}, env={},
                                                                                         home=tmp_path))
    actor = cls(*args)
    assert cls is TurnRunnerActor and actor.goals.limit == 30


def test_a_goal_pauses_at_its_turn_limit_in_the_actor(monkeypatch, tmp_path, fake):
    from everchat.actors.supervisor import actor as supervisor

    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    fake.rule(Script([], []))  # every check: not met
    original = TurnRunnerActor.__init__

    def small(self, *args, **kwargs):
        kwargs["goal_limit"] = 2
        original(self, *args, **kwargs)

    monkeypatch.setattr(TurnRunnerActor, "__init__", small)
    assert supervisor  # the supervisor builds the turn runner from the class
    with ChatSession.open(settings) as session:
        session.goal("Never done.")
        events = goal_events(session, ("paused", "met"))
        assert events[-1].event == "paused" and events[-1].detail == "2 turns in a row without a word from you"
        assert user_messages(session) == ["Never done.", goals.CONTINUE]


def test_ask_goal_prints_every_turn_and_exits_0_when_the_goal_is_met(tmp_path, env):

    from everchat.tools.fakemodel import FakeModelServer

    chat = tmp_path / "chat"
    script = Script(["Step one.", "Step two."], ["Not met: step two is missing.", "Goal met."])
    with FakeModelServer() as server:
        server.rule(script)
        env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="anthropic",
                   EVERCHAT_REPLY_BASE_URL=server.base_url, EVERCHAT_COMPACTION_PROVIDER="demo")
        done = everchat(env, "--data-dir", str(chat), "ask", "--goal", "Do both steps.")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Step one.\nStep two.\n"
    assert "◎ The goal isn't met yet: keep working. (the check: Not met: step two is missing.)" in done.stderr
    assert "◎ Goal met. (Do both steps., 2 turns)" in done.stderr
    assert not (chat / goals.GOAL_NAME).exists()


def test_a_goal_saved_during_a_turn_by_a_crash_is_paused_at_the_next_start(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    script = Script(["Back to work."], ["Goal met."])
    fake.rule(script)
    ChatSession.open(settings).close()  # the chat exists
    goals.save_goal(settings.chat_dir, goals.Goal("Finish.", "active", 4, running=True))  # as a kill -9 leaves it
    with ChatSession.open(settings) as session:
        goal = session.goal_status()
        assert (goal["state"], goal["running"], goal["detail"]) == ("paused", False, "Everchat stopped during a goal turn")
        assert not script.shown
        session.send("Go on, please.")
        events = goal_events(session, ("met",))
        assert [e.event for e in events if isinstance(e, schema.GoalEvent)][-2:] == ["resumed", "met"]
        assert events[-1].turns == 1  # counted afresh from the person's word


def test_input_while_the_check_runs_starts_its_turn_at_once_and_that_turn_is_checked(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    gate = Gate()
    script = Script(["One.", "Two."], [Reply(Text("Not met."), gate=gate), "Goal met."])
    fake.rule(script)
    try:
        with ChatSession.open(settings) as session:
            session.goal("Do one and two.")
            assert script.checking.wait(30)  # the first check is held by the gate
            mine = session.send("Also do two.")  # a fresh turn at once: the held check is abandoned
            events = goal_events(session, ("met", "paused"))
            assert [e.event for e in events if isinstance(e, schema.GoalEvent)] == ["set", "met"]
            assert [e.turn for e in events if isinstance(e, schema.TurnEnded)][-1] == mine
            assert user_messages(session) == ["Do one and two.", "Also do two."]  # no continuation
    finally:
        gate.open()


def test_the_goal_runs_with_the_turn_runner_in_its_own_process(tmp_path):
    from everchat.actors.settings import load
    from everchat.actors.supervisor.actor import Placement

    settings = load({"demo": True}, env={}, home=tmp_path)  # the demo's check calls a goal met
    with ChatSession.open(settings, placement=Placement("processes", workers=1)) as session:
        session.goal("Remember amber-42.")
        events = goal_events(session, ("met", "paused"), timeout=60)
        assert events[-1] == schema.GoalEvent("met", "Remember amber-42.", 1, goals.MET)
        assert session.goal_status() is None
    assert read_meta(settings.chat_dir, "Remember amber-42.") == [{"goal": "set"}]
