"""The planner's pure core: the view, the compaction view and the work queues.

`Planner` is plain Python: the planner actor feeds it events (a message logged, a
node built, a compaction failed) and does the I/O it asks for (persist free
nodes, a merge record, the views; start compactions). Tests drive it directly.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

from ._nodes import (
    LEVEL_BITS,
    LINE_LIMIT,
    children,
    end,
    key_of,
    level,
    name,
    node_of,
    parent,
    placeholder_bytes,
    start,
)
from ._tree import Tree
from ._view import View

__all__ = ["Budget", "Step", "Planner", "PlannerError", "NodeSource"]

_LEVEL_MASK = (1 << LEVEL_BITS) - 1

_LEAF_WINDOW = 8
"""R31: a leaf is ready once fewer than 8 lines before it in the view are unbuilt."""


class PlannerError(ValueError):
    """An event the planner cannot accept (a build of a node that is not running,
    a size out of range, a saved state that breaks R13). Nothing was changed."""


@dataclass(frozen=True)
class Budget:
    """The sawtooths' numbers (R19, R21) and the pool size (R31).

    With `unit="lines"` view sizes count lines instead of bytes (R20's check).
    """

    ceiling: int = 128_000
    floor: int = 64_000
    cceiling: int = 32_000
    cfloor: int = 16_000
    jobs: int = 8
    unit: str = "bytes"

    def __post_init__(self) -> None:
        if self.unit not in ("bytes", "lines"):
            raise PlannerError(f"unit must be 'bytes' or 'lines', not {self.unit!r}")
        if not 1 <= self.jobs <= 8:
            raise PlannerError(f"jobs must be 1 to 8 (R31), not {self.jobs}")
        for label in ("ceiling", "floor", "cceiling", "cfloor"):
            value = getattr(self, label)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PlannerError(f"{label} must be a whole number >= 0, not {value!r}")


class Step:
    """What one event changed, for the caller to persist and act on.

    `built`: nodes built free at this event (R11), to append to the tree, in
    order, with their texts in `built_texts` (when the planner was given texts;
    a batch may already have merged them below the view). `batch`: whether an R19 batch ran (then R25 wants a merge record with
    `merged`, and this step's own message count `t` and `shrinking` flag: a caller that
    persists several steps at once must not take them from the planner, which has moved
    on). `started`: compactions to start now.
    """

    __slots__ = ("built", "built_texts", "batch", "merged", "cview_changed", "started", "t", "shrinking")

    def __init__(self) -> None:
        self.built: list[int] = []
        self.built_texts: list[str | None] = []
        self.batch = False
        self.merged: list[int] = []
        self.cview_changed = False
        self.started: list[int] = []
        self.t = 0
        self.shrinking = False

    @property
    def record(self) -> tuple[list[int], int, bool] | None:
        """R25: the merge record this step's batch owes, `(merged, t, open)`; None without a batch."""
        return (self.merged, self.t, self.shrinking) if self.batch else None

    def __repr__(self) -> str:
        return (
            f"Step(built={[name(key) for key in self.built]}, batch={self.batch},"
            f" merged={[name(key) for key in self.merged]}, started={[name(key) for key in self.started]})"
        )


class NodeSource:
    """What `Planner.restore` reads from the chat folder (the store provides it)."""

    def node(self, l: int, i: int) -> str | None:  # pragma: no cover - protocol
        raise NotImplementedError

    def message_line(self, i: int) -> str:  # pragma: no cover - protocol
        raise NotImplementedError


class Planner:
    """The view, the compaction view, the frontier of the tree and the work queues."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        count_lines = self.budget.unit == "lines"
        self.messages = 0
        self.tree = Tree()
        self.view = View(count_lines)
        self.cview = View(count_lines)
        self.merge_queue: deque[int] = deque()
        self.pending: list[int] = []  # unbuilt leaves, by message id (all are view lines)
        self.running: dict[int, None] = {}
        self.failed: dict[int, None] = {}
        self.waiting_for = -1
        self.waiting_since = 0  # the first message the waits want (P18: `ask` waits for its own)
        self.fit_wanted = False  # a waiting turn's view is over the ceiling: merges start too

    # -- events ----------------------------------------------------------------

    def add_message(self, line_bytes: int, text: str | None = None, budget: Budget | None = None) -> Step:
        """A message was logged: its `kind: text` line is `line_bytes` long.

        Section 8's order: failed nodes become startable; the leaf is appended
        (free when it fits, R11, with the free cascade); R19 on the view; R21 on
        the compaction view; starts (R31).
        """
        if budget is not None:
            self.budget = budget
        self._retry_failed()
        step = Step()
        tree, view, cview = self.tree, self.view, self.cview
        t = self.messages
        self.messages = t + 1
        leaf = t << LEVEL_BITS
        built = step.built
        if line_bytes <= LINE_LIMIT:
            ready = tree.build(leaf, line_bytes, text, built)
            if ready >= 0:
                self.merge_queue.append(ready)
            if text is not None:
                step.built_texts = [tree.text[key] for key in built]
        else:
            self.pending.append(t)
        # Free parents built here need no candidate check: only the leaf's own
        # parent can sit over two lines, and `append` checks that one.
        view.append(leaf, tree)

        budget = self.budget
        if view.size > budget.ceiling or view.shrinking:
            self._batch(step)
        if not step.merged:
            cview.append(leaf, tree)
            if cview.size > budget.cceiling or cview.shrinking:
                step.cview_changed = bool(cview.fit(budget.cfloor, self.messages, tree))
        step.t, step.shrinking = self.messages, view.shrinking
        self._start(step.started)
        return step

    def _batch(self, step: Step) -> None:
        """R19's batch on the view; when it merged, R21's fresh compaction view."""
        budget, tree, view = self.budget, self.tree, self.view
        step.batch = True
        step.merged = view.fit(budget.floor, self.messages, tree)
        if not step.merged:
            return
        self.cview = cview = view.copy()
        cview.fit(budget.cfloor, self.messages, tree)
        step.cview_changed = True
        # The merged halves are below the frontier now (see Tree); drop them.
        forget, members = tree.forget, cview.members
        for up in step.merged:
            left = up - 1
            right = left + ((1 << ((up & _LEVEL_MASK) - 1)) << LEVEL_BITS)
            if left not in members:
                forget(left)
            if right not in members:
                forget(right)

    def fit_now(self) -> Step:
        """The batch R19 would run at the next message, run now, without one (issue 8).

        The one place a batch runs without a new message: `compact` ends with it, and a
        turn whose settled view is still over the ceiling runs it before rendering, so
        no request carries more than the ceiling (R36 renders the view before the
        turn's message is appended, so the message's own batch would come too late).
        It runs only when R19 would (over the ceiling, or still shrinking), and owes a
        merge record (R25) only when it changed something: pairs merged or the
        shrinking flag; its record's t is the current message count, so it may equal
        the record before it (t never decreases, R25)."""
        step = Step()
        view = self.view
        if view.size > self.budget.ceiling or view.shrinking:
            was = view.shrinking
            self._batch(step)
            step.batch = bool(step.merged) or view.shrinking != was
        step.t, step.shrinking = self.messages, view.shrinking
        self._start(step.started)
        return step

    def node_built(self, key: int, text_bytes: int, text: str | None = None) -> Step:
        """A running compaction finished with a line of `text_bytes` (1 … 512).

        Records it, runs the free cascade (R11) and starts what may start. Builds
        never change the views' lines (R19), only an unbuilt line's size (R16).
        """
        if key not in self.running:
            raise PlannerError(f"node {name(key)} is not running")
        if not 1 <= text_bytes <= LINE_LIMIT:
            raise PlannerError(f"a built line is 1 to {LINE_LIMIT} bytes, not {text_bytes}")
        del self.running[key]
        step = Step()
        tree, view, cview = self.tree, self.view, self.cview
        built = step.built
        ready = tree.build(key, text_bytes, text, built)
        if ready >= 0:
            self.merge_queue.append(ready)
        if key & _LEVEL_MASK:
            # A merge is never a line (only leaves are unbuilt lines); it and the free
            # parents above it may now sit over two lines.
            for up in built:
                view.on_parent_built(up, tree)
                cview.on_parent_built(up, tree)
        else:
            self.pending.remove(key >> LEVEL_BITS)
            unbuilt = placeholder_bytes(key)
            view.on_leaf_built(key, tree, unbuilt)
            cview.on_leaf_built(key, tree, unbuilt)
            for up in built[1:]:
                view.on_parent_built(up, tree)
                cview.on_parent_built(up, tree)
        del built[0]  # the caller built that one; only free ones are news
        if text is not None:
            step.built_texts = [tree.text[up] for up in built]
        self._start(step.started)
        return step

    def node_failed(self, key: int) -> Step:
        """A running compaction failed; it is tried again at the next message (R30)."""
        if key not in self.running:
            raise PlannerError(f"node {name(key)} is not running")
        del self.running[key]
        self.failed[key] = None
        step = Step()
        self._start(step.started)
        return step

    def _retry_failed(self) -> None:
        """Section 8 (1): failed merges rejoin the merge queue, lower level first."""
        if not self.failed:
            return
        merges = sorted(
            (key for key in self.failed if level(key)), key=lambda key: (level(key), start(key))
        )
        self.failed.clear()
        self.merge_queue.extend(merges)

    # -- starts (R31) --------------------------------------------------------------

    def _start(self, started: list[int]) -> None:
        running, jobs = self.running, self.budget.jobs
        if len(running) >= jobs or not (self.merge_queue or self.pending):
            return
        if self.waiting_for >= 0:
            self._start_for_turn(started)
            return
        while len(running) < jobs:
            if self.merge_queue:
                key = self.merge_queue.popleft()
            else:
                key = self._next_leaf()
                if key < 0:
                    return
            running[key] = None
            started.append(key)

    def _next_leaf(self) -> int:
        running, failed = self.running, self.failed
        for t in self.pending[:_LEAF_WINDOW]:
            key = t << LEVEL_BITS
            if key not in running and key not in failed:
                return key
        return -1

    def _start_for_turn(self, started: list[int]) -> None:
        """R31: while a turn waits, only the unbuilt lines before its message start (from
        `waiting_since` on: `ask` waits for its own lines only, P18). When a waiting turn's
        view is still over the ceiling once its lines are built (`fit_wanted`), ready
        merges start too, so the batch before it renders can fit it (issue 8)."""
        running, failed = self.running, self.failed
        for t in self.pending[bisect_left(self.pending, self.waiting_since):]:
            if len(running) >= self.budget.jobs or t >= self.waiting_for:
                break
            key = t << LEVEL_BITS
            if key not in running and key not in failed:
                running[key] = None
                started.append(key)
        while self.fit_wanted and self.merge_queue and len(running) < self.budget.jobs:
            key = self.merge_queue.popleft()
            running[key] = None
            started.append(key)

    def retry_failed(self) -> list[int]:
        """R30: failed nodes become startable now (a turn waits for them); returns the starts."""
        self._retry_failed()
        started: list[int] = []
        self._start(started)
        return started

    def wait_for(self, message: int, since: int = 0, fit: bool = False) -> list[int]:
        """A turn waits for the lines of messages `since` … `message` - 1 (R36), and with
        `fit` for the merges that can bring its view under the ceiling; returns the starts."""
        self.waiting_for = message
        self.waiting_since = since
        self.fit_wanted = fit
        started: list[int] = []
        self._start(started)
        return started

    def stop_waiting(self) -> list[int]:
        self.waiting_for = -1
        self.waiting_since = 0
        self.fit_wanted = False
        started: list[int] = []
        self._start(started)
        return started

    def settled(self, message: int, since: int = 0) -> bool:
        """True when every view line of messages `since` … `message` - 1 is built (R36)."""
        at = bisect_left(self.pending, since)
        return at == len(self.pending) or self.pending[at] >= message

    def unbuilt_between(self, since: int, message: int) -> int:
        """How many view lines of messages `since` … `message` - 1 are still unbuilt."""
        return bisect_left(self.pending, message) - bisect_left(self.pending, since)

    def over_ceiling(self) -> bool:
        """Is the view larger than the ceiling (R19)?"""
        return self.view.size > self.budget.ceiling

    def merging(self) -> bool:
        """Are merges ready or running (what could still bring the view down)?"""
        return bool(self.merge_queue) or any(level(key) for key in self.running)

    # -- reading ---------------------------------------------------------------

    def context(self, key: int) -> list[int]:
        """R27: the compaction view cut at the node, stopping at its first unbuilt line.

        For a leaf of message m: the lines that end before m. For a merge: the
        lines that end at or before its last message.
        """
        cut = start(key) if level(key) == 0 else end(key)
        if self.pending and self.pending[0] < cut:
            cut = self.pending[0]
        lines = self.cview.ordered()
        count = bisect_left(lines, cut << LEVEL_BITS)
        if count and end(lines[count - 1]) > cut:
            count -= 1
        return lines[:count]

    def unbuilt_lines(self) -> int:
        return len(self.pending)

    # -- saving and restoring (R22, R24) ---------------------------------------------

    def saved_views(self) -> tuple[dict, dict]:
        """The view and compaction view as saved in view.json and compaction-view.json."""
        return (
            _view_record(self.messages, self.view),
            _view_record(self.messages, self.cview),
        )

    @classmethod
    def restore(
        cls,
        budget: Budget,
        messages: int,
        lines: list[tuple[int, int]],
        shrinking: bool,
        source: NodeSource,
        cview: tuple[list[tuple[int, int]], bool] | None = None,
    ) -> tuple["Planner", list[int]]:
        """Rebuild the planner from a saved view (R22), never by another rule (R42).

        Reads the built state of the view's lines and their ancestors from
        `source`. Free nodes that a crash kept from being saved are built again
        (returned, for the caller to save). A missing or stale compaction view
        restarts as the view fitted down (R24).
        """
        planner = cls(budget)
        planner.messages = messages
        keys = _checked_cover(lines, messages, "view")
        tree = planner.tree
        frontier = _frontier(keys, messages)
        for key in frontier:
            text = source.node(*node_of(key))
            if text is not None:
                tree.add(key, len(text.encode()), text)
        rebuilt: list[int] = []
        for key in keys:
            if level(key) == 0 and key not in tree.raw:
                line = source.message_line(start(key))
                size = len(line.encode())
                if size <= LINE_LIMIT:
                    tree.build(key, size, line, rebuilt)
        for key in sorted(frontier, key=lambda key: (level(key), start(key))):
            if key in tree.raw or level(key) == 0:
                continue
            left, right = children(key)
            if left not in tree.raw or right not in tree.raw:
                continue
            joined = tree.raw[left] + 1 + tree.raw[right]
            if joined <= LINE_LIMIT:  # R11: free, lost to a crash before it was saved
                left_text, right_text = tree.text.get(left), tree.text.get(right)
                text = None if left_text is None or right_text is None else left_text + "\n" + right_text
                tree.add(key, joined, text)
                rebuilt.append(key)
            else:
                planner.merge_queue.append(key)
        planner.view.load(keys, shrinking, tree)
        planner.pending = [start(key) for key in keys if key not in tree.raw]
        if cview is not None:
            ckeys = _checked_cover(cview[0], messages, "compaction view")
            planner.cview.load(ckeys, cview[1], tree)
            if not all(key in tree.raw or key in planner.view.members for key in ckeys):
                raise PlannerError("the compaction view holds a line that is neither built nor a view line")
        else:
            planner.cview = planner.view.copy()
            planner.cview.fit(budget.cfloor, messages, tree)
        return planner, rebuilt

    def unstart(self) -> None:
        """Forget the starts made so far (no call was made for them): merges go back to
        the front of their queue in start order, leaves stay pending. `start_all` makes
        the same starts again."""
        merges = [key for key in self.running if level(key)]
        self.running.clear()
        self.merge_queue.extendleft(reversed(merges))

    def start_all(self) -> list[int]:
        """Start whatever may start now (after a restart, R30 retries)."""
        started: list[int] = []
        self._start(started)
        return started


def _view_record(messages: int, view: View) -> dict:
    return {
        "version": 1,
        "t": messages,
        "open": view.shrinking,
        "view": [list(node_of(key)) for key in view.ordered()],
    }


def _checked_cover(lines: list[tuple[int, int]], messages: int, label: str) -> list[int]:
    """R13: the lines cover 0 … T-1 exactly once, contiguously, oldest first."""
    keys: list[int] = []
    expect = 0
    for entry in lines:
        l, i = entry
        if not (isinstance(l, int) and isinstance(i, int)) or l < 0 or i < 0 or l >= 1 << LEVEL_BITS:
            raise PlannerError(f"the {label} holds a bad node {entry!r}")
        key = key_of(l, i)
        if start(key) != expect:
            raise PlannerError(
                f"the {label} does not cover the messages once each: {name(key)} where message {expect} should start"
            )
        expect = end(key)
        keys.append(key)
    if expect != messages:
        raise PlannerError(f"the {label}'s lines cover {expect} messages, but it was saved at t={messages} (R13)")
    return keys


def _frontier(keys: list[int], messages: int) -> set[int]:
    """The view's lines and all their complete ancestors."""
    frontier = set(keys)
    for key in keys:
        up = parent(key)
        while end(up) <= messages and up not in frontier:
            frontier.add(up)
            up = parent(up)
    return frontier
