"""The fake server speaks Anthropic's Messages API to the real `anthropic` SDK.

Tokens: ceil(UTF-8 bytes / 4) per block; with chunk_tokens=1 a stream piece is at
most 4 bytes.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import anthropic
import pytest

from everchat.tools.fakemodel import (
    FakeModelServer,
    ModelNotFound,
    Reply,
    Text,
    Thinking,
    ToolCall,
    count_tokens,
)

HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def shared():
    with FakeModelServer(chunk_tokens=1) as server:
        yield server, anthropic.Anthropic(base_url=server.base_url, api_key="test-key", max_retries=0)


@pytest.fixture
def server(shared):
    shared[0].reset()
    return shared[0]


@pytest.fixture
def client(shared, server):
    return shared[1]


def stream_final(client, **kwargs):
    with client.messages.stream(model="claude-test", max_tokens=kwargs.pop("max_tokens", 256),
                                messages=kwargs.pop("messages", HELLO), **kwargs) as stream:
        events = list(stream)
        return stream.get_final_message(), events


def raw_sse(server, body: dict) -> list[tuple[str, dict]]:
    """POST with urllib and split the stream into (event name, data) pairs."""
    request = urllib.request.Request(
        server.base_url + "/v1/messages", data=json.dumps(body).encode(), method="POST",
        headers={"x-api-key": "test-key", "anthropic-version": "2023-06-01", "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    pairs = []
    for frame in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.split("\n"))
        pairs.append((lines["event"], json.loads(lines["data"])))
    return pairs


def test_a_streamed_text_reply_arrives_in_token_sized_pieces(client, server):
    server.script("Hello, world!")
    with client.messages.stream(model="claude-test", max_tokens=256, messages=HELLO) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert pieces == ["Hell", "o, w", "orld", "!"]
    assert final.content[0].text == "Hello, world!"
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == count_tokens("hello") == 2
    assert final.usage.output_tokens == 4


def test_the_raw_stream_has_anthropics_event_order_with_one_ping(server):
    server.script("Hi there")
    pairs = raw_sse(server, {"model": "claude-test", "max_tokens": 50, "stream": True, "messages": HELLO})
    assert [name for name, _ in pairs] == [
        "message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in pairs)
    start = pairs[0][1]["message"]
    assert (start["id"], start["content"], start["stop_reason"]) == ("msg_fake000001", [], None)
    assert start["usage"]["output_tokens"] == 1
    assert pairs[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert pairs[-2][1]["usage"]["output_tokens"] == 2


def test_thinking_then_text_stream_as_thinking_and_signature_deltas(client, server):
    server.script(Reply(Thinking("Let me see."), Text("Yes.")))
    final, events = stream_final(client)
    thinking, answer = final.content
    assert (thinking.type, thinking.thinking) == ("thinking", "Let me see.")
    assert thinking.signature == Thinking("Let me see.").signed()
    assert answer.text == "Yes."
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas == ["thinking_delta"] * 3 + ["signature_delta", "text_delta"]


def test_a_tool_call_streams_its_input_as_json_pieces_that_the_sdk_assembles(client, server):
    call = ToolCall("zoom", {"id": "m42+8", "depth": 2, "why": "naïve ünïcode"}, chunks=('{"id": "m4', '2+8", "dep',
                                                                                      'th": 2, "why": "naïve ',
                                                                                      'ünïcode"}'))
    server.script(Reply(Text("Looking."), call))
    tools = [{"name": "zoom", "description": "fetch details", "input_schema": {"type": "object"}}]
    final, events = stream_final(client, tools=tools)
    text, use = final.content
    assert (use.type, use.name, use.id) == ("tool_use", "zoom", "toolu_fake000001_1")
    assert use.input == {"id": "m42+8", "depth": 2, "why": "naïve ünïcode"}
    assert final.stop_reason == "tool_use"
    partial = [e.delta.partial_json for e in events if e.type == "content_block_delta" and e.index == 1]
    assert partial == ["", *call.chunks]


def test_a_whole_reply_mixes_thinking_text_and_tool_use(client, server):
    server.script(Reply(Thinking("hm"), Text("Calling."), ToolCall("zoom", {"id": 7}, id="toolu_given")))
    message = client.messages.create(model="claude-test", max_tokens=256, messages=HELLO)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].id == "toolu_given"
    assert message.content[2].input == {"id": 7}
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == count_tokens("hm") + count_tokens("Calling.") + count_tokens('zoom{"id":7}')


def test_explicit_chunks_are_sent_as_given(client, server):
    server.script(Text("token by token", chunks=("token", " by", " token")))
    with client.messages.stream(model="claude-test", max_tokens=256, messages=HELLO) as stream:
        assert list(stream.text_stream) == ["token", " by", " token"]


def test_the_default_rule_echoes_the_last_user_message(client):
    message = client.messages.create(model="claude-test", max_tokens=256,
                                     messages=[{"role": "user", "content": "where is   my file?"}])
    assert message.content[0].text == "fake reply #1: where is my file?"


def test_a_rule_sees_the_parsed_request(client, server):
    seen = []

    def rule(request):
        seen.append(request)
        return f"{request.api} {request.model} {len(request.messages)}"

    server.rule(rule)
    tools = [{"name": "zoom", "description": "d", "input_schema": {"type": "object"}}]
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "zoom", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "the detail"},
                                     {"type": "text", "text": " thanks"}]},
    ]
    message = client.messages.create(model="claude-test", max_tokens=99, system=[{"type": "text", "text": "Be brief."}],
                                     tools=tools, messages=messages)
    assert message.content[0].text == "anthropic claude-test 3"
    request = seen[0]
    assert (request.system, request.tool_names, request.max_tokens, request.stream) == (
        "Be brief.", ("zoom",), 99, False)
    assert request.last_user_text == "the detail thanks"
    assert request.exchange_id == 1


def test_the_scripted_queue_comes_before_the_rule_and_is_used_in_order(client, server):
    server.script("one", "two")
    server.rule(lambda request: "ruled")
    texts = [client.messages.create(model="claude-test", max_tokens=50, messages=HELLO).content[0].text
             for _ in range(3)]
    assert texts == ["one", "two", "ruled"]
    assert server.scripted_left == 0


def test_a_rule_may_answer_with_a_fault(client, server):
    server.rule(lambda request: ModelNotFound())
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-test", max_tokens=50, messages=HELLO)


def test_max_tokens_cuts_the_reply_and_says_so(client, server):
    server.script(Reply("x" * 100, ToolCall("zoom", {})))
    message = client.messages.create(model="claude-test", max_tokens=5, messages=HELLO)
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "x" * 20
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 5)


def test_a_scripted_stop_reason_is_reported(client, server):
    server.script(Reply("done", stop_reason="stop_sequence"))
    assert client.messages.create(model="claude-test", max_tokens=50, messages=HELLO).stop_reason == "stop_sequence"


def test_every_request_is_recorded_without_its_key(client, server):
    client.messages.create(model="claude-test", max_tokens=50, messages=HELLO, metadata={"user_id": "u1"})
    assert server.wait_idle()
    (exchange,) = server.requests
    assert (exchange.api, exchange.method, exchange.path) == ("anthropic", "POST", "/v1/messages")
    assert exchange.body["metadata"] == {"user_id": "u1"}
    assert (exchange.model, exchange.stream, exchange.status, exchange.outcome) == ("claude-test", False, 200, "ok")
    assert exchange.headers["authorization"] == "<redacted>"
    assert "test-key" not in json.dumps(exchange.headers)
    assert exchange.started <= exchange.first_byte <= exchange.ended
    assert exchange.reply == Reply("fake reply #1: hello")


def test_a_wrong_key_is_an_authentication_error(server):
    wrong = anthropic.Anthropic(base_url=server.base_url, api_key="not-the-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        wrong.messages.create(model="claude-test", max_tokens=50, messages=HELLO)
    assert caught.value.body["error"]["type"] == "authentication_error"
    assert server.wait_idle()
    assert server.requests[0].outcome == "http 401"


def test_the_x_api_key_header_is_accepted_and_the_version_header_required(server):
    body = json.dumps({"model": "claude-test", "max_tokens": 50, "messages": HELLO}).encode()
    headers = {"x-api-key": "test-key", "content-type": "application/json"}
    request = urllib.request.Request(server.base_url + "/v1/messages", data=body, headers=headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 400
    assert json.loads(caught.value.read())["error"]["message"] == "anthropic-version: header is required"
    request.add_header("anthropic-version", "2023-06-01")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["content"][0]["text"] == "fake reply #2: hello"


def test_an_unknown_model_is_not_found_when_models_are_listed():
    with FakeModelServer(models=["claude-known"]) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="test-key", max_retries=0)
        with pytest.raises(anthropic.NotFoundError, match="model: claude-other"):
            client.messages.create(model="claude-other", max_tokens=50, messages=HELLO)
        assert [m.id for m in client.models.list()] == ["claude-known"]


def test_bad_requests_are_refused_as_the_api_would(client):
    with pytest.raises(anthropic.BadRequestError, match="text content blocks must be non-empty"):
        client.messages.create(model="claude-test", max_tokens=50,
                               messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}])
    with pytest.raises(anthropic.BadRequestError, match="messages"):
        client.messages.create(model="claude-test", max_tokens=50, messages=[])


def test_count_tokens_counts_with_the_same_tokenizer(client, server):
    counted = client.messages.count_tokens(model="claude-test", system="12345678",
                                           messages=[{"role": "user", "content": "hello"}])
    assert counted.input_tokens == 2 + 2
    assert server.requests[0].api == "count_tokens"


def test_a_rule_that_raises_fails_its_request_visibly(client, server, caplog):
    server.rule(lambda request: 1 / 0)
    with pytest.raises(anthropic.InternalServerError, match="ZeroDivisionError"):
        client.messages.create(model="claude-test", max_tokens=50, messages=HELLO)
    assert server.wait_idle()
    ((exchange_id, trace),) = server.errors
    assert exchange_id == 1 and "ZeroDivisionError" in trace
    assert server.requests[0].outcome == "server failed"
    assert "exchange 1 failed" in caplog.text


def test_the_async_client_streams_and_runs_requests_side_by_side(server):
    async def run():
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test-key", max_retries=0)
        server.script(Reply(Text("async"), ToolCall("zoom", {"id": 1})))
        async with client.messages.stream(model="claude-test", max_tokens=64, messages=HELLO) as stream:
            final = await stream.get_final_message()
        many = await asyncio.gather(*[client.messages.create(model="claude-test", max_tokens=64, messages=[
            {"role": "user", "content": f"question {i}"}]) for i in range(4)])
        await client.close()
        return final, many

    final, many = asyncio.run(run())
    assert final.content[1].input == {"id": 1}
    assert sorted(m.content[0].text.split(": ")[1] for m in many) == [f"question {i}" for i in range(4)]
