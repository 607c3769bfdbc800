"""The Codex app-server protocol as pure functions: what goes in, and what the events mean.

`codex app-server` speaks JSON-RPC 2.0 (without the "jsonrpc" member) as JSON lines over
stdio. One run of a `Request` is: ``initialize`` + ``initialized``, ``account/read``
(login check), ``thread/start`` (an ephemeral thread: the system prompt as its base
instructions, our tools as *dynamic tools*, read-only sandbox, no approvals),
``thread/inject_items`` (the saved view as raw Responses items), ``turn/start`` (the turn:
text and images as local image files). The server streams notifications
(``item/agentMessage/delta``, ``item/reasoning/summaryTextDelta``,
``thread/tokenUsage/updated``, ``error``, ``turn/completed``) and asks us to run a tool
with the request ``item/tool/call``, which it waits on: the run is blocked until we answer.

Nothing here does I/O except writing a turn's images where it is told to; `_codex.py`
runs the process. The shapes were read off `codex app-server generate-json-schema
--experimental` of codex-cli 0.171.0 and checked against the real binary (the recorded
streams in tests/data/codex_app_server_*.jsonl).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import (
    BadRequest,
    ModelError,
    ModelNotFound,
    ModelTimeout,
    NotLoggedIn,
    Overloaded,
    ProtocolError,
    QuotaExceeded,
    RateLimited,
    Refused,
    ServerError,
    Unreachable,
    _by_status,
)
from ._openai import _data_url, _joined, _responses_items
from ._types import (
    ImageBlock,
    Message,
    Request,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    Usage,
)

__all__ = [
    "CONFIG",
    "NOT_LOGGED_IN",
    "NOT_SUBSCRIPTION",
    "SUBSCRIPTION_PROVIDER",
    "Split",
    "codex_effort",
    "config_args",
    "error_class",
    "error_detail",
    "history_items",
    "login_problem",
    "mcp_overrides",
    "parse_line",
    "split",
    "thread_params",
    "tool_response",
    "tool_specs",
    "turn_input",
    "usage_between",
]

CONFIG: tuple[tuple[str, str], ...] = (
    # Codex's own tools off: no shell, no file edits, no web, no images made or viewed,
    # no sub-agents, goals, apps, plugins or skills; only the tools we pass (dynamic tools).
    ("features.shell_tool", "false"),
    ("features.view_image", "false"),
    ("features.image_generation", "false"),
    ("features.goals", "false"),
    ("features.apps", "false"),
    ("features.plugins", "false"),
    ("features.hooks", "false"),
    ("agents.enabled", "false"),
    ("web_search", '"disabled"'),
    ("tools.experimental_request_user_input.enabled", "false"),
    # Nothing of Codex's own in the prompt: our system prompt and view are the whole context.
    ("skills.include_instructions", "false"),
    ("include_environment_context", "false"),
    ("include_permissions_instructions", "false"),
    ("include_apps_instructions", "false"),
    ("project_doc_max_bytes", "0"),
    # Sandboxed and never asking: nothing runs, nothing is written.
    ("sandbox_mode", '"read-only"'),
    ("approval_policy", '"never"'),
)
"""The ``-c key=value`` overrides every run passes (they win over the user's config.toml;
the login in CODEX_HOME is left as it is). The run passes ``--strict-config``, so codex
refuses a key it does not know (one renamed in another version) instead of ignoring it and
leaving that tool on. The MCP servers of the user's own config are turned off one by one
(`mcp_overrides`)."""

NOT_LOGGED_IN = ("Codex is not logged in with a ChatGPT account: run `codex login` (the subscription "
                 "connection never falls back to an API key)")


NOT_SUBSCRIPTION = ("Codex's model provider needs no OpenAI login, so it is some other API, not a ChatGPT "
                    "subscription: the subscription connection runs only on the ChatGPT login")

SUBSCRIPTION_PROVIDER = "openai"
"""Codex's built-in provider: the only one a ChatGPT login pays for."""


def config_args(user_config: str = "", model_provider: str = SUBSCRIPTION_PROVIDER) -> list[str]:
    """The command-line overrides, as ``-c key=value`` pairs; `user_config` is the text of
    the user's CODEX_HOME/config.toml, whose MCP servers are turned off. The provider is
    forced (a ``model_provider`` in the user's config could route the run through another,
    billed API); only the tests name another one, their fake server's."""
    if not _BARE.match(model_provider):
        raise ValueError(f"not a Codex provider name: {model_provider!r}")
    args: list[str] = []
    for key, value in CONFIG + (("model_provider", f'"{model_provider}"'),) + mcp_overrides(user_config):
        args += ["-c", f"{key}={value}"]
    return args


_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def mcp_overrides(user_config: str) -> tuple[tuple[str, str], ...]:
    """``mcp_servers.NAME.enabled=false`` for each MCP server the user's config.toml names
    (an override cannot empty the table: ``mcp_servers={}`` leaves them on). A config that
    does not parse names none: Codex itself then refuses to start and says why."""
    try:
        servers = tomllib.loads(user_config).get("mcp_servers") or {}
    except tomllib.TOMLDecodeError:
        return ()
    out = []
    for name in servers if isinstance(servers, dict) else ():
        if not _BARE.match(name):  # `-c` splits keys at dots and takes no quotes
            raise ModelError(f"Codex's config.toml names the MCP server {name!r}, which a run cannot turn off "
                             f"(`-c` takes names of letters, digits, - and _): rename it", provider="codex")
        out.append((f"mcp_servers.{name}.enabled", "false"))
    return tuple(out)


# --- what goes in ----------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """A request cut where Codex wants it: the history to inject and the turn to start.

    `turn` is the trailing user message of text and images (None when the request ends
    with tool results: the history holds them and the turn starts with no input, so the
    model goes on from the results)."""

    history: tuple[Message, ...]
    turn: Message | None


def split(request: Request) -> Split:
    last = request.messages[-1]
    plain = last.role == "user" and all(isinstance(b, (TextBlock, ImageBlock)) for b in last.content)
    if plain:
        return Split(request.messages[:-1], last)
    return Split(request.messages, None)


def history_items(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The messages as ``thread/inject_items`` items: the Responses API items the OpenAI
    API path sends (`_openai._responses_items`; cache marks mean nothing to OpenAI), each
    wrapped as ``{"item": ..., "retention": "default"}``. The API takes a bare role and
    text for a message; an injected item is a typed ``message`` with content parts."""
    out = []
    for item in _responses_items(messages):
        if "role" in item:
            content = item["content"]
            if item["role"] == "assistant":
                if not content:  # an assistant message of no text (its tool calls are items of their own)
                    continue
                content = [{"type": "output_text", "text": content}]
            item = {"type": "message", "role": item["role"], "content": content}
        out.append({"item": item, "retention": "default"})
    return out


_SUFFIX = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


def turn_input(message: Message | None, save_image: Callable[[bytes, str], str]) -> list[dict[str, Any]]:
    """The turn's input items: text joined in runs as the API path joins it
    (`_openai._joined`), each image as a ``localImage`` item naming a file
    `save_image(data, suffix)` wrote (Codex's own image input: the bytes never pass on a
    command line or through the JSON-RPC pipe)."""
    if message is None:
        return []
    return [{"type": "text", "text": part} if isinstance(part, str)
            else {"type": "localImage", "path": save_image(part.data, _SUFFIX[part.media_type])}
            for part in _joined(message.content)]


def tool_specs(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Our tools as Codex dynamic tools (the model calls them; we answer `item/tool/call`)."""
    return [{"type": "function", "name": t.name, "description": t.description, "inputSchema": dict(t.schema)}
            for t in tools]


def codex_effort(effort: str | None) -> str | None:
    """Our effort names in Codex's (which has no "max": its top is "xhigh")."""
    if effort is None:
        return None
    return "xhigh" if effort == "max" else effort


def thread_params(request: Request, cwd: str, model: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "cwd": cwd,
        "ephemeral": True,  # nothing saved in the user's Codex history
        "approvalPolicy": "never",
        "sandbox": "read-only",
        "dynamicTools": tool_specs(request.tools),
    }
    if request.system:
        params["baseInstructions"] = request.system
    if model:
        params["model"] = model
    return params


def tool_response(result: ToolResultBlock) -> dict[str, Any]:
    """The answer to an ``item/tool/call`` request: the result's text and images."""
    items: list[dict[str, Any]] = []
    for part in result.content:
        if isinstance(part, TextBlock):
            items.append({"type": "inputText", "text": part.text})
        elif isinstance(part, ImageBlock):
            items.append({"type": "inputImage", "imageUrl": _data_url(part)})
    if not items:
        items.append({"type": "inputText", "text": "(empty)"})
    return {"contentItems": items, "success": not result.is_error}


# --- what comes out --------------------------------------------------------------------


def usage_between(total: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> Usage:
    """The tokens used between two cumulative ``tokenUsage.total`` readings. Codex counts
    cached and cache-written input inside ``inputTokens``; ours excludes them."""

    def of(reading: Mapping[str, Any] | None, key: str) -> int:
        return int((reading or {}).get(key) or 0)

    def delta(key: str) -> int:
        return max(0, of(total, key) - of(before, key))

    cached, written = delta("cachedInputTokens"), delta("cacheWriteInputTokens")
    return Usage(input=max(0, delta("inputTokens") - cached - written), output=delta("outputTokens"),
                 cache_read=cached, cache_write=written)


_BY_INFO: dict[str, tuple[type[ModelError], str]] = {
    "usageLimitExceeded": (QuotaExceeded, "the ChatGPT plan's Codex usage limit is reached: wait until it resets "
                                          "or change the plan (no fallback to API billing)"),
    "sessionBudgetExceeded": (QuotaExceeded, "Codex's budget for this session is used up"),
    "rateLimitExceeded": (RateLimited, "Codex is rate limited; try again later"),
    "serverOverloaded": (Overloaded, "the Codex backend is overloaded; try again later"),
    "policyCapacityUnavailable": (Overloaded, "the Codex backend has no capacity now; try again later"),
    "flexUnavailable": (Overloaded, "the Codex backend has no capacity now; try again later"),
    "modelNotFound": (ModelNotFound, "Codex does not serve this model to this account; check --model"),
    "contextWindowExceeded": (BadRequest, "the view and turn do not fit the model's context window"),
    "badRequest": (BadRequest, "Codex's backend rejected the request"),
    "internalServerError": (ServerError, "the Codex backend failed on its side"),
    "cyberPolicy": (Refused, "the model declined to answer"),
    "bioPolicy": (Refused, "the model declined to answer"),
    "misalignmentPolicyViolation": (Refused, "the model declined to answer"),
}


def error_class(error: Mapping[str, Any]) -> tuple[type[ModelError], str]:
    """The `ModelError` class and advice for a Codex ``TurnError`` object (its `message`,
    `codexErrorInfo`, `additionalDetails`)."""
    info = error.get("codexErrorInfo")
    if isinstance(info, str):
        if info == "unauthorized":
            return NotLoggedIn, NOT_LOGGED_IN
        if info in _BY_INFO:
            return _BY_INFO[info]
    status = None
    if isinstance(info, Mapping) and info:
        inner = next(iter(info.values()))
        if isinstance(inner, Mapping):
            status = inner.get("httpStatusCode")
    if status in (401, 403):  # the ChatGPT login, not an API key (which _by_status means)
        return NotLoggedIn, NOT_LOGGED_IN
    if isinstance(status, int) and status >= 400:
        # the status alone: Codex's message is its own words, not an API error body
        cls = _by_status(status, "", "", "")
        return cls, _ADVICE.get(cls, "Codex failed")
    if isinstance(info, Mapping) and info:
        return Unreachable, "Codex could not reach its backend"
    return ProtocolError, "Codex failed"


_ADVICE: dict[type[ModelError], str] = {
    # the classes `_errors._by_status` gives a status, in Codex's words
    QuotaExceeded: _BY_INFO["usageLimitExceeded"][1],
    RateLimited: _BY_INFO["rateLimitExceeded"][1],
    ModelNotFound: _BY_INFO["modelNotFound"][1],
    Overloaded: _BY_INFO["serverOverloaded"][1],
    ModelTimeout: "the Codex backend did not answer in time; try again later",
    BadRequest: _BY_INFO["badRequest"][1],
    ServerError: _BY_INFO["internalServerError"][1],
}


def error_detail(error: Mapping[str, Any]) -> str:
    """Codex's own words for an error, in one line."""
    parts = [str(error.get("message") or "")]
    if error.get("additionalDetails"):
        parts.append(str(error["additionalDetails"]))
    return " ".join(" ".join(parts).split())[:300]


def login_problem(account: Mapping[str, Any], *, subscription: bool = True) -> str | None:
    """Why an ``account/read`` result cannot serve a subscription run (None: it can). The
    OpenAI provider needs a ChatGPT account, never an API key. A provider that needs no
    OpenAI login is another API and is refused, unless `subscription` is False: only
    the tests' connection, on its fake server's provider (`config_args`)."""
    if not account.get("requiresOpenaiAuth"):
        return None if not subscription else NOT_SUBSCRIPTION
    kind = (account.get("account") or {}).get("type")
    if kind is None:
        return NOT_LOGGED_IN
    if kind == "apiKey":
        return ("Codex is logged in with an API key, not a ChatGPT account: run `codex login` to use the "
                "subscription (API billing is never used by this connection)")
    return None


def parse_line(line: str) -> dict[str, Any]:
    """One JSON-RPC message from a line of the server's stdout."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise ProtocolError(f"codex app-server printed a line that is not JSON ({error.msg}): {line[:120]!r}",
                            provider="codex") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"codex app-server printed JSON that is not an object: {line[:120]!r}",
                            provider="codex")
    return value
