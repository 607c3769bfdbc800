"""What every model connection takes and gives: requests, content blocks, stream events.

A `Request` is vendor-neutral: the system prompt as one string, tool specs, and
user/assistant messages made of blocks. A block with `cache=True` carries a cache
mark (R23); the Anthropic backend sends it as an ephemeral `cache_control`, the
OpenAI backends (whose cache needs no marks) ignore it. `stream(request)` yields
`TextDelta`, `ThinkingDelta`, `ToolCall`, then one `Usage` and one `Stop`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = [
    "Block",
    "Connection",
    "Event",
    "ImageBlock",
    "MAX_CACHE_MARKS",
    "Message",
    "Reply",
    "Request",
    "Stop",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "ToolCall",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "Usage",
    "EFFORTS",
    "IMAGE_TYPES",
    "approx_tokens",
]

MAX_CACHE_MARKS = 4
"""Anthropic accepts at most four cache marks in one request; R23 uses three."""

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""Reasoning efforts a request may name; each backend maps them to its own API."""

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


# --- content blocks ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str
    cache: bool = False  # a cache mark at the end of this block (R23)

    def __post_init__(self) -> None:
        if not self.text:
            raise ValueError("a text block is never empty (the APIs refuse empty text)")


@dataclass(frozen=True, slots=True)
class ImageBlock:
    data: bytes
    media_type: str  # image/png, image/jpeg, image/gif or image/webp (R9)
    cache: bool = False

    def __post_init__(self) -> None:
        if self.media_type not in IMAGE_TYPES:
            raise ValueError(f"an image is one of {', '.join(IMAGE_TYPES)}, not {self.media_type!r}")

    def __repr__(self) -> str:
        return f"ImageBlock({self.media_type}, {len(self.data)} bytes, cache={self.cache})"


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    """An assistant's tool call, sent back to the model in the next request of a tool loop."""

    id: str
    name: str
    input: Mapping[str, Any]
    cache: bool = False


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    """The answer to a `ToolUseBlock` (in a user message): text and images."""

    tool_use_id: str
    content: tuple[TextBlock | ImageBlock, ...]
    is_error: bool = False
    cache: bool = False

    @classmethod
    def of_text(cls, tool_use_id: str, text: str, is_error: bool = False, cache: bool = False) -> ToolResultBlock:
        return cls(tool_use_id, (TextBlock(text or "(empty)"),), is_error, cache)

    @property
    def text(self) -> str:
        return "\n".join(part.text for part in self.content if isinstance(part, TextBlock))


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """An assistant's thinking, passed back within one turn's tool loop (Anthropic needs its
    signature then). Never logged (R6, R48)."""

    text: str
    signature: str = ""
    cache: bool = False


Block = Union[TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock]


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # "user" or "assistant"
    content: tuple[Block, ...]

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise ValueError(f"a message's role is 'user' or 'assistant', not {self.role!r}")
        if not self.content:
            raise ValueError("a message has at least one block")
        object.__setattr__(self, "content", tuple(self.content))

    @classmethod
    def user(cls, *blocks: Block | str) -> Message:
        return cls("user", tuple(TextBlock(b) if isinstance(b, str) else b for b in blocks))

    @classmethod
    def assistant(cls, *blocks: Block | str) -> Message:
        return cls("assistant", tuple(TextBlock(b) if isinstance(b, str) else b for b in blocks))

    @property
    def text(self) -> str:
        """The text blocks joined (tool results' text included)."""
        parts = []
        for block in self.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolResultBlock):
                parts.append(block.text)
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: its name, what it does, and its input's JSON schema."""

    name: str
    description: str
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class Request:
    """One model call. `cache_system` puts a cache mark at the end of the system prompt
    (R23); blocks with `cache=True` carry the others. `effort` is None (the model's own
    default) or one of `EFFORTS`. `timeout` is the whole call's limit in seconds.
    `label` (e.g. "turn", "compaction") goes out as the `x-everchat-call` header.
    `priority` orders calls waiting for a shared CLI slot (subscription connections):
    0 replies, 1 leaf summaries, 2 merges; HTTP backends ignore it."""

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    cache_system: bool = True
    max_tokens: int = 8192
    effort: str | None = None
    timeout: float = 600.0
    label: str = ""
    priority: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "tools", tuple(self.tools))
        if not self.messages:
            raise ValueError("a request has at least one message")
        if self.messages[0].role != "user":
            raise ValueError("a request's first message is the user's")
        if self.effort is not None and self.effort not in EFFORTS:
            raise ValueError(f"effort is one of {', '.join(EFFORTS)}, not {self.effort!r}")
        if self.max_tokens < 1:
            raise ValueError("max_tokens is at least 1")
        if not self.timeout > 0:
            raise ValueError("timeout is positive")
        if self.marks() > MAX_CACHE_MARKS:
            raise ValueError(f"at most {MAX_CACHE_MARKS} cache marks in a request, not {self.marks()}")

    def marks(self) -> int:
        """How many cache marks the request carries."""
        count = 1 if self.cache_system and self.system else 0
        for message in self.messages:
            count += sum(1 for block in message.content if block.cache)
        return count


# --- stream events -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A piece of thinking. The last event of a thinking block may carry only its
    `signature` (Anthropic), for the turn's next request."""

    text: str
    signature: str = ""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete tool call: its arguments parsed into a dict."""

    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one call. `input` excludes cache reads and writes, so the prompt was
    `input + cache_read + cache_write` tokens (OpenAI reports no writes)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def prompt(self) -> int:
        return self.input + self.cache_read + self.cache_write


@dataclass(frozen=True, slots=True)
class Stop:
    """The end of a call. `reason`: "end_turn", "tool_use", "max_tokens", "refusal",
    "pause_turn" or "stop_sequence". `incomplete`: the answer was cut short."""

    reason: str
    incomplete: bool = False


Event = Union[TextDelta, ThinkingDelta, ToolCall, Usage, Stop]


@dataclass
class Reply:
    """A whole answer, as `complete` gathers it from the stream."""

    text: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop: Stop = field(default_factory=lambda: Stop("end_turn"))
    blocks: list[Block] = field(default_factory=list)  # the assistant message, for a tool loop

    def message(self) -> Message | None:
        """The assistant message to send back in the next request (None when empty)."""
        return Message("assistant", tuple(self.blocks)) if self.blocks else None


class _Gatherer:
    """Folds stream events into a `Reply`, keeping blocks in the order they came."""

    def __init__(self) -> None:
        self.reply = Reply()
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._signature = ""
        self._open: str | None = None  # "text" or "thinking"

    def _close(self) -> None:
        if self._open == "text" and self._text:
            text = "".join(self._text)
            if text:
                self.reply.blocks.append(TextBlock(text))
        elif self._open == "thinking":
            text = "".join(self._thinking)
            if text or self._signature:
                self.reply.blocks.append(ThinkingBlock(text, self._signature))
        self._text, self._thinking, self._signature, self._open = [], [], "", None

    def add(self, event: Event) -> None:
        reply = self.reply
        if isinstance(event, TextDelta):
            if self._open != "text":
                self._close()
                self._open = "text"
            self._text.append(event.text)
            reply.text += event.text
        elif isinstance(event, ThinkingDelta):
            if self._open != "thinking" or (self._signature and event.text):
                self._close()
                self._open = "thinking"
            self._thinking.append(event.text)
            if event.signature:
                self._signature = event.signature
            reply.thinking += event.text
        elif isinstance(event, ToolCall):
            self._close()
            reply.tool_calls.append(event)
            reply.blocks.append(ToolUseBlock(event.id, event.name, dict(event.input)))
        elif isinstance(event, Usage):
            reply.usage = event
        elif isinstance(event, Stop):
            self._close()
            reply.stop = event


class Connection:
    """One model endpoint (a vendor, a key, a base URL). Subclasses implement `stream`.

    `stream(request)` is a generator: closing it early (a stopped turn, R37) closes
    the HTTP stream. An error raises a `ModelError` after the events already
    yielded, so the caller keeps what arrived (R37: marked incomplete). A
    connection never retries with another vendor or model.
    """

    provider = "?"

    def stream(self, request: Request) -> Iterator[Event]:  # pragma: no cover - abstract
        raise NotImplementedError

    def complete(self, request: Request) -> Reply:
        """The whole reply of one call."""
        gather = _Gatherer()
        for event in self.stream(request):
            gather.add(event)
        gather._close()
        return gather.reply

    def close(self) -> None:
        """Release the HTTP client."""

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def approx_tokens(text: str) -> int:
    """A rough token count (4 bytes a token), for backends that count nothing."""
    return math.ceil(len(text.encode()) / 4)

