"""P20: stored text printed to a terminal has its control sequences neutralised. A note, an
imported file, a model's reply or a tool's result may hold `ESC ] 0 ; … BEL` (the window
title), `ESC [ 2 J` (clear the screen) or an OSC 8 hyperlink; what Everchat prints shows
them as visible symbols and sends no ESC, BEL or C1 control of theirs to the terminal."""

from __future__ import annotations

import os
import subprocess
import sys

from cli_world import env, everchat  # noqa: F401 (env is a fixture)
from terminal_world import ScriptedSession, running

from everchat.tools.fakemodel import FakeModelServer, Reply, Text, ToolCall
from everchat.transport import schema

TITLE = "\x1b]0;PWNED\x07"
CLEAR = "\x1b[2J"
LINK = "\x1b]8;;https://evil.example/\x1b\\click me\x1b]8;;\x1b\\"
NASTY = f"{TITLE}title {CLEAR}clear {LINK} csi\x9b31m bell\x07 back\bspace del\x7f cr\rover"
SHOWN = ("␛]0;PWNED␇title ␛[2Jclear ␛]8;;https://evil.example/␛\\click me␛]8;;␛\\ csi�31m bell␇ back␈space "
         "del␡ cr␍over")


def no_controls(data: bytes) -> None:
    """What `od -c` would show: no ESC, no BEL, no backspace, no DEL, no C1 control (as UTF-8)."""
    for byte in (b"\x1b", b"\x07", b"\x08", b"\x7f", b"\r", "\x9b".encode()):
        assert byte not in data, f"{byte!r} reached the terminal: {data!r}"


def test_p20_printable_keeps_newlines_and_tabs_and_shows_every_other_control():
    from everchat.frontends.cli.safe_text import printable

    assert printable(NASTY) == SHOWN
    assert printable("a\tb\nc\r\nd") == "a\tb\nc\nd"  # a Windows line end is a plain newline
    assert printable("\x00\x1f\x80\x9f") == "␀␟��"
    assert printable("ünï cödé ✓ 漢字") == "ünï cödé ✓ 漢字"


def test_p20_zoom_view_and_date_print_a_note_s_escape_sequences_as_symbols(env, tmp_path):
    chat = tmp_path / "chat"
    assert everchat(env, "note", NASTY, "--data-dir", str(chat)).returncode == 0
    for command in (["zoom", "0"], ["view"], ["date", "0"], ["zoom", "0+1"]):
        done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *command, "--data-dir", str(chat)],
                              env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        no_controls(done.stdout)
    zoom = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "zoom", "0", "--data-dir", str(chat)],
                          env=env, capture_output=True, timeout=60)
    assert zoom.stdout.decode() == f"note: {SHOWN}\n"


def test_p20_ask_prints_a_reply_and_tool_lines_without_their_escape_sequences(env, tmp_path):
    chat = tmp_path / "chat"
    assert everchat(env, "note", "plain", "--data-dir", str(chat)).returncode == 0
    with FakeModelServer() as server:
        server.script(Reply(ToolCall("zoom", {"id": TITLE})), Reply(Text(f"Here {NASTY} end.")))
        run_env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="anthropic",
                       EVERCHAT_REPLY_BASE_URL=server.base_url, EVERCHAT_COMPACTION_PROVIDER="demo")
        done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "ask", "hi", "--data-dir", str(chat)],
                              env=run_env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    no_controls(done.stdout)
    no_controls(done.stderr)
    assert done.stdout.decode() == f"Here {SHOWN} end.\n"


class _NastySession(ScriptedSession):
    """A scripted chat whose log, replies, tool results and notices hold escape sequences."""

    def zoom(self, id, n=1, page=1):
        with self._one("zoom"):
            return f"user: {NASTY}"


def test_p20_the_terminal_chat_shows_escape_sequences_as_symbols():
    session = _NastySession([
        schema.TurnToolCall(0, "c1", "zoom", '{"id": "\\u001b[2J"}'),
        schema.TurnToolResult(0, "c1", "zoom", False, f"result {CLEAR}{TITLE}"),
        schema.TurnText(0, f"reply {NASTY}\n"),
    ])
    session.sent = [("earlier", ())]  # one message in the log: shown when the chat opens
    with running(session) as chat:
        chat.wait_printed("› ␛]0;PWNED␇title")  # the history, from zoom
        chat.line("go")
        chat.wait_printed(f"reply {SHOWN}")
        session.events.put(schema.Notice("warning", f"notice {TITLE}"))
        chat.wait_printed("! notice")
        chat.line("/zoom 0")
        chat.wait(lambda t: sum(SHOWN in line for line in t.printed) >= 3, "the zoomed message")
        printed = "\n".join(chat.terminal.printed)
        assert "⚙ zoom(id=\"\\u001b[2J\") → result ␛[2J␛]0;PWNED␇" in printed
        assert "! notice ␛]0;PWNED␇" in printed
        written = chat.screen.getvalue()
    for control in ("\x07", "\x08", "\x7f", "\x9b", "\x1b]0;PWNED", "\x1b]8;;", "\rover"):
        assert control not in written, f"{control!r} reached the terminal"
    assert "␛]0;PWNED␇title" in written


def test_p20_every_everchat_line_on_stderr_is_neutralised_too(env, tmp_path):
    """An error whose words come from outside (here: a file name) cannot drive the terminal."""
    bad = tmp_path / f"x{TITLE}.png"
    done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "--demo", "ask", "hi", "--image", str(bad),
                           "--data-dir", str(tmp_path / "chat")], env=env, capture_output=True, timeout=60)
    assert done.returncode == 2
    no_controls(done.stderr)
    assert done.stderr.decode() == f"everchat: {tmp_path}/x␛]0;PWNED␇.png: no such image\n"
    assert not os.path.exists(tmp_path / "chat")


def test_p9_a_log_record_while_the_terminal_chat_runs_is_a_line_of_its_transcript(tmp_path, monkeypatch):
    """An actor of this process that logs (with a traceback, too) while the chat is on the
    screen: one line in the transcript, nothing printed over the screen, the traceback in
    the details file."""
    import logging

    from everchat.frontends.cli.edge import person_logging

    monkeypatch.setenv("EVERCHAT_HOME", str(tmp_path / "home"))
    with person_logging("everchat chat"), running(ScriptedSession()) as chat:
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            logging.getLogger("everchat.log_writer").error("log_writer: saving %s failed", "usage.json",
                                                           exc_info=True)
        at = chat.wait_printed("! error: log_writer: saving usage.json failed")
        details = tmp_path / "home" / "logs" / "errors.log"
        assert chat.terminal.printed[at] == ("! error: log_writer: saving usage.json failed: OSError: [Errno 28] "
                                             f"No space left on device (details in {details})")
        assert "Traceback" not in chat.screen.getvalue()
    assert "OSError: [Errno 28] No space left on device" in details.read_text()
