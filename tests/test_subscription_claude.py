"""Claude Code as the model, end to end: the real pinned `claude` binary talks to the fake
model server on a dummy subscription login (tests/claude_world.py, docs/SUBSCRIPTIONS.md)."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import pytest

from claude_world import MODEL, TOKEN, claude_binary, claude_env, fake, login_env  # noqa: F401 - fixtures
from cli_world import env, everchat  # noqa: F401 - fixture
from everchat.actors.models import (
    ImageBlock,
    Message,
    ModelTimeout,
    NotLoggedIn,
    QuotaExceeded,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ToolCall,
    ToolResultBlock,
    Usage,
    connect_cli,
)
from everchat.actors.prompt import memory_tools, view_blocks
from everchat.tools.fakemodel import FakeModelServer, Reply, Text, ToolCall as FakeToolCall, UsageLimit

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


@pytest.fixture
def connection(claude_env, tmp_path):
    conn = connect_cli("claudecode", executable=claude_binary(), timeout=120, state_dir=tmp_path / "state")
    yield conn
    conn.close()


def ask(*blocks, messages=(), tools=memory_tools(), label="turn") -> Request:
    first = Message("user", tuple(TextBlock(b) if isinstance(b, str) else b for b in blocks))
    return Request(model=MODEL, system="You are Everchat's test model.", tools=tools,
                   messages=(first, *messages), label=label)


def test_a_reply_streams_in_pieces_through_the_real_cli(connection, fake):
    fake.script(Reply(Text("The amber-42 probe launched on Tuesday at dawn.")))
    events = list(connection.stream(ask("When did the probe launch?")))
    pieces = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(pieces) > 1
    assert "".join(pieces) == "The amber-42 probe launched on Tuesday at dawn."
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.prompt > 0 and usage.output > 0  # Claude Code's own counts (status shows them)
    assert events[-1] == Stop("end_turn")


def test_r35_a_zoom_round_trip_continues_the_same_claude_run(connection, fake):
    fake.script(Reply(FakeToolCall("mcp__everchat__zoom", {"id": 3})), Reply(Text("It was amber-42.")))
    first = ask("What was the code?")
    events = list(connection.stream(first))
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, dict(c.input)) for c in calls] == [("zoom", {"id": 3})]
    assert events[-1] == Stop("tool_use")

    result = Message("user", (ToolResultBlock.of_text(calls[0].id, "user: the code is amber-42"),))
    reply = connection.complete(replace(first, messages=(*first.messages, Message.assistant("(zoom)"), result)))
    assert reply.text == "It was amber-42." and reply.stop == Stop("end_turn")
    first_call, second_call = fake.model_calls
    assert second_call.headers["x-claude-code-session-id"] == first_call.headers["x-claude-code-session-id"]
    assert "the code is amber-42" in json.dumps(second_call.body["messages"][-1])
    assert sorted(t["name"] for t in first_call.body["tools"]) == ["mcp__everchat__date", "mcp__everchat__zoom"]


def test_r9_an_image_goes_through_claude_codes_own_image_input(connection, fake):
    fake.script(Reply(Text("A single pixel.")))
    reply = connection.complete(ask("What is in this picture?", ImageBlock(PNG, "image/png")))
    assert reply.text == "A single pixel."
    (call,) = fake.model_calls
    assert call.images() == [("image/png", PNG)]


def test_a_slow_answer_ends_in_a_timeout_that_names_the_flag(claude_env, fake, tmp_path):
    gate = fake.gate()
    fake.script(Reply(Text("too late"), gate=gate))
    conn = connect_cli("claudecode", executable=claude_binary(), timeout=3, state_dir=tmp_path / "state")
    try:
        with pytest.raises(ModelTimeout, match="--cli-timeout"):
            list(conn.stream(ask("hello")))
    finally:
        gate.open()
        conn.close()


def test_a_usage_limit_reads_as_quota_with_the_reset_time(connection, fake):
    fake.inject(UsageLimit())
    with pytest.raises(QuotaExceeded, match="usage limit is reached.*resets"):
        list(connection.stream(ask("hello")))


def test_no_login_reads_as_not_logged_in_and_asks_nothing(tmp_path, fake, monkeypatch):
    for name, value in login_env(tmp_path, fake, logged_in=False).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-a-paid-key-that-must-not-be-used")
    conn = connect_cli("claudecode", executable=claude_binary(), timeout=120, state_dir=tmp_path / "state")
    with pytest.raises(NotLoggedIn, match="/login"):
        list(conn.stream(ask("hello")))
    assert fake.model_calls == []  # no fallback to the API key


def test_a_console_api_key_login_is_refused_before_it_bills(tmp_path, monkeypatch):
    """A Console login saves an API key (`primaryApiKey`) where a subscription login saves an
    OAuth token: Claude Code then reports apiKeySource "/login managed key" and calls with
    `x-api-key`. The fake accepts that key here, as the real API would (and bill it)."""
    console_key = "sk-ant-api03-a-console-login-key"
    with FakeModelServer(api_keys=(TOKEN, console_key), chunk_tokens=2) as server:
        server.rule(lambda request: Reply(Text("Billed per token.")))
        for name, value in login_env(tmp_path, server, logged_in=False).items():
            monkeypatch.setenv(name, value)
        config = tmp_path / "claude-home" / ".claude" / ".claude.json"  # as /login writes it
        config.write_text(json.dumps({"primaryApiKey": console_key}))
        conn = connect_cli("claudecode", executable=claude_binary(), timeout=120, state_dir=tmp_path / "state")
        try:
            with pytest.raises(NotLoggedIn, match=r"API key \(apiKeySource=/login managed key\), not a subscription"):
                list(conn.stream(ask("hello")))
        finally:
            conn.close()


def test_api_key_variables_never_reach_the_cli(connection, fake, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-a-paid-key-that-must-not-be-used")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "another-paid-token")
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "x-api-key: sk-ant-api03-a-paid-key-in-a-header")
    fake.script(Reply(Text("On the subscription.")))
    assert connection.complete(ask("hello")).text == "On the subscription."
    (call,) = fake.model_calls
    assert "x-api-key" not in call.headers  # the fake only takes the login's Bearer token
    assert "oauth" in call.headers["anthropic-beta"]
    assert call.headers["x-everchat-call"] == "turn"  # our label, as on the API path


def test_r23_a_turn_after_a_turn_reads_its_view_from_the_cache(connection, fake):
    lines = [f"{n}: the probe log entry number {n} says the seals held at {n * 7} kPa" for n in range(200)]
    fake.script(Reply(Text("First.")), Reply(Text("Second.")))
    view = view_blocks(lines)
    first = connection.complete(ask(*view, TextBlock("turn one", cache=True)))
    second = connection.complete(ask(*view, TextBlock("turn two", cache=True)))
    assert (first.text, second.text) == ("First.", "Second.")
    assert first.usage.cache_write > 0
    assert second.usage.cache_read >= first.usage.cache_write - 64  # the view and all before it
    body = fake.model_calls[1].body
    marks = [b for b in body["system"] + body["messages"][0]["content"] if b.get("cache_control")]
    assert len(marks) <= 4  # Anthropic's limit, with Claude Code's own two system marks


def test_everchat_ask_through_the_claude_subscription_streams_a_reply(env, tmp_path, fake):
    fake.rule(lambda request: Reply(Text("Hello from the subscription, in pieces.")))
    env = {**env, **login_env(tmp_path, fake)}
    done = everchat(env, "--connection", "subscription", "--cli", "claudecode", "--cli-executable",
                    claude_binary(), "--cli-timeout", "120", "--cli-concurrency", "2", "ask", "Hello?",
                    timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Hello from the subscription, in pieces." in done.stdout
    assert all("x-api-key" not in call.headers for call in fake.model_calls)


def test_r23_the_cli_cache_bench_reads_every_turns_view_through_claude_code():
    from everchat.tools.bench import bench_cache_cli

    rows = {row["kind"]: row for row in bench_cache_cli.run("claudecode", turns=3, lines=60,
                                                             claude=claude_binary())}
    turns, compactions = rows["turns"], rows["compactions"]
    assert (turns["requests"], compactions["requests"]) == (4, 7)  # one zoom round; 6 leaves and a merge
    assert turns["ratio"] == 1.0  # a turn after a turn reads all the perfect cache could
    assert compactions["ratio"] > 0.95 and compactions["cache_read"] > 0


def test_status_counts_what_claude_code_reported_for_every_call(env, tmp_path, fake):
    """Issue 13: the CLI's own token and cache counts feed `status` (usage.json), as the API
    path's do: the chat's totals are the sums of what the server reported per call. The
    second turn's view starts otherwise than the first's, and it still reads the first's
    prefix from the cache: Claude Code's attribution block stays the same (STEADY_OPENING)."""
    fake.rule(lambda request: Reply(Text("Noted, from the plan.")))
    env = {**env, **login_env(tmp_path, fake)}
    flags = ("--connection", "subscription", "--cli", "claudecode", "--cli-executable", claude_binary(),
             "--cli-timeout", "120")
    for words in ("First words.", "Second words."):
        done = everchat(env, *flags, "ask", words, timeout=300)
        assert done.returncode == 0, done.stderr
    status = everchat(env, *flags, "status", timeout=120)
    assert status.returncode == 0, status.stderr
    # The turns' share: a summary call cut off as `ask` closed may have reached the server
    # without its usage coming back, so the compactions' share is not compared.
    usage = json.loads(status.stdout)["usage"]["turns"]
    # Claude Code first tries a request form the fake refuses (HTTP 400: a `system` role in
    # `messages`), then sends the same call in the public form; only answered calls count.
    calls = [call for call in fake.model_calls
             if call.headers.get("x-everchat-call") == "turn" and call.status == 200]
    assert usage["calls"] == len(calls) == 2
    first, second = (call.body for call in calls)
    assert first["system"][0] == second["system"][0]  # the attribution block, before everything
    assert usage["input"] == sum(call.cache.input_tokens for call in calls)
    assert usage["cache_read"] == sum(call.cache.cache_read for call in calls) > 0
    assert usage["cache_write"] == sum(call.cache.cache_write for call in calls)
    assert usage["output"] == sum(call.output_tokens for call in calls)
