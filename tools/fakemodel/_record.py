"""What the server remembers of each request, and sums over them."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Iterable

from ._cache import CacheUsage

__all__ = ["CacheStats", "Exchange", "SECRET_HEADERS", "redact"]

SECRET_HEADERS = frozenset({"x-api-key", "authorization", "proxy-authorization", "cookie", "anthropic-api-key",
                            "api-key", "openai-api-key"})


def redact(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers with secrets replaced by "<redacted>" (names lower-cased)."""
    return {k.lower(): ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in headers}


@dataclass
class Exchange:
    """One request and what became of it.

    Times: `arrived` is the injected clock at arrival (the cache's time);
    `started`, `first_byte` and `ended` are `time.monotonic()` (wall time, for
    concurrency: who overlapped whom); `chunks_sent` holds, for a streamed reply, the
    `time.monotonic()` at which each content piece (a text, thinking or tool-input delta)
    was handed to the socket, in order (system-wide on Linux: another process's clock
    compares with it). `outcome` is "ok", "http <status>" for an
    error answer, or the fault's name ("dropped_stream", "garbage_event",
    "stream_error"); "open" while the request runs.
    """

    id: int
    api: str  # "anthropic", "responses", "chat"; or "count_tokens", "anthropic_models", "models"
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    arrived: float
    started: float
    model: str | None = None
    stream: bool = False
    fault: str | None = None
    reply: Any = None  # the Reply sent, after any cut to the token limit
    cache: CacheUsage | None = None
    output_tokens: int = 0
    status: int | None = None
    outcome: str = "open"
    first_byte: float | None = None
    ended: float | None = None
    chunks_sent: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def is_model_call(self) -> bool:
        return self.api in ("anthropic", "responses", "chat")

    def images(self) -> list[tuple[str, bytes]]:
        """(media type, bytes) of every image the request carried, in order: Anthropic image
        blocks (tool results' too) and OpenAI data-URL images (Responses `input_image`, Chat
        `image_url`). Empty once the body was dropped (`record_bodies=False`)."""
        found: list[tuple[str, bytes]] = []

        def walk(node: Any) -> None:
            if isinstance(node, list):
                for item in node:
                    walk(item)
                return
            if not isinstance(node, dict):
                return
            source = node.get("source")
            if node.get("type") == "image" and isinstance(source, dict) and source.get("type") == "base64":
                found.append((str(source.get("media_type", "")), base64.b64decode(source.get("data", ""))))
                return
            url = node.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
                head, data = url[5:].split(";base64,", 1)
                found.append((head, base64.b64decode(data)))
                return
            for value in node.values():
                walk(value)

        walk(self.body)
        return found

    def overlaps(self, other: Exchange) -> bool:
        """Whether the two were in flight at the same time (wall time)."""
        end_a = self.ended if self.ended is not None else float("inf")
        end_b = other.ended if other.ended is not None else float("inf")
        return self.started < end_b and other.started < end_a


@dataclass(frozen=True)
class CacheStats:
    """Input accounting summed over requests (tokens).

    `read_share` is Anthropic's cache read share, ``cache_read / total`` where total
    is ``input + cache_read + cache_write``; `perfect_share` the same for the perfect
    prefix cache; `of_perfect` is ``cache_read / perfect_read`` (1.0 when a perfect
    cache could read nothing either).
    """

    requests: int = 0
    total: int = 0
    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    perfect_read: int = 0
    output_tokens: int = 0
    duplicate_writers: int = 0  # requests that wrote a prefix another in-flight request was writing

    @classmethod
    def of(cls, exchanges: Iterable[Exchange]) -> CacheStats:
        rows = [e for e in exchanges if e.cache is not None]
        return cls(
            requests=len(rows),
            total=sum(e.cache.total for e in rows),
            input_tokens=sum(e.cache.input_tokens for e in rows),
            cache_read=sum(e.cache.cache_read for e in rows),
            cache_write=sum(e.cache.cache_write for e in rows),
            perfect_read=sum(e.cache.perfect_read for e in rows),
            output_tokens=sum(e.output_tokens for e in rows),
            duplicate_writers=sum(1 for e in rows if e.cache.duplicate_of),
        )

    @property
    def read_share(self) -> float:
        return self.cache_read / self.total if self.total else 0.0

    @property
    def perfect_share(self) -> float:
        return self.perfect_read / self.total if self.total else 0.0

    @property
    def of_perfect(self) -> float:
        return self.cache_read / self.perfect_read if self.perfect_read else 1.0
