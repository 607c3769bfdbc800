"""The planner's work with the chat folder: plan, persist in recovery order, read.

`Planning` fixes the order in which a message's consequences reach the disk
(message, free nodes, merge record, views) so that a crash between any two leaves
a chat that `recover` brings back. The planner actor wraps it with a store proxy
that asks the log writer; `Chat` wraps it with the store itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

from everchat.actors.tree import (
    cut_utf8,
    LINE_LIMIT,
    Budget,
    Planner,
    PlannerError,
    Step,
    key_of,
    level,
    name,
    newest_within,
    node_of,
    pair_of,
    recover,
    refold,
    render_line,
    request_lines,
    start,
)
from everchat.actors.tree import children as _children
from everchat.actors.zoom import ZOOM_PAGE_BYTES, MemoryTools, ZoomError
from everchat.actors.folder import BadInput, CorruptRecord
from everchat.actors.planner.view_check import check_saved_view, check_view_shape

log = logging.getLogger("everchat.planning")

__all__ = ["Planning", "ZoomError", "ZOOM_PAGE_BYTES", "VIEW_VERSION", "records_after"]

UNSETTLED_MARK = "(not summarized yet, first 512 bytes) "
"""R36: how an unbuilt line reads when a turn stopped waiting for it."""


VIEW_VERSION = 2
"""view.json's version: 2 adds `merges`, the number of merge records the view folds (R24),
so records sharing a t (`fit_now`) are never folded twice or missed after a restart.
Version 1 files (without it) name their place by `t` alone, which is right for them."""


def records_after(store, view: dict | None) -> tuple[int, list]:
    """R24: `(first, records)`: the merge records logged after a saved view, and the
    number of the first of them. The log writer answers LoadState with the same."""
    if view is None:
        return 0, store.merge_records(first=0)
    check_view_shape(view, str(Path(store.path) / "view.json"))
    first = view.get("merges")
    if first is None:
        first = store.first_merge_after(view["t"])
    elif type(first) is not int or not 0 <= first <= store.merge_count:
        raise CorruptRecord(str(Path(store.path) / "view.json"), 0,
                            f"it folds {first!r} merge records, the chat has {store.merge_count} (R24)")
    return first, store.merge_records(first=first)


class Planning:
    """The planner core and the persistence of what it decides, in recovery order.

    `store` is anything with the log store's reading and saving methods: the
    `ChatStore` itself in one process, or the planner actor's proxy that asks the
    log writer. `recover` builds one from a store's saved state (R22, R24).
    """

    def __init__(self, store, planner: Planner, writer: bool) -> None:
        self.store = store
        self.planner = planner
        self.writer = writer
        self._leaf_lines: dict[int, str] = {}  # unbuilt leaves' lines, for their compactions
        self.merges = 0  # merge records in the log: the view saved next folds them all (R24)

    @classmethod
    def recover(cls, store, budget: Budget | None = None, writer: bool = True, verify: bool = True) -> "Planning":
        """Bring the planner back from the store (R22, R24); a writer saves what it redid.

        Costs O(view): the saved view, its lines' ancestors and the merge records
        after it, never the whole history. With `verify` the saved view is first
        checked against the merge records since the fold checkpoint (R24 at open,
        actors/planner/view_check.py): a view that disagrees stops the chat, naming the file.
        A compaction view that does not fit the view is derived data: it is rebuilt
        from the view, with a warning (R24).
        """
        view, cview = store.load_views()
        first, records = records_after(store, view)
        if verify:
            check_saved_view(store, view, first, writer=writer)
        budget = budget or Budget()
        try:
            try:
                planner, rebuilt, steps = recover(budget, store.message_count, store, records, view, cview)
            except PlannerError as error:
                if cview is None:
                    raise
                log.log(logging.DEBUG if getattr(store, "quiet", False) else logging.WARNING,
                        "%s: compaction-view.json does not fit the view (%s); it is rebuilt from the view (R24)",
                        store.path, error)
                cview = None
                planner, rebuilt, steps = recover(budget, store.message_count, store, records, view, cview)
        except PlannerError as error:
            raise CorruptRecord(str(Path(store.path) / "view.json"), 0, str(error)) from None
        planning = cls(store, planner, writer)
        planning.merges = first + len(records)
        if writer:
            planning._save_nodes(rebuilt, [planner.tree.text[key] for key in rebuilt])
            for step in steps:
                planning._persist(step)
            if rebuilt or steps or view is None or cview is None or view.get("merges") != planning.merges:
                planning._save_views()
        return planning

    @property
    def messages(self) -> int:
        return self.planner.messages

    # -- messages ----------------------------------------------------------------------

    def plan(self, ids: list[int], lines: dict[int, str] | None = None) -> list[Step]:
        """Plan messages just logged and save the views.

        `lines` may carry the messages' `kind: text` lines (the log writer sends
        them along); missing ones are read from the store. Ids planned before (a
        resent key) are skipped; ids past a gap (a lost notice) plan the gap too.
        """
        steps = []
        wanted = sorted(set(ids))
        if wanted and wanted[-1] >= self.planner.messages:
            wanted = range(self.planner.messages, wanted[-1] + 1)
        else:
            wanted = []
        built: list[int] = []
        texts: list[str | None] = []
        for i in wanted:
            line = lines.get(i) if lines else None
            if line is None:
                line = self.store.message_line(i)
            size = len(line.encode())
            step = self.planner.add_message(size, line)
            if size > LINE_LIMIT:
                self._leaf_lines[i] = line  # the input of its compaction (R28)
            built += step.built
            texts += step.built_texts
            steps.append(step)
        # The group's consequences reach the disk in recovery order, each kind in one write:
        # free nodes, then the batches' merge records (R25), then the views (R22). A crash
        # in between leaves messages logged but not planned, which recovery plans again.
        self._save_nodes(built, texts)
        for step in steps:
            self._save_record(step)
        if steps:
            self._save_views()
        return steps

    def fit_now(self) -> Step:
        """The batch R19 would run at the next message, run now (`Planner.fit_now`):
        `compact` ends with it and an over-budget turn runs it before it renders. Its
        merge record (R25) and the views are saved in recovery order."""
        self._need_writer()
        step = self.planner.fit_now()
        if step.batch:
            self._save_record(step)
            self._save_views()
        return step

    def _persist(self, step: Step) -> None:
        """Free nodes, then the batch's merge record (R25): the order recovery relies on."""
        self._save_nodes(step.built, step.built_texts)
        self._save_record(step)

    def _save_record(self, step: Step) -> None:
        """R25: the step's own merge record, with its own t and shrinking flag (P1: a
        replay of several steps once wrote every record with the last step's values)."""
        record = step.record
        if record is not None:
            merged, t, still_open = record
            self.store.append_merge([pair_of(up) for up in merged], t, still_open)
            self.merges += 1

    def _save_views(self) -> None:
        """R22: both views, the view carrying how many merge records it folds (R24)."""
        view, cview = self.planner.saved_views()
        view["version"] = VIEW_VERSION
        view["merges"] = self.merges
        self.store.save_views(view, cview)

    def _save_nodes(self, keys: list[int], texts: list[str | None]) -> None:
        if keys:
            self.store.append_nodes([(*node_of(key), text) for key, text in zip(keys, texts)])

    # -- compactions -----------------------------------------------------------------------

    def built(self, key: int, text: str) -> Step:
        """A compaction built `key`'s line (1 … 512 bytes, R29): save it, then plan."""
        self._need_writer()
        size = len(text.encode())
        if not 1 <= size <= LINE_LIMIT:
            raise BadInput(f"a built line is 1 to {LINE_LIMIT} bytes, not {size}")
        if key not in self.planner.running:
            raise PlannerError(f"node {name(key)} is not running")
        step = self.planner.node_built(key, size, text)
        self._leaf_lines.pop(start(key), None)
        self.store.append_nodes([(*node_of(key), text)] + [(*node_of(k), t) for k, t in zip(step.built, step.built_texts)])
        return step

    def failed(self, key: int) -> Step:
        return self.planner.node_failed(key)

    def start_all(self) -> list[int]:
        return self.planner.start_all()

    def compaction_input(self, key: int) -> list[str]:
        """R28's input: the message's line for a leaf, the two halves' lines for a merge."""
        if level(key) == 0:
            line = self._leaf_lines.get(start(key))
            return [line if line is not None else self.store.message_line(start(key))]
        return [render_line(half, self.node_text(half)) for half in _children(key)]

    def compaction_context(self, key: int) -> list[str]:
        """R27: the compaction view cut at the node, rendered (never a placeholder), at
        most the ceiling (issue 20, P2): past it the oldest lines are dropped
        (`newest_within`), the cut point stays."""
        lines = [render_line(line, self.node_text(line)) for line in self.planner.context(key)]
        return newest_within(lines, self._limit())

    # -- reading -----------------------------------------------------------------------------

    def node_text(self, key: int) -> str | None:
        text = self.planner.tree.text.get(key)
        if text is None:
            text = self.store.node(*node_of(key))
        return text

    def view_lines(self) -> list[str]:
        """R14/R15: the view's lines, oldest first, without tags: the view as it is
        (`everchat view`, status); a request carries `request_view`."""
        return [render_line(key, self.node_text(key)) for key in self.planner.view.ordered()]

    def render_view(self) -> str:
        """R14: `<chat>`, one line per node, `</chat>`."""
        return "<chat>\n" + "".join(line + "\n" for line in self.view_lines()) + "</chat>"

    def request_view(self, fallback: bool = False) -> str:
        """The view as a turn's or an agent's request carries it (R36, R38): R14's view,
        at most the ceiling whatever is built (issue 20, P2; `memory.request_lines`).

        With `fallback` (R36, a wait that ended at its settle timeout) unbuilt lines show
        their message's line cut to 512 bytes, marked as such, newest first, as far as
        the ceiling allows. Rendering only: the saved view never changes (R22, R42)."""
        def marked_start(key: int) -> str:
            return UNSETTLED_MARK + cut_utf8(self.compaction_input(key)[0], LINE_LIMIT)

        lines = request_lines(self.planner.view.ordered(), self.node_text, marked_start if fallback else None,
                              self._limit())
        return "<chat>\n" + "".join(line + "\n" for line in lines) + "</chat>"

    def _limit(self) -> int | None:
        """The bytes a request's view (or compaction context) may carry: the ceiling (R19);
        none when sizes count lines (R20's check)."""
        budget = self.planner.budget
        return budget.ceiling if budget.unit == "bytes" else None

    def render_compaction_view(self) -> str:
        """R21's compaction view rendered as R14 renders the view (placeholders, R15)."""
        lines = [render_line(key, self.node_text(key)) for key in self.planner.cview.ordered()]
        return "<chat>\n" + "".join(line + "\n" for line in lines) + "</chat>"

    def zoom(self, first: int, count: int, page: int = 1) -> str:
        """R35: a line's two halves (count >= 2), or a message whole (count = 1), paged:
        `MemoryTools.zoom`, the model's own tool, so the CLI says what the model reads."""
        return MemoryTools(_Reader(self)).zoom(first, count, page, images=False).text

    def date(self, message: int) -> str:
        """R35: the local date and time message `message` was logged (`MemoryTools.date`)."""
        return MemoryTools(_Reader(self)).date(message)

    def status(self) -> dict:
        planner = self.planner
        return {
            "messages": planner.messages,
            "view_lines": len(planner.view),
            "view_bytes": planner.view.size if planner.budget.unit == "bytes" else None,
            "view_shrinking": planner.view.shrinking,
            "compaction_view_lines": len(planner.cview),
            "compaction_view_bytes": planner.cview.size if planner.budget.unit == "bytes" else None,
            "unbuilt_lines": planner.unbuilt_lines(),
            "ready_merges": len(planner.merge_queue),
            "running": len(planner.running),
            "ceiling": planner.budget.ceiling,
            "floor": planner.budget.floor,
        }

    def verify_views(self) -> None:
        """R24, for `check`: the saved view agrees with every merge record, folded from
        the first (never from the fold checkpoint)."""
        view, _ = self.store.load_views()
        first, _ = records_after(self.store, view)
        check_saved_view(self.store, view, first, writer=False, full=True)

    def _need_writer(self) -> None:
        if not self.writer:
            raise PermissionError("this chat was opened read-only")


class _Reader:
    """`MemoryReader` over a `Planning`: the planner's count and built texts, the store's
    messages and assets."""

    def __init__(self, planning: Planning) -> None:
        self.planning = planning

    def count(self) -> int:
        return self.planning.planner.messages

    def message(self, i: int):
        return self.planning.store.message(i)

    def node(self, l: int, i: int) -> str | None:  # noqa: E741
        return self.planning.node_text(key_of(l, i))

    def asset(self, digest: str) -> bytes:
        return self.planning.store.asset(digest)
