"""The planner's pure core: tree nodes, views, the merge order and the work queues.

No sockets, no threads, no files: the planner actor wraps `Planner`, and tests
drive it directly. Rule numbers refer to docs/SPEC.md.
"""

from ._nodes import (
    LINE_LIMIT,
    PLACEHOLDER,
    children,
    cut_utf8,
    end,
    key_of,
    level,
    name,
    node_of,
    parent,
    render_line,
    render_text,
    span,
    start,
)
from ._planner import Budget, NodeSource, Planner, PlannerError, Step
from ._refold import MergeRecord, pair_of, recover, refold
from ._render import FOLDED, aligned, newest_within, request_lines
from ._tree import Tree
from ._view import View

__all__ = [
    "FOLDED",
    "LINE_LIMIT",
    "PLACEHOLDER",
    "Budget",
    "MergeRecord",
    "NodeSource",
    "Planner",
    "PlannerError",
    "Step",
    "Tree",
    "View",
    "aligned",
    "children",
    "cut_utf8",
    "end",
    "key_of",
    "level",
    "name",
    "newest_within",
    "node_of",
    "pair_of",
    "parent",
    "recover",
    "refold",
    "render_line",
    "render_text",
    "request_lines",
    "span",
    "start",
]
