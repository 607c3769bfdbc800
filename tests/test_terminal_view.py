"""The terminal chat's pure core: commands and their usage, the transcript, the status bar."""

from __future__ import annotations

import pytest

from everchat.frontends.terminal.transcript import Transcript, plain, short_size, status_lines, status_text, tool_line
from everchat.frontends.terminal.slash import COMMANDS, Command, CommandCompleter, Send, UsageError, help_lines, parse
from everchat.transport import schema


def texts(lines):
    return [plain(line) for line in lines]


# ---- commands ----------------------------------------------------------------------------


def test_plain_text_is_sent_as_typed():
    assert parse("hello  there ") == Send("hello  there ")
    assert parse("   ") is None
    assert parse("") is None


def test_a_double_slash_sends_text_that_starts_with_a_slash():
    assert parse("//etc/hosts is mine") == Send("/etc/hosts is mine")
    assert parse("//") == Send("/")


@pytest.mark.parametrize("line, command", [
    ("/help", Command("help")),
    ("/help zoom", Command("help", ("zoom",))),
    ("/memory", Command("memory")),
    ("/zoom 40", Command("zoom", (40, 1, 1))),
    ("/zoom 40 8", Command("zoom", (40, 8, 1))),
    ("/zoom 12 1 3", Command("zoom", (12, 1, 3))),
    ("/zoom Scout", Command("zoom", ("Scout", 1, 1))),
    ("/zoom Scout 2", Command("zoom", ("Scout", 1, 2))),
    ("/date 7", Command("date", (7,))),
    ("/note I was born in Lisbon.", Command("note", ("I was born in Lisbon.",))),
    ("/attach ~/a picture.png", Command("attach", ("~/a picture.png",))),
    ("/compact", Command("compact")),
    ("/stop", Command("stop")),
    ("/stop Scout", Command("stop", ("Scout",))),  # R38: an agent
    ("/agent Scout find the bug in x.py", Command("agent", ("Scout", "find the bug in x.py"))),
    ("/agents", Command("agents")),
    ("/status", Command("status")),
    ("/quit", Command("quit")),
])
def test_r35_commands_parse_with_their_arguments(line, command):
    assert parse(line) == command


@pytest.mark.parametrize("line, said", [
    ("/zoom", "/zoom needs an id, then optionally n and a page. usage: /zoom ID [N] [PAGE]"),
    ("/zoom x1 2 3", "/zoom an agent's name takes only a page. usage: /zoom ID [N] [PAGE]"),
    ("/zoom 4 two", "/zoom n is a whole number, not 'two'. usage: /zoom ID [N] [PAGE]"),
    ("/zoom 4 0", "/zoom n is at least 1, not 0. usage: /zoom ID [N] [PAGE]"),
    ("/zoom -4", "/zoom the id is at least 0, not -4. usage: /zoom ID [N] [PAGE]"),
    ("/zoom 1 2 3 4", "/zoom needs an id, then optionally n and a page. usage: /zoom ID [N] [PAGE]"),
    ("/date", "/date needs one message id. usage: /date ID"),
    ("/date 3 4", "/date needs one message id. usage: /date ID"),
    ("/date today", "/date the id is a whole number, not 'today'. usage: /date ID"),
    ("/note", "/note needs the note's text. usage: /note TEXT"),
    ("/note    ", "/note needs the note's text. usage: /note TEXT"),
    ("/attach", "/attach needs an image's path. usage: /attach PATH"),
    ("/quit now", "/quit takes no arguments. usage: /quit"),
    ("/stop it now", "/stop takes at most an agent's name. usage: /stop [NAME]"),
    ("/agent Scout", "/agent needs a name and a task. usage: /agent NAME TASK"),
    ("/agent 9lives do it", "/agent an agent's name starts with a letter, then letters, digits, - or _ (R38), not "
                            "'9lives'. usage: /agent NAME TASK"),
    ("/memory 3", "/memory takes no arguments. usage: /memory"),
    ("/help a b", "/help takes at most one command name. usage: /help [COMMAND]"),
])
def test_a_wrong_command_prints_its_usage_and_sends_nothing(line, said):
    assert parse(line) == UsageError(said)


def test_an_unknown_command_points_to_help_and_to_the_double_slash():
    error = parse("/etc/hosts")
    assert isinstance(error, UsageError)
    assert error.text.startswith("unknown command /etc/hosts — /help lists the commands")
    assert "//text" in error.text


def test_help_lists_every_command_with_its_usage():
    lines = help_lines()
    for spec in COMMANDS.values():
        assert sum(line.startswith(spec.usage + " ") for line in lines) == 1
    assert any(line.startswith("//TEXT") for line in lines)
    assert help_lines("zoom") == [f"{COMMANDS['zoom'].usage}  {COMMANDS['zoom'].help}"]
    assert help_lines("nope") == ["no command /nope"]


def test_r38_zoom_help_names_an_agents_transcript():
    """`/zoom NAME` reads agent NAME's transcript (R35, R38): the help says so."""
    (line,) = help_lines("zoom")
    assert "NAME" in line and "transcript" in line and "none yet" not in line


# ---- the status bar -------------------------------------------------------------------------


def test_the_status_bar_reads_like_the_issue():
    status = {"messages": 812, "view_bytes": 97_312, "view_budget": 128_000, "pending": 3, "failures": 0,
              "model": "demo", "cache_share": 0.981, "usage": {}}
    assert status_text(status) == "mem 97K/128K · summarizing 3 · demo · cache 98%"


def test_r30_failed_compactions_show_in_the_status_bar_and_nothing_pending_is_quiet():
    status = {"view_bytes": 812, "view_budget": 128_000, "pending": 0, "failures": 2, "model": "claude-sonnet-5-5",
              "cache_share": None}
    assert status_text(status, ("replying",)) == "mem 812B/128K · 2 failed · claude-sonnet-5-5 · replying"


def test_sizes_are_short_and_in_thousands_of_bytes():
    assert [short_size(n) for n in (0, 999, 1000, 9_749, 10_000, 128_000, 1_250_000, None)] == \
        ["0B", "999B", "1.0K", "9.7K", "10K", "128K", "1.2M", "?"]


# ---- the transcript --------------------------------------------------------------------------


def feed(transcript, *events):
    for event in events:
        transcript.on_event(event)
    return texts(transcript.take())


def test_a_reply_streams_live_and_finished_lines_go_to_the_scrollback():
    view = Transcript(width=40)
    assert feed(view, schema.TurnStarted(5), schema.TurnText(5, "Hel"), schema.TurnText(5, "lo")) == []
    assert texts(view.live()) == ["Hello"]
    assert feed(view, schema.TurnText(5, " there.\nSecond")) == ["Hello there."]
    assert texts(view.live()) == ["Second"]
    assert feed(view, schema.TurnEnded(5, "done", False, "")) == ["Second"]
    assert view.live() == [] and not view.running


def test_r6_thinking_streams_dimmed_then_folds_into_one_line():
    view = Transcript()
    assert feed(view, schema.TurnStarted(1), schema.TurnThinking(1, "Let me look"),
                schema.TurnThinking(1, " at the view.")) == []
    assert view.live() == [(("class:thinking", "Let me look at the view."),)]
    assert feed(view, schema.TurnThinkingDone(1)) == ["▸ thought for 6 words"]
    assert view.live() == []


def test_text_after_thinking_without_a_done_event_still_folds_it():
    view = Transcript()
    assert feed(view, schema.TurnThinking(1, "hm"), schema.TurnText(1, "Yes.\n")) == ["▸ thought for 1 word", "Yes."]


def test_a_tool_call_is_one_line_completed_by_its_result():
    view = Transcript(width=60)
    feed(view, schema.TurnStarted(9), schema.TurnText(9, "Let me zoom."))
    out = feed(view, schema.TurnToolCall(9, "c1", "zoom", '{"id": 40, "n": 8}'))
    assert out == ["Let me zoom."]
    assert texts(view.live()) == ["⚙ zoom(id=40, n=8) …"]
    out = feed(view, schema.TurnToolResult(9, "c1", "zoom", False, "40+4|user: the code\nword is amber-42"))
    assert out == ["⚙ zoom(id=40, n=8) → 40+4|user: the code word is amber-42"]
    out = feed(view, schema.TurnToolCall(9, "c2", "zoom", '{"id": 6, "n": 4}'),
               schema.TurnToolResult(9, "c2", "zoom", True, "No line 6+4." + " x" * 100))
    assert len(out) == 1 and out[0].startswith("✗ zoom(id=6, n=4) → No line 6+4.") and len(out[0]) == 60


def test_r37_a_stopped_reply_keeps_its_text_marked_incomplete():
    view = Transcript()
    out = feed(view, schema.TurnStarted(3), schema.TurnText(3, "Once upon a ti"),
               schema.TurnEnded(3, "stopped", True, ""))
    assert out == ["Once upon a ti", "⏹ stopped — the reply so far is kept, marked incomplete"]
    assert not view.running


def test_a_failed_reply_says_why_and_a_pending_tool_call_is_closed():
    view = Transcript()
    out = feed(view, schema.TurnStarted(3), schema.TurnToolCall(3, "c", "date", '{"id": 2}'),
               schema.TurnEnded(3, "error", True, "the model is overloaded"))
    assert out == ["⚙ date(id=2) (no result)",
                   "✗ the reply failed: the model is overloaded (the reply so far is kept, marked incomplete)"]


def test_r36_input_typed_during_a_reply_joins_it_between_its_lines():
    view = Transcript()
    feed(view, schema.TurnStarted(3), schema.TurnText(3, "Work"))
    view.user("also check the logs")
    out = feed(view, schema.TurnJoined(3, 4), schema.TurnText(3, "ing on it.\n"))
    assert out == ["Work", "› also check the logs", "↳ message 4 joined the reply in progress", "ing on it."]


def test_r30_a_notice_is_shown_never_silent():
    view = Transcript()
    out = feed(view, schema.Notice("warning", "summary of 40+8 failed (2 of 3): overloaded"))
    assert out == ["! summary of 40+8 failed (2 of 3): overloaded"]
    assert view.take() == []


def test_live_thinking_shows_only_its_last_rows():
    view = Transcript(width=10)
    feed(view, schema.TurnThinking(1, "\n".join(f"line {n}" for n in range(20))))
    assert texts(view.live(rows=3)) == ["line 17", "line 18", "line 19"]
    assert texts(view.live(rows=30)) == [f"line {n}" for n in range(14, 20)]  # a glimpse: six rows at most
    feed(view, schema.TurnThinkingDone(1), schema.TurnText(1, "x" * 25))
    assert texts(view.live(rows=8)) == ["xxxxxxxxxx", "xxxxxxxxxx", "xxxxx"]


def test_a_multi_line_message_and_its_images_show_under_one_prompt():
    view = Transcript()
    view.user("first\nsecond", ("cat.png",))
    assert texts(view.take()) == ["› first", "  second", "  [image cat.png]"]


def test_tool_lines_name_their_arguments():
    assert tool_line("zoom", '{"id": "Scout"}') == 'zoom(id="Scout")'
    assert tool_line("shell", "not json") == "shell(not json)"
    assert tool_line("x", "") == "x()"


def test_an_event_the_transcript_does_not_know_is_an_error_not_a_silence():
    with pytest.raises(TypeError, match="no use for Ping"):
        Transcript().on_event(schema.Ping(b""))


def test_status_in_words_names_the_view_the_summaries_and_the_tokens():
    status = {"messages": 6, "view_bytes": 488, "view_budget": 128_000, "pending": 2, "failures": 1,
              "model": "demo", "cache_share": 0.5, "usage": {"input": 2967, "cache_read": 1200},
              "planner": {"view_lines": 6, "floor": 64_000, "running": 2}}
    assert status_lines(status) == [
        "messages: 6",
        "view: 488 bytes in 6 lines (R19: merges past 128000, down to 64000)",
        "summaries: 2 pending, 2 being written, 1 failed calls this run",
        "model: demo · 50% of prompt tokens read from the cache",
        "tokens: input 2,967, cache read 1,200",
    ]


def test_a_reopened_chat_shows_logged_messages_briefly_and_tool_calls_as_calls():
    view = Transcript(width=40)
    view.logged(0, "user: Remember amber-42.")
    view.logged(1, "tool: zoom {\"id\": 0, \"n\": 1}")
    view.logged(2, "echo: user: Remember amber-42.")
    view.logged(3, "everchat: " + "\n".join(f"row {n}" for n in range(6)))
    view.logged(4, "note: born in Lisbon")
    assert texts(view.take()) == ["› Remember amber-42.", "⚙ zoom(id=0, n=1)", "row 0", "row 1", "row 2",
                                  "row 3 … (/zoom 3 for all)", "note: born in Lisbon"]


def test_one_line_tool_calls_fit_the_terminal_in_columns_not_characters():
    view = Transcript(width=12)
    feed(view, schema.TurnToolCall(1, "d", "x", "{}"))
    (line,) = feed(view, schema.TurnToolResult(1, "d", "x", False, "日本語のテキスト"))
    assert line == "⚙ x() → 日…"  # 8 columns, one wide character (2), the mark (1): 11 of 12


def completions(text):
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    return [c.text for c in CommandCompleter().get_completions(Document(text, len(text)), CompleteEvent())]


def test_commands_complete_after_a_slash_and_help_completes_their_names(tmp_path):
    assert completions("/zo") == ["/zoom"]
    assert completions("/") == ["/" + name for name in COMMANDS]
    assert completions("/help d") == ["date"]
    assert completions("//zo") == [] and completions("zo") == [] and completions("/zoom 4") == []
    (tmp_path / "cat.png").write_bytes(b"")
    assert completions(f"/attach {tmp_path}/ca") == ["t.png"]
