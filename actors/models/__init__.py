"""Model connections: one interface, three backends (Anthropic, OpenAI, the offline demo).

    connection = connect("anthropic")                 # key from ANTHROPIC_API_KEY
    request = Request(model="claude-sonnet-5-5", system=..., tools=..., messages=(Message.user("hi"),))
    for event in connection.stream(request):          # TextDelta, ThinkingDelta, ToolCall, Usage, Stop
        ...
    reply = connection.complete(request)              # the same, gathered

Failures raise one of the `ModelError` classes (`MissingKey`, `BadKey`,
`QuotaExceeded`, `RateLimited`, `ModelNotFound`, `ModelTimeout`, `Overloaded`,
`ServerError`, `BadRequest`, `Unreachable`, `ProtocolError`, `Refused`, and for the
subscription CLIs `NotLoggedIn`, `CliMissing`); a connection never switches vendor or model.

Subscription connections run an official CLI per call on the person's login
(docs/SUBSCRIPTIONS.md): `connect_cli("claudecode")` or `connect_cli("codex")`.
"""

from __future__ import annotations

from ._anthropic import AnthropicConnection
from ._cli import CliConnection
from ._claudecode import ClaudeCodeConnection
from ._errors import (
    BadKey,
    BadRequest,
    CliMissing,
    MissingKey,
    ModelError,
    ModelNotFound,
    ModelTimeout,
    NoAnswer,
    NotLoggedIn,
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
    "CLIS",
    "EFFORTS",
    "PROVIDERS",
    "AnthropicConnection",
    "BadKey",
    "BadRequest",
    "Block",
    "ClaudeCodeConnection",
    "CliConnection",
    "CliMissing",
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
    "NotLoggedIn",
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
    "connect_cli",
    "extractive_summary",
]

def __getattr__(name: str):
    if name == "DemoConnection":  # the old import path; the demo lives in actors.demo
        from everchat.actors.demo import DemoConnection

        return DemoConnection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PROVIDERS = ("anthropic", "openai", "openai-chat", "demo")
CLIS = ("claudecode", "codex")
"""The subscription CLIs `connect_cli` drives (`--cli`)."""
_EXECUTABLES = {"claudecode": "claude", "codex": "codex"}


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
        # The demo reads the chat's task texts (actors.prompt.tasks), which sit above the
        # connections: it is found when asked for, like a plug-in, never at import (cut 11).
        from everchat.actors.demo import DemoConnection

        return DemoConnection()
    raise ValueError(f"provider is one of {', '.join(PROVIDERS)}, not {provider!r}")


def connect_cli(cli: str, *, executable: str | None = None, model: str | None = None, timeout: float = 300.0,
                concurrency: int = 1, effort: str | None = None, state_dir=None) -> Connection:
    """A subscription connection: each call runs the official CLI on its own login, with
    every API key removed from its environment (docs/SUBSCRIPTIONS.md). `cli`: "claudecode"
    (`claude`) or "codex"; `executable`: the CLI's path (default: found on PATH, else the
    pinned one in tools/clis); `model`: when a request names none; `timeout`: seconds per
    call; `concurrency`: 1…8 runs at once on this machine, shared through `state_dir`
    (default: a folder in the temp dir); `effort`: the default reasoning effort."""
    if cli not in CLIS:
        raise ValueError(f"cli is one of {', '.join(CLIS)}, not {cli!r}")
    path = executable or _default_executable(cli)
    options = dict(model=model, timeout=timeout, concurrency=concurrency, effort=effort, state_dir=state_dir)
    if cli == "claudecode":
        return ClaudeCodeConnection(path, **options)
    try:
        from ._codex import CodexConnection
    except ImportError as error:
        raise CliMissing(f"the Codex connection is not part of this build ({error})", provider="codex") from None
    return CodexConnection(path, **options)


def _default_executable(cli: str) -> str:
    """The CLI on PATH, else the pinned copy `npm ci --prefix tools/clis` installs, else
    its bare name (starting it then raises `CliMissing`)."""
    import shutil
    from pathlib import Path

    name = _EXECUTABLES[cli]
    found = shutil.which(name)
    if found:
        return found
    pinned = Path(__file__).resolve().parents[2] / "tools" / "clis" / "node_modules" / ".bin" / name
    return str(pinned) if pinned.exists() else name
