"""A consistent cut of the log, taken by a reader while a writer may append (R1-R5).

The log is append-only and every record is fsynced before it is acknowledged (R4), so a
reader that knows a message count N and a merge record count K can copy a chat as it
was once N messages were logged and K merge records folded, without the lock (R5):

- `main/`: each day file up to the end of message N-1 (byte for byte: the offsets, and so
  `repairs.json`'s spans and `chat.json`'s `sealed_from`, stay true);
- `tree/`: the records of the tree's day files (up to their size when the cut began) that
  belong to the cut: every node covering only messages < N (R10), the first K merge
  records (R25). Nodes of later messages and later merge records are left out, as are torn
  lines (R2) and the spans `repairs.json` lists, so the tree is rewritten line by line
  and the positions that name tree bytes are moved to match (`tree_position`);
- the images (R9) the messages < N reference, found while `main/` is copied.

The cut reads through the store's day files and checks each record it parses (P3): the
tree's every record, the messages that carry images. What it yields is streamed, one
line or one block at a time; nothing holds a whole file.

    cut = store.cut(messages, merges)
    for rel, chunks in cut.main_files(): ...     # then cut.images
    for rel, chunks in cut.tree_files(): ...     # then cut.tree_position(...), cut.kept_repairs()
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ._daylog import DayLog
from ._errors import CorruptRecord
from ._records import Malformed, parse_message, parse_tree
from ._scan import Repair

__all__ = ["LogCut"]

_BLOCK = 1 << 20


class LogCut:
    """The cut of one chat at N messages and K merge records (see the module docstring).

    Made by `ChatStore.cut` from a reader's open store. `main_files` and `tree_files` are
    generators of `(relative path, chunks)`; each file's chunks must be consumed before the
    next file is asked for. After `main_files`: `images`, the digests referenced; after
    `tree_files`: `nodes`, `merges_kept` and `tree_position`."""

    def __init__(self, chat: Path, main: DayLog, tree: DayLog, messages: int, merges: int,
                 main_end: tuple[int, int], repairs: set[Repair]) -> None:
        self.chat = chat
        self.messages = messages
        self.merges = merges
        self.main_end = main_end
        self.images: set[str] = set()
        self.nodes = 0
        self.merges_kept = 0
        self._main, self._tree = main, tree
        self._repairs = repairs
        self._main_sizes: dict[str, int] = {}
        # tree: the stop position measured when the cut began, and the moves of positions
        days = tree.days()
        self._tree_stop = (days[-1], tree.size(days[-1]) or 0) if days else (0, 0)
        self._moves: dict[int, list[tuple[int, int]]] = {}  # ordinal -> [(old offset, new offset)]

    def __repr__(self) -> str:
        return f"<LogCut {self.chat} N={self.messages} K={self.merges}>"

    # -- main/ ---------------------------------------------------------------------------

    def main_files(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        """Each day file of `main/` that holds messages < N, with its bytes up to the end
        of message N-1 (R1, R2: a prefix of the log, so every offset stays true)."""
        end_ordinal, end_offset = self.main_end
        if not end_ordinal:
            return
        for ordinal in self._main.days():
            if ordinal > end_ordinal:
                return
            rel = self._main.rel(ordinal)
            stop = end_offset if ordinal == end_ordinal else None
            yield rel, self._main_lines(ordinal, rel, stop)

    def _main_lines(self, ordinal: int, rel: str, stop: int | None) -> Iterator[bytes]:
        """The lines of one main day file up to `stop` (complete lines only), gathered into
        blocks; each message that carries images adds them to `images` (R9)."""
        block, offset = bytearray(), 0
        for ordinal_, offset_, line, terminated in self._main.lines_from(
                (ordinal, 0), (ordinal, stop) if stop is not None else None):
            if ordinal_ != ordinal:
                break
            if not terminated:
                break  # a torn last line (R2) is no record of the cut
            if b'"images"' in line and Repair(rel, offset_, len(line)) not in self._repairs:
                self._note_images(ordinal, offset_, line, rel)
            block += line
            block += b"\n"
            offset = offset_ + len(line) + 1
            if len(block) >= _BLOCK:
                yield bytes(block)
                block.clear()
        if block:
            yield bytes(block)
        self._main_sizes[rel] = offset

    def _note_images(self, ordinal: int, offset: int, line: bytes, rel: str) -> None:
        try:
            rec = parse_message(line, self._main.sealed(ordinal, offset))
        except Malformed as exc:
            raise CorruptRecord(self.chat / rel, offset, str(exc)) from None
        self.images.update(rec.get("images", ()))

    # -- tree/ ---------------------------------------------------------------------------

    def tree_files(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        """Each day file of `tree/` up to the size it had when the cut began, holding only
        the records of the cut: nodes of messages < N, the first K merge records (R25)."""
        stop_ordinal = self._tree_stop[0]
        if not stop_ordinal:
            return
        for ordinal in self._tree.days():
            if ordinal > stop_ordinal:
                return
            yield self._tree.rel(ordinal), self._tree_lines(ordinal)

    def _tree_lines(self, ordinal: int) -> Iterator[bytes]:
        stop = self._tree_stop[1] if ordinal == self._tree_stop[0] else None
        rel = self._tree.rel(ordinal)
        moves = self._moves[ordinal] = []
        block, written = bytearray(), 0
        for ordinal_, offset, line, terminated in self._tree.lines_from(
                (ordinal, 0), (ordinal, stop) if stop is not None else None):
            if ordinal_ != ordinal:
                break
            moves.append((offset, written + len(block)))
            if not terminated or Repair(rel, offset, len(line)) in self._repairs:
                continue  # a torn line (R2) or a span a writer terminated: no record
            if not self._keep(ordinal, offset, line, rel):
                continue
            block += line
            block += b"\n"
            if len(block) >= _BLOCK:
                written += len(block)
                yield bytes(block)
                block.clear()
        written += len(block)
        moves.append((1 << 62, written))
        if block:
            yield bytes(block)

    def _keep(self, ordinal: int, offset: int, line: bytes, rel: str) -> bool:
        try:
            rec = parse_tree(line, self._tree.sealed(ordinal, offset))
        except Malformed as exc:
            raise CorruptRecord(self.chat / rel, offset, str(exc)) from None
        if rec[0] == "node":
            _, level, i, _ = rec
            if (i + 1) << level > self.messages:
                return False
            self.nodes += 1
            return True
        if self.merges_kept >= self.merges:
            return False
        if rec[2] > self.messages:
            raise CorruptRecord(self.chat / rel, offset, f"merge record {self.merges_kept} has t={rec[2]}, "
                                f"past the cut's {self.messages} messages (R25)")
        self.merges_kept += 1
        return True

    def tree_position(self, position: tuple[int, int]) -> tuple[int, int]:
        """Where a position of the original `tree/` lands in the cut's rewritten `tree/`
        (for `chat.json`'s `sealed_from`): before the first line at or after it."""
        ordinal, offset = position
        moves = self._moves.get(ordinal)
        if moves is None:
            return position if ordinal > self._tree_stop[0] else (ordinal, 0)
        for old, new in moves:
            if old >= offset:
                return ordinal, new
        return ordinal, moves[-1][1]

    def main_length(self, rel: str) -> int:
        """How many bytes of main day file `rel` the cut copied (0 when none)."""
        return self._main_sizes.get(rel, 0)

    def kept_repairs(self) -> list[Repair]:
        """The spans of `repairs.json` that the cut copied: those of `main/` inside its
        copied bytes (the tree's were left out with their lines)."""
        return [r for r in sorted(self._repairs)
                if r.file.startswith("main/") and r.offset + r.length + 1 <= self.main_length(r.file)]
