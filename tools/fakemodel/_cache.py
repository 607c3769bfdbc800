"""A model of Anthropic's prompt cache, and of a perfect prefix cache to compare it with.

`PromptCache` follows the documented rules:

- Entries are written only at cache marks (``cache_control`` on a tool, a system
  block or a message content block; a top-level mark means the last block). An
  entry is the whole prefix through its marked block, in prefix order tools ->
  system -> messages, and only if that prefix is at least `min_tokens` long.
- A request reads the longest live entry that ends at one of its marks or at a
  block at most `lookback` (20) blocks before a mark.
- An entry lives `ttl` seconds (300, or 3600 for a ``"ttl": "1h"`` mark) from its
  last use; a read refreshes the entry read and every live entry that is a prefix
  of it. Time comes from the injected clock.
- Entries become readable only when the writing response starts (its first byte),
  as Anthropic documents; a request that fails before that writes nothing. A
  request that writes a prefix another in-flight request is already writing is
  recorded as a duplicate writer (R23's "one writer per new prefix").

Usage per request, as Anthropic reports it: ``cache_read_input_tokens`` is the
prefix read, ``cache_creation_input_tokens`` runs from there to the last mark that
is written, and ``input_tokens`` is the rest (after the last mark, or everything
not read when nothing is written).

`PerfectPrefix` remembers every block-boundary prefix any earlier request sent
(per model, forever, no marks needed) and reports the longest one the new request
starts with: the most any prefix cache could have read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ._tokens import PromptBlock

__all__ = ["CacheUsage", "Clock", "ManualClock", "PerfectPrefix", "PromptCache", "monotonic_clock"]

Clock = Callable[[], float]


class ManualClock:
    """A clock that moves only when told: ``clock.advance(301)``. Thread-safe enough
    for tests (a float assignment)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def __call__(self) -> float:
        return self._now

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._now += seconds
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now})"


@dataclass(frozen=True)
class CacheUsage:
    """One request's input accounting. All counts in tokens of the fake tokenizer.

    ``total == input_tokens + cache_read + cache_write``. `read_end` is the index of
    the last block read (-1: none); `written` are the indices of marked blocks whose
    prefixes this request writes; `duplicate_of` are ids of in-flight requests that
    were already writing one of those prefixes.
    """

    total: int
    input_tokens: int
    cache_read: int
    cache_write: int
    cache_write_1h: int
    perfect_read: int
    blocks: int
    marks: tuple[int, ...]
    read_end: int
    written: tuple[int, ...]
    duplicate_of: tuple[int, ...] = ()

    @classmethod
    def uncached(cls, total: int, blocks: int, perfect_read: int = 0, cache_read: int = 0) -> CacheUsage:
        """Usage with no marks (OpenAI), where `cache_read` is the automatic cache's read."""
        return cls(total, total - cache_read, cache_read, 0, 0, perfect_read, blocks, (), -1, ())


@dataclass
class _Entry:
    tokens: int
    ttl: float
    last_used: float
    writer: int


class PromptCache:
    """Anthropic's prompt cache, by marks. Not thread-safe: the server calls it under its lock."""

    def __init__(self, clock: Clock, *, ttl: float = 300.0, long_ttl: float = 3600.0,
                 min_tokens: int = 1024, lookback: int = 20) -> None:
        self.clock = clock
        self.ttl = ttl
        self.long_ttl = long_ttl
        self.min_tokens = min_tokens
        self.lookback = lookback
        self._entries: dict[bytes, _Entry] = {}
        self._pending: dict[int, list[tuple[bytes, int, float]]] = {}  # exchange -> writes
        self._writing: dict[bytes, list[int]] = {}  # digest -> in-flight writers

    def __len__(self) -> int:
        return len(self._entries)

    def _live(self, digest: bytes, now: float) -> _Entry | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if now - entry.last_used >= entry.ttl:
            del self._entries[digest]
            return None
        return entry

    def lookup(self, exchange: int, blocks: Sequence[PromptBlock], perfect_read: int = 0) -> CacheUsage:
        """Account for a request arriving now; its writes wait for `commit(exchange)`."""
        now = self.clock()
        ends: list[int] = []  # ends[j]: tokens through block j
        running = 0
        for block in blocks:
            running += block.tokens
            ends.append(running)
        total = running
        marks = tuple(j for j, b in enumerate(blocks) if b.mark)

        read_end = -1
        for m in marks:
            for j in range(m, max(-1, m - self.lookback - 1), -1):
                if j <= read_end:
                    break
                if self._live(blocks[j].digest, now) is not None:
                    read_end = j
                    break
        if read_end >= 0:  # refresh what was read, and every live entry it contains
            for j in range(read_end + 1):
                entry = self._live(blocks[j].digest, now)
                if entry is not None:
                    entry.last_used = now

        written = tuple(m for m in marks if m > read_end and ends[m] >= self.min_tokens)
        duplicates: set[int] = set()
        writes: list[tuple[bytes, int, float]] = []
        for m in written:
            digest = blocks[m].digest
            ttl = self.long_ttl if blocks[m].mark == "1h" else self.ttl
            writes.append((digest, ends[m], ttl))
            duplicates.update(w for w in self._writing.get(digest, ()) if w != exchange)
            self._writing.setdefault(digest, []).append(exchange)
        if writes:
            self._pending[exchange] = writes

        cache_read = ends[read_end] if read_end >= 0 else 0
        cache_write = ends[written[-1]] - cache_read if written else 0
        long_end = max((m for m in written if blocks[m].mark == "1h"), default=None)
        cache_write_1h = ends[long_end] - cache_read if long_end is not None else 0
        return CacheUsage(
            total=total,
            input_tokens=total - cache_read - cache_write,
            cache_read=cache_read,
            cache_write=cache_write,
            cache_write_1h=cache_write_1h,
            perfect_read=perfect_read,
            blocks=len(blocks),
            marks=marks,
            read_end=read_end,
            written=written,
            duplicate_of=tuple(sorted(duplicates)),
        )

    def commit(self, exchange: int) -> None:
        """The exchange's response started: its writes become readable entries."""
        now = self.clock()
        for digest, tokens, ttl in self._pending.pop(exchange, ()):
            self._stop_writing(digest, exchange)
            entry = self._live(digest, now)
            if entry is None:
                self._entries[digest] = _Entry(tokens, ttl, now, exchange)
            else:
                entry.last_used = now

    def abandon(self, exchange: int) -> None:
        """The exchange failed before its response started: it writes nothing."""
        for digest, _, _ in self._pending.pop(exchange, ()):
            self._stop_writing(digest, exchange)

    def _stop_writing(self, digest: bytes, exchange: int) -> None:
        writers = self._writing.get(digest)
        if writers and exchange in writers:
            writers.remove(exchange)
            if not writers:
                del self._writing[digest]

    def clear(self) -> None:
        self._entries.clear()
        self._pending.clear()
        self._writing.clear()


class PerfectPrefix:
    """Every block-boundary prefix ever sent; reads the longest one a request starts with."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    def read(self, blocks: Sequence[PromptBlock]) -> int:
        """Tokens of the longest earlier-sent prefix of `blocks`; then remembers `blocks`."""
        running = best = 0
        for block in blocks:
            running += block.tokens
            if block.digest in self._seen:
                best = running
            else:
                break  # a later prefix contains this one, so it cannot have been sent
        self._seen.update(b.digest for b in blocks)
        return best

    def clear(self) -> None:
        self._seen.clear()


def monotonic_clock() -> float:
    """The default clock: `time.monotonic`."""
    return time.monotonic()
