"""The fake server speaks OpenAI's Responses and Chat Completions APIs to the real `openai` SDK."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from everchat.tools.fakemodel import FakeModelServer, Reply, Text, Thinking, ToolCall, count_tokens

TOOL = {"type": "function", "name": "zoom", "description": "fetch details",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}
CHAT_TOOL = {"type": "function", "function": {"name": "zoom", "description": "fetch details",
                                              "parameters": {"type": "object"}}}
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def shared():
    with FakeModelServer(chunk_tokens=1) as server:
        yield server, openai.OpenAI(base_url=server.openai_base_url, api_key="test-key", max_retries=0)


@pytest.fixture
def server(shared):
    shared[0].reset()
    return shared[0]


@pytest.fixture
def client(shared, server):
    return shared[1]


# --- Responses ---------------------------------------------------------------------------


def test_a_streamed_responses_text_has_the_documented_event_order(client, server):
    server.script("Hello, world!")
    events = list(client.responses.create(model="gpt-test", input="hello", stream=True))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * 4, "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello, world!"
    done = events[-1].response
    assert (done.status, done.output_text) == ("completed", "Hello, world!")
    assert (done.usage.input_tokens, done.usage.output_tokens) == (count_tokens("hello"), 4)


def test_the_responses_stream_helper_assembles_text_and_a_function_call(client, server):
    server.script(Reply(Text("Let me look."), ToolCall("zoom", {"id": "m42+8"})))
    with client.responses.stream(model="gpt-test", input="what was in m42?", tools=[TOOL]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    message, call = final.output
    assert message.content[0].text == "Let me look."
    assert (call.type, call.name, call.call_id) == ("function_call", "zoom", "call_fake000001_1")
    assert json.loads(call.arguments) == {"id": "m42+8"}
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(deltas) == call.arguments and len(deltas) > 1
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == call.arguments


def test_a_whole_responses_reply_and_its_reasoning_summary(client, server):
    server.script(Reply(Thinking("thinking hard"), Text("42")))
    response = client.responses.create(model="gpt-test", input=[{"role": "user", "content": "answer?"}])
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == "thinking hard"
    assert response.output_text == "42"
    assert response.usage.output_tokens_details.reasoning_tokens == count_tokens("thinking hard")


def test_a_streamed_reasoning_summary_arrives_in_pieces(client, server):
    server.script(Reply(Thinking("thinking hard"), Text("42")))
    with client.responses.stream(model="gpt-test", input="answer?") as stream:
        pieces = [e.delta for e in stream if e.type == "response.reasoning_summary_text.delta"]
        final = stream.get_final_response()
    assert pieces == ["thin", "king", " har", "d"]
    assert final.output_text == "42"


def test_max_output_tokens_leaves_the_response_incomplete(client, server):
    server.script("x" * 100)
    response = client.responses.create(model="gpt-test", input="hello", max_output_tokens=3)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "x" * 12


def test_a_long_shared_prefix_is_reported_as_cached_tokens_in_128_token_steps(client, server):
    instructions = "x" * 4200  # 1,050 tokens
    first = client.responses.create(model="gpt-test", instructions=instructions, input="one")
    second = client.responses.create(model="gpt-test", instructions=instructions, input="two")
    assert first.usage.input_tokens_details.cached_tokens == 0
    assert second.usage.input_tokens == 1050 + 1
    assert second.usage.input_tokens_details.cached_tokens == 1024
    assert server.model_calls[1].cache.perfect_read == 1050


def test_a_rule_sees_the_parsed_responses_request(client, server):
    seen = []
    server.rule(lambda request: seen.append(request) or "ok")
    client.responses.create(model="gpt-test", instructions="Be brief.", tools=[TOOL], max_output_tokens=77, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "first"}]},
        {"type": "function_call", "call_id": "c1", "name": "zoom", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "the detail"},
        {"role": "user", "content": "second"},
    ])
    request = seen[0]
    assert (request.api, request.system, request.tool_names, request.max_tokens) == (
        "responses", "Be brief.", ("zoom",), 77)
    assert request.messages == (("user", "first"), ("tool", "the detail"), ("user", "second"))


# --- Chat Completions ---------------------------------------------------------------------


def test_a_streamed_chat_text_ends_with_a_usage_chunk(client, server):
    server.script("Hello, world!")
    chunks = list(client.chat.completions.create(model="gpt-test", messages=HELLO, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello, world!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].choices == []
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (2, 4, 6)
    assert usage.prompt_tokens_details.cached_tokens == 0


def test_without_include_usage_no_usage_chunk_is_sent(client, server):
    chunks = list(client.chat.completions.create(model="gpt-test", messages=HELLO, stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_streamed_chat_tool_calls_are_assembled_by_the_stream_helper(client, server):
    server.script(Reply(Text("Looking."), ToolCall("zoom", {"id": "m1"}), ToolCall("zoom", {"id": "m2"})))
    with client.chat.completions.stream(model="gpt-test", messages=HELLO, tools=[CHAT_TOOL]) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Looking."
    calls = choice.message.tool_calls
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("call_fake000001_1", "zoom", {"id": "m1"}), ("call_fake000001_2", "zoom", {"id": "m2"})]


def test_raw_chat_tool_call_chunks_name_the_call_once_then_stream_arguments(client, server):
    server.script(ToolCall("zoom", {"id": "m1"}))
    chunks = list(client.chat.completions.create(model="gpt-test", messages=HELLO, tools=[CHAT_TOOL], stream=True))
    deltas = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls]
    assert (deltas[0].id, deltas[0].function.name, deltas[0].function.arguments) == ("call_fake000001_0", "zoom", "")
    assert all(d.id is None and d.index == 0 for d in deltas[1:])
    assert "".join(d.function.arguments for d in deltas[1:]) == '{"id":"m1"}'


def test_a_whole_chat_completion_with_tool_calls_and_reasoning_content(client, server):
    server.script(Reply(Thinking("hmm"), ToolCall("zoom", {"id": "m1"})))
    completion = client.chat.completions.create(model="gpt-test", messages=HELLO, tools=[CHAT_TOOL])
    message = completion.choices[0].message
    assert message.content is None
    assert message.tool_calls[0].function.arguments == '{"id":"m1"}'
    assert message.model_extra["reasoning_content"] == "hmm"
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage.completion_tokens_details.reasoning_tokens == 1


def test_chat_max_tokens_ends_with_length(client, server):
    server.script("y" * 100)
    completion = client.chat.completions.create(model="gpt-test", messages=HELLO, max_completion_tokens=2)
    assert (completion.choices[0].message.content, completion.choices[0].finish_reason) == ("y" * 8, "length")


def test_a_rule_sees_the_chat_system_and_tool_messages(client, server):
    seen = []
    server.rule(lambda request: seen.append(request) or "ok")
    client.chat.completions.create(model="gpt-test", tools=[CHAT_TOOL], messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "zoom", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "the detail"},
    ])
    request = seen[0]
    assert (request.api, request.system, request.tool_names) == ("chat", "Be brief.", ("zoom",))
    assert request.messages == (("user", "first"), ("assistant", ""), ("tool", "the detail"))


# --- both ------------------------------------------------------------------------------------


def test_a_wrong_key_is_an_authentication_error_in_openais_shape(server):
    wrong = openai.OpenAI(base_url=server.openai_base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        wrong.responses.create(model="gpt-test", input="hello")
    assert caught.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model="gpt-test", messages=HELLO)


def test_the_model_list_and_an_unknown_model():
    with FakeModelServer(models=["gpt-known"]) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="test-key", max_retries=0)
        assert [m.id for m in client.models.list()] == ["gpt-known"]
        with pytest.raises(openai.NotFoundError) as caught:
            client.responses.create(model="gpt-other", input="hello")
        assert caught.value.code == "model_not_found"


def test_openai_requests_are_recorded_without_their_key(client, server):
    client.responses.create(model="gpt-test", input="hello")
    client.chat.completions.create(model="gpt-test", messages=HELLO, stream=True).close()
    responses, chat = server.model_calls
    assert (responses.api, responses.path, chat.api, chat.path, chat.stream) == (
        "responses", "/v1/responses", "chat", "/v1/chat/completions", True)
    assert responses.headers["authorization"] == "<redacted>"
    assert "test-key" not in json.dumps([responses.headers, chat.headers])


def test_the_async_client_streams_responses_and_chat(server):
    async def run():
        client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="test-key", max_retries=0)
        server.script("from responses", ToolCall("zoom", {"id": "m1"}))
        async with client.responses.stream(model="gpt-test", input="hello") as stream:
            response = await stream.get_final_response()
        async with client.chat.completions.stream(model="gpt-test", messages=HELLO, tools=[CHAT_TOOL]) as stream:
            completion = await stream.get_final_completion()
        await client.close()
        return response, completion

    response, completion = asyncio.run(run())
    assert response.output_text == "from responses"
    assert completion.choices[0].message.tool_calls[0].function.arguments == '{"id":"m1"}'
