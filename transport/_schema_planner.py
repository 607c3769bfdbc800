"""The planner's and the compactor pool's messages: jobs and their results, settling and
fitting the view, the pool's idleness, the planner's clock and status, and R23's prefix
gate and bulk-import flow control.

Part of `everchat.transport.schema`: import them from there (`schema.BuildJob`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._check import bool_, dict_, fields, float_, int_, str_, strs
from ._schema_base import BLOCK, DROP, Message, REFUSE, message

__all__ = [
    "BuildJob",
    "Built",
    "BuildFailed",
    "NodeBuilt",
    "SettleView",
    "FitView",
    "SettledView",
    "PoolIdle",
    "Idle",
    "NextJob",
    "NoJob",
    "PullWork",
    "Tick",
    "ActorRestarted",
    "CompactionFailed",
    "PlannerStatus",
    "PlannerState",
    "ResponseStarted",
    "WaitBacklog",
]


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class BuildJob(Message):
    """Planner -> compactor (tell): build node (l, i) from `input` with `context` before it.
    `mark`: whole context blocks before the view's cache mark, set by R23's prefix gate
    (-1: the last whole block, R23's default). `closing`: the context's closing block
    carries a cache mark when it holds lines (our fourth mark; False: the gate dropped it)."""
    l: int   # noqa: E741 (SPEC's name for a level)
    i: int
    context: list[str]
    input: list[str]
    attempt: int
    mark: int = -1
    closing: bool = True

    def to_wire(self) -> list:
        return [self.l, self.i, self.context, self.input, self.attempt, self.mark, self.closing]

    @classmethod
    def from_wire(cls, obj: Any) -> BuildJob:
        l, i, context, input_, attempt, mark, closing = fields(obj, 7, cls)  # noqa: E741
        return cls(int_(l, "BuildJob.l"), int_(i, "BuildJob.i"), strs(context, "BuildJob.context"),
                   strs(input_, "BuildJob.input"), int_(attempt, "BuildJob.attempt"), int_(mark, "BuildJob.mark"),
                   bool_(closing, "BuildJob.closing"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class Built(Message):
    """Compactor -> planner (tell): node (l, i) was built with `text`."""
    l: int   # noqa: E741
    i: int
    text: str
    worker: str

    def to_wire(self) -> list:
        return [self.l, self.i, self.text, self.worker]

    @classmethod
    def from_wire(cls, obj: Any) -> Built:
        l, i, text, worker = fields(obj, 4, cls)  # noqa: E741
        return cls(int_(l, "Built.l"), int_(i, "Built.i"), str_(text, "Built.text"), str_(worker, "Built.worker"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class BuildFailed(Message):
    """Compactor -> planner (tell): building node (l, i) failed for `reason`."""
    l: int   # noqa: E741
    i: int
    reason: str
    worker: str

    def to_wire(self) -> list:
        return [self.l, self.i, self.reason, self.worker]

    @classmethod
    def from_wire(cls, obj: Any) -> BuildFailed:
        l, i, reason, worker = fields(obj, 4, cls)  # noqa: E741
        return cls(int_(l, "BuildFailed.l"), int_(i, "BuildFailed.i"), str_(reason, "BuildFailed.reason"),
                   str_(worker, "BuildFailed.worker"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class NodeBuilt(Message):
    """Event, topic "built": node (l, i) is built and saved."""
    l: int   # noqa: E741
    i: int

    def to_wire(self) -> list:
        return [self.l, self.i]

    @classmethod
    def from_wire(cls, obj: Any) -> NodeBuilt:
        l, i = fields(obj, 2, cls)  # noqa: E741
        return cls(int_(l, "NodeBuilt.l"), int_(i, "NodeBuilt.i"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class SettleView(Message):
    """Ask the planner for the view once every line of messages `since` … `until` - 1 is
    built, waiting at most `timeout` seconds (R36) (ask -> SettledView). A turn waits from
    0 (its whole view); `ask` waits for its own turn's lines only (P18)."""
    until: int
    timeout: float
    since: int = 0

    def to_wire(self) -> list:
        return [self.until, float(self.timeout), self.since]

    @classmethod
    def from_wire(cls, obj: Any) -> SettleView:
        until, timeout, since = fields(obj, 3, cls)
        return cls(int_(until, "SettleView.until"), float_(timeout, "SettleView.timeout"),
                   int_(since, "SettleView.since"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class FitView(Message):
    """Ask the planner to run the batch R19 would run at the next message, now (`compact`
    ends with it, issue 8) (ask -> Ack)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> FitView:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class SettledView(Message):
    """Reply to SettleView: the view text, the messages it covers, and how many lines of
    the messages waited for (`since` … `until` - 1) are still unbuilt."""
    text: str
    messages: int
    unbuilt: int

    def to_wire(self) -> list:
        return [self.text, self.messages, self.unbuilt]

    @classmethod
    def from_wire(cls, obj: Any) -> SettledView:
        text, messages, unbuilt = fields(obj, 3, cls)
        return cls(str_(text, "SettledView.text"), int_(messages, "SettledView.messages"),
                   int_(unbuilt, "SettledView.unbuilt"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class PoolIdle(Message):
    """Ask whether the compactor pool is idle (ask -> Idle)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> PoolIdle:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class Idle(Message):
    """Reply to PoolIdle."""
    idle: bool
    running: int
    queued: int

    def to_wire(self) -> list:
        return [self.idle, self.running, self.queued]

    @classmethod
    def from_wire(cls, obj: Any) -> Idle:
        idle, running, queued = fields(obj, 3, cls)
        return cls(bool_(idle, "Idle.idle"), int_(running, "Idle.running"), int_(queued, "Idle.queued"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class NextJob(Message):
    """Worker -> planner (ask -> BuildJob or NoJob): answered when there is work (R31, R32)."""
    worker: str

    def to_wire(self) -> list:
        return [self.worker]

    @classmethod
    def from_wire(cls, obj: Any) -> NextJob:
        (worker,) = fields(obj, 1, cls)
        return cls(str_(worker, "NextJob.worker"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class NoJob(Message):
    """Reply to NextJob when nothing came for a while: ask again."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> NoJob:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class PullWork(Message):
    """A worker's note to itself: ask the planner for the next job."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> PullWork:
        fields(obj, 0, cls)
        return cls()


@message(DROP)
@dataclass(frozen=True, slots=True)
class Tick(Message):
    """The planner's clock (once a second): expire waits, retry failures (R30). The log
    writer tells itself one to save usage.json it held back (actors/folder/usage.py)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> Tick:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class ActorRestarted(Message):
    """Supervisor -> planner: the actor `name` was restarted; jobs it held are handed out again."""
    name: str

    def to_wire(self) -> list:
        return [self.name]

    @classmethod
    def from_wire(cls, obj: Any) -> ActorRestarted:
        (name,) = fields(obj, 1, cls)
        return cls(str_(name, "ActorRestarted.name"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class CompactionFailed(Message):
    """Event (topic "failed"): a compaction call failed (R30: reported, never silent)."""
    l: int
    i: int
    reason: str
    failures: int

    def to_wire(self) -> list:
        return [self.l, self.i, self.reason, self.failures]

    @classmethod
    def from_wire(cls, obj: Any) -> CompactionFailed:
        l, i, reason, failures = fields(obj, 4, cls)
        return cls(int_(l, "CompactionFailed.l"), int_(i, "CompactionFailed.i"),
                   str_(reason, "CompactionFailed.reason"), int_(failures, "CompactionFailed.failures"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class PlannerStatus(Message):
    """Ask the planner for its figures and the view as it stands (ask -> PlannerState).
    Unlike SettleView it never waits and never changes what compactions start.
    `compaction`: the state's view is the compaction view (R21) instead (the web page's
    memory inspector)."""
    compaction: bool = False

    def to_wire(self) -> list:
        return [self.compaction]

    @classmethod
    def from_wire(cls, obj: Any) -> PlannerStatus:
        (compaction,) = fields(obj, 1, cls)
        return cls(bool_(compaction, "PlannerStatus.compaction"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class PlannerState(Message):
    """Reply to PlannerStatus: `Planning.status()` and the rendered view (R14, R15), or
    the compaction view when asked for it."""
    status: dict
    view: str

    def to_wire(self) -> list:
        return [self.status, self.view]

    @classmethod
    def from_wire(cls, obj: Any) -> PlannerState:
        status, view = fields(obj, 2, cls)
        return cls(dict_(status, "PlannerState.status"), str_(view, "PlannerState.view"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class ResponseStarted(Message):
    """Compactor -> planner (tell): the first call of job (l, i) got its first event, so
    the cache prefix it wrote can be read now (R23: one writer per new prefix)."""
    l: int   # noqa: E741
    i: int
    worker: str

    def to_wire(self) -> list:
        return [self.l, self.i, self.worker]

    @classmethod
    def from_wire(cls, obj: Any) -> ResponseStarted:
        l, i, worker = fields(obj, 3, cls)  # noqa: E741
        return cls(int_(l, "ResponseStarted.l"), int_(i, "ResponseStarted.i"), str_(worker, "ResponseStarted.worker"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class WaitBacklog(Message):
    """Ask the planner (-> Idle) to answer once at most `at_most` compactions are ready
    but not yet handed to a worker: a bulk import's flow control, so the pool keeps
    up and compaction contexts stay small (R27, R31)."""
    at_most: int

    def to_wire(self) -> list:
        return [self.at_most]

    @classmethod
    def from_wire(cls, obj: Any) -> WaitBacklog:
        (at_most,) = fields(obj, 1, cls)
        return cls(int_(at_most, "WaitBacklog.at_most"))
