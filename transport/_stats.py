"""Mailbox statistics: the counters each hosted name keeps, and their snapshot.

A `Recorder` lives as long as its name is hosted in the node, across restarts. Counters are
plain ints bumped by the actor's thread or the gateway (one writer each, except rare races
between askers when counting late replies; statistics, not accounting). Handling latency is
the time inside the handler, kept for the last `WINDOW` messages.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["MailboxStats", "Recorder", "WINDOW"]

WINDOW = 2048


@dataclass(frozen=True, slots=True)
class MailboxStats:
    """One mailbox as `Node.statistics()` sees it.

    depth: messages waiting; handled: messages handled (including failed ones); errors:
    handlers that raised, messages of a type the actor has no handler for, tells to a name
    that is not here; dropped_bad: frames that did not decode (BadFrame); dropped_late:
    requests not run because their deadline had passed, plus replies that came too late;
    dropped_full: events dropped because a queue on the way was full (policy "drop");
    refused: asks answered Refused because the mailbox was full; p50_ms/p99_ms: handling
    time; restarts: times the name was hosted again in this node; last_type: the type name
    of the last message handled.
    """
    name: str
    node: str
    host: str
    pid: int
    depth: int
    handled: int
    errors: int
    dropped_bad: int
    dropped_late: int
    dropped_full: int
    refused: int
    p50_ms: float
    p99_ms: float
    restarts: int
    last_type: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-like, for `StatsReply.actors` and `everchat ops --json`."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MailboxStats:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


def _percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Recorder:
    """The live counters of one mailbox (or of the node's gateway)."""

    __slots__ = ("handled", "errors", "dropped_bad", "dropped_late", "dropped_full", "refused",
                 "restarts", "last_type", "times")

    def __init__(self) -> None:
        self.handled = self.errors = self.dropped_bad = self.dropped_late = 0
        self.dropped_full = self.refused = self.restarts = 0
        self.last_type = ""
        self.times: deque[float] = deque(maxlen=WINDOW)

    def snapshot(self, name: str, node: str, host: str, pid: int, depth: int) -> MailboxStats:
        ordered = sorted(self.times)
        return MailboxStats(
            name=name, node=node, host=host, pid=pid, depth=depth, handled=self.handled,
            errors=self.errors, dropped_bad=self.dropped_bad, dropped_late=self.dropped_late,
            dropped_full=self.dropped_full, refused=self.refused,
            p50_ms=round(_percentile(ordered, 0.50) * 1000, 3),
            p99_ms=round(_percentile(ordered, 0.99) * 1000, 3),
            restarts=self.restarts, last_type=self.last_type)
