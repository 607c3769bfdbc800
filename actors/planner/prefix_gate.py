"""R23's "one writer per new prefix" for the compactor pool, as a pure core.

A compaction request marks up to four cache prefixes: R23's three (the system
prompt, the last whole 4-line block of its context, its own end) and our fourth,
the context's closing block (its last 1-3 lines and `</chat>`, see
`Compaction`), so compactions started on the same cut context (R27) read it
whole. The end is unique to the call; the others are shared. A prefix is
*written* (a cache entry) once the response of the call that sent it starts;
until then, a second call that marks the same prefix would write a second copy
of it. R23 says that call waits.

Waiting holds a pool slot for up to one first-byte latency, and during a bulk
import consecutive merges often share their context's last whole block, so the
gate offers three policies (the planner actor reads `EVERCHAT_PREFIX_GATE`):

- ``wait``: R23 to the letter. A job whose view prefix, closing prefix (or the
  system prompt) is being written is held until that call's response starts
  (or it ends).
- ``reread`` (the default): never hold for the view or closing prefix: the job
  moves its view mark back to the newest of its block prefixes already written,
  and drops its closing mark, so it only reads there and writes no copy.
  (Billing is the same as writing the copy, since the end mark writes the rest
  of the request anyway; what it keeps is "one writer", without idling a pool
  slot.)
- ``auto``: hold only when it pays and is short: the new part of
  the prefix (from the newest written block prefix to the marked one) is at least
  `large` bytes, so reading it instead of writing a copy saves real money, and
  the writer's response is expected within `patience` of a first-byte latency
  (measured: hand-out to response start, averaged). Otherwise move the mark back
  as in ``reread``. A held job is handed out as soon as the writer's response
  starts.
- ``off``: no gate; every job marks its last whole block and its closing block
  (for comparison).

The system prompt's prefix is always held for (its mark is not movable): that
wait happens once per chat start or after an idle cache expiry.

Measured with tools/bench/bench_pool.py (10,000 notes, 200 ms ± 50 ms, 8 workers,
6,646 calls, one run each on a shared 2-core machine):

    policy   share of ideal   cache read share   calls writing a copy
    reread        0.92              0.77                  0
    off           0.89              0.77              1,660
    auto          0.87              0.77                  0
    wait          0.74              0.84                  0

With the closing mark (our fourth), `reread` measured 0.903 of the ideal (184.0 s for an
ideal of 166.2 s) and a read share of 0.77, the tree without it 0.903 and 0.77 in the
next minutes (and 0.87 / 0.88 both, side by side, under other engineers' load): the bulk
import's contexts rarely repeat whole, so the closing mark neither helps nor costs the
pool (no duplicate writers either way).

`reread` is the default: it keeps one writer per new prefix and the throughput
target (>= 0.9). `wait`, R23 to the letter, idles a slot whenever two consecutive
merges share their last whole block (about one call in four) but reads the whole
new prefix instead of writing it again: at Anthropic's prices (write 1.25, read
0.1) its compaction input costs about a fifth less. `auto`'s short holds were too
rare to move the read share.

The planner's core decides which jobs run (R31); the gate only decides when a
started job is handed to a worker, where its view mark goes and whether it keeps
its closing mark. Both the law
"at no time do two calls whose responses have not started write the same
prefix" and "a held job waits only for a call in flight" are tested with
hypothesis in tests/test_prefix_gate.py.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from everchat.actors.prompt import BLOCK_LINES

__all__ = ["POLICIES", "SYSTEM", "BlockPrefix", "Marks", "PrefixGate", "prefix_chain"]

POLICIES = ("reread", "auto", "wait", "off")

SYSTEM = "system"
"""The prefix through the system prompt: shared by every compaction of a chat."""

DEFAULT_LARGE = 4096
"""`auto` holds for a new prefix part of at least this many bytes (~1,000 tokens)."""

DEFAULT_PATIENCE = 0.25
"""`auto` holds only when the writer's response is due within this share of a first-byte latency."""

CACHE_TTL = 300.0
"""Anthropic's 5-minute entries (R23 uses no 1-hour marks): an entry unused this long is gone."""


@dataclass(frozen=True, slots=True)
class BlockPrefix:
    """The context through whole block k (k = 1, 2 …), or through its closing block
    (`closing`: the whole context, when it ends with 1-3 lines after its last whole
    block): a digest of its lines, and its size in bytes (the rendered lines,
    newlines included)."""

    digest: str
    size: int
    closing: bool = False


class Marks(NamedTuple):
    """Where a started job's context marks go: after whole block `view` (0: no view
    mark; R23's default is the last whole block), and on the closing block or not
    (`closing`, only when the context has a closing prefix in its chain)."""

    view: int
    closing: bool


def prefix_chain(context: Sequence[str]) -> list[BlockPrefix]:
    """One `BlockPrefix` per whole 4-line block of a compaction's context (R23), then
    one for its closing block when the context ends with 1-3 lines past its last whole
    block (the fourth mark, our choice beyond R23; see `Compaction`).

    Block k's text depends only on lines 4(k-1) … 4k-1 (`view_blocks`), so two
    contexts share the prefix through block k exactly when their first 4k lines
    are equal, and their closing prefix exactly when all their lines are. The digest
    chains, so each block costs one hash of its own lines.
    """
    chain: list[BlockPrefix] = []
    digest = hashlib.sha256(b"everchat-context")
    size = 0
    whole = len(context) // BLOCK_LINES
    for k in range(whole):
        for line in context[k * BLOCK_LINES:(k + 1) * BLOCK_LINES]:
            data = line.encode() + b"\n"
            digest.update(data)
            size += len(data)
        chain.append(BlockPrefix(digest.copy().hexdigest(), size))
    if len(context) > whole * BLOCK_LINES:
        for line in context[whole * BLOCK_LINES:]:
            data = line.encode() + b"\n"
            digest.update(data)
            size += len(data)
        digest.update(b"</chat>")  # no block prefix ends so: a whole block ends with a newline
        chain.append(BlockPrefix(digest.hexdigest(), size, closing=True))
    return chain


def _split(chain: Sequence[BlockPrefix]) -> tuple[Sequence[BlockPrefix], BlockPrefix | None]:
    """The chain's whole blocks, and its closing prefix (None: the context has none)."""
    if chain and chain[-1].closing:
        return chain[:-1], chain[-1]
    return chain, None


class PrefixGate:
    """Which prefixes are written and which are being written, and each job's marks.

        gate = PrefixGate("reread")
        marks = gate.offer(key, prefix_chain(context), now)  # None: hold it for now
        ...                                                   # the job is sent with `marks`
        gate.started(key, now)                                # its response started
        gate.ended(key)                                       # built, failed or lost

    `marks.view` is the number of whole context blocks the view's cache mark goes
    after: the number of whole blocks is R23's default (the last whole block), 0
    none. `marks.closing` says whether the closing block carries its mark.
    Not thread-safe: the planner actor calls it from its own thread.
    """

    def __init__(self, policy: str = "reread", *, large: int = DEFAULT_LARGE, patience: float = DEFAULT_PATIENCE,
                 ttl: float = CACHE_TTL) -> None:
        if policy not in POLICIES:
            raise ValueError(f"the prefix gate's policy is one of {', '.join(POLICIES)}, not {policy!r}")
        self.policy = policy
        self.large = large
        self.patience = patience
        self.ttl = ttl
        self.first_byte: float | None = None  # mean seconds from hand-out to response start
        self.since: dict[int, float] = {}  # unstarted job -> when it was handed out
        self.written: OrderedDict[str, float] = OrderedDict()  # prefix -> last use, oldest first
        self.writing: dict[str, int] = {}  # prefix -> the job writing it (response not started)
        self.jobs: dict[int, tuple[str, ...]] = {}  # job -> prefixes it writes, until it starts
        self.holds = 0  # offers answered "hold"
        self.moved = 0  # jobs sent with their view mark moved back
        self.dropped = 0  # jobs sent without their closing mark

    def __repr__(self) -> str:
        return (f"PrefixGate({self.policy}, written={len(self.written)}, writing={len(self.writing)}, "
                f"jobs={len(self.jobs)})")

    def offer(self, key: int, chain: Sequence[BlockPrefix], now: float) -> Marks | None:
        """The marks for job `key` (`Marks`: view mark 0 … whole blocks, closing mark
        or not), or None to hold it until a call in flight starts its response. A job
        that gets marks is running."""
        if key in self.jobs:
            raise ValueError(f"job {key} is already running")
        blocks, closing = _split(chain)
        whole = len(blocks)
        if self.policy == "off":
            self.jobs[key] = ()
            return Marks(whole, closing is not None)
        self._expire(now)
        writes: list[str] = []
        if SYSTEM not in self.written:
            if SYSTEM in self.writing:
                self.holds += 1
                return None
            writes.append(SYSTEM)
        view, close = whole, closing is not None
        busy: list[tuple[BlockPrefix, int]] = []  # prefixes another unstarted call writes, with it
        if whole:
            target = blocks[-1].digest
            if target in self.writing and target not in self.written:
                view = self._newest_written(blocks)
                busy.append((blocks[-1], self.writing[target]))
        if closing is not None and closing.digest in self.writing and closing.digest not in self.written:
            close = False
            busy.append((closing, self.writing[closing.digest]))
        if busy:
            read = blocks[view - 1].size if view else 0
            if self.policy == "wait" or (self.policy == "auto" and any(
                    prefix.size - read >= self.large and self._due_soon(writer, now) for prefix, writer in busy)):
                self.holds += 1
                return None
        if view < whole:
            self.moved += 1
        if closing is not None and not close:
            self.dropped += 1
        for prefix in (blocks[view - 1] if view else None, closing if close else None):
            if prefix is not None and prefix.digest not in self.written:
                writes.append(prefix.digest)
        self._touch([*blocks[:view], *([closing] if close else [])], now)
        self.jobs[key] = tuple(writes)
        self.since[key] = now
        for prefix in writes:
            self.writing[prefix] = key
        return Marks(view, close)

    def blocked_by(self, chain: Sequence[BlockPrefix]) -> int | None:
        """The running job whose unstarted call is writing a prefix a job with this chain
        would write (the system prompt's, its last whole block's or its closing
        block's), or None."""
        if SYSTEM not in self.written and SYSTEM in self.writing:
            return self.writing[SYSTEM]
        blocks, closing = _split(chain)
        for prefix in (blocks[-1] if blocks else None, closing):
            if prefix is not None and prefix.digest not in self.written and prefix.digest in self.writing:
                return self.writing[prefix.digest]
        return None

    def started(self, key: int, now: float) -> None:
        """Job `key`'s response started: what it wrote can be read from now on."""
        since = self.since.pop(key, None)
        if since is not None:
            seconds = now - since
            self.first_byte = seconds if self.first_byte is None else 0.9 * self.first_byte + 0.1 * seconds
        for prefix in self.jobs.get(key, ()):
            if self.writing.get(prefix) == key:
                del self.writing[prefix]
            self.written[prefix] = now
            self.written.move_to_end(prefix)
        if key in self.jobs:
            self.jobs[key] = ()

    def ended(self, key: int) -> None:
        """Job `key` is over (built, failed or lost). A call that failed before its
        response started wrote nothing: its prefixes are free for the next writer."""
        self.since.pop(key, None)
        for prefix in self.jobs.pop(key, ()):
            if self.writing.get(prefix) == key:
                del self.writing[prefix]

    def running(self) -> int:
        return len(self.jobs)

    def _due_soon(self, writer: int, now: float) -> bool:
        """Whether the writer's response is expected within `patience` of a latency
        (before any response was seen, hold: it is the chat's first call)."""
        if self.first_byte is None:
            return True
        due = self.since.get(writer, now) + self.first_byte
        return due - now <= self.patience * self.first_byte

    # -- written prefixes ------------------------------------------------------------

    def _newest_written(self, chain: Sequence[BlockPrefix]) -> int:
        for k in range(len(chain) - 1, 0, -1):
            if chain[k - 1].digest in self.written:
                return k
        return 0

    def _touch(self, read: Sequence[BlockPrefix], now: float) -> None:
        """A call reads the written prefixes it starts with: the cache keeps them alive."""
        for prefix in (SYSTEM, *(block.digest for block in read)):
            if prefix in self.written:
                self.written[prefix] = now
                self.written.move_to_end(prefix)

    def _expire(self, now: float) -> None:
        while self.written:
            prefix, used = next(iter(self.written.items()))
            if now - used < self.ttl:
                return
            del self.written[prefix]
