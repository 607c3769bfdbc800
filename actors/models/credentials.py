"""The environment variables that let a process pay for a model (or a search API): what a
subscription CLI's child (issue 13, actors/models/_cli.py) and an after-turn command
(actors/turns/after_turn.py) must never receive. Kept apart from both so neither imports the
other (the models package loads the vendors' SDKs; the after-turn code must stay light).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CREDENTIAL_NAMES", "is_credential", "without_credentials"]

CREDENTIAL_NAMES = frozenset({
    "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY", "AZURE_OPENAI_API_KEY",
    "ANTHROPIC_FOUNDRY_API_KEY", "AWS_BEARER_TOKEN_BEDROCK", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY", "CLAUDE_CODE_API_KEY_HELPER_TTL_MS", "ANTHROPIC_VERTEX_PROJECT_ID",
    # Claude Code reads an API key from this file descriptor: billed, not the plan.
    "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
    # Codex's Azure federation: a paid Azure OpenAI deployment, not the ChatGPT plan.
    "AZURE_CLIENT_SECRET", "OPENAI_IDENTITY_TOKEN_FILE",
    # Claude Code sends these headers with every request: an `x-api-key` in them is billed.
    "ANTHROPIC_CUSTOM_HEADERS",
})
"""Keys, tokens and the cloud-provider switches of the paid API paths. Every name ending in
`_API_KEY` or `_AUTH_TOKEN` counts too; a CLI's own login (its credentials file,
CLAUDE_CODE_OAUTH_TOKEN) is the subscription and is not one of them."""


def is_credential(name: str) -> bool:
    upper = name.upper()
    return upper in CREDENTIAL_NAMES or upper.endswith("_API_KEY") or upper.endswith("_AUTH_TOKEN")


def without_credentials(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in environ.items() if not is_credential(name)}
