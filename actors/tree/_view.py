"""A view: the lines that cover messages 0 … T-1 once each, and its fit (R13-R19).

The same class serves the chat's view and the compaction view (R21); only their
budgets differ.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from ._nodes import LEVEL_BITS, parent, placeholder_bytes, sibling
from ._tree import Tree

__all__ = ["View"]

_LEVEL_MASK = (1 << LEVEL_BITS) - 1

# Dues are compared exactly (R18): (T - last) / 2**l is ordered like the integer
# (T - last) << (_DUE_SHIFT - l), since l never exceeds _DUE_SHIFT.
_DUE_SHIFT = 1 << LEVEL_BITS


class View:
    """Lines oldest first, their size by R16 (or their count), the shrinking flag.

    `candidates` holds the parents of sibling line pairs whose parent is built:
    exactly the merges R18 may choose from. It is kept up to date as lines come
    and go and nodes get built, so a fit never scans the view (issue: a batch
    costs O(V log V)).
    """

    __slots__ = ("lines", "members", "size", "shrinking", "candidates", "count_lines", "_sorted")

    def __init__(self, count_lines: bool = False) -> None:
        self.lines: list[int] = []
        self.members: set[int] = set()
        self.size = 0
        self.shrinking = False
        self.candidates: set[int] = set()
        self.count_lines = count_lines
        self._sorted = True

    # -- sizes ---------------------------------------------------------------

    def line_size(self, key: int, tree: Tree) -> int:
        """R16: a line's bytes with its newline; unbuilt lines as placeholders."""
        if self.count_lines:
            return 1
        size = tree.line.get(key)
        return placeholder_bytes(key) if size is None else size

    # -- changes ---------------------------------------------------------------

    def append(self, key: int, tree: Tree) -> None:
        """R17: a new message's leaf goes at the end."""
        if not self._sorted:
            self.ordered()
        self.lines.append(key)
        members = self.members
        members.add(key)
        if self.count_lines:
            self.size += 1
        else:
            size = tree.line.get(key)
            self.size += placeholder_bytes(key) if size is None else size
        if key & (1 << LEVEL_BITS) and key - (1 << LEVEL_BITS) in members:
            # A right leaf beside its left sibling: a pair, if their parent is built.
            up = ((key >> (LEVEL_BITS + 1)) << (LEVEL_BITS + 1)) | 1
            if up in tree.raw:
                self.candidates.add(up)

    def on_leaf_built(self, key: int, tree: Tree, unbuilt_size: int) -> None:
        """A leaf got built: if it is a line, its size changes from `unbuilt_size` (R16)."""
        if key in self.members and not self.count_lines:
            self.size += tree.line[key] - unbuilt_size

    def on_parent_built(self, up: int, tree: Tree) -> None:
        """A parent got built: if its halves are both lines, they may merge (R18)."""
        left = up - 1  # the left half's key: same first message, one level down
        members = self.members
        if left in members and left + ((1 << ((up & _LEVEL_MASK) - 1)) << LEVEL_BITS) in members:
            self.candidates.add(up)

    def _note_pair(self, key: int, tree: Tree) -> None:
        """If `key` and its sibling are both lines and their parent is built, they may merge."""
        if sibling(key) in self.members:
            up = parent(key)
            if up in tree.raw:
                self.candidates.add(up)

    def fit(self, floor: int, messages: int, tree: Tree) -> list[int]:
        """R18/R19: merge the most due built pairs until size <= floor or none is left.

        Returns the parents merged, in order. Sets `shrinking` (R19).
        """
        merged: list[int] = []
        if self.size > floor and self.candidates:
            heap = [_entry(up, messages) for up in self.candidates]
            heapify(heap)
            members, candidates = self.members, self.candidates
            count_lines, line_of, raw = self.count_lines, tree.line, tree.raw
            size = self.size
            while size > floor and heap:
                up = heappop(heap)[1]
                candidates.discard(up)
                # The halves, sibling and parent of `up` (see _nodes), inlined: this
                # loop runs for every merge of both views.
                l = up & _LEVEL_MASK
                half = (1 << (l - 1)) << LEVEL_BITS
                left = up - 1
                right = left + half
                members.discard(left)
                members.discard(right)
                members.add(up)
                if count_lines:
                    size -= 1
                else:
                    size += line_of[up] - line_of[left] - line_of[right]
                merged.append(up)
                if up ^ (half << 1) in members:
                    grand = ((up >> (LEVEL_BITS + l + 1)) << (LEVEL_BITS + l + 1)) | (l + 1)
                    if grand in raw:
                        candidates.add(grand)
                        heappush(heap, _entry(grand, messages))
            self.size = size
            if merged:
                self._sorted = False
        self.shrinking = self.size > floor
        return merged

    # -- reading ---------------------------------------------------------------

    def ordered(self) -> list[int]:
        """The lines oldest first (R13)."""
        if not self._sorted:
            self.lines = sorted(self.members)
            self._sorted = True
        return self.lines

    def copy(self) -> "View":
        other = View(self.count_lines)
        other.lines = list(self.ordered())
        other.members = set(self.members)
        other.size = self.size
        other.shrinking = self.shrinking
        other.candidates = set(self.candidates)
        return other

    def load(self, keys: list[int], shrinking: bool, tree: Tree) -> None:
        """Replace the lines by saved ones (R22) and recount size and candidates."""
        self.lines = list(keys)
        self.members = set(keys)
        self._sorted = True
        self.shrinking = shrinking
        self.size = sum(self.line_size(key, tree) for key in keys)
        self.candidates = set()
        for key in keys:
            self._note_pair(key, tree)

    def __len__(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        return f"<View of {len(self.members)} lines, size {self.size}, shrinking={self.shrinking}>"


def _entry(up: int, messages: int) -> tuple[int, int]:
    """The heap entry of the pair under `up`: the most due pair pops first, then the leftmost.

    The pair's halves have level l = level(up) - 1 and its last message is
    end(up) - 1, so due = (T - end(up) + 1) / 2**l (R18), ordered exactly like
    the integer (T - end(up) + 1) << (_DUE_SHIFT - l). Keys order by first message.
    """
    l = up & _LEVEL_MASK
    due = (messages - (up >> LEVEL_BITS) - (1 << l) + 1) << (_DUE_SHIFT - l + 1)
    return (-due, up)
