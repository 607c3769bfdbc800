"""What a model request carries of the memory: at most the ceiling, whatever is built.

The one bounded renderer of every request (issue 20, P2; R16, R36's "Our choice" in
docs/SPEC.md): turns and agents carry `request_lines` of the view (R36, R38),
compactions `newest_within` of their context (R27). The saved views are never touched:
this is rendering only (R22, R42), a pure function of the lines, their texts and the
limit, so the same state gives the same bytes (R23's prefix cache).

`request_lines` goes down these steps and stops at the first that fits the limit
(R16's bytes: every line with its newline, tags excluded):

1. the view as it stands (R14, R15), with R36's marked start for every unbuilt line when
   the caller gives them (a settle timeout): exactly what the view is, untouched;
2. each maximal run of unbuilt lines folded into the fewest aligned nodes (`aligned`),
   each an R15 placeholder `id+n|(not summarized yet: zoom it)`: a true line (a node
   over unbuilt leaves is unbuilt) that `zoom(id, n)` opens. Then the marked starts get
   what is left, newest line first, and stop at the first that does not fit;
3. built lines alone over the limit (merges not built yet): the oldest lines are folded
   too, messages 0 … s-1 into the aligned nodes covering them, each reading `FOLDED`,
   for the smallest s that fits; the newest lines stay as step 2 renders them.

Every step covers each message once, in order, with `id+n` heads that name real nodes
(n a power of two, id a multiple of n), so the model's zoom accepts every line it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._nodes import end, key_of, name, render_line, start

__all__ = ["FOLDED", "aligned", "newest_within", "request_lines"]

FOLDED = "(left out of this request to keep the view within its budget: zoom it)"
"""Step 3's text: lines (built or not) the request has no room for; zoom opens them."""


def aligned(first: int, stop: int) -> list[int]:
    """The fewest aligned nodes covering messages `first` … `stop` - 1, oldest first
    (each `id+n` with n a power of two and id a multiple of n, R10)."""
    keys = []
    while first < stop:
        l = (stop - first).bit_length() - 1
        if first:
            l = min(l, (first & -first).bit_length() - 1)
        keys.append(key_of(l, first >> l))
        first += 1 << l
    return keys


def _size(line: str) -> int:
    """R16: a rendered line's bytes with its newline."""
    return len(line.encode()) + 1


def _placeholders(first: int, stop: int) -> list[str]:
    """Step 2: messages `first` … `stop` - 1, all unbuilt, as R15 placeholders of aligned nodes."""
    return [render_line(key, None) for key in aligned(first, stop)]


def request_lines(keys: Sequence[int], text_of: Callable[[int], str | None],
                  start_of: Callable[[int], str] | None = None, limit: int | None = None) -> list[str]:
    """The view's lines as a request carries them, at most `limit` bytes (R16), without tags.

    `keys` are the view's lines oldest first (R13), `text_of(key)` a line's built text
    (None: unbuilt, then a leaf), `start_of(key)` the marked start R36 shows for an
    unbuilt line after a settle timeout (None: no timeout), `limit` the ceiling (None:
    no bound). The module docstring gives the steps. A limit below the fold of the whole
    chat (step 3 with nothing kept: at most 64 lines) gets that fold, the least there is.
    """
    view = _Lines(keys, text_of, start_of)
    whole = view.whole(limit)
    if whole is not None:
        return whole
    if view.compact_size() <= limit:
        return view.compact(limit)
    return view.folded(limit)


class _Lines:
    """One rendering's lines and sizes. Unbuilt lines come in runs: `items` holds
    ("line", p) for a built line and ("run", a, b) for the unbuilt lines at positions
    a … b-1 (consecutive messages: only leaves are unbuilt, R18)."""

    def __init__(self, keys: Sequence[int], text_of, start_of) -> None:
        self.keys = keys
        self.start_of = start_of
        texts = [text_of(key) for key in keys]
        self.lines = [render_line(key, text) for key, text in zip(keys, texts)]
        self.sizes = [_size(line) for line in self.lines]
        self.unbuilt = [p for p, text in enumerate(texts) if text is None]
        self.starts: dict[int, str] = {}  # position -> its marked-start line, read once
        self.items: list[tuple] = []
        p = 0
        while p < len(keys):
            a = p
            while p < len(keys) and texts[p] is None:
                p += 1
            if p > a:
                self.items.append(("run", a, p))
            else:
                self.items.append(("line", p))
                p += 1

    def marked(self, p: int) -> str:
        if p not in self.starts:
            self.starts[p] = render_line(self.keys[p], self.start_of(self.keys[p]))
        return self.starts[p]

    def run_lines(self, a: int, b: int) -> list[str]:
        """Positions a … b-1 of a run, folded (step 2); none when a == b."""
        return _placeholders(start(self.keys[a]), start(self.keys[b - 1]) + 1) if b > a else []

    def item_lines(self, item: tuple) -> list[str]:
        return [self.lines[item[1]]] if item[0] == "line" else self.run_lines(item[1], item[2])

    def item_size(self, item: tuple) -> int:
        return sum(map(_size, self.item_lines(item)))

    # -- the steps -------------------------------------------------------------------

    def whole(self, limit: int | None) -> list[str] | None:
        """Step 1: the view untouched (with every marked start, if asked), or None."""
        total = sum(self.sizes)
        if self.start_of is None or not self.unbuilt:
            return self.lines if limit is None or total <= limit else None
        for p in reversed(self.unbuilt):  # newest first: a line that does not fit reads no more starts
            total += _size(self.marked(p)) - self.sizes[p]
            if limit is not None and total > limit:
                return None
        return [self.starts.get(p, line) for p, line in enumerate(self.lines)]

    def compact_size(self) -> int:
        return sum(map(self.item_size, self.items))

    def compact(self, limit: int) -> list[str]:
        """Step 2: runs folded, then marked starts from the newest unbuilt line back, while
        they fit; the first that does not fit ends them."""
        spent = self.compact_size()
        shown: dict[int, int] = {}  # run item -> its first position shown with its start
        for k in range(len(self.items) - 1, -1, -1) if self.start_of is not None else ():
            kind, a, *rest = self.items[k]
            if kind != "run":
                continue
            for q in range(rest[0] - 1, a - 1, -1):
                grown = (spent - sum(map(_size, self.run_lines(a, q + 1))) + sum(map(_size, self.run_lines(a, q)))
                         + _size(self.marked(q)))
                if grown > limit:
                    return self._assemble(shown)
                spent, shown[k] = grown, q
        return self._assemble(shown)

    def _assemble(self, shown: dict[int, int]) -> list[str]:
        out: list[str] = []
        for k, item in enumerate(self.items):
            if item[0] == "line":
                out.append(self.lines[item[1]])
                continue
            a, b = item[1], item[2]
            cut = shown.get(k, b)
            out += self.run_lines(a, cut) + [self.marked(q) for q in range(cut, b)]
        return out

    def folded(self, limit: int) -> list[str]:
        """Step 3: messages 0 … s-1 folded for the smallest item boundary s whose rest
        (step 2's lines, no marked starts) fits; at worst the whole chat folded."""
        sizes = [self.item_size(item) for item in self.items]
        kept = sum(sizes)
        messages = end(self.keys[-1])
        for k in range(len(self.items) + 1):
            first = start(self.keys[self.items[k][1]]) if k < len(self.items) else messages
            out = [f"{name(key)}|{FOLDED}" for key in aligned(0, first)]
            if k == len(self.items) or sum(map(_size, out)) + kept <= limit:
                break
            kept -= sizes[k]
        for item in self.items[k:]:
            out += self.item_lines(item)
        return out


def newest_within(lines: Sequence[str], limit: int | None) -> list[str]:
    """R27's context within `limit` bytes (R16): its newest lines, the oldest dropped.

    A compaction cannot zoom (R26 forbids its tools) and reads no placeholder (R27), so
    its context is cut, not folded; the lines just before the node, which its line
    continues, stay."""
    if limit is None:
        return list(lines)
    total = 0
    for k in range(len(lines) - 1, -1, -1):
        total += _size(lines[k])
        if total > limit:
            return list(lines[k + 1:])
    return list(lines)
