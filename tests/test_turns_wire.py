"""Turns through a whole ChatSession, the real SDKs (anthropic and openai) and the fake
model server (R23, R35-R37): what goes on the wire, joins, settling, images after a restart."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest

from everchat.actors.settings import load
from everchat.actors.prompt import TURN_OPENING
from everchat.actors.session.session import ChatSession
from everchat.tools.fakemodel import FakeModelServer, Gate, Latency, Reply, Text, ToolCall
from everchat.transport import schema

PROVIDERS = ["anthropic", "openai"]


@pytest.fixture(scope="module")
def server():
    with FakeModelServer(chunk_tokens=2) as fake:
        yield fake


@pytest.fixture
def fake(server):
    server.reset()
    return server


def configure(monkeypatch, tmp_path, server, provider, settle=20.0):
    """Both models at the fake server, through the environment (the compactor workers read
    their settings there too)."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "EVERCHAT_CONFIG", "EVERCHAT_DEMO"):
        monkeypatch.delenv(name, raising=False)
    key = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    url = server.base_url if provider == "anthropic" else server.openai_base_url
    monkeypatch.setenv(key, "test-key")
    monkeypatch.setenv("EVERCHAT_HOME", str(tmp_path))
    for role, model in (("REPLY", "reply-test"), ("COMPACTION", "compaction-test")):
        monkeypatch.setenv(f"EVERCHAT_{role}_PROVIDER", provider)
        monkeypatch.setenv(f"EVERCHAT_{role}_BASE_URL", url)
        monkeypatch.setenv(f"EVERCHAT_{role}_MODEL", model)
    monkeypatch.setenv("EVERCHAT_SETTLE_TIMEOUT", str(settle))
    return load()


def until_end(session, turn, timeout=30.0):
    events = []
    while True:
        event = session.next_event(timeout=timeout)
        assert event is not None, f"no end of turn {turn}; saw {events}"
        events.append(event)
        if isinstance(event, schema.TurnEnded) and event.turn == turn:
            return events


def turn_calls(server):
    return [x for x in server.model_calls if x.headers.get("x-everchat-call") == "turn"]


def user_texts(body, provider):
    """The text parts of the first user message, in order: Anthropic's blocks (R23); OpenAI
    gets the same text as one part (no cache marks there), cut here after `</chat>`."""
    if provider == "anthropic":
        first = body["messages"][0]
        return [part["text"] for part in first["content"] if part["type"] == "text"]
    (part,) = body["input"][0]["content"]
    assert part["type"] == "input_text"
    view, end, rest = part["text"].partition("</chat>")
    return [view + end, rest]


def system_of(body, provider):
    if provider == "anthropic":
        return "".join(part["text"] for part in body["system"])
    return body["instructions"]


def tool_names(body, provider):
    return [tool["name"] for tool in body["tools"]]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_r36_a_turns_request_on_the_wire_is_tools_system_view_then_header_and_message(
        monkeypatch, tmp_path, fake, provider):
    settings = configure(monkeypatch, tmp_path, fake, provider)
    fake.script(Reply(Text("First answer.")), Reply(Text("Second answer.")))
    with ChatSession.open(settings) as session:
        for n in range(6):
            session.note(f"note number {n}")
        first = session.send("Hello there.")
        until_end(session, first)
        view = session.view()
        second = session.send("And now?")
        events = until_end(session, second)
        assert events[-1] == schema.TurnEnded(turn=second, reason="done", incomplete=False, detail="")
        assert "".join(e.text for e in events if isinstance(e, schema.TurnText)) == "Second answer."
    calls = turn_calls(fake)
    assert len(calls) == 2
    body = calls[1].body
    # R35's memory tools, then the hands (docs/HANDS.md §2), in the one order of every call
    assert tool_names(body, provider) == ["zoom", "date", "search", "fetch", "spawn", "tell", "shell", "read",
                                          "write", "edit"]
    assert system_of(body, provider) == system_of(calls[0].body, provider)  # R34: the same bytes
    texts = user_texts(body, provider)
    assert "".join(texts[:-1]) == view  # the view, rendered before the message was logged
    assert "6+1|user: Hello there." in view and "And now?" not in view
    header, _, message = texts[-1].partition("\n\n")
    assert header.startswith(TURN_OPENING) and message == "And now?"
    if provider == "anthropic":
        parts = body["messages"][0]["content"]
        marks = [k for k, part in enumerate(parts) if "cache_control" in part]
        assert marks == [len(parts) - 3, len(parts) - 1]  # the last whole view block, the end (R23)
        assert "cache_control" in body["system"][-1]
        assert len(body["messages"]) == 1  # R50: nothing carried from the first turn


@pytest.mark.parametrize("provider", PROVIDERS)
def test_r36_a_message_typed_during_a_tool_loop_arrives_between_tool_calls(monkeypatch, tmp_path, fake, provider):
    settings = configure(monkeypatch, tmp_path, fake, provider)
    gate = Gate()
    fake.script(Reply(ToolCall("zoom", {"id": 0, "n": 1}, id="call-1"), gate=gate), Reply(Text("Both seen.")))
    with ChatSession.open(settings) as session:
        session.note("the code is 7")
        turn = session.send("What is the code?")
        assert fake.wait_for_requests(1)
        later = session.send("Also, hurry.")  # logged at once, while the call waits
        assert later == turn + 1
        gate.open()
        events = until_end(session, turn)
        assert schema.TurnJoined(turn=turn, message=later) in events
        kinds = [session.zoom(i, 1).split(":", 1)[0] for i in range(turn, turn + 5)]
    assert kinds == ["user", "user", "tool", "echo", "everchat"]
    calls = turn_calls(fake)
    assert len(calls) == 2
    second = json.dumps(calls[1].body)
    assert "note: the code is 7" in second and "Also, hurry." in second
    assert "Also, hurry." not in json.dumps(calls[0].body)
    if provider == "anthropic":
        last = calls[1].body["messages"][-1]["content"]
        assert last[0]["type"] == "tool_result" and "Also, hurry." in last[1]["text"]


def compaction_rule(delay):
    """Compactions answer after `delay` seconds with a short line; turns say "ok"."""
    def rule(request):
        said = request.last_user_text
        if "Compaction: " in said:
            return Reply(Text("summary of a long note"), latency=Latency(first_byte=delay))
        return Reply(Text("ok"))
    return rule


@pytest.mark.parametrize("provider", PROVIDERS)
def test_r36_a_turn_waits_for_its_lines_and_shows_no_placeholder(monkeypatch, tmp_path, fake, provider):
    settings = configure(monkeypatch, tmp_path, fake, provider)
    fake.rule(compaction_rule(0.5))
    with ChatSession.open(settings) as session:
        session.note("long " * 200)  # over 512 bytes: its leaf needs a compaction
        turn = session.send("What did the note say?")
        events = until_end(session, turn)
    assert not [e for e in events if isinstance(e, schema.Notice)]
    (call,) = turn_calls(fake)
    view = "".join(user_texts(call.body, provider)[:-1])
    assert "0+1|summary of a long note" in view and "not summarized" not in view
    compaction = [x for x in fake.model_calls if x.headers.get("x-everchat-call") == "compaction"]
    assert compaction and compaction[0].ended <= call.arrived
    # R34: one system prompt and one tool list for turns and compactions, byte for byte
    assert system_of(compaction[0].body, provider) == system_of(call.body, provider)
    assert json.dumps(compaction[0].body["tools"]) == json.dumps(call.body["tools"])


def test_r36_after_the_settle_timeout_the_turn_shows_the_message_cut_and_marked(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic", settle=0.3)
    gate = Gate()  # the compaction never answers during the turn
    fake.rule(lambda request: Reply(Text("late line"), gate=gate) if "Compaction: " in
        request.last_user_text else Reply(Text("ok")))
    with ChatSession.open(settings) as session:
        session.note("long " * 200)
        turn = session.send("Go on.")
        events = until_end(session, turn)
        gate.open()
    notices = [e for e in events if isinstance(e, schema.Notice)]
    assert len(notices) == 1 and "not summarized" in notices[0].text
    (call,) = turn_calls(fake)
    view = "".join(user_texts(call.body, "anthropic")[:-1])
    line = next(line for line in view.splitlines() if line.startswith("0+1|"))
    assert line.startswith("0+1|(not summarized yet, first 512 bytes) note: long long")
    assert len(line.encode()) <= 512 + len("0+1|(not summarized yet, first 512 bytes) ")


def png(width=2, height=2) -> bytes:
    """A tiny valid PNG."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_r35_images_round_trip_through_zoom_after_a_restart(monkeypatch, tmp_path, fake, provider):
    settings = configure(monkeypatch, tmp_path, fake, provider)
    picture = tmp_path / "red.png"
    picture.write_bytes(png())
    fake.script(Reply(Text("A red square.")))
    with ChatSession.open(settings) as session:
        turn = session.send("Look at this.", images=[picture])
        until_end(session, turn)
    first = json.dumps(turn_calls(fake)[0].body)
    encoded = base64.b64encode(png()).decode()
    assert encoded in first  # the image went out with the message
    fake.reset()
    fake.script(Reply(ToolCall("zoom", {"id": turn, "n": 1}, id="z1")), Reply(Text("Still red.")))
    with ChatSession.open(settings) as session:  # a new process's view of the same folder
        text = session.zoom(turn, 1)
        assert text.startswith("user: Look at this.\n[image ") and len(text.split("[image ")[1]) == 64 + 1
        again = session.send("What was in the picture?")
        until_end(session, again)
    second = turn_calls(fake)[1].body
    echoed = json.dumps(second["messages"][-1] if provider == "anthropic" else second["input"][-1])
    assert encoded in echoed  # zoom(id, 1) handed the model the image itself
