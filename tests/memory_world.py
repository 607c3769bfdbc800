"""A deterministic world for the planner: a real chat folder planned by production code.

`World` logs each message with the real `ChatStore` (in a temporary folder, on tmpfs
when the machine has one) and plans it with the production `Planning`, which persists
free nodes, merge records (R25) and views (R22) in its own recovery order. Builds and
failures go through `Planning` too, and a restart reopens the folder and runs
`Planning.recover` (R24), after deleting view.json or compaction-view.json when asked.
So the laws read R25's records and the shrinking flag back from the store: what the
production code wrote, not a copy of its persistence. `nodes` keeps every built
node's text as the steps reported it, for the brute-force checkers below, which are
written straight from docs/SPEC.md to compare with the planner's fast paths.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from fractions import Fraction
from pathlib import Path

from everchat.actors.tree import (
    LINE_LIMIT,
    Budget,
    children,
    end,
    key_of,
    level,
    name,
    node_of,
    parent,
    render_line,
    start,
)
from everchat.actors.planner.planning import Planning
from everchat.actors.folder import ChatStore

__all__ = ["World", "most_due_pair", "rendered_size", "is_cover", "scratch_root"]


def scratch_root() -> str | None:
    """Where the worlds' folders go: tmpfs when there is one (fsync costs nothing there;
    the laws are not about durability), else the system's temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shm.stat().st_mode & 0o002 else None


class World:
    """One chat folder, its store and the production planning over it."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.folder = Path(tempfile.mkdtemp(prefix="everchat-world-", dir=scratch_root()))
        self.path = self.folder / "chat"
        self.store = ChatStore.open(self.path, create=True)
        self._cleanup = weakref.finalize(self, _remove, self.store, self.folder)
        self.planning = Planning.recover(self.store, budget)
        self.lines: list[str] = []  # message i's `kind: text` line
        self.nodes: dict[int, str] = {}  # every built node ever, by key

    def close(self) -> None:
        self._cleanup()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def planner(self):
        return self.planning.planner

    @property
    def records(self) -> list[tuple[list[tuple[int, int]], int, bool]]:
        """R25: every merge record in the store, as written."""
        return self.store.merge_records(first=0)

    # -- events: logged by the store, planned and persisted by Planning ------------------

    def message(self, line: str):
        kind, text = line.split(": ", 1)
        (i,) = self.store.append_message(kind, text)
        self.lines.append(line)
        (step,) = self.planning.plan([i], {i: line})  # the line goes along, as the log writer sends it
        self._keep(step)
        return step

    def build(self, key: int, text: str):
        step = self.planning.built(key, text)
        self.nodes[key] = text
        self._keep(step)
        return step

    def fail(self, key: int):
        return self.planning.failed(key)

    def _keep(self, step) -> None:
        assert len(step.built) == len(step.built_texts)
        for key, text in zip(step.built, step.built_texts):
            self.nodes[key] = text

    def free_text(self, key: int) -> str:
        """R11's text of a free node, from the world's own files."""
        if level(key) == 0:
            return self.lines[start(key)]
        left, right = children(key)
        return self.nodes[left] + "\n" + self.nodes[right]

    def stored(self) -> dict[int, str | None]:
        """The store's text of every node the steps reported built."""
        return {key: self.store.node(*node_of(key)) for key in self.nodes}

    # -- restarts ------------------------------------------------------------------

    def restart(self, lose_view: bool = False, lose_cview: bool = False):
        """Reopen the folder and recover (R22), refolding the merge records when view.json
        is lost (R24); a lost compaction view restarts as the view fitted down."""
        self.store.close()
        if lose_view or lose_cview:
            (self.path / "compaction-view.json").unlink(missing_ok=True)
        if lose_view:
            (self.path / "view.json").unlink(missing_ok=True)
        self.store = ChatStore.open(self.path)
        self._cleanup.detach()
        self._cleanup = weakref.finalize(self, _remove, self.store, self.folder)
        self.planning = Planning.recover(self.store, self.budget)
        for key, text in self.planner.tree.text.items():
            assert self.nodes.setdefault(key, text) == text, name(key)
        return self.planner


def _remove(store: ChatStore, folder: Path) -> None:
    store.close()
    shutil.rmtree(folder, ignore_errors=True)


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
