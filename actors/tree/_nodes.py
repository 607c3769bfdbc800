"""Tree nodes as small integers, and how a node's line renders (R10, R14-R16).

A node `(l, i)` covers the 2**l messages from `id = i * 2**l` (R10). The planner
handles millions of node look-ups, so a node is one int, its *key*:
`key = (id << 6) | l`. Sorting keys sorts lines by their first message, which is
the view's order (R13), and a key's level, span and neighbours are bit tricks.
"""

from __future__ import annotations

__all__ = [
    "LEVEL_BITS",
    "PLACEHOLDER",
    "LINE_LIMIT",
    "key_of",
    "node_of",
    "level",
    "start",
    "span",
    "end",
    "parent",
    "children",
    "sibling",
    "is_right",
    "name",
    "header_bytes",
    "render_text",
    "line_bytes",
    "placeholder_bytes",
    "render_line",
    "cut_utf8",
]

LEVEL_BITS = 6
_LEVEL_MASK = (1 << LEVEL_BITS) - 1

LINE_LIMIT = 512
"""R10: every tree line is at most 512 UTF-8 bytes."""

PLACEHOLDER = "(not summarized yet: zoom it)"
"""R15: the text of a view line whose node is not built yet."""


def key_of(l: int, i: int) -> int:
    """The key of node `(l, i)`."""
    return ((i << l) << LEVEL_BITS) | l


def node_of(key: int) -> tuple[int, int]:
    """The `(l, i)` of a key."""
    l = key & _LEVEL_MASK
    return l, (key >> LEVEL_BITS) >> l


def level(key: int) -> int:
    return key & _LEVEL_MASK


def start(key: int) -> int:
    """The first message the node covers (its `id`)."""
    return key >> LEVEL_BITS


def span(key: int) -> int:
    """How many messages the node covers (its `n`)."""
    return 1 << (key & _LEVEL_MASK)


def end(key: int) -> int:
    """One past the last message the node covers."""
    return (key >> LEVEL_BITS) + (1 << (key & _LEVEL_MASK))


def parent(key: int) -> int:
    l = (key & _LEVEL_MASK) + 1
    first = ((key >> LEVEL_BITS) >> l) << l
    return (first << LEVEL_BITS) | l


def children(key: int) -> tuple[int, int]:
    """The left and right child of a node of level >= 1."""
    l = (key & _LEVEL_MASK) - 1
    first = key >> LEVEL_BITS
    return (first << LEVEL_BITS) | l, ((first + (1 << l)) << LEVEL_BITS) | l


def sibling(key: int) -> int:
    return key ^ ((1 << (key & _LEVEL_MASK)) << LEVEL_BITS)


def is_right(key: int) -> bool:
    """True for the right child of its parent (odd `i`)."""
    return bool((key >> LEVEL_BITS) & (1 << (key & _LEVEL_MASK)))


def name(key: int) -> str:
    """The node's name `id+n` (R10)."""
    return f"{key >> LEVEL_BITS}+{1 << (key & _LEVEL_MASK)}"


# The bytes of "+n|" for each level: n = 2**l in decimal, then the two marks.
_SPAN_HEAD = tuple(len(str(1 << l)) + 2 for l in range(1 << LEVEL_BITS))


def header_bytes(key: int) -> int:
    """Bytes of the rendered head `id+n|` (ASCII digits)."""
    return len(str(key >> LEVEL_BITS)) + _SPAN_HEAD[key & _LEVEL_MASK]


def render_text(text: str) -> str:
    """R14: every CR LF, CR and LF of a node's text becomes one space."""
    if "\r" in text:
        text = text.replace("\r\n", " ").replace("\r", " ")
    return text.replace("\n", " ")


def line_bytes(key: int, rendered_text_bytes: int) -> int:
    """R16: a built line's size, its trailing newline included."""
    return header_bytes(key) + rendered_text_bytes + 1


_PLACEHOLDER_BYTES = len(PLACEHOLDER.encode())


def placeholder_bytes(key: int) -> int:
    """R15/R16: an unbuilt line counts as its placeholder line."""
    return len(str(key >> LEVEL_BITS)) + _SPAN_HEAD[key & _LEVEL_MASK] + _PLACEHOLDER_BYTES + 1


def render_line(key: int, text: str | None) -> str:
    """R14/R15: one view line without its newline; `None` is an unbuilt node."""
    body = PLACEHOLDER if text is None else render_text(text)
    return f"{name(key)}|{body}"


def cut_utf8(text: str, limit: int) -> str:
    """The longest prefix of `text` that is at most `limit` UTF-8 bytes."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore")
