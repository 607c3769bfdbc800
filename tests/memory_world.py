"""A deterministic world for the planner core: an in-memory chat folder.

`World` drives the production `Planner` and keeps what the chat folder would keep
(message lines, every built node's text, merge records, saved views), so tests can
restart the planner from it exactly as the log writer's files would let it. It
also holds brute-force checkers written straight from docs/SPEC.md, to compare with
the planner's fast paths.
"""

from __future__ import annotations

from fractions import Fraction

from everchat.actors.memory import (
    LINE_LIMIT,
    Budget,
    Planner,
    children,
    end,
    key_of,
    level,
    name,
    node_of,
    pair_of,
    parent,
    recover,
    render_line,
    start,
)

__all__ = ["World", "most_due_pair", "rendered_size", "is_cover"]


class World:
    """One chat: the planner plus the files it would have written."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.planner = Planner(budget)
        self.lines: list[str] = []  # message i's `kind: text` line
        self.nodes: dict[int, str] = {}  # every built node ever, by key
        self.records: list[tuple[list[tuple[int, int]], int, bool]] = []
        self.saved: tuple[dict, dict] | None = None

    # -- events, with the persistence the log writer does ------------------------

    def message(self, line: str):
        self.lines.append(line)
        step = self.planner.add_message(len(line.encode()), line)
        self._keep(step)
        return step

    def build(self, key: int, text: str):
        step = self.planner.node_built(key, len(text.encode()), text)
        self.nodes[key] = text
        self._keep(step)
        return step

    def fail(self, key: int):
        return self.planner.node_failed(key)

    def _keep(self, step) -> None:
        assert len(step.built) == len(step.built_texts)
        for key, text in zip(step.built, step.built_texts):
            self.nodes[key] = text
        if step.batch:
            self.records.append(([pair_of(up) for up in step.merged], self.planner.messages, self.planner.view.shrinking))
        self.saved = self.planner.saved_views()

    def free_text(self, key: int) -> str:
        """R11's text of a free node, from the world's own files."""
        if level(key) == 0:
            return self.lines[start(key)]
        left, right = children(key)
        return self.nodes[left] + "\n" + self.nodes[right]

    # -- restarts ------------------------------------------------------------------

    def node(self, l: int, i: int) -> str | None:
        return self.nodes.get(key_of(l, i))

    def message_line(self, i: int) -> str:
        return self.lines[i]

    def restart(self, lose_view: bool = False, lose_cview: bool = False) -> Planner:
        """Restore from the saved views (R22), or refold the merge records (R24)."""
        view, cview = self.saved or self.planner.saved_views()
        if lose_view:
            view = cview = None
        elif lose_cview:
            cview = None
        after = [record for record in self.records if view is None or record[1] > view["t"]]
        planner, rebuilt, steps = recover(self.budget, len(self.lines), self, after, view, cview)
        self.planner = planner
        for key in rebuilt:
            self.nodes.setdefault(key, planner.tree.text[key])
        for step in steps:
            self._keep(step)
        self.saved = planner.saved_views()
        return planner


def rendered_size(keys: list[int], texts: dict[int, str], count_lines: bool) -> int:
    """R16 from scratch: rendered lines' bytes with newlines, placeholders for unbuilt."""
    if count_lines:
        return len(keys)
    return sum(len(render_line(key, texts.get(key)).encode()) + 1 for key in keys)


def most_due_pair(keys: list[int], built: set[int] | dict, messages: int) -> int | None:
    """R18 from scratch: the parent of the most due sibling pair with a built parent.

    Exact fractions; on equal due the leftmost pair. None when no pair can merge.
    """
    best = None
    for left, right in zip(keys, keys[1:]):
        l, i = node_of(left)
        if level(right) != l or i % 2 or node_of(right)[1] != i + 1:
            continue
        up = parent(left)
        if up not in built:
            continue
        last = (i + 2) * 2**l - 1
        due = Fraction(messages - last, 2**l)
        if best is None or due > best[0]:
            best = (due, up)
    return None if best is None else best[1]


def is_cover(keys: list[int], messages: int) -> bool:
    """R13: the lines cover 0 … T-1 exactly once, contiguously, oldest first."""
    expect = 0
    for key in keys:
        if start(key) != expect or start(key) % (end(key) - start(key)):
            return False
        expect = end(key)
    return expect == messages


assert LINE_LIMIT == 512 and name(key_of(3, 5)) == "40+8"  # R10's worked name
