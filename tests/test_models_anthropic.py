"""The Anthropic connection through the real `anthropic` SDK and the fake model server."""

from __future__ import annotations

import base64

import pytest

from everchat.actors.models import (
    AnthropicConnection,
    ImageBlock,
    Message,
    MissingKey,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    connect,
)
from everchat.actors.prompt import Prompt
from everchat.tools.fakemodel import Reply, Text, Thinking
from everchat.tools.fakemodel import ToolCall as FakeCall
from fake_world import fake_server_fixtures

PROMPT = Prompt.make()
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 24


shared, server = fake_server_fixtures(chunk_tokens=2)


@pytest.fixture
def claude(server):
    with AnthropicConnection("test-key", server.base_url, max_retries=0) as connection:
        yield connection


def ask(*blocks, **fields) -> Request:
    base = dict(model="claude-test", system=PROMPT.system, tools=PROMPT.tools,
                messages=(Message.user(*blocks),), max_tokens=1024)
    base.update(fields)
    return Request(**base)


def test_a_streamed_reply_comes_as_thinking_text_and_a_whole_tool_call(server, claude):
    server.script(Reply(Thinking("look at 3+1"), Text("Let me zoom in."), FakeCall("zoom", {"id": 3, "n": 1})))
    events = list(claude.stream(ask("what was in 3?")))
    thinking = [e for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(e.text for e in thinking) == "look at 3+1" and thinking[-1].signature.startswith("sig-")
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(texts) == "Let me zoom in." and len(texts) > 1
    call = next(e for e in events if isinstance(e, ToolCall))
    assert (call.name, call.input) == ("zoom", {"id": 3, "n": 1}) and call.id.startswith("toolu_")
    assert isinstance(events[-2], Usage) and events[-1] == Stop("tool_use")


def test_complete_gathers_the_reply_and_its_assistant_message(server, claude):
    server.script(Reply(Thinking("hm"), Text("answer"), FakeCall("date", {"id": 0})))
    reply = claude.complete(ask("when?"))
    assert (reply.text, reply.thinking, reply.stop.reason) == ("answer", "hm", "tool_use")
    thinking, text, use = reply.message().content
    assert isinstance(thinking, ThinkingBlock) and thinking.signature.startswith("sig-")
    assert text == TextBlock("answer") and isinstance(use, ToolUseBlock) and use.input == {"id": 0}


def test_a_reply_cut_by_max_tokens_stops_incomplete(server, claude):
    server.script("word " * 100)
    reply = claude.complete(ask("talk", max_tokens=5))
    assert reply.stop == Stop("max_tokens", incomplete=True) and len(reply.text) == 20


def test_the_body_carries_tools_system_and_every_kind_of_block(server, claude):
    server.script("ok")
    request = Request(
        model="claude-test", system="SYSTEM", tools=PROMPT.tools, max_tokens=100,
        messages=(
            Message.user(TextBlock("look"), ImageBlock(PNG, "image/png")),
            Message.assistant(ThinkingBlock("hm", "sig-1"), TextBlock("zooming"), ToolUseBlock("t1", "zoom", {"id": 0, "n": 1})),
            Message.user(ToolResultBlock("t1", (TextBlock("user: hi"), ImageBlock(PNG, "image/png")), is_error=True)),
        ))
    claude.complete(request)
    body = server.model_calls[0].body
    assert [t["name"] for t in body["tools"]] == ["zoom", "date"]
    assert body["tools"][0]["input_schema"]["properties"]["n"]["type"] == "integer"
    assert body["system"] == [{"type": "text", "text": "SYSTEM", "cache_control": {"type": "ephemeral"}}]
    user, assistant, result = body["messages"]
    assert user["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                               "data": base64.b64encode(PNG).decode()}}
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "hm", "signature": "sig-1"},
        {"type": "text", "text": "zooming"},
        {"type": "tool_use", "id": "t1", "name": "zoom", "input": {"id": 0, "n": 1}}]
    (block,) = result["content"]
    assert (block["type"], block["tool_use_id"], block["is_error"]) == ("tool_result", "t1", True)
    assert block["content"][0] == {"type": "text", "text": "user: hi"} and block["content"][1]["type"] == "image"
    assert "thinking" not in body and "output_config" not in body


def test_r23_marks_go_exactly_where_the_request_puts_them_and_never_for_an_hour(server, claude):
    server.script("ok")
    claude.complete(ask(TextBlock("a"), TextBlock("b", cache=True), TextBlock("c"), TextBlock("d", cache=True)))
    body = server.model_calls[0].body
    marks = [b.get("cache_control") for b in body["messages"][0]["content"]]
    assert marks == [None, {"type": "ephemeral"}, None, {"type": "ephemeral"}]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "ttl" not in str(body) and all("cache_control" not in tool for tool in body["tools"])


def test_without_a_system_mark_the_system_prompt_goes_unmarked(server, claude):
    server.script("ok")
    claude.complete(ask("hi", cache_system=False))
    assert "cache_control" not in server.model_calls[0].body["system"][0]


def test_usage_reports_cache_writes_then_reads_of_the_marked_prefix(server, claude):
    server.script("one", "two")
    first = claude.complete(ask(TextBlock("a question", cache=True)))
    second = claude.complete(ask(TextBlock("a question", cache=True)))
    assert first.usage.cache_write > 1000 and first.usage.cache_read == 0
    assert second.usage.cache_read == first.usage.cache_write and second.usage.cache_write == 0
    assert second.usage.output == 1 and second.usage.prompt == first.usage.prompt


def test_effort_turns_on_adaptive_thinking(server, claude):
    server.script("ok", "ok")
    claude.complete(ask("think", effort="high"))
    claude.complete(ask("think", effort="none"))
    high, none = (call.body for call in server.model_calls)
    assert high["thinking"] == {"type": "adaptive"} and high["output_config"] == {"effort": "high"}
    assert "thinking" not in none and "output_config" not in none


def test_a_label_travels_as_a_header_and_the_key_is_never_recorded(server, claude):
    server.script("ok")
    claude.complete(ask("hi", label="compaction"))
    headers = server.model_calls[0].headers
    assert headers["x-everchat-call"] == "compaction"
    assert "test-key" not in str(headers)


def test_closing_the_stream_early_ends_the_call_quietly(server, claude):
    server.script("a long answer " * 40)
    stream = claude.stream(ask("talk"))
    assert isinstance(next(stream), TextDelta)
    stream.close()
    assert server.wait_idle()


def test_the_key_comes_from_anthropic_api_key_only(server, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "test-key")
    with pytest.raises(MissingKey, match="ANTHROPIC_API_KEY is not set"):
        connect("anthropic", base_url=server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    server.script("ok")
    with connect("anthropic", base_url=server.base_url, max_retries=0) as connection:
        assert connection.complete(ask("hi")).text == "ok"
        assert "test-key" not in repr(connection)
