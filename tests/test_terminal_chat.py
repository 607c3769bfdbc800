"""The terminal chat driven for real: the prompt_toolkit application on a pipe input over
the real ChatSession (every actor, real ZeroMQ sockets), with the offline demo model or
the fake model server through the real Anthropic SDK."""

from __future__ import annotations

import io
import os

import pytest
from terminal_world import running

from everchat.actors import settings as config
from everchat.actors.session.session import ChatSession
from everchat.actors.turns.turn import INCOMPLETE
from everchat.tools.fakemodel import FakeModelServer, Latency, Reply, Text, Thinking
from everchat.transport import schema


class Recorded:
    """The session, with every event the terminal took from it kept for the test."""

    def __init__(self, session: ChatSession) -> None:
        self.session = session
        self.events: list = []

    def next_event(self, timeout=None):
        event = self.session.next_event(timeout)
        if event is not None:
            self.events.append(event)
        return event

    def __getattr__(self, name):
        return getattr(self.session, name)


def demo_settings(home):
    return config.load({"demo": True}, env={}, home=home)


def test_r36_a_message_streams_its_reply_zoom_answers_and_a_reopened_chat_remembers(tmp_path):
    session = Recorded(ChatSession.open(demo_settings(tmp_path)))
    try:
        with running(session) as chat:
            chat.line("Remember that the code word is amber-42.")
            chat.wait_printed("Noted as message 0")
            chat.line("What is the code word?")
            at = chat.wait_printed('In message 0 you wrote: "Remember that the code word is amber-42."')
            printed = chat.terminal.printed
            assert printed[at - 1] == "⚙ zoom(id=0, n=1) → user: Remember that the code word is amber-42."
            pieces = [e for e in session.events if isinstance(e, schema.TurnText) and e.turn == 2]
            assert len(pieces) > 3  # the reply arrived in pieces, shown as they came
            chat.line("/zoom 0")
            chat.line("/zoom 6 4")
            chat.line("/date 0")
            chat.wait_printed("message 0: ")
            zoomed = printed.index("› /zoom 0")
            assert printed[zoomed + 1] == "user: Remember that the code word is amber-42."
            assert printed[printed.index("› /zoom 6 4") + 1].startswith("No line 6+4.")
            chat.line("/compact")
            chat.wait_printed("every summary is built")
            chat.wait(lambda t: t.status_bar().startswith("mem ") and " · demo" in t.status_bar(), "the status bar")
            chat.line("/quit")
            assert chat.exit_code() == 0
    finally:
        session.close()

    session = ChatSession.open(demo_settings(tmp_path))
    try:
        with running(session) as chat:
            assert chat.terminal.printed[0] == "6 messages so far · /help lists the commands"
            assert "› Remember that the code word is amber-42." in chat.terminal.printed
            chat.line("What is the code word?")
            chat.wait_printed("(I zoomed 0+1 to read it.)")
            chat.type("\x04")
            assert chat.exit_code() == 0
    finally:
        session.close()


@pytest.fixture
def slow_server():
    with FakeModelServer(latency=Latency(per_chunk=0.02)) as server:
        yield server


def fake_settings(home, server):
    flags = {"reply.provider": "anthropic", "reply.model": "claude-test", "reply.base_url": server.base_url,
             "compaction.provider": "demo"}
    return config.load(flags, env={"ANTHROPIC_API_KEY": "test-key"}, home=home)


def test_r37_stop_ends_a_long_reply_keeps_it_marked_incomplete_and_the_chat_goes_on(tmp_path, slow_server):
    story = " ".join(f"word{n}" for n in range(400))
    slow_server.script(
        Reply(Thinking("The person wants a long story; I will write one."),
              Text(story, chunks=tuple(piece + " " for piece in story.split(" ")[:-1]) + ("word399",))),
        Reply("Still here."),
    )
    session = ChatSession.open(fake_settings(tmp_path, slow_server))
    try:
        with running(session) as chat:
            chat.line("Tell me a very long story.")
            chat.wait(lambda t: "word3 " in str(t.transcript.live()), "the story streaming")
            assert "▸ thought for 10 words" in chat.terminal.printed  # folded once the text began
            assert "replying" in chat.terminal.status_bar()
            chat.line("/stop")
            chat.wait_printed("⏹ stopped — the reply so far is kept, marked incomplete")
            printed = chat.terminal.printed
            kept = printed[printed.index("⏹ stopped — the reply so far is kept, marked incomplete") - 1]
            assert kept.startswith("word0 word1 word2 word3 ") and "word399" not in kept
            chat.line("/zoom 1")
            at = chat.wait_printed("everchat: word0 word1")
            assert "word399" not in printed[at]
            assert printed[at + 1] == f"[incomplete: {INCOMPLETE['stopped']}]"
            chat.line("Are you there?")
            chat.wait_printed("Still here.")
            assert not chat.terminal.busy
            chat.line("/quit")
            assert chat.exit_code() == 0
    finally:
        session.close()
    assert len(slow_server.model_calls) == 2


class _Tty:
    def isatty(self) -> bool:
        return True


def test_r5_a_chat_open_elsewhere_is_one_line_on_stderr_and_status_1(tmp_path, capsys):
    from everchat.frontends.terminal.app import run

    settings = demo_settings(tmp_path)
    # A one-shot command's chat (not attachable); a server's is attached to (tests/test_attach.py).
    with ChatSession.open(settings, attachable=False):
        assert run(settings, stdin=_Tty()) == 1
    err = capsys.readouterr().err
    assert err.startswith("everchat: ") and err.count("\n") == 1
    assert f"is locked by its writer, pid {os.getpid()} on host" in err  # ChatLocked names the owner


def test_without_a_terminal_the_chat_says_what_works_instead(tmp_path, capsys):
    from everchat.frontends.terminal.app import run

    assert run(demo_settings(tmp_path), stdin=io.StringIO()) == 2
    assert "everchat ask MESSAGE" in capsys.readouterr().err
    assert not (tmp_path / "chat").exists()  # nothing was opened


def test_r36_what_is_typed_while_a_reply_streams_joins_that_turn(tmp_path, slow_server):
    chunks = tuple(f"step{n} " for n in range(60))
    slow_server.script(Reply(Text("".join(chunks), chunks=chunks)), Reply("Noted your addition too."))
    session = ChatSession.open(fake_settings(tmp_path, slow_server))
    try:
        with running(session) as chat:
            chat.line("Plan the trip.")
            chat.wait(lambda t: "step2 " in str(t.transcript.live()), "the plan streaming")
            chat.line("Also book a train.")
            chat.wait_printed("↳ message 1 joined the reply in progress")
            chat.wait_printed("Noted your addition too.")
            chat.wait(lambda t: not t.busy, "the turn's end")
            turns = [line for line in chat.terminal.printed if line.startswith("›")]
            assert turns == ["› Plan the trip.", "› Also book a train."]
    finally:
        session.close()
    first, second = slow_server.model_calls
    assert "Also book a train." not in str(first.body) and "Also book a train." in str(second.body)
