"""Bring the planner back after a restart: saved views, merge records (R22, R24, R25).

The view only ever changes in two ways: each message appends its leaf (R17), and
each batch merges pairs (R19), logged as one merge record. Folding those two
gives back the view without view.json, by the same rule that made it (R42 forbids
recomputing it by any other).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ._nodes import LEVEL_BITS, children, end, key_of, name, node_of, start
from ._planner import Budget, NodeSource, Planner, PlannerError, Step

__all__ = ["MergeRecord", "pair_of", "recover", "refold"]

MergeRecord = tuple[Sequence[Sequence[int]], int, bool]
"""R25: `(merges, t, open)`, each merge named by its pair's left member `(l, i)`."""


def pair_of(up: int) -> tuple[int, int]:
    """The `(l, i)` by which a merge record names the pair merged into `up` (R25).

    R18 names a pair `(l, i)`, `(l, i+1)` with i even; the record keeps `(l, i)`.
    """
    return node_of(children(up)[0])


def refold(
    records: Iterable[MergeRecord],
    lines: Sequence[Sequence[int]] = (),
    messages: int = 0,
    shrinking: bool = False,
) -> tuple[int, list[tuple[int, int]], bool]:
    """Fold merge records into the view they leave behind.

    Starts from `lines` covering `messages` (default: the empty chat) and folds
    `records`, which must be exactly the records logged after those lines were
    saved. Returns `(t, lines, open)` right after the last record folded.

    t never decreases (R25), the same order the store's scan accepts: two records
    may share a t, when a batch ran without a new message (`Planner.fit_now`), and
    in chats an older Everchat recovered with one t for every replayed step (the
    review's P1). Such records fold in log order at their t; folding a batch after
    leaves that came later leaves the same lines, so those chats refold to the view
    they saved. A record whose t goes back, or that merges anything but two sibling
    lines, is a loud error (R24: records and saved views must agree).
    """
    by_first: dict[int, int] = {}  # first message -> line key
    for l, i in lines:
        key = key_of(l, i)
        by_first[start(key)] = key
    last_t = messages
    for n, record in enumerate(records):
        try:
            last_t, shrinking = _fold_one(record, by_first, last_t)
        except PlannerError as error:
            error.record = n  # which record did not fold, for the caller to name its place
            raise
    return last_t, [node_of(by_first[first]) for first in sorted(by_first)], shrinking


def _fold_one(record: Sequence, by_first: dict[int, int], last_t: int) -> tuple[int, bool]:
    """Fold one record (its first three fields) into `by_first`; returns its t and open."""
    merges, t, still_open = record[0], record[1], record[2]
    if t < last_t:
        raise PlannerError(f"merge records out of order: t={t} after t={last_t}")
    for leaf in range(last_t, t):
        by_first[leaf] = leaf << LEVEL_BITS
    last_t = t
    for pair in merges:
        l, i = pair
        if l < 0 or i < 0 or i % 2:
            raise PlannerError(f"merge record t={t} names a pair by {[l, i]}, not by a left member")
        up = key_of(l + 1, i // 2)
        if end(up) > t:
            raise PlannerError(f"merge record t={t} merges {name(up)}, past its {t} messages")
        left, right = children(up)
        if by_first.get(start(left)) != left or by_first.get(start(right)) != right:
            raise PlannerError(f"merge record t={t} merges {name(up)}, whose halves are not both lines")
        del by_first[start(right)]
        by_first[start(left)] = up
    return last_t, bool(still_open)


def recover(
    budget: Budget,
    messages: int,
    source: NodeSource,
    records: Iterable[MergeRecord],
    view: dict | None,
    cview: dict | None,
) -> tuple[Planner, list[int], list[Step]]:
    """The planner of a chat of `messages` messages after a restart (R22, R24).

    `view` and `cview` are the saved view files' contents (None when lost);
    `records` the merge records logged after the saved view (all of them when it
    is lost). Returns the planner, the free nodes it had to build again, and the
    steps of messages it processed now, for the caller to persist like live ones
    (each step carries its own t and shrinking flag for its merge record).

    - Saved view: folded forward by any later records (a crash between a record
      and the save); messages after that were never planned, so they are
      processed now, as live ones.
    - Lost view: refolded from all the records. Messages after the last record
      had no batch (each batch logs a record), so their leaves are appended as
      they were, with their built state read back, unless that record was still
      shrinking: then each later message would have logged a batch, so none of
      them was processed and they are now. (Had a crash also kept the batch of
      a message after the last record from being logged, it is not redone: the
      next message's batch fits the view.)
    - The compaction view is used when it belongs to the same message count and
      nothing was folded after it; otherwise it restarts as the view fitted (R24).
    """
    if view is not None:
        base_t, base_lines, base_open = view["t"], view["view"], view["open"]
    else:
        base_t, base_lines, base_open = 0, [], False
    if base_t > messages:
        raise PlannerError(f"the saved view covers {base_t} messages, the log has {messages}")
    t, lines, shrinking = refold(records, base_lines, base_t, base_open)
    if t > messages:
        raise PlannerError(f"a merge record has t={t}, the log has {messages} messages")
    if view is None and not shrinking:
        lines += [(0, leaf) for leaf in range(t, messages)]
        t = messages
    saved_cview = None
    if cview is not None and view is not None and cview.get("t") == t == base_t:
        saved_cview = ([tuple(pair) for pair in cview["view"]], bool(cview["open"]))
    planner, rebuilt = Planner.restore(budget, t, lines, shrinking, source, saved_cview)
    steps = []
    for i in range(t, messages):
        line = source.message_line(i)
        steps.append(planner.add_message(len(line.encode()), line))
    planner.unstart()  # nothing runs right after a restart: the caller starts (start_all)
    for step in steps:
        step.started = []
    return planner, rebuilt, steps
