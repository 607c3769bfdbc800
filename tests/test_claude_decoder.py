"""Claude Code's decoder on lines shaped as the pinned binary writes them (tests/samples,
recorded from the real `claude`): what each says about the login and the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from everchat.actors.models import NotLoggedIn
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
