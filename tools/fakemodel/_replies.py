"""What the fake model answers: replies, faults, latency, and the request a rule sees.

A reply is a `Reply` of `Text`, `Thinking` and `ToolCall` blocks. Anything a script
or a rule hands over is turned into one by `as_reply`: a plain string is one text
block, a lone block is a one-block reply. A `Fault` stands in for a reply and makes
the request fail in one of the ways real servers fail (see each class).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from ._tokens import BYTES_PER_TOKEN, count_tokens

__all__ = [
    "Block",
    "DropStream",
    "Fault",
    "Gate",
    "GarbageEvent",
    "Latency",
    "ModelNotFound",
    "ModelRequest",
    "Overloaded",
    "QuotaExceeded",
    "RateLimited",
    "Reply",
    "ServerError",
    "StreamError",
    "Text",
    "Thinking",
    "ToolCall",
    "UsageLimit",
    "Rule",
    "as_reply",
    "fit",
    "output_tokens",
    "split_text",
]


@dataclass(frozen=True)
class Text:
    """A text block. `chunks`, when given, are the exact stream pieces (joined they must be `text`)."""

    text: str
    chunks: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Thinking:
    """A thinking block (Anthropic thinking, OpenAI reasoning summary, chat `reasoning_content`).

    The signature defaults to a digest of the text, so replies stay deterministic.
    """

    thinking: str
    signature: str | None = None
    chunks: tuple[str, ...] | None = None

    def signed(self) -> str:
        if self.signature is not None:
            return self.signature
        return "sig-" + hashlib.sha256(self.thinking.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class ToolCall:
    """A tool call with a JSON object input. `id` defaults to one made from the exchange id.

    `chunks`, when given, are the pieces of the arguments' JSON text as streamed.
    """

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    chunks: tuple[str, ...] | None = None

    def arguments(self) -> str:
        if self.chunks is not None:
            return "".join(self.chunks)
        return json.dumps(dict(self.input), separators=(",", ":"), ensure_ascii=False)


Block = Union[Text, Thinking, ToolCall]


class Gate:
    """Holds replies before their first byte until `open()` is called (from any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def open(self) -> None:
        with self._lock:
            self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    def is_open(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until the gate opens (False on timeout)."""
        return self._event.wait(timeout)

    async def passed(self) -> None:
        """Wait, in an event loop, until the gate opens."""
        with self._lock:
            if self._event.is_set():
                return
            event = asyncio.Event()
            self._waiters.append((asyncio.get_running_loop(), event))
        await event.wait()

    def __repr__(self) -> str:
        return f"Gate(open={self.is_open()})"


class Reply:
    """A scripted answer: blocks in order, plus optional overrides.

    `stop_reason` None means derived: "tool_use" when a block is a `ToolCall`, else
    "end_turn" (or "max_tokens" when the request's limit cut the reply). `latency`
    replaces the server's latency for this reply. `gate` holds the first byte until
    the gate opens.
    """

    __slots__ = ("blocks", "stop_reason", "latency", "gate")

    def __init__(
        self,
        *blocks: Block | str,
        stop_reason: str | None = None,
        latency: Latency | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.blocks: tuple[Block, ...] = tuple(Text(b) if isinstance(b, str) else b for b in blocks)
        for block in self.blocks:
            if not isinstance(block, (Text, Thinking, ToolCall)):
                raise TypeError(f"a Reply holds Text, Thinking or ToolCall blocks, not {block!r}")
        self.stop_reason = stop_reason
        self.latency = latency
        self.gate = gate

    def __repr__(self) -> str:
        return f"Reply({', '.join(map(repr, self.blocks))}, stop_reason={self.stop_reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reply) and (self.blocks, self.stop_reason) == (other.blocks, other.stop_reason)

    def __hash__(self) -> int:
        return hash((self.blocks, self.stop_reason))

    def text(self) -> str:
        """The text blocks joined."""
        return "".join(b.text for b in self.blocks if isinstance(b, Text))


@dataclass(frozen=True)
class Latency:
    """Delays in seconds: before the first byte, and before each streamed chunk.

    Each is a number or a (low, high) range drawn uniformly with the server's seeded
    random generator. A non-streaming reply waits first_byte plus one per_chunk per
    chunk the stream would have had.
    """

    first_byte: float | tuple[float, float] = 0.0
    per_chunk: float | tuple[float, float] = 0.0

    @classmethod
    def around(cls, first_byte: float, spread: float, per_chunk: float = 0.0) -> Latency:
        """`first_byte` ± `spread`, e.g. ``Latency.around(0.2, 0.05)`` for 200 ms ± 50 ms."""
        return cls(first_byte=(first_byte - spread, first_byte + spread), per_chunk=per_chunk)


class Fault:
    """A failure in place of a reply. Subclasses say what the client sees."""

    name = "fault"

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self))


class RateLimited(Fault):
    """HTTP 429 rate limit (Anthropic ``rate_limit_error``, OpenAI ``rate_limit_exceeded``) with retry-after."""

    name = "rate_limited"

    def __init__(self, retry_after: float = 1.0) -> None:
        self.retry_after = retry_after


class ServerError(Fault):
    """HTTP 500 (Anthropic ``api_error``, OpenAI ``server_error``)."""

    name = "server_error"


class Overloaded(Fault):
    """Anthropic: HTTP 529 ``overloaded_error``. OpenAI: HTTP 503 ``server_error`` (engine overloaded)."""

    name = "overloaded"


class ModelNotFound(Fault):
    """HTTP 404 for the request's model (Anthropic ``not_found_error``, OpenAI ``model_not_found``)."""

    name = "model_not_found"


class QuotaExceeded(Fault):
    """Out of credit. Anthropic: HTTP 402 ``billing_error``. OpenAI: HTTP 429 ``insufficient_quota``."""

    name = "quota_exceeded"


class UsageLimit(Fault):
    """A subscription plan's usage limit (what Claude Code and Codex meet on a Pro/Max or
    ChatGPT plan). Anthropic: HTTP 429 ``rate_limit_error`` with the unified rate-limit
    headers (``anthropic-ratelimit-unified-status: rejected`` and the reset time, epoch
    seconds, `reset_in` from now). OpenAI: HTTP 429 ``usage_limit_reached``."""

    name = "usage_limit"

    def __init__(self, reset_in: float = 3600.0) -> None:
        self.reset_in = reset_in


class _MidStream(Fault):
    """A fault that strikes after `after_events` events of a streamed `reply` (None: the rule's reply)."""

    def __init__(self, after_events: int = 2, reply: Reply | str | None = None) -> None:
        self.after_events = after_events
        self.reply = reply


class DropStream(_MidStream):
    """The connection closes mid-stream (after `after_events` events), or, not streaming,
    before any response is sent."""

    name = "dropped_stream"


class GarbageEvent(_MidStream):
    """A stream event whose data is not JSON after `after_events` events; not streaming,
    a 200 response whose body is not JSON."""

    name = "garbage_event"


class StreamError(_MidStream):
    """An error event inside a 200 stream after `after_events` events (Anthropic ``event: error``
    with an overloaded_error, Responses ``error`` event, Chat a chunk with an ``error``);
    not streaming, the same as `Overloaded`."""

    name = "stream_error"


def as_reply(value: Any) -> Reply | Fault:
    """A script item or a rule's result as a Reply or a Fault."""
    if isinstance(value, (Reply, Fault)):
        return value
    if isinstance(value, (str, Text, Thinking, ToolCall)):
        return Reply(value)
    raise TypeError(f"a reply is a Reply, a Fault, a block or a string, not {value!r}")


def split_text(text: str, max_bytes: int) -> list[str]:
    """`text` in pieces of at most `max_bytes` UTF-8 bytes, cut at character boundaries.

    A character longer than `max_bytes` is a piece of its own. "" gives [].
    """
    pieces: list[str] = []
    start = size = 0
    for i, ch in enumerate(text):
        n = len(ch.encode("utf-8"))
        if size and size + n > max_bytes:
            pieces.append(text[start:i])
            start, size = i, 0
        size += n
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def _block_tokens(block: Block) -> int:
    if isinstance(block, Text):
        return count_tokens(block.text)
    if isinstance(block, Thinking):
        return count_tokens(block.thinking)
    return count_tokens(block.name + block.arguments())


def output_tokens(blocks: tuple[Block, ...]) -> int:
    """Output tokens of a reply's blocks, by the same tokenizer as the input."""
    return sum(_block_tokens(b) for b in blocks)


def _cut(text: str, max_bytes: int) -> str:
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


def fit(reply: Reply, max_tokens: int | None) -> tuple[tuple[Block, ...], bool]:
    """The reply's blocks cut to `max_tokens` output tokens, and whether anything was cut.

    Text and thinking are cut at a character boundary; a tool call that does not fit
    whole is dropped, and so is everything after a cut.
    """
    if max_tokens is None:
        return reply.blocks, False
    left = max_tokens
    kept: list[Block] = []
    for block in reply.blocks:
        need = _block_tokens(block)
        if need <= left:
            kept.append(block)
            left -= need
            continue
        if isinstance(block, Text) and left > 0:
            kept.append(Text(_cut(block.text, left * BYTES_PER_TOKEN)))
        elif isinstance(block, Thinking) and left > 0:
            kept.append(Thinking(_cut(block.thinking, left * BYTES_PER_TOKEN), block.signature))
        return tuple(kept), True
    return tuple(kept), False


@dataclass(frozen=True)
class ModelRequest:
    """A parsed request, as a rule sees it.

    `api` is "anthropic", "responses" or "chat". `messages` is every message as
    (role, text) with tool results' text included and tool calls left out;
    `system` is the system prompt or instructions as text.
    """

    api: str
    exchange_id: int
    model: str
    stream: bool
    body: Mapping[str, Any]
    system: str
    messages: tuple[tuple[str, str], ...]
    tool_names: tuple[str, ...]
    max_tokens: int | None

    @property
    def last_user_text(self) -> str:
        """The text of the last user message ("" if none)."""
        for role, text in reversed(self.messages):
            if role == "user":
                return text
        return ""


Rule = Callable[[ModelRequest], Any]
