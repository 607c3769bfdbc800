"""The terminal shell's own logic, on the real prompt_toolkit application (pipe input,
recording output) over a scripted session: keys, ordering, stop and quit. The
scenarios on the real ChatSession are in test_terminal_chat.py and test_terminal_tmux.py."""

from __future__ import annotations

import re
import threading

from terminal_world import ScriptedSession, running

from everchat.transport import schema

CTRL_C, CTRL_D, TAB, ESC_ENTER = "\x03", "\x04", "\t", "\x1b\r"


def test_a_message_streams_its_reply_and_the_status_bar_shows_the_memory():
    session = ScriptedSession([schema.TurnThinking(0, "Looking."), schema.TurnThinkingDone(0),
                               schema.TurnText(0, "Hello, "), schema.TurnText(0, "Ada.\nBye.")])
    with running(session) as chat:
        chat.line("hi, I am Ada")
        at = chat.wait_printed("Bye.")
        assert chat.terminal.printed[at - 3:at + 1] == ["› hi, I am Ada", "▸ thought for 1 word", "Hello, Ada.",
                                                         "Bye."]
        assert session.sent == [("hi, I am Ada", ())]
        chat.wait(lambda t: "mem 97K/128K · summarizing 3 · scripted · cache 98%" in chat.screen.text(),
                  "the status bar")
        chat.type(CTRL_D)
        assert chat.exit_code() == 0
    assert session.overlaps == 0


def test_r36_input_stays_usable_and_joins_the_running_turn():
    gate = threading.Event()
    session = ScriptedSession([schema.TurnText(0, "Working"), gate, schema.TurnText(0, " done.\n")])
    with running(session) as chat:
        chat.line("start the work")
        chat.wait(lambda t: t.transcript.running and "Working" in str(t.transcript.live()), "the reply running")
        assert "replying" in chat.terminal.status_bar()
        chat.line("and also this")
        chat.wait_printed("joined the reply in progress")
        gate.set()
        at = chat.wait_printed(" done.")
        assert chat.terminal.printed[at - 3:at + 1] == [
            "Working", "› and also this", "↳ message 1 joined the reply in progress", " done."]
        assert [text for text, _ in session.sent] == ["start the work", "and also this"]


def test_r37_ctrl_c_once_stops_the_reply_and_the_chat_takes_the_next_message():
    gate = threading.Event()
    session = ScriptedSession([schema.TurnText(0, "A long sto"), gate], [schema.TurnText(0, "Next.\n")])
    with running(session) as chat:
        chat.line("tell me a long story")
        chat.wait(lambda t: "A long sto" in str(t.transcript.live()), "the reply streaming")
        chat.type(CTRL_C)
        chat.wait_printed("⏹ stopped — the reply so far is kept, marked incomplete")
        assert "A long sto" in chat.terminal.printed
        assert session.stops == 1
        assert "Ctrl-C again to quit" in chat.terminal.status_bar()
        chat.line("go on")  # typing disarms the second Ctrl-C
        chat.wait_printed("Next.")
        chat.wait(lambda t: not t.busy, "the second reply's end")
        assert chat.thread.is_alive()


def test_slash_stop_stops_and_says_so_when_nothing_runs():
    gate = threading.Event()
    session = ScriptedSession([schema.TurnText(0, "Strea"), gate])
    with running(session) as chat:
        chat.line("/stop")
        chat.wait_printed("nothing to stop")
        chat.line("go")
        chat.wait(lambda t: "Strea" in str(t.transcript.live()), "the reply streaming")
        chat.line("/stop")
        chat.wait_printed("⏹ stopped")
        assert [text for text, _ in session.sent] == ["go"]


def test_ctrl_c_twice_quits():
    with running(ScriptedSession()) as chat:
        chat.type("half a thought")
        chat.type(CTRL_C)
        chat.wait(lambda t: "Ctrl-C again to quit" in t.status_bar() and not t.buffer.text, "the armed bar")
        chat.type(CTRL_C)
        assert chat.exit_code() == 0


def test_ctrl_d_quits_only_on_an_empty_line_and_slash_quit_quits():
    session = ScriptedSession()
    with running(session) as chat:
        chat.type("abc\x01" + CTRL_D)  # Ctrl-A to the start, Ctrl-D deletes the "a"
        chat.wait(lambda t: t.buffer.text == "bc", "the deleted character")
        assert chat.thread.is_alive()
        chat.type("\x05\x15")  # Ctrl-E to the end, Ctrl-U clears the line
        chat.line("/quit")
        assert chat.exit_code() == 0
    assert session.sent == []


def test_a_wrong_command_prints_its_usage_and_sends_nothing_and_double_slash_sends():
    session = ScriptedSession()
    with running(session) as chat:
        for line in ("/zoom", "/date x", "/bogus", "/note", "/attach"):
            chat.line(line)
        chat.line("//etc is a folder")
        chat.wait(lambda t: session.sent and not t.busy, "the send and its reply")
        printed = chat.terminal.printed
        assert "/zoom needs an id, then optionally n and a page. usage: /zoom ID [N] [PAGE]" in printed
        assert "/date the id is a whole number, not 'x'. usage: /date ID" in printed
        assert any(line.startswith("unknown command /bogus") for line in printed)
        assert "/note needs the note's text. usage: /note TEXT" in printed
        assert "/attach needs an image's path. usage: /attach PATH" in printed
        assert session.sent == [("/etc is a folder", ())]


def test_r35_memory_commands_answer_in_the_order_they_were_typed():
    session = ScriptedSession()
    with running(session) as chat:
        chat.line("/zoom 0")
        chat.line("/zoom 6 4")
        chat.line("/date 0")
        chat.line("/note I was born in Lisbon.")
        chat.line("/memory")
        chat.line("/help date")
        chat.wait_printed("/date ID  the date and time of message ID")
        printed = chat.terminal.printed
        order = [printed.index(line) for line in ("user: hi", "No line 6+4.", "message 0: 2026-12-02 19:00:00 +0000",
                                                  "noted as message 0", "<chat>", "0+1|user: hi")]
        assert order == sorted(order)
        assert "summaries: 3 pending, 0 being written, 0 failed calls this run" in printed
        assert session.notes == ["I was born in Lisbon."] and session.sent == []
    assert session.overlaps == 0


def test_attach_sends_the_image_with_the_next_message_only(tmp_path):
    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(25))
    session = ScriptedSession()
    with running(session) as chat:
        chat.line(f"/attach {tmp_path / 'nope.png'}")
        chat.line(f"/attach {image}")
        chat.wait(lambda t: "1 image attached" in t.status_bar(), "the attachment in the bar")
        chat.line("what is this?")
        chat.wait(lambda t: len(session.sent) == 1, "the send")
        chat.wait(lambda t: not t.busy, "the reply's end")
        chat.line("and now?")
        chat.wait(lambda t: len(session.sent) == 2, "the second send")
        assert f"/attach: no file {tmp_path / 'nope.png'}" in chat.terminal.printed
        assert "  [image cat.png]" in chat.terminal.printed
    assert session.sent == [("what is this?", (image,)), ("and now?", ())]


def test_compact_waits_in_short_steps_and_says_when_done():
    session = ScriptedSession()
    with running(session) as chat:
        chat.line("/compact")
        chat.wait_printed("every summary is built")
        assert session.calls.count("compact") == 3 and session.compact_timeouts == 0
        assert any(line.startswith("building every pending summary") for line in chat.terminal.printed)


def test_commands_complete_with_tab_and_esc_enter_adds_a_line():
    session = ScriptedSession()
    with running(session) as chat:
        chat.type("/mem")
        chat.wait(lambda t: t.buffer.complete_state is not None, "the completion menu")
        chat.type(TAB)
        chat.wait(lambda t: t.buffer.text == "/memory", "the completed command")
        chat.type("\x15first" + ESC_ENTER + "second\r")
        chat.wait(lambda t: len(session.sent) == 1, "the send")
    assert session.sent == [("first\nsecond", ())]


def test_a_reopened_chat_shows_its_last_messages():
    session = ScriptedSession()
    session.sent = [("my name is Ada", ())]
    with running(session) as chat:
        chat.wait_printed("› hi")
        assert chat.terminal.printed[0] == "1 message so far · /help lists the commands"


def test_a_refused_image_is_dropped_with_words_and_the_next_message_goes(tmp_path):
    from everchat.actors.folder import BadInput

    text_file = tmp_path / "notes.txt"
    text_file.write_text("not an image")
    session = ScriptedSession()
    plain_send = session.send

    def send(text, images=()):
        if images:
            raise BadInput("not a PNG, JPEG, GIF or WebP image (R9: type checked from the bytes)")
        return plain_send(text, images)

    session.send = send
    with running(session) as chat:
        chat.line(f"/attach {text_file}")
        chat.line("look at this")
        chat.wait_printed("not sent: not a PNG, JPEG, GIF or WebP image (R9: type checked from the bytes) "
                          "(the attached images were dropped: /attach them again)")
        assert "image" not in chat.terminal.status_bar()
        chat.line("then just this")
        chat.wait(lambda t: len(session.sent) == 1, "the send")
    assert session.sent == [("then just this", ())]


def test_a_lost_end_of_turn_does_not_leave_the_chat_busy_for_ever():
    session = ScriptedSession([schema.TurnText(0, "All of it.")])
    session.lose_ends = True
    with running(session) as chat:
        chat.line("go")
        chat.wait_printed("(the end of this reply was lost on the way; the log has it all: /zoom shows it)")
        assert chat.terminal.printed[-2] == "All of it."
        assert not chat.terminal.busy


def test_a_pasted_block_of_lines_is_one_message():
    session = ScriptedSession()
    with running(session) as chat:
        chat.type("\x1b[200~def f():\r\n    return 42\x1b[201~")
        chat.wait(lambda t: t.buffer.text == "def f():\n    return 42", "the pasted text")
        chat.type("\r")
        chat.wait(lambda t: len(session.sent) == 1, "the send")
        chat.wait_printed("      return 42")
    assert session.sent == [("def f():\n    return 42", ())]


def test_r6_the_thinking_is_drawn_dimmed_while_it_streams_then_folds():
    gate = threading.Event()
    session = ScriptedSession([schema.TurnThinking(0, "Pondering deeply"), gate, schema.TurnThinkingDone(0),
                               schema.TurnText(0, "Done.\n")])
    with running(session) as chat:
        chat.line("go")
        chat.wait(lambda t: "Pondering deeply" in chat.screen.getvalue(), "the thinking on screen")
        assert re.search(r"\x1b\[0;38;5;245;3mPondering deeply", chat.screen.getvalue())  # grey, italic
        gate.set()
        at = chat.wait_printed("Done.")
        assert chat.terminal.printed[at - 1] == "▸ thought for 2 words"
        assert not any("Pondering" in line for line in chat.terminal.printed)  # folded, not kept


def test_quitting_in_the_middle_of_a_streaming_reply_quits_at_once():
    gate = threading.Event()
    lines = [schema.TurnText(0, f"line {n}\n") for n in range(50)]
    session = ScriptedSession(lines + [gate] + lines)
    with running(session) as chat:
        chat.line("stream")
        chat.wait_printed("line 49")
        chat.type(CTRL_D)
        assert chat.exit_code() == 0
        gate.set()  # the rest of the reply arrives after the app is gone
