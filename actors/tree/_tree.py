"""The planner's window on the tree: which nodes are built, and the free cascade.

The whole tree of a long chat does not fit in memory, and the planner never needs
it: every node it asks about is a view line, a compaction-view line or an ancestor
of one (a built node's descendants are all built, since a node is only built from
its built children, R10-R12). So `Tree` holds that frontier only, and `forget`
drops nodes that fell below it.
"""

from __future__ import annotations

from ._nodes import _SPAN_HEAD, LEVEL_BITS, LINE_LIMIT, children, parent

_LEVEL_MASK = (1 << LEVEL_BITS) - 1

__all__ = ["Tree"]


class Tree:
    """Built nodes at or above the view, by key (see `_nodes`).

    Each built node has its text's UTF-8 size (`raw`, used by the free rule R11)
    and its rendered line's size (`line`, R16). Texts are kept when the caller
    gives them (a real chat); scenario runs give sizes only.
    """

    __slots__ = ("raw", "line", "text")

    def __init__(self) -> None:
        self.raw: dict[int, int] = {}
        self.line: dict[int, int] = {}
        self.text: dict[int, str] = {}

    def is_built(self, key: int) -> bool:
        return key in self.raw

    def add(self, key: int, raw_size: int, text: str | None) -> None:
        """Record one built node (no cascade)."""
        rendered = raw_size
        if text is not None:
            self.text[key] = text
            # R14 turns CR LF into one space; a lone CR or LF keeps its one byte.
            rendered -= text.count("\r\n")
        self.raw[key] = raw_size
        # R16: "id+n|" + the rendered text + the newline (header_bytes, inlined).
        self.line[key] = len(str(key >> LEVEL_BITS)) + _SPAN_HEAD[key & _LEVEL_MASK] + rendered + 1

    def build(self, key: int, raw_size: int, text: str | None, built: list[int]) -> int:
        """R11: record `key` as built, then build free parents upward at once.

        Appends every node built (`key` first) to `built`. Returns the key of the
        parent that became ready for a compaction (both halves built, not free),
        or -1.
        """
        self.add(key, raw_size, text)
        built.append(key)
        raw, texts = self.raw, self.text
        while True:
            # The bit tricks of _nodes.sibling and _nodes.parent, inlined: this
            # loop runs for every node of the tree.
            l = key & _LEVEL_MASK
            first = key >> LEVEL_BITS
            other = key ^ ((1 << l) << LEVEL_BITS)
            other_raw = raw.get(other)
            if other_raw is None:
                return -1
            up = ((first >> (l + 1)) << (l + 1 + LEVEL_BITS)) | (l + 1)
            if up in raw:  # restore may revisit a node that is already joined
                return -1
            joined = raw[key] + 1 + other_raw
            if joined > LINE_LIMIT:
                return up
            left, right = (other, key) if first & (1 << l) else (key, other)
            left_text, right_text = texts.get(left), texts.get(right)
            joined_text = None
            if left_text is not None and right_text is not None:
                joined_text = left_text + "\n" + right_text
            self.add(up, joined, joined_text)
            built.append(up)
            key = up

    def forget(self, key: int) -> None:
        """Drop a node that fell below the frontier (it stays built on disk)."""
        self.raw.pop(key, None)
        self.line.pop(key, None)
        self.text.pop(key, None)

    def ready_parent(self, key: int) -> int:
        """The parent of `key` if both its halves are built and it is not, else -1."""
        up = parent(key)
        if up in self.raw:
            return -1
        left, right = children(up)
        if left in self.raw and right in self.raw:
            return up
        return -1

    def __len__(self) -> int:
        return len(self.raw)

    def __repr__(self) -> str:
        return f"<Tree frontier of {len(self.raw)} built nodes>"

