"""The planner's work with the chat folder: plan, persist in recovery order, read.

`Planning` fixes the order in which a message's consequences reach the disk
(message, free nodes, merge record, views) so that a crash between any two leaves
a chat that `recover` brings back. The planner actor wraps it with a store proxy
that asks the log writer; `Chat` wraps it with the store itself.
"""

from __future__ import annotations

from pathlib import Path

from everchat.actors.memory import (
    cut_utf8,
    LINE_LIMIT,
    Budget,
    Planner,
    PlannerError,
    Step,
    key_of,
    level,
    name,
    node_of,
    pair_of,
    recover,
    refold,
    render_line,
    start,
)
from everchat.actors.memory import children as _children
from everchat.actors.store import BadInput, CorruptRecord

__all__ = ["Planning", "ZoomError", "ZOOM_PAGE_BYTES"]

UNSETTLED_MARK = "(not summarized yet, first 512 bytes) "
"""R36: how an unbuilt line reads when a turn stopped waiting for it."""

ZOOM_PAGE_BYTES = 16_000
"""R35: `zoom(id, 1)` returns a message in pages of 16,000 bytes."""


class ZoomError(ValueError):
    """A `zoom` or `date` call with arguments that name no line (R35)."""


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

    @classmethod
    def recover(cls, store, budget: Budget | None = None, writer: bool = True) -> "Planning":
        """Bring the planner back from the store (R22, R24); a writer saves what it redid.

        Costs O(view): the saved view, its lines' ancestors and the merge
        records after it, never the whole history.
        """
        view, cview = store.load_views()
        after = -1 if view is None else view["t"]
        records = store.merge_records(after_t=after)
        try:
            planner, rebuilt, steps = recover(budget or Budget(), store.message_count, store, records, view, cview)
        except PlannerError as error:
            raise CorruptRecord(str(Path(store.path) / "view.json"), 0, str(error)) from None
        planning = cls(store, planner, writer)
        if writer:
            planning._save_nodes(rebuilt, [planner.tree.text[key] for key in rebuilt])
            for step in steps:
                planning._persist(step)
            if rebuilt or steps or view is None or cview is None:
                store.save_views(*planner.saved_views())
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
        records = []
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
            if step.batch:
                records.append(([pair_of(up) for up in step.merged], self.planner.messages,
                                self.planner.view.shrinking))
            steps.append(step)
        # The group's consequences reach the disk in recovery order, each kind in one write:
        # free nodes, then the batches' merge records (R25), then the views (R22). A crash
        # in between leaves messages logged but not planned, which recovery plans again.
        self._save_nodes(built, texts)
        for merges, t, still_open in records:
            self.store.append_merge(merges, t, still_open)
        if steps:
            self.store.save_views(*self.planner.saved_views())
        return steps

    def _persist(self, step: Step) -> None:
        """Free nodes, then the batch's merge record (R25): the order recovery relies on."""
        self._save_nodes(step.built, step.built_texts)
        if step.batch:
            merges = [pair_of(up) for up in step.merged]
            self.store.append_merge(merges, self.planner.messages, self.planner.view.shrinking)

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
        """R27: the compaction view cut at the node, rendered (never a placeholder)."""
        return [render_line(line, self.node_text(line)) for line in self.planner.context(key)]

    # -- reading -----------------------------------------------------------------------------

    def node_text(self, key: int) -> str | None:
        text = self.planner.tree.text.get(key)
        if text is None:
            text = self.store.node(*node_of(key))
        return text

    def view_lines(self, fallback: bool = False) -> list[str]:
        """R14/R15: the view's lines, oldest first, without tags.

        With `fallback` (R36, a turn that waited past its settle timeout) an
        unbuilt line shows its message's line cut to 512 bytes, marked as such.
        """
        lines = []
        for key in self.planner.view.ordered():
            text = self.node_text(key)
            if text is None and fallback:
                text = UNSETTLED_MARK + cut_utf8(self.compaction_input(key)[0], LINE_LIMIT)
            lines.append(render_line(key, text))
        return lines

    def render_view(self, fallback: bool = False) -> str:
        """R14: `<chat>`, one line per node, `</chat>`."""
        return "<chat>\n" + "".join(line + "\n" for line in self.view_lines(fallback)) + "</chat>"

    def zoom(self, first: int, count: int, page: int = 1) -> str:
        """R35: a line's two halves (count >= 2), or a message whole (count = 1), paged."""
        messages = self.planner.messages
        if (
            not isinstance(first, int)
            or not isinstance(count, int)
            or count < 1
            or count & (count - 1)
            or first < 0
            or first % count
            or first + count > messages
        ):
            raise ZoomError(f"No line {first}+{count}.")
        if count >= 2:
            up = key_of(count.bit_length() - 1, first // count)
            return "\n".join(render_line(half, self.node_text(half)) for half in _children(up))
        record = self.store.message(first)
        pages = _pages(f"{record.kind}: {record.text}")
        if not isinstance(page, int) or not 1 <= page <= len(pages):
            plural = "s" if len(pages) > 1 else ""
            raise ZoomError(f"Message {first} has {len(pages)} page{plural}, not page {page}.")
        chunk = pages[page - 1]
        if record.images:
            chunk += "\n" + "\n".join(f"[image {digest}]" for digest in record.images)
        if page < len(pages):
            chunk += f"\n(page {page} of {len(pages)}: zoom({first}, 1, page={page + 1}) for the rest)"
        return chunk

    def date(self, message: int) -> str:
        if not isinstance(message, int) or not 0 <= message < self.planner.messages:
            raise ZoomError(f"No message {message}.")
        return self.store.message(message).date

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
        """R24: the saved view must agree with the view refolded from the merge records."""
        view, _ = self.store.load_views()
        if view is None:
            return
        t, lines, shrinking = refold(self.store.merge_records(after_t=-1))
        if t > view["t"]:
            return  # saved before its last batch's record: recovery folds it forward
        if not shrinking:
            lines += [(0, leaf) for leaf in range(t, view["t"])]
            t = view["t"]
        if t == view["t"] and [list(pair) for pair in lines] != [list(pair) for pair in view["view"]]:
            raise CorruptRecord(
                str(Path(self.store.path) / "view.json"),
                0,
                "view.json disagrees with the view refolded from the merge records (R24)",
            )

    def _need_writer(self) -> None:
        if not self.writer:
            raise PermissionError("this chat was opened read-only")


def _pages(text: str) -> list[str]:
    """R35: a message's line in pages of at most 16,000 bytes, cut between characters."""
    body = text.encode()
    pages = []
    begin = 0
    while True:
        stop = min(len(body), begin + ZOOM_PAGE_BYTES)
        while stop < len(body) and (body[stop] & 0xC0) == 0x80:
            stop -= 1  # never cut inside a character
        pages.append(body[begin:stop].decode())
        if stop >= len(body):
            return pages
        begin = stop
