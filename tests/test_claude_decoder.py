"""Claude Code's decoder on lines shaped as the pinned binary writes them (tests/samples,
recorded from the real `claude`): what each says about the login and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from everchat.actors.models import (
    BadRequest,
    ModelNotFound,
    ModelTimeout,
    NotLoggedIn,
    Overloaded,
    QuotaExceeded,
    RateLimited,
    ServerError,
)
from everchat.actors.models._claudecode import ClaudeDecoder

SAMPLES = Path(__file__).parent / "samples"
RECORDED_INIT = (SAMPLES / "claude_code_reply.jsonl").read_text().splitlines()[0]


def test_the_recorded_subscription_init_line_says_no_api_key_and_passes():
    assert '"apiKeySource":"none"' in RECORDED_INIT  # a claude.ai login, as recorded
    assert ClaudeDecoder().feed(RECORDED_INIT) == []


@pytest.mark.parametrize("source", ["ANTHROPIC_API_KEY", "/login managed key", "apiKeyHelper"])
def test_an_init_line_with_an_api_key_source_fails_the_call_as_not_logged_in(source):
    line = RECORDED_INIT.replace('"apiKeySource":"none"', f'"apiKeySource":"{source}"')
    (error,) = ClaudeDecoder("claudecode", "m").feed(line)
    assert isinstance(error, NotLoggedIn)
    assert f"Claude Code is using an API key (apiKeySource={source}), not a subscription login" in str(error)
    assert "/login with the subscription account" in str(error)


def test_an_init_line_without_the_field_is_not_refused():
    # older CLIs did not write it: nothing to judge by, the scrubbed environment still holds
    line = RECORDED_INIT.replace('"apiKeySource":"none",', "")
    assert "apiKeySource" not in line
    assert ClaudeDecoder().feed(line) == []


# --- a failed call: the API path's classes, but for the login and the plan's own limit ------

QUOTA_LINES = (SAMPLES / "claude_code_quota.jsonl").read_text().splitlines()


def failed(status: int, kind: str, error: str, text: str) -> Exception:
    """The recorded usage-limit run with another failure in its `assistant` and `result`
    lines (the fields the pinned binary fills: `error`, api_error_status/_type, the text)."""
    decoder = ClaudeDecoder("claudecode", "m")
    items: list = []
    for line in QUOTA_LINES:
        event = json.loads(line)
        if event.get("type") == "assistant":
            event.update(error=error, api_error_status=status, api_error_type=kind, api_error=None)
            event["message"]["content"] = [{"type": "text", "text": text}]
        elif event.get("type") == "result":
            event.update(api_error_status=status, api_error_type=kind, api_error=None, result=text)
        elif event.get("type") == "rate_limit_event":
            continue  # the plan's limit only
        items += decoder.feed(json.dumps(event))
    (error_,) = [i for i in items if isinstance(i, Exception)]
    return error_


# The texts are what the pinned binary printed for the fake's faults (CLAUDE_CODE_MAX_RETRIES=0).
RATE = ("API Error: Server is temporarily limiting requests (not your usage limit) · Number of request tokens "
        "has exceeded your per-minute rate limit.")


@pytest.mark.parametrize("status, kind, error, text, expected", [
    (429, "rate_limit_error", "rate_limit", RATE, RateLimited),
    (504, "api_error", "server_error", "API Error: 504 Gateway Timeout", ModelTimeout),
    (408, "", "unknown", "API Error: 408 Request Timeout", ModelTimeout),
    (529, "overloaded_error", "server_error", "API Error: 529 Overloaded. This is a server-side issue", Overloaded),
    (500, "api_error", "server_error", "API Error: 500 Internal server error.", ServerError),
    (404, "not_found_error", "model_not_found", "There's an issue with the selected model (m).", ModelNotFound),
    (402, "billing_error", "billing_error", "Credit balance is too low", QuotaExceeded),
    (400, "invalid_request_error", "invalid_request", "API Error: 400 prompt is too long", BadRequest),
])
def test_a_failed_call_reads_as_on_the_api_path(status, kind, error, text, expected):
    error_ = failed(status, kind, error, text)
    assert type(error_) is expected and error_.retryable == expected.retryable
    assert error_.status == status
    assert text[:40] in str(error_)  # Claude Code's own words
    assert "API_KEY" not in str(error_)  # a subscription has no key to set


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_login_reads_as_not_logged_in(status):
    error_ = failed(status, "authentication_error", "authentication_failed", "Invalid bearer token")
    assert isinstance(error_, NotLoggedIn) and "run `claude` and /login" in str(error_)


def test_the_plans_usage_limit_reads_as_quota_with_its_reset_time():
    items = [i for line in QUOTA_LINES for i in ClaudeDecoder("claudecode", "m").feed(line)]
    (error_,) = [i for i in items if isinstance(i, Exception)]
    assert type(error_) is QuotaExceeded and not error_.retryable
    assert "usage limit is reached" in str(error_) and "resets 3:45pm" in str(error_)


def test_the_shared_helper_never_asks_a_subscription_for_a_key():
    from everchat.actors.models._errors import error_for_status

    error_ = error_for_status(401, "invalid bearer", provider="claudecode", model="m", kind="authentication_error")
    assert isinstance(error_, NotLoggedIn) and "log in again with the CLI" in str(error_)
    assert "API_KEY" not in str(error_)


# --- one copy of the Messages API's shapes ---------------------------------------------------


def test_claude_code_uses_the_api_paths_effort_image_and_usage_helpers():
    from everchat.actors.models import _anthropic, _claudecode

    assert _claudecode._EFFORT is _anthropic._EFFORT
    assert _claudecode._image is _anthropic._image
    assert _claudecode._usage is _anthropic._usage


def test_the_shared_usage_reads_the_sdks_objects_and_claude_codes_json_alike():
    from types import SimpleNamespace

    from everchat.actors.models import Usage
    from everchat.actors.models._anthropic import _usage

    before = Usage(input=1, output=2, cache_read=3, cache_write=4)
    raw = {"input_tokens": 10, "output_tokens": None, "cache_read_input_tokens": 7}
    expected = Usage(input=10, output=2, cache_read=7, cache_write=4)  # what is missing stays
    assert _usage(raw, before) == expected
    assert _usage(SimpleNamespace(**raw), before) == expected
    assert _usage(None, before) == before


# --- the command line ------------------------------------------------------------------------


def test_the_command_line_asks_for_the_bridge_command_once_and_its_mcp_config_holds_it(tmp_path):
    from everchat.actors.models import ClaudeCodeConnection, Message, Request
    from everchat.actors.models._cli import Run

    asked = []

    class Counting(ClaudeCodeConnection):
        def bridge_command(self, run):
            asked.append(run)
            return ["/bin/bridge", "--in", str(run.folder), f"call-{len(asked)}"]

    run = Run(folder=tmp_path, slot=None)
    argv = Counting("claude", state_dir=tmp_path / "state").argv(run, Request(model="m", system="s",
                                                                              messages=(Message.user("x"),)))
    assert len(asked) == 1
    config = json.loads((tmp_path / "mcp.json").read_text())
    assert config["mcpServers"]["everchat"] == {"type": "stdio", "command": "/bin/bridge",
                                                "args": ["--in", str(tmp_path), "call-1"]}
    assert argv[argv.index("--mcp-config") + 1] == str(tmp_path / "mcp.json")
    assert (tmp_path / "system.txt").read_text() == "s"
