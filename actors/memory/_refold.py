"""Refold the view from the logged merge records (R24, R25).

The view only ever changes in two ways: each message appends its leaf (R17), and
each batch merges pairs (R19), logged as one merge record. Replaying those two
gives back the view without view.json, by the same rule that made it (R42 forbids
recomputing it by any other).
"""

from __future__ import annotations

from collections.abc import Iterable

from ._nodes import LEVEL_BITS, children, end, key_of, name, node_of, start
from ._planner import PlannerError

__all__ = ["refold"]


def refold(
    records: Iterable[tuple[list[tuple[int, int]] | list[list[int]], int, bool]],
) -> tuple[int, list[tuple[int, int]], bool]:
    """Fold merge records `(merges, t, open)` into the view they leave behind.

    Returns `(t, lines, open)`: the message count of the last record, the view's
    lines as `(l, i)` right after that batch, and whether it was still shrinking.
    Messages after the last record only append leaves; the caller replays them.
    A record that merges anything but two sibling lines is a loud error.
    """
    lines: dict[int, int] = {}  # first message -> key
    messages = 0
    shrinking = False
    last_t = 0
    for merges, t, still_open in records:
        if t <= last_t:
            raise PlannerError(f"merge records out of order: t={t} after t={last_t}")
        last_t = t
        for leaf in range(messages, t):
            lines[leaf] = leaf << LEVEL_BITS
        messages = t
        for l, i in merges:
            up = key_of(l, i)
            if l < 1 or end(up) > messages:
                raise PlannerError(f"merge record t={t} merges {name(up)}, which is not a pair of lines")
            left, right = children(up)
            if lines.get(start(left)) != left or lines.get(start(right)) != right:
                raise PlannerError(f"merge record t={t} merges {name(up)}, whose halves are not both lines")
            del lines[start(right)]
            lines[start(left)] = up
        shrinking = bool(still_open)
    return messages, [node_of(lines[first]) for first in sorted(lines)], shrinking
