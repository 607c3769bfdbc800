"""Every injected failure raises its own error class, on all three protocols, through the
real SDKs; none leaks a key, and none makes a connection try another vendor or model."""

from __future__ import annotations

import socket

import pytest

from everchat.actors.models import (
    BadKey,
    Message,
    ModelError,
    ModelNotFound,
    ModelTimeout,
    Overloaded,
    ProtocolError,
    QuotaExceeded,
    RateLimited,
    Request,
    ServerError,
    TextDelta,
    Unreachable,
    connect,
)
from everchat.tools import fakemodel as fake

PROVIDERS = ["anthropic", "openai", "openai-chat"]
LONG = "a fairly long answer that streams in many small pieces before it ends"

FAULTS = {
    "429 rate limit": (fake.RateLimited(retry_after=7), RateLimited),
    "500 server error": (fake.ServerError(), ServerError),
    "529 overloaded": (fake.Overloaded(), Overloaded),
    "404 model": (fake.ModelNotFound(), ModelNotFound),
    "quota": (fake.QuotaExceeded(), QuotaExceeded),
    "dropped stream": (fake.DropStream(after_events=5, reply=LONG), ProtocolError),
    "garbage event": (fake.GarbageEvent(after_events=5, reply=LONG), ProtocolError),
    "error event mid-stream": (fake.StreamError(after_events=5, reply=LONG), Overloaded),
}


@pytest.fixture(scope="module")
def shared():
    with fake.FakeModelServer(chunk_tokens=2) as server:
        yield server


@pytest.fixture
def server(shared):
    shared.reset()
    shared.latency = fake.Latency()
    yield shared
    assert shared.errors == []


def url(server, provider: str) -> str:
    return server.base_url if provider == "anthropic" else server.openai_base_url


def open_connection(server, provider: str, key: str = "test-key", retries: int = 0):
    return connect(provider, api_key=key, base_url=url(server, provider), max_retries=retries)


def ask(timeout: float = 30.0) -> Request:
    return Request(model="model-x", system="You are a test.", messages=(Message.user("hello"),), max_tokens=256,
                   timeout=timeout)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_injected_failure_raises_its_own_error(server, provider, fault):
    injected, expected = FAULTS[fault]
    server.script(injected)
    received = []
    with open_connection(server, provider) as connection, pytest.raises(ModelError) as caught:
        for event in connection.stream(ask()):
            received.append(event)
    error = caught.value
    assert type(error) is expected, f"{fault} on {provider}: {error!r}"
    assert (error.provider, error.model) == (provider, "model-x")
    assert str(error).startswith(f"{provider} model-x: ") and "test-key" not in str(error)
    if fault == "429 rate limit":
        assert error.retry_after == 7.0 and error.retryable
    if fault in ("dropped stream", "garbage event", "error event mid-stream"):
        assert any(isinstance(e, TextDelta) for e in received)  # what arrived stays with the caller (R37)
    assert server.wait_idle()
    assert [call.model for call in server.model_calls] == ["model-x"]  # one call, never another model


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_refused_key_is_a_bad_key(server, provider):
    with open_connection(server, provider, key="wrong-key") as connection, pytest.raises(BadKey) as caught:
        connection.complete(ask())
    assert caught.value.status == 401 and "wrong-key" not in str(caught.value)
    assert "API_KEY" in str(caught.value)  # says which variable to check


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_model_the_server_does_not_serve_is_not_found(provider):
    with fake.FakeModelServer(models=["model-y"]) as server, open_connection(server, provider) as connection:
        with pytest.raises(ModelNotFound) as caught:
            connection.complete(ask())
        assert "model-x" in str(caught.value)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_no_answer_within_the_timeout_is_a_model_timeout(server, provider):
    gate = server.gate()
    server.script(fake.Reply("late", gate=gate))
    with open_connection(server, provider) as connection, pytest.raises(ModelTimeout):
        connection.complete(ask(timeout=0.3))
    gate.open()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_nothing_listening_at_the_base_url_is_unreachable(provider):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}" + ("" if provider == "anthropic" else "/v1")
    with connect(provider, api_key="k", base_url=base, max_retries=0) as connection:
        with pytest.raises(Unreachable) as caught:
            connection.complete(ask())
    assert caught.value.retryable and str(port) in str(caught.value)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_sdk_retries_repeat_the_same_model_and_never_switch(server, provider):
    server.script(fake.RateLimited(retry_after=0.01), fake.RateLimited(retry_after=0.01), "at last")
    with open_connection(server, provider, retries=2) as connection:
        assert connection.complete(ask()).text == "at last"
    assert [call.model for call in server.model_calls] == ["model-x"] * 3
    assert {call.api for call in server.model_calls} == {"anthropic" if provider == "anthropic"
                                                          else "responses" if provider == "openai" else "chat"}
