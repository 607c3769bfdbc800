"""The real `everchat` command in a real terminal: tmux runs it in a pane, the test types
with send-keys and reads the screen with capture-pane. EVERCHAT_HOME is the test's
own folder; the tmux server is the test's own (a private socket), killed at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from everchat.tools.fakemodel import FakeModelServer, Latency, Reply, Text

EVERCHAT = Path(sys.executable).with_name("everchat")


class Pane:
    """One tmux pane running a command, on a tmux server of the test's own."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.socket = folder / "tmux.sock"
        self.env = env
        self.windows = 0

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", str(self.socket), *args], env=self.env, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, f"tmux {' '.join(args)}: {done.stderr}"
        return done.stdout

    def start(self, *argv: str) -> str:
        """Run `argv` in a new 100x30 window; when it ends, the pane says `[exit N]`."""
        self.windows += 1
        name = f"w{self.windows}"
        line = " ".join(_quote(arg) for arg in argv) + '; echo "[exit $?]"; sleep 3600'
        if self.windows == 1:
            self.tmux("new-session", "-d", "-s", "t", "-n", name, "-x", "100", "-y", "30", line)
        else:
            self.tmux("new-window", "-t", "t", "-n", name, line)
        self.target = f"t:{name}"
        return name

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.target)

    def wait(self, text: str, timeout: float = 30.0, *, idle: bool = False) -> str:
        """Poll the screen until `text` is on it (capture-pane is a snapshot, not a stream);
        with `idle`, also until the status bar no longer says a reply is running."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            bar = [line for line in screen.splitlines() if line.strip()][-1:]
            if text in screen and not (idle and "replying" in "".join(bar)):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {text!r} on the screen:\n{screen}")
            time.sleep(0.05)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.target, "-l", text)
        self.tmux("send-keys", "-t", self.target, "Enter")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.target, *keys)

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], env=self.env, capture_output=True, timeout=30)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


@pytest.fixture
def pane(tmp_path):
    assert shutil.which("tmux"), "tmux is needed (.ci/run installs it)"
    folder = Path(tempfile.mkdtemp(prefix="ect-"))  # a short path: unix sockets allow ~100 bytes
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TMUX", "EVERCHAT_"))
           and key not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env.update(EVERCHAT_HOME=str(tmp_path / "home"), TERM="xterm-256color", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    pane = Pane(folder, env)
    yield pane
    pane.kill()
    shutil.rmtree(folder, ignore_errors=True)


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
