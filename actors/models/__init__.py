"""Model connections: one interface, three backends (Anthropic, OpenAI, the offline demo).

    connection = connect("anthropic")                 # key from ANTHROPIC_API_KEY
    request = Request(model="claude-sonnet-5-5", system=..., tools=..., messages=(Message.user("hi"),))
    for event in connection.stream(request):          # TextDelta, ThinkingDelta, ToolCall, Usage, Stop
        ...
    reply = connection.complete(request)              # the same, gathered

Failures raise one of the `ModelError` classes (`MissingKey`, `BadKey`,
`QuotaExceeded`, `RateLimited`, `ModelNotFound`, `ModelTimeout`, `Overloaded`,
`ServerError`, `BadRequest`, `Unreachable`, `ProtocolError`, `Refused`); a
connection never switches vendor or model.
"""

from __future__ import annotations

from ._anthropic import AnthropicConnection
from ._demo import DemoConnection
from ._errors import (
    BadKey,
    BadRequest,
    MissingKey,
    ModelError,
    ModelNotFound,
    ModelTimeout,
    NoAnswer,
    Overloaded,
    ProtocolError,
    QuotaExceeded,
    RateLimited,
    Refused,
    ServerError,
    Unreachable,
)
from ._openai import OpenAIChatConnection, OpenAIConnection
from ._summarize import summarize as extractive_summary
from ._types import (
    EFFORTS,
    Block,
    Connection,
    Event,
    ImageBlock,
    Message,
    Reply,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)

__all__ = [
    "EFFORTS",
    "PROVIDERS",
    "AnthropicConnection",
    "BadKey",
    "BadRequest",
    "Block",
    "Connection",
    "DemoConnection",
    "Event",
    "ImageBlock",
    "Message",
    "MissingKey",
    "ModelError",
    "ModelNotFound",
    "ModelTimeout",
    "NoAnswer",
    "OpenAIChatConnection",
    "OpenAIConnection",
    "Overloaded",
    "ProtocolError",
    "QuotaExceeded",
    "RateLimited",
    "Refused",
    "Reply",
    "Request",
    "ServerError",
    "Stop",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "ToolCall",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "Unreachable",
    "Usage",
    "connect",
    "extractive_summary",
]

PROVIDERS = ("anthropic", "openai", "openai-chat", "demo")


def connect(provider: str, *, api_key: str | None = None, base_url: str | None = None,
            dummy_key: str | None = None, max_retries: int = 2) -> Connection:
    """The connection for a provider: "anthropic" (Messages API), "openai" (Responses
    API), "openai-chat" (Chat Completions, for local OpenAI-compatible servers) or
    "demo" (offline). Without `api_key` the key is read from ANTHROPIC_API_KEY or
    OPENAI_API_KEY; none raises `MissingKey` (an OpenAI-compatible server that needs no
    key takes `dummy_key`)."""
    if provider == "anthropic":
        return AnthropicConnection(api_key, base_url, max_retries=max_retries)
    if provider == "openai":
        return OpenAIConnection(api_key, base_url, dummy_key=dummy_key, max_retries=max_retries)
    if provider == "openai-chat":
        return OpenAIChatConnection(api_key, base_url, dummy_key=dummy_key, max_retries=max_retries)
    if provider == "demo":
        return DemoConnection()
    raise ValueError(f"provider is one of {', '.join(PROVIDERS)}, not {provider!r}")
