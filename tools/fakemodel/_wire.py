"""What the three wire formats share: the answer being sent and server-sent events."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ._cache import CacheUsage
from ._replies import Block, Text, Thinking, ToolCall, split_text
from ._tokens import count_tokens

__all__ = ["Answer", "SseEvent", "compact", "garbage_event"]


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event. `chunk` marks a content piece: per-chunk latency comes before it."""

    name: str | None
    data: str
    chunk: bool = False

    def encode(self) -> bytes:
        head = f"event: {self.name}\n" if self.name else ""
        return f"{head}data: {self.data}\n\n".encode("utf-8")


def garbage_event(name: str | None) -> SseEvent:
    """An event whose data is cut-off JSON: a well-formed SSE frame no JSON parser accepts."""
    return SseEvent(name, '{"type": "' + (name or "chunk") + '", "delta": {"text": "and then th')


@dataclass(frozen=True)
class Answer:
    """Everything a wire format needs to write one reply."""

    exchange_id: int
    model: str
    request: Mapping[str, Any]  # the parsed JSON body
    blocks: tuple[Block, ...]
    stop_reason: str | None  # as scripted; None: derived
    truncated: bool  # the request's token limit cut the reply
    usage: CacheUsage
    output_tokens: int
    created: int  # unix seconds
    chunk_bytes: int  # stream pieces of at most this many bytes, unless a block says

    def stop(self) -> str:
        """"end_turn", "tool_use", "max_tokens", or the scripted stop reason."""
        if self.stop_reason:
            return self.stop_reason
        if self.truncated:
            return "max_tokens"
        if any(isinstance(b, ToolCall) for b in self.blocks):
            return "tool_use"
        return "end_turn"

    def pieces(self, block: Block) -> list[str]:
        """The stream pieces of a block's text (for a tool call: of its arguments' JSON)."""
        if block.chunks is not None:
            return list(block.chunks)
        if isinstance(block, Text):
            return split_text(block.text, self.chunk_bytes)
        if isinstance(block, Thinking):
            return split_text(block.thinking, self.chunk_bytes)
        return split_text(block.arguments(), self.chunk_bytes)

    def call_id(self, index: int, block: ToolCall, prefix: str) -> str:
        return block.id or f"{prefix}fake{self.exchange_id:06d}_{index}"

    def thinking_tokens(self) -> int:
        return sum(count_tokens(b.thinking) for b in self.blocks if isinstance(b, Thinking))
