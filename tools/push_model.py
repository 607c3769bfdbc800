"""Taelin's rollback ``push`` list, the yardstick of R20.

The list is a binary counter over message ranges, newest entry first. Each entry is a
contiguous range of messages ``id+n`` with a bit. Pushing a new state (one message, ``t+1``):

* an empty list becomes ``[t+1 (bit 0)]``;
* a newest entry with bit 0 absorbs the new state (its range grows by the new one) and
  sets its bit;
* a newest entry with bit 1 makes room: the new state becomes the newest entry with bit 0,
  and the old newest entry is pushed, by the same rule, into the rest of the list.

So the entry at position k (0 = newest) spans ``2**k`` messages with bit 0 and ``2**(k+1)``
with bit 1, and every entry is an aligned tree node: an absorb always joins two siblings.

Worked by hand, newest first, ``(range, bit)``, T the number of messages pushed::

    T=1   [0+1 0]
    T=2   [0+2 1]                          0+1 absorbs 1
    T=3   [2+1 0, 0+2 0]                   0+2 (bit 1) is pushed into []
    T=4   [2+2 1, 0+2 0]
    T=5   [4+1 0, 0+4 1]                   2+2 pushed into [0+2 0]: absorbed
    T=6   [4+2 1, 0+4 1]
    T=7   [6+1 0, 4+2 0, 0+4 0]            4+2 pushed into [0+4 1]: 0+4 pushed into []
    T=8   [6+2 1, 4+2 0, 0+4 0]
    T=9   [8+1 0, 4+4 1, 0+4 0]            6+2 pushed into [4+2 0, ...]: absorbed
    T=10  [8+2 1, 4+4 1, 0+4 0]

Oldest first, T = 10 is ``0+4, 4+4, 8+2``: the three lines R20 expects once the view
``0+4, 4+4, 8+1, 9+1`` has merged 8-9 under a 3-line budget.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

__all__ = ["Entry", "push", "push_nodes", "push_steps"]


class Entry(NamedTuple):
    """One entry of the push list: messages ``id .. id+n-1`` and the counter bit."""

    id: int  # first message of the range
    n: int  # number of messages in the range
    bit: int  # 0: the entry absorbs the next state; 1: it is pushed on by the next state


def push(entries: tuple[Entry, ...], new: Entry) -> tuple[Entry, ...]:
    """Push ``new`` (a range right after the newest entry) onto ``entries``, newest first."""
    if not entries:
        return (Entry(new.id, new.n, 0),)
    newest, rest = entries[0], entries[1:]
    if newest.bit == 0:
        assert newest.id + newest.n == new.id, "an entry absorbs only the range right after it"
        return (Entry(newest.id, newest.n + new.n, 1),) + rest
    return (Entry(new.id, new.n, 0),) + push(rest, Entry(newest.id, newest.n, 0))


def push_nodes(entries: tuple[Entry, ...]) -> list[str]:
    """The entries as view node names ``id+n``, oldest first (the view's order, R13)."""
    return [f"{e.id}+{e.n}" for e in reversed(entries)]


def push_steps(count: int) -> Iterator[tuple[int, list[str], int]]:
    """For T = 1 .. count: ``(T, list oldest first, its length)`` after pushing messages 0..T-1."""
    entries: tuple[Entry, ...] = ()
    for t in range(count):
        entries = push(entries, Entry(t, 1, 0))
        yield t + 1, push_nodes(entries), len(entries)
