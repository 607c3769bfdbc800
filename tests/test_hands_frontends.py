"""The hands in the front ends (R38, R39): the terminal shows an agent's news and the chat's
own shell output as it comes; the page gets both as events; `/agent NAME TASK` on the page
goes out as the terminal's `/agent` does, and a bad one is refused before anything is sent."""

from __future__ import annotations

import types

import pytest

from everchat.actors.call_texts import agent_request
from everchat.frontends.chat_view import Transcript, plain
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

    def stop(self):
        self.stopped.append(None)

    def stop_agent(self, name):
        self.stopped.append(name)


def _chat(session) -> WebChat:
    chat = WebChat.__new__(WebChat)  # the send path only: no reader needed
    chat.session = session
    return chat


def test_r38_agent_on_the_page_is_sent_as_the_terminals_agent_request():
    session = _Session()
    _chat(session).send("/agent Ada  compare the two logs ", [])
    ((target, msg),) = session.asked
    assert target == "turn_runner" and msg.text == agent_request("Ada", "compare the two logs")


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
