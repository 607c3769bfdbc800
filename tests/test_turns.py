"""The turn core (R34-R37) driven without sockets: a scripted `TurnIO` records what the
turn logs, publishes and asks for, in order, and plays scripted model events."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from everchat.actors.models import (
    ImageBlock,
    ServerError,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    Usage,
)
from everchat.actors.prompt import Prompt, turn_header, turn_text, view_blocks
from everchat.actors.zoom import MemoryTools, ToolOutcome, ZoomError
from everchat.actors.turns.turn import DRAFT_SECONDS, Input, TurnRunner
from everchat.transport import schema

VIEW = "<chat>\n" + "".join(f"{i}+1|user: line {i}\n" for i in range(6)) + "</chat>"
NOW = datetime(2026, 12, 2, 9, 30, tzinfo=timezone.utc)


class ScriptedIO:
    """A TurnIO whose model plays `calls` (one list of events per request)."""

    def __init__(self, calls, *, joins=None, stop_after=None, unbuilt=0, clock_step=0.0):
        self.calls = list(calls)
        self.joins = dict(joins or {})  # request number -> inputs joining after it
        self.stop_after = stop_after  # events streamed before the person stops
        self.unbuilt = unbuilt
        self.ops: list = []
        self.requests = []
        self.logged: list[tuple[str, str, str, dict | None]] = []
        self.events: list = []
        self.drafts: list = []
        self.next_id = 6
        self.streamed = 0
        self.closed = False
        self.t = 0.0
        self.clock_step = clock_step

    def settle(self):
        self.ops.append("settle")
        return schema.SettledView(text=VIEW, messages=6, unbuilt=self.unbuilt)

    def begin(self):
        self.ops.append("begin")
        ids = self.log("user", "What is in line 3?", "input-1")
        return Input(tuple(ids), "What is in line 3?")

    def log(self, kind, text, key, images=(), meta=None):
        self.ops.append(("log", kind))
        self.logged.append((kind, text, key, meta))
        self.next_id += 1
        return [self.next_id - 1]

    def save_draft(self, key, text, meta):
        self.ops.append(("draft", key))
        self.drafts.append((key, text))

    def stream(self, request):
        self.ops.append("request")
        self.requests.append(request)
        for event in self.calls.pop(0):
            if isinstance(event, Exception):
                raise event
            self.streamed += 1
            yield event

    def tool(self, name, arguments, key=None):
        self.ops.append(("tool", name))
        if name == "zoom":
            return ToolOutcome(f"{arguments['id']}+1|user: line {arguments['id']}")
        return ToolOutcome("no such tool", is_error=True)

    def image(self, digest):
        return ImageBlock(b"\x89PNG\r\n\x1a\n" + digest.encode(), "image/png")

    def joined(self, final):
        number = len(self.requests)
        items = self.joins.pop(number, [])
        self.ops.append(("joined", final, len(items)))
        return items

    def publish(self, event, **fields):
        msg = getattr(schema, event)(**fields)
        self.events.append(msg)
        return msg

    def stopped(self):
        return self.stop_after is not None and self.streamed > self.stop_after

    def now(self):
        return NOW

    def clock(self):
        self.t += self.clock_step
        return self.t


def runner(**kwargs):
    return TurnRunner(Prompt.make("Answer in English."), "test-model", **kwargs)


def zoom_call(n=1, id=3):
    return ToolCall(f"call-{n}", "zoom", {"id": id, "n": 1})


def ended(io):
    return [e for e in io.events if isinstance(e, schema.TurnEnded)]


def test_r36_the_first_request_is_tools_system_view_then_the_header_and_message():
    io = ScriptedIO([[TextDelta("Line 3 says hi."), Stop("end_turn")]])
    core = runner()
    core.run(io)
    (request,) = io.requests
    assert request.system == core.prompt.system and request.tools == core.prompt.tools
    assert [t.name for t in request.tools] == ["zoom", "date"]
    (first,) = request.messages
    lines = VIEW.removeprefix("<chat>\n").removesuffix("</chat>").splitlines()
    header = turn_header(NOW)
    assert first.content == (*view_blocks(lines), TextBlock(turn_text(header, "What is in line 3?"), cache=True))
    assert "".join(block.text for block in first.content[:-1]) == VIEW
    assert request.marks() == 3  # R23: the system prompt, the last whole view block, the end


def test_r36_the_view_is_settled_before_the_message_is_logged():
    io = ScriptedIO([[TextDelta("ok"), Stop("end_turn")]])
    runner().run(io)
    assert io.ops[:3] == ["settle", "begin", ("log", "user")]
    assert io.ops.index("request") > io.ops.index("begin")


def test_r36_a_view_that_did_not_settle_is_reported_to_the_person():
    io = ScriptedIO([[TextDelta("ok"), Stop("end_turn")]], unbuilt=2)
    runner().run(io)
    notices = [e for e in io.events if isinstance(e, schema.Notice)]
    assert len(notices) == 1 and "2 line(s)" in notices[0].text


def test_r37_reply_tool_call_and_result_are_logged_in_order_before_the_next_request():
    io = ScriptedIO([
        [TextDelta("Let me "), TextDelta("look."), zoom_call(), Usage(10, 5), Stop("tool_use")],
        [TextDelta("Line 3 says: line 3."), Usage(20, 6), Stop("end_turn")],
    ])
    end = runner().run(io)
    assert end == schema.TurnEnded(turn=6, reason="done", incomplete=False, detail="")
    kinds = [(kind, text) for kind, text, _, _ in io.logged]
    assert kinds == [
        ("user", "What is in line 3?"),
        ("everchat", "Let me look."),
        ("tool", 'zoom {"id": 3, "n": 1}'),
        ("echo", "3+1|user: line 3"),
        ("everchat", "Line 3 says: line 3."),
    ]
    second = io.ops.index("request", io.ops.index("request") + 1)
    assert io.ops.index(("log", "echo")) < second
    keys = [key for _, _, key, _ in io.logged[1:]]
    assert len(set(keys)) == len(keys) and all(key.startswith("turn-6-") for key in keys)
    follow = io.requests[1].messages
    assert [m.role for m in follow] == ["user", "assistant", "user"]
    (result,) = follow[2].content
    assert isinstance(result, ToolResultBlock) and result.tool_use_id == "call-1" and result.cache
    assert not follow[0].content[-1].cache  # R23: one mark at the request's end, not two


def test_r48_thoughts_are_shown_and_never_logged():
    io = ScriptedIO([[ThinkingDelta("secret musing"), ThinkingDelta("", signature="sig"), TextDelta("Hi."),
                      Stop("end_turn")]])
    runner().run(io)
    assert all("secret" not in text for _, text, _, _ in io.logged)
    assert schema.TurnThinking(turn=6, text="secret musing") in io.events
    assert schema.TurnThinkingDone(turn=6) in io.events


def test_thinking_goes_back_to_the_model_within_the_tool_loop_with_its_signature():
    io = ScriptedIO([[ThinkingDelta("I should zoom."), ThinkingDelta("", signature="sig-1"), zoom_call(),
                      Stop("tool_use")], [TextDelta("Done."), Stop("end_turn")]])
    runner().run(io)
    assistant = io.requests[1].messages[1]
    assert assistant.role == "assistant"
    assert assistant.content[0] == ThinkingBlock("I should zoom.", "sig-1")
    assert assistant.content[1].name == "zoom"


def test_r36_a_message_typed_during_a_tool_loop_joins_between_tool_calls():
    typed = Input((9,), "Also check line 4.")
    io = ScriptedIO([[zoom_call(), Stop("tool_use")], [TextDelta("Both done."), Stop("end_turn")]],
                    joins={1: [typed]})
    runner().run(io)
    follow = io.requests[1].messages[-1].content
    assert isinstance(follow[0], ToolResultBlock)
    assert follow[1].text.endswith("(message 9):]\nAlso check line 4.")
    assert schema.TurnJoined(turn=6, message=9) in io.events
    assert ("joined", False, 1) in io.ops


def test_r36_a_message_typed_while_the_view_settles_goes_out_with_the_first_request():
    typed = Input((8,), "And a second thing.")
    io = ScriptedIO([[TextDelta("Both."), Stop("end_turn")]], joins={0: [typed]})
    runner().run(io)
    (request,) = io.requests
    (first,) = request.messages
    assert first.content[-2].text.startswith("[turn]") and first.content[-2].text.endswith("What is in line 3?")
    assert first.content[-1].text.endswith("(message 8):]\nAnd a second thing.") and first.content[-1].cache
    assert schema.TurnJoined(turn=6, message=8) in io.events


def test_r36_a_reply_without_tool_calls_takes_in_what_was_typed_meanwhile():
    typed = Input((8,), "One more thing.")
    io = ScriptedIO([[TextDelta("First answer."), Stop("end_turn")], [TextDelta("Second."), Stop("end_turn")]],
                    joins={1: [typed]})
    end = runner().run(io)
    assert end.reason == "done" and len(io.requests) == 2
    last = io.requests[1].messages
    assert [m.role for m in last] == ["user", "assistant", "user"]
    assert last[1].content == (TextBlock("First answer."),)
    assert ("joined", True, 0) == io.ops[-1]  # the turn ends only when nothing more joined


def test_the_round_limit_ends_the_turn_with_a_note():
    io = ScriptedIO([[zoom_call(n), Stop("tool_use")] for n in range(5)])
    end = runner(tool_rounds=3).run(io)
    assert len(io.requests) == 3
    assert end.reason == "round_limit" and "3 tool rounds" in end.detail
    assert [kind for kind, *_ in io.logged].count("echo") == 3


def test_r37_a_stopped_call_keeps_its_text_marked_incomplete():
    io = ScriptedIO([[TextDelta("Half "), TextDelta("of it"), TextDelta(" never shown"), Stop("end_turn")]],
                    stop_after=2)
    end = runner().run(io)
    assert end.reason == "stopped" and end.incomplete
    kind, text, _, meta = io.logged[-1]
    assert kind == "everchat" and text == "Half of it\n[incomplete: stopped by the person]"
    assert meta["incomplete"] == "stopped"


def test_r37_a_stop_after_a_tool_call_logs_its_echo_as_not_run():
    io = ScriptedIO([[zoom_call(), TextDelta("x"), Stop("tool_use")]], stop_after=1)
    end = runner().run(io)
    assert end.reason == "stopped"
    assert [kind for kind, *_ in io.logged] == ["user", "tool", "echo"]
    assert io.logged[-1][1].startswith("(not run")


def test_r37_a_failed_call_keeps_its_text_marked_incomplete_and_says_why():
    io = ScriptedIO([[TextDelta("Partial"), ServerError("boom", model="test-model")]])
    end = runner().run(io)
    assert end.reason == "error" and end.incomplete and "ServerError" in end.detail
    assert io.logged[-1][1] == "Partial\n[incomplete: the model call failed]"


def test_a_reply_cut_at_the_output_limit_is_marked_incomplete():
    io = ScriptedIO([[TextDelta("Long"), Stop("max_tokens", incomplete=True)]])
    end = runner().run(io)
    assert end.reason == "done" and end.incomplete
    assert io.logged[-1][1].endswith("[incomplete: cut at the output limit]")


def test_r37_streamed_text_is_saved_as_a_draft_before_it_is_shown_and_cleared_once_logged():
    io = ScriptedIO([[TextDelta("a"), TextDelta("b"), TextDelta("c"), Stop("end_turn")]], clock_step=DRAFT_SECONDS)
    runner().run(io)
    key = io.logged[-1][2]
    assert io.drafts == [(key, "a"), (key, "ab"), (key, "abc"), (None, "")]
    texts = [e for e in io.events if isinstance(e, schema.TurnText)]
    assert len(texts) == 3
    assert io.ops.index(("draft", key)) < io.ops.index(("log", "everchat")) < io.ops.index(("draft", None))


def test_drafts_are_saved_at_most_every_draft_interval():
    io = ScriptedIO([[TextDelta("x")] * 50 + [Stop("end_turn")]], clock_step=DRAFT_SECONDS / 10)
    runner().run(io)
    saved = [d for d in io.drafts if d[0] is not None]
    assert 4 <= len(saved) <= 6


def test_r50_nothing_carries_between_turns_and_r34_the_system_prompt_never_changes():
    core = runner()
    first = ScriptedIO([[zoom_call(), Stop("tool_use")], [TextDelta("a"), Stop("end_turn")]])
    second = ScriptedIO([[TextDelta("b"), Stop("end_turn")]])
    core.run(first)
    core.run(second)
    assert len(second.requests[0].messages) == 1
    systems = {r.system for r in first.requests + second.requests}
    tools = {json.dumps([(t.name, t.description, dict(t.schema)) for t in r.tools]) for r in
             first.requests + second.requests}
    assert len(systems) == 1 and len(tools) == 1
    assert "2026" not in core.prompt.system  # R49: no date in the system prompt


# --- the memory tools (R35) ---------------------------------------------------------------


class Record:
    def __init__(self, kind, text, date="2026-12-02T09:00:00+00:00", images=()):
        self.kind, self.text, self.date, self.images = kind, text, date, images


class Reader:
    def __init__(self, texts, nodes=None):
        self.texts = texts
        self.nodes = nodes or {}

    def count(self):
        return len(self.texts)

    def message(self, i):
        return Record("user", self.texts[i], images=("a" * 64,) if i == 2 else ())

    def node(self, l, i):  # noqa: E741
        return self.nodes.get((l, i))

    def asset(self, digest):
        return b"\x89PNG\r\n\x1a\n" + b"0" * 8


@pytest.fixture
def tools():
    texts = ["hello", "world", "a picture", "x" * 40_000, "five", "six"]
    return MemoryTools(Reader(texts, {(1, 0): "both", (0, 0): "user: hello", (1, 1): None}))


def test_r35_zoom_n_of_two_or_more_returns_the_two_child_lines(tools):
    assert tools.call("zoom", {"id": 0, "n": 2}).text == "0+1|user: hello\n1+1|(not summarized yet: zoom it)"
    assert tools.call("zoom", {"id": 0, "n": 4}).text == "0+2|both\n2+2|(not summarized yet: zoom it)"


def test_r35_zoom_one_returns_the_message_whole_with_its_images(tools):
    outcome = tools.call("zoom", {"id": 2, "n": 1})
    assert outcome.text == f"user: a picture\n[image {'a' * 64}]"
    assert outcome.digests == ("a" * 64,) and outcome.images[0].media_type == "image/png"
    assert not outcome.is_error


def test_r35_a_front_ends_zoom_names_the_images_without_reading_them(tools, monkeypatch):
    """The CLI and /zoom print the text: the same zoom, with the image bytes left unread."""
    monkeypatch.setattr(tools.reader, "asset", lambda digest: pytest.fail(f"read asset {digest}"))
    outcome = tools.zoom(2, 1, images=False)
    assert outcome.text == f"user: a picture\n[image {'a' * 64}]" and outcome.images == ()


def test_r35_a_long_message_comes_in_pages(tools):
    first = tools.call("zoom", {"id": 3, "n": 1})
    assert first.text.endswith("(page 1 of 3: zoom(3, 1, page=2) for the rest)")
    last = tools.call("zoom", {"id": 3, "n": 1, "page": 3})
    assert "page" not in last.text and len(last.text.encode()) < 16_000
    assert tools.call("zoom", {"id": 3, "n": 1, "page": 4}).text == "Message 3 has 3 pages, not page 4."


@pytest.mark.parametrize("arguments, error", [
    ({"id": 6, "n": 4}, "No line 6+4. id must be a multiple of n, at least 0."),
    ({"id": 0, "n": 3}, "No line 0+3. n must be a power of two: 1, 2, 4, 8 …"),
    ({"id": 4, "n": 4}, "No line 4+4. The chat has 6 messages (ids 0 to 5)."),
    ({"id": 6, "n": 1}, "No line 6+1. The chat has 6 messages (ids 0 to 5)."),
    ({"id": -2, "n": 2}, "No line -2+2. id must be a multiple of n, at least 0."),
    ({"id": 1.5, "n": 1}, "id must be a whole number, not 1.5."),
    ({"id": 0, "n": "2"}, "n must be a whole number (a power of two), not '2'."),
    ({"id": 0, "n": True}, "n must be a whole number (a power of two), not True."),
    ({"id": 0, "n": 2, "page": 2}, "Line 0+2 has one page, not page 2."),
    ({"id": 0, "depth": 2}, "zoom takes id, n and page, or name; not 'depth'."),
    ({}, "zoom needs id and n (e.g. zoom(0, 8), zoom(12, 1)), or an agent's name."),
    ({"name": "Ada"}, "No agent named 'Ada': this chat has no agents yet."),
    ({"id": "Ada"}, "No agent named 'Ada': this chat has no agents yet."),
    ({"name": "Ada", "id": 0}, "zoom takes either id and n, or name, not both."),
])
def test_r35_each_wrong_zoom_argument_has_a_clear_error(tools, arguments, error):
    outcome = tools.call("zoom", arguments)
    assert outcome.is_error and outcome.text == error


def test_r35_date_and_its_errors(tools):
    assert tools.call("date", {"id": 1}).text == "2026-12-02T09:00:00+00:00"
    assert tools.call("date", {"id": 6}).text == "No message 6: the chat has 6 messages (ids 0 to 5)."
    assert tools.call("date", {}).text == "date needs id: the message's id, e.g. date(12)."
    assert tools.call("date", {"id": "3"}).text == "id must be a whole number, not '3'."
    assert tools.call("date", {"id": 1, "n": 2}).text == "date takes only id, not 'n'."
    assert tools.call("nope", {}).text == "No tool called 'nope'."
    with pytest.raises(ZoomError):
        tools.date(-1)
