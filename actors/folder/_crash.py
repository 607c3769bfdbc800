"""Crash points: a test-only switch that ends the process right after a chosen write.

Off unless a test arms it (`arm`), from Python, in the process it wants to crash: no flag,
no environment variable, nothing the CLI can reach. Armed with `("merge", 3)`, the process
calls `os._exit(CRASH_STATUS)` right after its third merge record is written and fsynced,
as a `kill -9` landing exactly there would stop it (no `finally`, no buffers flushed). The
writes are counted by kind at the write boundaries of the log writer's core and
`Planning` (issue 8):

    message      a group of messages appended to main/ (one write)
    node         a group of nodes appended to tree/
    merge        a merge record appended to tree/ (R25)
    view         view.json replaced (R22)
    cview        compaction-view.json replaced
    index        the index's covered.json replaced at a checkpoint
    usage        usage.json replaced
    draft        draft.json replaced or removed (R37)

`counts()` tells how many writes of each kind the process made, so a test can first run a
script whole and then walk every crash point of it.
"""

from __future__ import annotations

import os

__all__ = ["KINDS", "CRASH_STATUS", "arm", "hit", "counts"]

KINDS = ("message", "node", "merge", "view", "cview", "index", "usage", "draft")
CRASH_STATUS = 86

_armed: tuple[str, int] | None = None
_counts: dict[str, int] = dict.fromkeys(KINDS, 0)


def arm(kind: str, k: int) -> None:
    """End this process right after its k-th write of `kind` (k >= 1)."""
    global _armed
    if kind not in KINDS or k < 1:
        raise ValueError(f"a crash point is one of {KINDS} and a count from 1, not {kind!r} {k!r}")
    _armed = (kind, k)


def hit(kind: str) -> None:
    """A write of `kind` just completed (called at each write boundary)."""
    _counts[kind] += 1
    if _armed is not None and _armed == (kind, _counts[kind]):
        os._exit(CRASH_STATUS)


def counts() -> dict[str, int]:
    return dict(_counts)
