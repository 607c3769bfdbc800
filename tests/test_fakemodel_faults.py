"""Injected failures and latency surface in the real SDKs as their own errors and delays."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import anthropic
import openai
import pytest

from everchat.tools.fakemodel import (
    DropStream,
    FakeModelServer,
    GarbageEvent,
    Latency,
    ModelNotFound,
    Overloaded,
    QuotaExceeded,
    RateLimited,
    Reply,
    ServerError,
    StreamError,
    Text,
)

HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def shared():
    with FakeModelServer(chunk_tokens=1) as server:
        claude = anthropic.Anthropic(base_url=server.base_url, api_key="test-key", max_retries=0)
        gpt = openai.OpenAI(base_url=server.openai_base_url, api_key="test-key", max_retries=0)
        yield server, claude, gpt


@pytest.fixture
def server(shared):
    server = shared[0]
    server.reset()
    server.latency = Latency()
    return server


@pytest.fixture
def claude(shared, server):
    return shared[1]


@pytest.fixture
def gpt(shared, server):
    return shared[2]


def call(api: str, client, stream: bool) -> str:
    """One request through the SDK, read to the end; returns the reply's text."""
    if api == "anthropic" and stream:
        with client.messages.stream(model="claude-test", max_tokens=256, messages=HELLO) as s:
            return s.get_final_text()
    if api == "anthropic":
        return client.messages.create(model="claude-test", max_tokens=256, messages=HELLO).content[0].text
    if api == "responses" and stream:
        with client.responses.stream(model="gpt-test", input="hello") as s:
            return s.get_final_response().output_text
    if api == "responses":
        return client.responses.create(model="gpt-test", input="hello").output_text
    if stream:
        chunks = client.chat.completions.create(model="gpt-test", messages=HELLO, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return client.chat.completions.create(model="gpt-test", messages=HELLO).choices[0].message.content


APIS = [(api, stream) for api in ("anthropic", "responses", "chat") for stream in (True, False)]

HTTP_FAULTS = {
    # fault: (anthropic error class, status, error type), (openai error class, status, code)
    "rate_limited": (RateLimited(retry_after=7), (anthropic.RateLimitError, 429, "rate_limit_error"),
                     (openai.RateLimitError, 429, "rate_limit_exceeded")),
    "server_error": (ServerError(), (anthropic.InternalServerError, 500, "api_error"),
                     (openai.InternalServerError, 500, None)),
    "overloaded": (Overloaded(), (anthropic.APIStatusError, 529, "overloaded_error"),
                   (openai.InternalServerError, 503, None)),
    "model_not_found": (ModelNotFound(), (anthropic.NotFoundError, 404, "not_found_error"),
                        (openai.NotFoundError, 404, "model_not_found")),
    "quota_exceeded": (QuotaExceeded(), (anthropic.APIStatusError, 402, "billing_error"),
                       (openai.RateLimitError, 429, "insufficient_quota")),
}


@pytest.mark.parametrize("api,stream", APIS)
@pytest.mark.parametrize("name", list(HTTP_FAULTS))
def test_each_http_fault_is_the_sdks_own_error(server, claude, gpt, api, stream, name):
    fault, on_anthropic, on_openai = HTTP_FAULTS[name]
    server.script(fault)
    client = claude if api == "anthropic" else gpt
    with pytest.raises(anthropic.APIStatusError if api == "anthropic" else openai.APIStatusError) as caught:
        call(api, client, stream)
    error = caught.value
    if api == "anthropic":
        cls, status, kind = on_anthropic
        assert error.body["error"]["type"] == kind
        assert error.body["type"] == "error" and error.body["request_id"] == "req_fake000001"
    else:
        cls, status, kind = on_openai
        assert error.code == kind
    assert type(error) is cls or isinstance(error, cls)
    assert error.status_code == status
    if name == "rate_limited":
        assert error.response.headers["retry-after"] == "7"
    assert server.wait_idle()
    (exchange,) = server.model_calls
    assert (exchange.fault, exchange.outcome, exchange.status, exchange.cache) == (name, f"http {status}", status, None)


def test_a_529_is_anthropics_overloaded_error_class_where_the_sdk_has_one(server, claude):
    server.script(Overloaded())
    with pytest.raises(anthropic.InternalServerError) as caught:
        call("anthropic", claude, False)
    assert caught.value.status_code == 529


def test_the_sdk_retries_a_rate_limit_after_the_servers_retry_after(server):
    server.script(RateLimited(retry_after=0.01), RateLimited(retry_after=0.01), "at last")
    client = anthropic.Anthropic(base_url=server.base_url, api_key="test-key", max_retries=2)
    assert call("anthropic", client, False) == "at last"
    assert server.wait_idle()
    assert [e.outcome for e in server.model_calls] == ["http 429", "http 429", "ok"]
    assert [e.headers["x-stainless-retry-count"] for e in server.model_calls] == ["0", "1", "2"]


@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
def test_a_dropped_stream_is_a_connection_error_after_the_first_events(server, claude, gpt, api):
    server.script(DropStream(after_events=4, reply=Reply(Text("a fairly long answer that never ends"))))
    client = claude if api == "anthropic" else gpt
    with pytest.raises(Exception) as caught:
        call(api, client, True)
    # openai wraps it as APIConnectionError; anthropic lets its HTTP library's error through
    assert type(caught.value).__name__ in ("APIConnectionError", "RemoteProtocolError")
    assert server.wait_idle()
    (exchange,) = server.model_calls
    assert (exchange.outcome, exchange.first_byte is not None) == ("dropped_stream", True)


def test_the_text_before_a_drop_reaches_the_client(server, claude):
    server.script(DropStream(after_events=5, reply="0123456789abcdef"))
    seen = []
    with pytest.raises(Exception):
        with claude.messages.stream(model="claude-test", max_tokens=256, messages=HELLO) as stream:
            seen.extend(stream.text_stream)
    assert seen == ["0123", "4567"]  # start, block start, ping, two deltas


@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
def test_a_dropped_connection_without_a_response_is_a_connection_error(server, claude, gpt, api):
    server.script(DropStream())
    client = claude if api == "anthropic" else gpt
    connection_error = anthropic.APIConnectionError if api == "anthropic" else openai.APIConnectionError
    with pytest.raises(connection_error):
        call(api, client, False)
    assert server.model_calls[0].first_byte is None


@pytest.mark.parametrize("api,stream", APIS)
def test_a_garbage_event_or_body_fails_to_parse_in_the_client(server, claude, gpt, api, stream):
    server.script(GarbageEvent(after_events=3))
    with pytest.raises(json.JSONDecodeError):
        call(api, claude if api == "anthropic" else gpt, stream)
    assert server.wait_idle()
    assert server.model_calls[0].outcome == "garbage_event"


def test_an_error_event_in_an_anthropic_stream_is_an_api_status_error(server, claude):
    server.script(StreamError(after_events=3))
    with pytest.raises(anthropic.APIStatusError) as caught:
        call("anthropic", claude, True)
    assert caught.value.body["error"]["type"] == "overloaded_error"


def test_an_error_event_in_a_responses_stream_leaves_it_without_completion(server, gpt):
    server.script(StreamError(after_events=3))
    events = list(gpt.responses.create(model="gpt-test", input="hello", stream=True))
    assert [e.type for e in events][-1] == "error"
    assert events[-1].code == "server_error"
    server.script(StreamError(after_events=3))
    with pytest.raises(RuntimeError, match="response.completed"):
        call("responses", gpt, True)


def test_an_error_chunk_in_a_chat_stream_is_an_api_error(server, gpt):
    server.script(StreamError(after_events=2))
    with pytest.raises(openai.APIError, match="overloaded"):
        call("chat", gpt, True)


def test_a_stream_error_on_a_whole_reply_is_an_overload(server, claude):
    server.script(StreamError())
    with pytest.raises(anthropic.APIStatusError) as caught:
        call("anthropic", claude, False)
    assert caught.value.status_code == 529


def outcomes_with_injection(seed: int) -> list[str]:
    with FakeModelServer() as server:
        server.inject(ServerError(), 0.5, seed=seed)
        client = anthropic.Anthropic(base_url=server.base_url, api_key="test-key", max_retries=0)
        for _ in range(24):
            try:
                call("anthropic", client, False)
            except anthropic.InternalServerError:
                pass
        assert server.wait_idle()
        return [e.outcome for e in server.model_calls]


def test_faults_injected_by_a_seeded_probability_repeat_with_the_seed():
    first, again, other = outcomes_with_injection(5), outcomes_with_injection(5), outcomes_with_injection(6)
    assert first == again
    assert first != other
    assert 4 <= first.count("http 500") <= 20


def test_an_injection_can_be_limited_to_a_number_of_times(server, claude):
    server.inject(Overloaded(), times=2)
    outcomes = []
    for _ in range(3):
        try:
            outcomes.append(call("anthropic", claude, False))
        except anthropic.APIStatusError as error:
            outcomes.append(error.status_code)
    assert outcomes[:2] == [529, 529] and outcomes[2].startswith("fake reply #3")


def test_first_byte_latency_delays_the_response(server, claude):
    server.latency = Latency(first_byte=0.15)
    call("anthropic", claude, True)
    (exchange,) = server.model_calls
    assert exchange.first_byte - exchange.started >= 0.15


def timed(fn) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def test_per_chunk_latency_grows_with_the_number_of_chunks(server, claude):
    slow = Latency(per_chunk=0.02)
    server.script(Reply("x" * 48, latency=slow), Reply("x" * 12, latency=slow))  # 12 and 3 chunks
    long = timed(lambda: call("anthropic", claude, True))
    short = timed(lambda: call("anthropic", claude, True))
    assert long >= 12 * 0.02
    assert long / short > 1.5


def test_a_whole_reply_waits_for_the_chunks_it_would_have_streamed(server, gpt):
    server.script(Reply("x" * 40, latency=Latency(first_byte=0.05, per_chunk=0.01)))
    call("chat", gpt, False)
    (exchange,) = server.model_calls
    assert exchange.first_byte - exchange.started >= 0.05 + 10 * 0.01


def test_a_latency_range_draws_within_its_bounds(server, claude):
    server.latency = Latency.around(0.08, 0.04)
    for _ in range(3):
        call("anthropic", claude, False)
    waits = [e.first_byte - e.started for e in server.model_calls]
    assert all(w >= 0.04 for w in waits)


def test_the_server_binds_loopback_only():
    with pytest.raises(ValueError, match="loopback"):
        FakeModelServer("0.0.0.0")


def test_the_command_line_serves_until_stopped():
    process = subprocess.Popen([sys.executable, "-m", "everchat.tools.fakemodel", "--port", "0"],
                               stdout=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert first.startswith("fake model server on http://127.0.0.1:")
        url = first.split()[-1]
        client = anthropic.Anthropic(base_url=url, api_key="test-key", max_retries=0)
        assert call("anthropic", client, True) == "fake reply #1: hello"
    finally:
        process.terminate()
        process.wait(timeout=10)
