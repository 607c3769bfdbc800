"""The OpenAI connections (Responses, Chat Completions) through the real `openai` SDK and
the fake model server."""

from __future__ import annotations

import base64
import json

import pytest

from everchat.actors.models import (
    ImageBlock,
    Message,
    MissingKey,
    OpenAIChatConnection,
    OpenAIConnection,
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
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


shared, server = fake_server_fixtures(chunk_tokens=2, api_keys=("test-key", "ollama"))


@pytest.fixture(params=["openai", "openai-chat"])
def gpt(request, server):
    with connect(request.param, api_key="test-key", base_url=server.openai_base_url, max_retries=0) as connection:
        yield connection


def ask(*blocks, **fields) -> Request:
    base = dict(model="gpt-test", system=PROMPT.system, tools=PROMPT.tools, messages=(Message.user(*blocks),),
                max_tokens=1024)
    base.update(fields)
    return Request(**base)


TOOL_LOOP = Request(
    model="gpt-test", system="SYSTEM", tools=PROMPT.tools, max_tokens=100,
    messages=(
        Message.user(TextBlock("look", cache=True), ImageBlock(PNG, "image/png")),
        Message.assistant(ThinkingBlock("hm", "sig"), TextBlock("zooming"), ToolUseBlock("c1", "zoom", {"id": 0, "n": 1})),
        Message.user(ToolResultBlock("c1", (TextBlock("user: hi"),)), TextBlock("and also this", cache=True)),
    ))


def test_both_protocols_stream_thinking_text_and_a_whole_tool_call(server, gpt):
    server.script(Reply(Thinking("look at 3+1"), Text("Let me zoom in."), FakeCall("zoom", {"id": 3, "n": 1})))
    events = list(gpt.stream(ask("what was in 3?")))
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "look at 3+1"
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(texts) == "Let me zoom in." and len(texts) > 1
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert (call.name, call.input) == ("zoom", {"id": 3, "n": 1}) and call.id.startswith("call_")
    assert isinstance(events[-2], Usage) and events[-1] == Stop("tool_use")


def test_usage_counts_cached_tokens_as_cache_reads_apart_from_the_rest(server, gpt):
    server.script("one", "two")
    first = gpt.complete(ask("a question"))
    second = gpt.complete(ask("a question"))
    assert first.usage.cache_read == 0 and first.usage.input > 1000
    assert second.usage.cache_read >= 1024 and second.usage.prompt == first.usage.prompt
    assert second.usage.input == first.usage.input - second.usage.cache_read and second.usage.cache_write == 0


def test_a_reply_cut_by_the_token_limit_stops_incomplete(server, gpt):
    server.script("word " * 100)
    reply = gpt.complete(ask("talk", max_tokens=5))
    assert reply.stop == Stop("max_tokens", incomplete=True) and reply.text == ("word " * 4)


def test_the_responses_body_has_instructions_function_tools_and_input_items(server):
    server.script("ok")
    with OpenAIConnection("test-key", server.openai_base_url, max_retries=0) as connection:
        connection.complete(TOOL_LOOP)
    body = server.model_calls[0].body
    assert body["instructions"] == "SYSTEM" and body["store"] is False and body["max_output_tokens"] == 100
    assert [(t["type"], t["name"], t["strict"]) for t in body["tools"]] == [("function", "zoom", False),
                                                                             ("function", "date", False)]
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                     {"type": "input_image", "image_url": DATA_URL, "detail": "auto"}]},
        {"role": "assistant", "content": "zooming"},
        {"type": "function_call", "call_id": "c1", "name": "zoom", "arguments": json.dumps({"id": 0, "n": 1})},
        {"type": "function_call_output", "call_id": "c1", "output": "user: hi"},
        {"role": "user", "content": [{"type": "input_text", "text": "and also this"}]},
    ]
    assert "cache_control" not in json.dumps(body) and "reasoning" not in body


def test_the_chat_body_has_a_system_message_tool_calls_and_tool_answers(server):
    server.script("ok")
    with OpenAIChatConnection("test-key", server.openai_base_url, max_retries=0) as connection:
        connection.complete(TOOL_LOOP)
    body = server.model_calls[0].body
    assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 100
    assert body["tools"][0]["function"]["name"] == "zoom"
    assert body["messages"] == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": DATA_URL}}]},
        {"role": "assistant", "content": "zooming", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "zoom", "arguments": json.dumps({"id": 0, "n": 1})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "user: hi"},
        {"role": "user", "content": "and also this"},
    ]
    assert "cache_control" not in json.dumps(body) and "reasoning_effort" not in body


def test_effort_goes_out_as_each_protocol_names_it(server, gpt):
    server.script("ok")
    gpt.complete(ask("think", effort="medium"))
    body = server.model_calls[0].body
    if gpt.provider == "openai":
        assert body["reasoning"] == {"effort": "medium", "summary": "auto"}
    else:
        assert body["reasoning_effort"] == "medium"


def test_a_label_travels_as_a_header(server, gpt):
    server.script("ok")
    gpt.complete(ask("hi", label="turn"))
    assert server.model_calls[0].headers["x-everchat-call"] == "turn"


def test_the_key_comes_from_openai_api_key_and_a_local_server_may_take_a_dummy(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingKey, match="OPENAI_API_KEY is not set"):
        connect("openai-chat", base_url=server.openai_base_url)
    server.script("local answer")
    with connect("openai-chat", base_url=server.openai_base_url, dummy_key="ollama", max_retries=0) as local:
        assert local.complete(ask("hi")).text == "local answer"
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server.script("ok")
    with connect("openai", base_url=server.openai_base_url, max_retries=0) as connection:
        assert connection.complete(ask("hi")).text == "ok" and "test-key" not in repr(connection)


def test_adjacent_text_blocks_go_out_as_one_part_in_order_around_images(server, gpt):
    """R23's view blocks only place Anthropic's cache marks; OpenAI gets their text as one
    part (the SDK's per-part cost made a 100 KB view's turn 25 ms slower)."""
    server.script("ok")
    image = ImageBlock(PNG, "image/png")
    gpt.complete(ask(TextBlock("<chat>\n0+1|a\n"), TextBlock("1+1|b\n", cache=True), TextBlock("</chat>"),
                     TextBlock("[turn] look"), image, TextBlock("and "), TextBlock("this")))
    body = server.model_calls[0].body
    if gpt.provider == "openai":
        assert body["input"] == [{"role": "user", "content": [
            {"type": "input_text", "text": "<chat>\n0+1|a\n1+1|b\n</chat>[turn] look"},
            {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
            {"type": "input_text", "text": "and this"}]}]
    else:
        assert body["messages"][1:] == [{"role": "user", "content": [
            {"type": "text", "text": "<chat>\n0+1|a\n1+1|b\n</chat>[turn] look"},
            {"type": "image_url", "image_url": {"url": DATA_URL}},
            {"type": "text", "text": "and this"}]}]


def test_the_sdk_transform_that_input_and_tools_skip_would_leave_them_unchanged():
    """`input` and `tools` go out through `extra_body`, past the SDK's transform (1.4 ms of a
    turn); this holds only while that transform leaves them as they are."""
    from openai._utils import maybe_transform
    from openai.types.responses.response_create_params import ResponseCreateParamsStreaming

    from everchat.actors.models._openai import responses_body

    rich = Request(model="gpt-test", system="SYSTEM", tools=PROMPT.tools, max_tokens=100, effort="low",
                   messages=(*TOOL_LOOP.messages, Message.assistant(ToolUseBlock("c2", "zoom", {"id": 0, "n": 2})),
                             Message.user(ToolResultBlock("c2", (TextBlock("seen"), ImageBlock(PNG, "image/png"))))))
    body = {**responses_body(rich), "stream": True}
    assert {"input", "tools"} <= body.keys()
    assert maybe_transform(body, ResponseCreateParamsStreaming) == body
