"""The real `everchat` command in a real terminal: tmux runs it in a pane, the test types
with send-keys and reads the screen with capture-pane. EVERCHAT_HOME is the test's
own folder; the tmux server is the test's own (a private socket), killed at the end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from everchat.tools.fakemodel import FakeModelServer, Latency, Reply, Text

from tmux_world import clean_env, tmux_pane

EVERCHAT = Path(sys.executable).with_name("everchat")


@pytest.fixture
def pane(tmp_path):
    with tmux_pane(clean_env(tmp_path / "home")) as pane:
        yield pane


def test_r36_everchat_demo_in_tmux_streams_zooms_quits_and_reopens_with_its_history(pane):
    pane.start(str(EVERCHAT), "--demo")
    screen = pane.wait("mem 0B/128K · demo")
    assert "0 messages so far · /help lists the commands" in screen
    pane.type("Remember that the code word is amber-42.")
    pane.wait("Noted as message 0.", idle=True)
    pane.type("What is the code word?")
    screen = pane.wait('In message 0 you wrote: "Remember that the code word is amber-42."', idle=True)
    assert "⚙ zoom(id=0, n=1) → user: Remember that the code word is amber-42." in screen
    pane.type("/zoom 0")
    pane.wait("› /zoom 0\nuser: Remember that the code word is amber-42.")
    pane.type("/zoom 6 4")
    pane.wait("› /zoom 6 4\nNo line 6+4.")
    pane.type("/date x")
    pane.wait("/date the id is a whole number, not 'x'. usage: /date ID")
    pane.keys("C-c")
    pane.wait("Ctrl-C again to quit")
    pane.keys("C-c")
    pane.wait("[exit 0]")

    pane.start(str(EVERCHAT), "chat", "--demo")
    screen = pane.wait("/128K · demo")  # the status bar is drawn after the history
    assert "6 messages so far · /help lists the commands" in screen
    assert "› Remember that the code word is amber-42." in screen
    assert "› What is the code word?" in screen
    pane.type("What is the code word?")
    screen = pane.wait("(I zoomed 5+1 to read it.)", idle=True)  # its latest word on it (R34), then back to 0
    assert 'In message 5 I wrote: "In message 0 you wrote: "Remember that the code word is amber-42."' in screen
    pane.keys("C-d")
    pane.wait("[exit 0]")


def test_r37_ctrl_c_in_tmux_stops_a_slow_reply_and_the_chat_takes_the_next_message(pane):
    # A line ends every third word, so lines go to the scrollback while Ctrl-C is typed.
    chunks = tuple(f"word{n}" + ("\n" if n % 3 == 2 else " ") for n in range(300))
    story = "".join(chunks)
    with FakeModelServer(latency=Latency(per_chunk=0.02)) as server:
        server.script(Reply(Text(story, chunks=chunks)), Reply("Still here."))
        pane.env["ANTHROPIC_API_KEY"] = "test-key"
        pane.start(str(EVERCHAT), "--reply-provider", "anthropic", "--reply-model", "claude-test",
                   "--reply-base-url", server.base_url, "--compaction-provider", "demo")
        pane.wait("0 messages so far")
        pane.type("Tell me a very long story.")
        pane.wait("word30 ")
        # the status bar is redrawn a moment after the lines scroll: it says so mid-reply
        assert "word299" not in pane.wait("replying", timeout=4.0)
        pane.keys("C-c")
        screen = pane.wait("⏹ stopped — the reply so far is kept, marked incomplete")
        assert "word299" not in screen and "[exit" not in screen
        pane.type("Are you there?")
        pane.wait("Still here.")
        pane.type("/quit")
        pane.wait("[exit 0]")
        assert len(server.model_calls) == 2
