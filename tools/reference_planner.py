"""An independent reference model of the planner, written from docs/SPEC.md alone (section 8).

It runs planner scenarios (the bridge format) so that the production planner can be checked
byte for byte: ``python tools/reference_planner.py < scenario.jsonl``. It is built for
obviousness, not speed: plain lists and dicts, exact dues with ``Fraction`` (R18), and a
rescan of the whole view wherever that is the plainest way to say a rule.

Readings of the points docs/SPEC.md leaves open (to compare with the production planner):

1. Parameters line. It prints nothing. Its keys are ``ceiling``, ``floor``, ``cceiling``,
   ``cfloor`` (integers >= 0), ``jobs`` (integer 1..8, R31) and ``unit`` (``"bytes"`` or
   ``"lines"``). A missing key takes the value shown in the SPEC example (the R19/R21/R31
   defaults: 128000, 64000, 32000, 16000, 8, "bytes"); any other key is malformed. SPEC
   requires no order between a floor and its ceiling, so a floor above its ceiling (here
   or on an ``m``) is accepted: a batch then merges only while the size passes the floor.
2. Integers must be JSON integers: ``true``, ``3.0`` or ``"3"`` are malformed.
3. Events. An event is a JSON object with exactly one of ``m``, ``b``, ``f``. ``m`` may also
   carry ``ceiling`` and/or ``floor`` (either alone is fine); they replace the view budgets
   before step (2) of that message, so its own R19 batch already uses them. ``b`` must carry
   ``s`` (integer 1..512) and nothing else; ``f`` nothing else. ``[l, i]`` is a list of two
   integers >= 0. The ``m`` size S may be any integer >= 0 (SPEC sets no lower bound). A
   blank line is malformed. Empty input prints nothing and exits 0.
4. ``b``/``f`` for any node not running now (never started, built, failed, or not a node
   of this chat) is an error. After an error the in-process planner refuses every further
   line, as the command has exited.
5. Sizes (R16). A line is the bytes of ``{id}+{n}|``, the text, and one newline. A built
   node's text is its S: the ``m`` size for a free leaf, ``a + 1 + b`` for a free parent,
   the ``s`` of its ``b`` event otherwise. An unbuilt node counts as the placeholder text.
   ``size`` and ``csize`` are measured when the output line is written, so a ``b`` event
   changes them in bytes mode (a placeholder line becomes a real line) although it never
   changes either list.
6. ``"unit": "lines"``: ``size``, ``csize`` and all four budgets count lines, for both
   views. R11's free rule still counts bytes; the 8-unbuilt-lines rule counts lines always.
7. Shrinking flags change only when a fit runs at a message: R19 sets ``shrink`` to
   ``size > floor`` at the end of every batch; R21 sets ``cshrink`` to ``csize > cfloor``
   at the end of every compaction-view fit. A build that brings a view under its floor
   leaves the flag at 1 until the next message's batch (which may then merge nothing).
8. R19: a batch runs when, after the leaf is appended, ``size > ceiling`` or ``shrink``.
   It merges while ``size > floor`` and some pair can merge.
9. R18: a pair is two adjacent lines ``(l, i)``, ``(l, i+1)`` with i even whose parent is
   built; ``due = Fraction(T - last, 2**l)``, ``last = (i+2)*2**l - 1``, T counting the new
   message. The largest due wins; on equal dues the leftmost pair. The view is rescanned
   after every merge, with the same T.
10. R21: "the view merges (any merge at this message)" means the R19 batch merged at least
    one pair (a batch that ran while shrinking but merged nothing does not count). Then
    the compaction view becomes a copy of the view and is always fitted to ``cfloor``.
    Otherwise the new leaf is appended and fitted to ``cfloor`` when ``csize > cceiling``
    ("passes" is strictly greater) or ``cshrink``. Both views merge only pairs whose
    parent is built, in the one shared tree.
11. Merge records (R25) are not part of the bridge output; ``ReferencePlanner.batches``
    keeps one per batch that ran, as R25 words it: the pairs merged in order, each named
    ``[l, i]`` the way R18 names a pair, by its left member (i even, not the parent), ``t``
    = T, ``open`` = the shrink flag after the batch. This reading is the weakest one here.
12. Free cascade (R11): whenever a node becomes built (a free leaf at step (2), or a
    ``b``), if its sibling is built and their parent is not, the parent is built at once
    with text ``a + 1 + b`` when that is <= 512 and the check repeats one level up;
    otherwise the parent joins the end of the merge queue. That happens once per parent,
    when its second child is built.
13. Failures. ``f`` takes the node off the running list and marks it failed. At step (1)
    of the next message every failed node is unmarked: failed merges join the end of the
    merge queue sorted by (level, i); failed leaves are simply startable again.
14. Starts. While fewer than ``jobs`` nodes run (leaves and merges count alike): start the
    head of the merge queue; else the lowest-id leaf that is unbuilt, not running, not
    failed, with fewer than 8 unbuilt lines (of any level, running or failed or not)
    before it in the view (the main view, not the compaction view); else stop. Merges
    have no such limit. An unbuilt leaf is always a line of the view, since a merge
    needs its whole subtree built.
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from typing import NamedTuple, TextIO

__all__ = [
    "FREE_LIMIT",
    "PLACEHOLDER",
    "MergeRecord",
    "ReferencePlanner",
    "ScenarioError",
    "main",
    "node_name",
]

FREE_LIMIT = 512  # R10/R11: a node's line is at most 512 bytes
PLACEHOLDER = "(not summarized yet: zoom it)"  # R15
UNBUILT_BEFORE_LIMIT = 8  # R31: a leaf starts once fewer than 8 lines before it are unbuilt
DEFAULTS = {
    "ceiling": 128000,
    "floor": 64000,
    "cceiling": 32000,
    "cfloor": 16000,
    "jobs": 8,
    "unit": "bytes",
}

Node = tuple[int, int]  # (l, i): node(l, i) of R10


class ScenarioError(Exception):
    """A scenario line was malformed, or a ``b``/``f`` named a node that is not running.

    The command prints ``error: <reason>`` on stderr and exits with status 2 (section 8).
    """


class MergeRecord(NamedTuple):
    """One R19 batch, worded as R25 (reading 11 of the module docstring)."""

    merge: list[Node]  # the pairs merged, in order, each named by its left member (l, i)
    t: int  # the message count T of the batch
    open: bool  # whether the view is still shrinking after it


def node_name(node: Node) -> str:
    """``id+n`` of node(l, i): id = i * 2**l, n = 2**l (R10)."""
    level, i = node
    return f"{i * 2**level}+{2**level}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_at_least(obj: dict, key: str, low: int) -> int:
    value = obj[key]
    if not _is_int(value) or value < low:
        raise ScenarioError(f"{key!r} must be an integer >= {low}, got {value!r}")
    return value


def _node_of(value: object, key: str) -> Node:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(_is_int(x) and x >= 0 for x in value)
    ):
        raise ScenarioError(f"{key!r} must be [l, i] with integers >= 0, got {value!r}")
    return (value[0], value[1])


class ReferencePlanner:
    """The planner of SPEC section 8, one scenario line at a time.

    ``feed`` takes the parameters line first (returning None: it prints nothing), then one
    event per call, returning its output line (without newline).
    """

    def __init__(self) -> None:
        self.params: dict | None = None
        self.stopped: str | None = None  # the reason of the error that ended the scenario
        self.sizes: list[int] = []  # the m size of every message, by id
        self.built: dict[Node, int] = {}  # text bytes of every built node (R12)
        self.view: list[Node] = []  # R13
        self.cview: list[Node] = []  # R21
        self.shrink = False  # R19
        self.cshrink = False  # R21
        self.running: list[Node] = []  # in start order
        self.failed: list[Node] = []  # in failure order
        self.queue: list[Node] = []  # ready merges, FIFO (R31)
        self.batches: list[MergeRecord] = []  # R25, reading 11

    def __repr__(self) -> str:
        return (
            f"<ReferencePlanner T={self.T} view={len(self.view)} lines"
            f" running={[node_name(n) for n in self.running]}>"
        )

    @property
    def T(self) -> int:
        """The number of messages so far."""
        return len(self.sizes)

    # --- input ---------------------------------------------------------------------------

    def feed(self, line: str) -> str | None:
        """Run one scenario line; return its output line (None for the parameters line).

        Raises ScenarioError on a malformed line or a b/f for a node not running; the
        planner then refuses every later line.
        """
        if self.stopped is not None:
            raise ScenarioError(f"stopped by an earlier error: {self.stopped}")
        try:
            return self._feed(line)
        except ScenarioError as error:
            self.stopped = str(error)
            raise

    def _feed(self, line: str) -> str | None:
        try:
            obj = json.loads(line)
        except ValueError as error:
            raise ScenarioError(f"not JSON ({error}): {line.rstrip()!r}") from None
        if not isinstance(obj, dict):
            raise ScenarioError(f"not a JSON object: {line.rstrip()!r}")
        if self.params is None:
            self._set_parameters(obj)
            return None
        kinds = [k for k in ("m", "b", "f") if k in obj]
        if len(kinds) != 1:
            raise ScenarioError(f"an event has exactly one of m, b, f: {line.rstrip()!r}")
        allowed = {"m": {"m", "ceiling", "floor"}, "b": {"b", "s"}, "f": {"f"}}[kinds[0]]
        extra = sorted(set(obj) - allowed)
        if extra:
            raise ScenarioError(f"unknown keys {extra} in {line.rstrip()!r}")
        if kinds[0] == "m":
            size = _int_at_least(obj, "m", 0)
            budgets = {k: _int_at_least(obj, k, 0) for k in ("ceiling", "floor") if k in obj}
            started = self._on_message(size, budgets)
        elif kinds[0] == "b":
            node = _node_of(obj["b"], "b")
            if "s" not in obj:
                raise ScenarioError(f"a b event needs s: {line.rstrip()!r}")
            text = _int_at_least(obj, "s", 1)
            if text > FREE_LIMIT:
                raise ScenarioError(f"'s' must be at most {FREE_LIMIT}, got {text}")
            started = self._on_built(node, text)
        else:
            started = self._on_failed(_node_of(obj["f"], "f"))
        return self.output(started)

    def _set_parameters(self, obj: dict) -> None:
        extra = sorted(set(obj) - set(DEFAULTS))
        if extra:
            raise ScenarioError(f"unknown parameter keys {extra}")
        params = dict(DEFAULTS)
        for key in ("ceiling", "floor", "cceiling", "cfloor", "jobs"):
            if key in obj:
                params[key] = _int_at_least(obj, key, 1 if key == "jobs" else 0)
        if params["jobs"] > 8:
            raise ScenarioError(f"'jobs' must be 1..8 (R31), got {params['jobs']}")
        if "unit" in obj:
            if obj["unit"] not in ("bytes", "lines"):
                raise ScenarioError(f"'unit' must be \"bytes\" or \"lines\", got {obj['unit']!r}")
            params["unit"] = obj["unit"]
        self.params = params

    # --- events (section 8) --------------------------------------------------------------

    def _on_message(self, size: int, budgets: dict[str, int]) -> list[Node]:
        """``m``: steps (1) to (5) of section 8."""
        # (1) Failed nodes become startable again; failed merges rejoin the queue's end.
        merges = sorted(node for node in self.failed if node[0] > 0)
        self.queue.extend(merges)
        self.failed = []
        # (2) T grows by one and the leaf is appended; a free leaf is built at once (R11).
        self.params.update(budgets)
        leaf = (0, self.T)
        self.sizes.append(size)
        self.view.append(leaf)
        if size <= FREE_LIMIT:
            self._build(leaf, size)
        # (3) R19 on the view.
        view_merged = False
        if self.size(self.view) > self.params["ceiling"] or self.shrink:
            pairs = self._fit(self.view, self.params["floor"])
            self.shrink = self.size(self.view) > self.params["floor"]
            self.batches.append(MergeRecord(pairs, self.T, self.shrink))
            view_merged = bool(pairs)
        # (4) R21 on the compaction view.
        if view_merged:
            self.cview = list(self.view)
            self._fit(self.cview, self.params["cfloor"])
            self.cshrink = self.size(self.cview) > self.params["cfloor"]
        else:
            self.cview.append(leaf)
            if self.size(self.cview) > self.params["cceiling"] or self.cshrink:
                self._fit(self.cview, self.params["cfloor"])
                self.cshrink = self.size(self.cview) > self.params["cfloor"]
        # (5) Starts.
        return self._start()

    def _on_built(self, node: Node, text: int) -> list[Node]:
        """``b``: record the line, run the free cascade, then start."""
        self._take_running(node, "b")
        self._build(node, text)
        return self._start()

    def _on_failed(self, node: Node) -> list[Node]:
        """``f``: mark the node failed (retried at the next message, R30), then start."""
        self._take_running(node, "f")
        self.failed.append(node)
        return self._start()

    def _take_running(self, node: Node, kind: str) -> None:
        if node not in self.running:
            raise ScenarioError(f"{kind} for {list(node)} ({node_name(node)}), which is not running")
        self.running.remove(node)

    # --- the tree (R10-R12) --------------------------------------------------------------

    def _build(self, node: Node, text: int) -> None:
        """Record a built node, then the free cascade of R11 upward."""
        self.built[node] = text
        while True:
            level, i = node
            sibling = (level, i ^ 1)
            parent = (level + 1, i // 2)
            if sibling not in self.built or parent in self.built:
                return
            left, right = sorted([node, sibling])
            joined = self.built[left] + 1 + self.built[right]
            if joined > FREE_LIMIT:
                self.queue.append(parent)
                return
            self.built[parent] = joined
            node = parent

    # --- the views (R13-R21) -------------------------------------------------------------

    def line_bytes(self, node: Node) -> int:
        """R16: the rendered line's UTF-8 bytes with its newline; R15 when not built."""
        text = self.built[node] if node in self.built else len(PLACEHOLDER.encode())
        return len(f"{node_name(node)}|".encode()) + text + 1

    def size(self, view: list[Node]) -> int:
        """A view's size: bytes by R16, or lines with ``"unit": "lines"``."""
        if self.params["unit"] == "lines":
            return len(view)
        return sum(self.line_bytes(node) for node in view)

    def _most_due_pair(self, view: list[Node]) -> int | None:
        """R18: the position of the most due mergeable pair (leftmost on ties), or None."""
        best, best_due = None, None
        for k in range(len(view) - 1):
            (level, i), (level2, i2) = view[k], view[k + 1]
            if level != level2 or i % 2 != 0 or i2 != i + 1:
                continue
            if (level + 1, i // 2) not in self.built:
                continue
            last = (i + 2) * 2**level - 1
            due = Fraction(self.T - last, 2**level)
            if best_due is None or due > best_due:
                best, best_due = k, due
        return best

    def _fit(self, view: list[Node], floor: int) -> list[Node]:
        """Merge by R18 in place until the size is at most ``floor`` or nothing can merge.

        Returns the pairs merged, in order, each named by its left member.
        """
        pairs: list[Node] = []
        while self.size(view) > floor:
            k = self._most_due_pair(view)
            if k is None:
                break
            level, i = view[k]
            pairs.append((level, i))
            view[k : k + 2] = [(level + 1, i // 2)]
        return pairs

    # --- starts (R31, section 8) ---------------------------------------------------------

    def _startable_leaf(self) -> Node | None:
        unbuilt_before = 0
        for node in self.view:
            if (
                node[0] == 0
                and node not in self.built
                and node not in self.running
                and node not in self.failed
                and unbuilt_before < UNBUILT_BEFORE_LIMIT
            ):
                return node
            if node not in self.built:
                unbuilt_before += 1
        return None

    def _start(self) -> list[Node]:
        started: list[Node] = []
        while len(self.running) < self.params["jobs"]:
            if self.queue:
                node = self.queue.pop(0)
            else:
                node = self._startable_leaf()
                if node is None:
                    break
            self.running.append(node)
            started.append(node)
        return started

    # --- output --------------------------------------------------------------------------

    def output(self, started: list[Node]) -> str:
        """The section 8 output line for the state now and the nodes just started."""

        def names(nodes: list[Node]) -> str:
            return ",".join(node_name(node) for node in nodes)

        return (
            f"T={self.T} view={names(self.view)} size={self.size(self.view)}"
            f" shrink={int(self.shrink)} cview={names(self.cview)}"
            f" csize={self.size(self.cview)} cshrink={int(self.cshrink)}"
            f" start={names(started)}"
        )


def main(stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    """Run a scenario from ``stdin``: one output line per event, flushed; 2 on error."""
    planner = ReferencePlanner()
    for line in iter(stdin.readline, ""):
        try:
            out = planner.feed(line)
        except ScenarioError as error:
            print(f"error: {error}", file=stderr, flush=True)
            return 2
        if out is not None:
            print(out, file=stdout, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
