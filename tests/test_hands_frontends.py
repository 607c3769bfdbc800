"""The hands in the front ends (R38, R39): the terminal shows an agent's news and the chat's
own shell output as it comes; the page gets both as events; `/agent NAME TASK` on the page
starts the agent as the terminal's `/agent` does (P15: `ChatSession.agent`), and a bad one
is refused before anything is sent."""

from __future__ import annotations

import types

import pytest

from everchat.frontends.terminal.transcript import Transcript, plain
from everchat.frontends.web.chat import WebChat
from everchat.frontends.web.hub import translate
from everchat.transport import schema


def _feed(view: Transcript, *events) -> list[str]:
    for event in events:
        view.on_event(event)
    return [plain(line) for line in view.take()]


def test_r39_the_terminal_prints_the_turns_shell_output_as_it_comes_and_not_an_agents():
    view = Transcript(width=60)
    _feed(view, schema.TurnStarted(4), schema.TurnToolCall(4, "c1", "shell", '{"command": "make"}'))
    out = _feed(view, schema.JobOutput(job="turn-4-2", caller="main", text="cc -c a.c\ncc -c b.c\n"))
    assert out == ["  │ cc -c a.c", "  │ cc -c b.c"]
    assert _feed(view, schema.JobOutput(job="agent-Ada-turn-0-2", caller="Ada", text="quiet\n")) == []


def test_r38_the_terminal_shows_an_agents_news_in_one_line():
    view = Transcript(width=60)
    assert _feed(view, schema.AgentEvent(name="Ada", state="working", text="shell {\"command\":\n\"ls\"}")) == [
        '◆ [Ada] working: shell {"command": "ls"}']
    (line,) = _feed(view, schema.AgentEvent(name="Ada", state="done", text="found it " * 20))
    assert line.startswith("◆ [Ada] done: found it") and len(line) == 60


def test_r38_r39_the_page_gets_agent_news_and_shell_output_as_events():
    def nothing(_):
        raise AssertionError("no message is read for these")

    assert translate(schema.AgentEvent("Ada", "queued", "queued"), nothing, nothing) == [
        {"type": "agent", "name": "Ada", "state": "queued", "text": "queued"}]
    assert translate(schema.JobOutput("turn-9-2", "main", "hi\n"), nothing, nothing) == [
        {"type": "output", "job": "turn-9-2", "caller": "main", "text": "hi\n"}]


class _Session:
    """What WebChat asks of a session when it sends or stops."""

    def __init__(self) -> None:
        self.asked: list = []
        self.stopped: list = []
        self.settings = types.SimpleNamespace(settle_timeout=1.0)

    def _ask(self, target, msg, timeout):
        self.asked.append((target, msg))
        return schema.InputLogged(ids=[3], turn=3, joined=False)

    def agent(self, name, task):
        self.asked.append(("agent", (name, task)))
        return schema.AgentAccepted(name, "working", ""), 5

    def stop(self):
        self.stopped.append(None)

    def stop_agent(self, name):
        self.stopped.append(name)


def _chat(session) -> WebChat:
    chat = WebChat.__new__(WebChat)  # the send path only: no reader needed
    chat.session = session
    return chat


def test_r38_p15_agent_on_the_page_starts_it_as_the_terminals_agent_does():
    session = _Session()
    logged = _chat(session).send("/agent Ada  compare the two logs ", [])
    assert session.asked == [("agent", ("Ada", "compare the two logs"))]  # no turn: the model is not asked
    assert logged == schema.InputLogged(ids=[5], turn=-1, joined=False)


@pytest.mark.parametrize("text, said", [("/agent 9lives do it", "starts with a letter"),
                                        ("/agent Ada", "the task is missing")])
def test_r38_a_bad_agent_command_on_the_page_is_refused_and_nothing_is_sent(text, said):
    session = _Session()
    with pytest.raises(ValueError, match=said):
        _chat(session).send(text, [])
    assert session.asked == []


def test_r38_stop_with_a_name_stops_that_agent_and_not_the_turn():
    session = _Session()
    chat = _chat(session)
    chat.stop("Ada")
    chat.stop()
    assert session.stopped == ["Ada", None]


def test_an_edits_diff_is_shown_in_the_terminal_added_lines_green_removed_red():
    view = Transcript(width=60)
    _feed(view, schema.TurnStarted(2), schema.TurnToolCall(2, "c1", "edit", '{"path": "a.txt"}'))
    diff = "edited /w/a.txt\n--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO"
    view.on_event(schema.TurnToolResult(2, "c1", "edit", False, diff))
    rows = view.take()
    assert [plain(row) for row in rows] == ['⚙ edit(path="a.txt") → edited /w/a.txt', "  --- a/w/a.txt",
                                           "  +++ b/w/a.txt", "  @@ -1,2 +1,2 @@", "   one", "  -two", "  +TWO"]
    styles = [row[0][0] for row in rows]
    assert styles[-2:] == ["class:diff.remove", "class:diff.add"] and styles[1] == "class:tool"


def test_the_turn_publishes_a_writes_diff_whole_and_other_results_cut_to_their_preview(monkeypatch):
    """R39: the front ends show a write's diff, not its first 200 characters."""
    from test_turns import ScriptedIO, runner

    from everchat.actors.zoom import ToolOutcome
    from everchat.actors.models import Stop, ToolCall

    diff = "wrote 900 bytes to a.txt\n" + "".join(f"+line {n}\n" for n in range(80))
    io = ScriptedIO([[ToolCall("w1", "write", {"path": "a.txt", "content": "x"}),
                      ToolCall("s1", "shell", {"command": "seq 300"}), Stop("tool_use")], [Stop("end_turn")]])
    monkeypatch.setattr(io, "tool", lambda name, arguments, key=None: ToolOutcome(diff))
    runner().run(io)
    previews = {e.name: e.preview for e in io.events if isinstance(e, schema.TurnToolResult)}
    assert previews["write"] == diff and previews["shell"] == diff[:200]
