"""Claude Code as the model: `claude -p` in streaming JSON, on the person's subscription.

    claude -p --input-format stream-json --output-format stream-json --verbose
           --include-partial-messages --tools "" --mcp-config FOLDER/mcp.json --strict-mcp-config
           --allowedTools mcp__everchat__zoom,... --system-prompt-file FOLDER/system.txt
           --setting-sources "" --no-session-persistence [--model M] [--effort E]

The view and the turn go in as one stream-json user message on stdin (text and image
blocks: images never touch the command line), split into the same blocks as on the API
path. The view's cache mark goes with it (R23); Claude Code marks its two system blocks
and the conversation's last block itself on every call (the API takes four marks), so a
turn after a turn reads its view from the cache.
Claude Code writes its working folder into the first user message, before our view, so
every run works in one stable empty folder (`state_dir/work`); its files go in the
run's fresh temporary folder.

Its output is the Messages API stream wrapped in `stream_event` lines, then whole
`assistant` messages, then one `result`; `ClaudeDecoder` reads the stream events for
text as it comes and the `result` for how the call ended.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._anthropic import _EFFORT, _image, _usage  # the Messages API's shapes, as on the API path
from ._cli import CliConnection, Decoder, Finished, Run, ToolsAsked
from ._errors import NotLoggedIn, ProtocolError, QuotaExceeded, error_for_status
from ._types import (
    ImageBlock,
    Message,
    Request,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

__all__ = ["ClaudeCodeConnection", "ClaudeDecoder", "user_line", "TOOL_PREFIX"]

SERVER = "everchat"
TOOL_PREFIX = f"mcp__{SERVER}__"
MAX_MARKS = 1
"""Our marks in a run's message. Claude Code marks two system blocks and the last block of
the conversation itself, on every model call of a run, and leaves earlier marks in place:
a fourth of ours would break the API's limit of four once a tool result comes back."""
_MIN_BUDGET = 1024  # the API's smallest thinking budget


class ClaudeCodeConnection(CliConnection):
    """Claude models through the `claude` CLI and its login (see the module)."""

    provider = "claudecode"
    tool_prefix = TOOL_PREFIX
    announces_tool_turns = True

    def argv(self, run: Run, request: Request) -> list[str]:
        # The base has no hook before the start, so the two files the command line names are
        # written here, into the run's own fresh folder.
        command, *args = self.bridge_command(run)  # once: the command and its arguments agree
        config = {"mcpServers": {SERVER: {"type": "stdio", "command": command, "args": args}}}
        (run.folder / "mcp.json").write_text(json.dumps(config), encoding="utf-8")
        # an empty system prompt would bring back Claude Code's own long one
        (run.folder / "system.txt").write_text(request.system or "You are a helpful assistant.", encoding="utf-8")
        argv = [self.executable, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
                "--verbose", "--include-partial-messages", "--tools", "", "--strict-mcp-config",
                "--mcp-config", str(run.folder / "mcp.json"), "--system-prompt-file", str(run.folder / "system.txt"),
                "--setting-sources", "", "--no-session-persistence", "--permission-prompts", "none"]
        if request.tools:
            argv += ["--allowedTools", ",".join(TOOL_PREFIX + t.name for t in request.tools)]
        model = self.model_for(request)
        if model:
            argv += ["--model", model]
        effort = self.effort_for(request)
        if effort in _EFFORT:
            argv += ["--effort", _EFFORT[effort]]
        return argv

    def environment(self, run: Run, request: Request) -> dict[str, str]:
        env = super().environment(run, request)
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(request.max_tokens)
        env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"  # no update checks or telemetry
        env["DISABLE_AUTOUPDATER"] = "1"
        env["MAX_THINKING_TOKENS"] = str(_thinking_budget(self.effort_for(request), request.max_tokens))
        if request.label:  # the API path's call label; the person's own custom headers were scrubbed
            env["ANTHROPIC_CUSTOM_HEADERS"] = f"x-everchat-call: {request.label}"
        return env

    def working_folder(self, run: Run) -> Path:
        folder = self.state_dir / "work"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return folder

    def opening(self, run: Run, request: Request) -> bytes:
        return user_line(request).encode() + b"\n"

    def decoder(self, request: Request) -> Decoder:
        return ClaudeDecoder(self.provider, request.model)


def _thinking_budget(effort: str | None, max_tokens: int) -> int:
    """Thinking as on the API path: only with an effort other than "none" (Claude Code would
    think by default), and within half the output limit; none when that leaves no room for
    the API's 1,024-token minimum (a compaction's small limit)."""
    if effort in (None, "none") or max_tokens < 2 * _MIN_BUDGET:
        return 0
    return max_tokens // 2


# --- the request as one user message ----------------------------------------------------


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _blocks(message: Message) -> list[tuple[dict[str, Any], bool]]:
    """(content block, cache mark) pairs for one message of the conversation. User blocks go
    as they are (tool results as text); an assistant's answers and calls are labelled, since
    one user message carries the whole conversation."""
    out: list[tuple[dict[str, Any], bool]] = []
    if message.role == "assistant":
        for block in message.content:
            if isinstance(block, TextBlock):
                out.append((_text(f"<your_earlier_answer>\n{block.text}\n</your_earlier_answer>"), block.cache))
            elif isinstance(block, ToolUseBlock):
                out.append((_text(f"<your_tool_call name=\"{block.name}\">{json.dumps(dict(block.input))}"
                                  f"</your_tool_call>"), block.cache))
            elif isinstance(block, ThinkingBlock):
                continue  # thinking is not passed back
        return out
    for block in message.content:
        if isinstance(block, TextBlock):
            out.append((_text(block.text), block.cache))
        elif isinstance(block, ImageBlock):
            out.append((_image(block), block.cache))
        elif isinstance(block, ToolResultBlock):
            out.append((_text(f"<tool_result>\n{block.text or '(empty)'}\n</tool_result>"), False))
            out += [(_image(part), False) for part in block.content if isinstance(part, ImageBlock)]
            if block.cache and out:
                out[-1] = (out[-1][0], True)
    return out


STEADY_OPENING = "Everchat: the saved view and the request follow."
"""The first text block of every call. Claude Code's attribution block, sent before the
system prompt, ends its version with a hash of characters 4, 7 and 20 of the first user
text block; were that the view, the hash would change with the view's oldest line and the
prefix before the system prompt with it. A constant opening keeps it the same from call to
call (R23, R26)."""


def user_line(request: Request) -> str:
    """The stream-json line that carries the whole request: the steady opening, then its
    messages' blocks in order, with the request's first cache mark (R23: the view's; Claude
    Code adds the end's)."""
    pairs: list[tuple[dict[str, Any], bool]] = [({"type": "text", "text": STEADY_OPENING}, False)]
    for message in request.messages:
        pairs += _blocks(message)
    marked = [i for i, (_, mark) in enumerate(pairs) if mark]
    keep = set(marked[:MAX_MARKS])
    content = []
    for i, (block, _) in enumerate(pairs):
        if i in keep:
            block = {**block, "cache_control": {"type": "ephemeral"}}
        content.append(block)
    return json.dumps({"type": "user", "message": {"role": "user", "content": content}})


# --- the output ------------------------------------------------------------------------


class ClaudeDecoder(Decoder):
    """Claude Code's stream-json output → events. Text and thinking come from the
    `stream_event` deltas (as they arrive); `Usage` once per model message, then
    `ToolsAsked` when it stopped for tools; the `result` line ends the call. The tool calls
    themselves arrive through the MCP bridge, not from here."""

    def __init__(self, provider: str = "claudecode", model: str = "") -> None:
        self.provider = provider
        self.model = model
        self._usage = Usage()
        self._stop = ""
        self._failure: str = ""  # an api error an `assistant` line reported

    def _error(self, cls: type, text: str, status: int | None = None) -> Exception:
        return cls(text, provider=self.provider, model=self.model, status=status)

    def feed(self, line: str) -> Iterable[Any]:
        try:
            event = json.loads(line)
        except ValueError:
            return [self._error(ProtocolError, f"Claude Code wrote a line that is not JSON: {line[:120]!r}")]
        if not isinstance(event, dict):
            return [self._error(ProtocolError, f"Claude Code wrote an unexpected line: {line[:120]!r}")]
        kind = event.get("type")
        if kind == "stream_event":
            return self._stream(event.get("event") or {})
        if kind == "system" and event.get("subtype") == "init":
            return self._init(event)
        if kind == "assistant" and event.get("error"):
            self._failure = str(event.get("error"))
        if kind == "result":
            return self._result(event)
        return []

    def _init(self, event: dict[str, Any]) -> list[Any]:
        """Claude Code's first line, before any model request is answered: the credential it
        will use (anything but the subscription login is billed per token: "never a paid
        fallback" must hold whatever login or settings the person has), and whether our tool
        bridge started (else the model would answer without zoom and the run would have no
        lifeline)."""
        # Its documented values: "none" (a claude.ai login, a bearer token), else an API key
        # from ANTHROPIC_API_KEY (or CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR), an apiKeyHelper, or
        # "/login managed key" (a Console login). Absent on older CLIs: then nothing to check.
        source = event.get("apiKeySource")
        if source is not None and source != "none":
            return [self._error(NotLoggedIn, f"Claude Code is using an API key (apiKeySource={source}), not a "
                                             f"subscription login: every call would be billed per token. Run "
                                             f"`claude`, /logout and /login with the subscription account "
                                             f"(and remove any apiKeyHelper)")]
        for server in event.get("mcp_servers") or []:
            if isinstance(server, dict) and server.get("name") == SERVER and server.get("status") == "failed":
                return [self._error(ProtocolError, "Claude Code could not start Everchat's tool bridge "
                                                   "(python -m everchat.actors.models._mcp_bridge)")]
        return []

    def _stream(self, event: dict[str, Any]) -> list[Any]:
        kind = event.get("type")
        if kind == "message_start":
            self._usage, self._stop = _usage((event.get("message") or {}).get("usage"), Usage()), ""
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "text" and block.get("text"):
                return [TextDelta(block["text"])]
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                return [TextDelta(delta["text"])]
            if delta.get("type") == "thinking_delta" and delta.get("thinking"):
                return [ThinkingDelta(delta["thinking"])]
        elif kind == "message_delta":
            self._usage = _usage(event.get("usage"), self._usage)
            self._stop = (event.get("delta") or {}).get("stop_reason") or self._stop
        elif kind == "message_stop":
            return [self._usage, ToolsAsked()] if self._stop == "tool_use" else [self._usage]
        return []

    def _result(self, event: dict[str, Any]) -> list[Any]:
        if not event.get("is_error"):
            reason = str(event.get("stop_reason") or "end_turn")
            return [Finished(reason, incomplete=reason in ("max_tokens", "refusal"))]
        return [self.failure(str(event.get("result") or event.get("subtype") or ""), event.get("api_error_status"),
                             kind=str(event.get("api_error_type") or ""), code=str(event.get("api_error") or ""))]

    def failure(self, text: str, status: Any = None, *, kind: str = "", code: str = "") -> Exception:
        """The error for a failed result: its text, the HTTP status, error type and code Claude
        Code saw. Only the login and the plan's own limit read otherwise than on the API path."""
        status = status if isinstance(status, int) else None
        code = " ".join(part for part in (code, self._failure) if part)
        low = f"{text} {code}".lower()
        shown = " ".join(text.split())[:300]
        if "not logged in" in low or "authentication_failed" in low or "/login" in low or status in (401, 403):
            return self._error(NotLoggedIn, f"Claude Code is not logged in: run `claude` and /login with the "
                                            f"subscription account ({shown})", status)
        # The plan's limit ("You've hit your 5-hour limit · resets 3:45pm", api_error
        # usage_limit_reached) waits for its reset. A server's rate limit is a 429 too, and its
        # words even say "(not your usage limit)": that one is RateLimited, retryable.
        if "usage_limit" in code or "limit" in low and ("hit your" in low or "resets" in low):
            return self._error(QuotaExceeded, f"the subscription's usage limit is reached; wait for it to reset "
                                              f"({shown})", status)
        error = error_for_status(status, shown, provider=self.provider, model=self.model, kind=kind, code=code)
        if type(error) is ProtocolError:  # nothing the API path knows (a max-turns stop, …): its words
            return self._error(ProtocolError, f"Claude Code failed: {shown or 'no reason given'}", status)
        return error

    def end(self, returncode: int | None, stderr: str) -> Iterable[Any]:
        tail = " ".join(stderr.split())[-300:]
        if tail and ("not logged in" in tail.lower() or "/login" in tail.lower()):
            return [self.failure(tail)]
        return ()

