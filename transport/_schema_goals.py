"""Goals and after-turn hooks (issue 13, docs/GOALS.md): setting, dropping and asking about
the chat's goal, its events, and its file in the chat folder; the after-turn commands'
failures, and their queue closed by the closing session.

Received by the turn runner unless said. Events go out on topic "turn" (DROP: the log and
`goal.json` hold what matters).

Part of `everchat.transport.schema`: import them from there (`schema.SetGoal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._check import fields, int_, list_, opt_dict, str_
from ._schema_base import BLOCK, DROP, Message, message

__all__ = ["SetGoal", "HaltGoal", "GoalStatus", "GoalState", "GoalEvent", "AfterTurnFailed", "CloseAfterTurn",
           "AfterTurnClosed", "SaveGoal", "LoadGoal"]


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class SetGoal(Message):
    """Front end -> turn runner (ask -> InputLogged): make `text` the chat's goal and send it
    as the person's message (a turn, or input joining the running one, R36). `key` makes a
    resent ask idempotent, as UserInput's."""
    text: str
    key: str

    def to_wire(self) -> list:
        return [self.text, self.key]

    @classmethod
    def from_wire(cls, obj: Any) -> SetGoal:
        text, key = fields(obj, 2, cls)
        return cls(str_(text, "SetGoal.text"), str_(key, "SetGoal.key"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class HaltGoal(Message):
    """Front end -> turn runner (ask -> GoalState): drop the goal and its continuation (a
    reply in progress finishes; /stop stops it)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> HaltGoal:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class GoalStatus(Message):
    """Ask the turn runner for the chat's goal (ask -> GoalState)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> GoalStatus:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class GoalState(Message):
    """Reply to GoalStatus, HaltGoal (the goal after it: None) and LoadGoal: the goal as
    `goals.Goal.to_record()` gives it, or None when there is none."""
    goal: dict | None

    def to_wire(self) -> list:
        return [self.goal]

    @classmethod
    def from_wire(cls, obj: Any) -> GoalState:
        (goal,) = fields(obj, 1, cls)
        return cls(opt_dict(goal, "GoalState.goal"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class GoalEvent(Message):
    """Event: the goal's news. `event`: "set", "continuing" (the next turn starts with the
    continuation message; `detail` the check's words), "met", "paused" (`detail` says why;
    it waits for the person), "resumed", "halted"; `turns`: its turns in a row so far."""
    event: str
    goal: str
    turns: int
    detail: str

    def to_wire(self) -> list:
        return [self.event, self.goal, self.turns, self.detail]

    @classmethod
    def from_wire(cls, obj: Any) -> GoalEvent:
        event, goal, turns, detail = fields(obj, 4, cls)
        return cls(str_(event, "GoalEvent.event"), str_(goal, "GoalEvent.goal"), int_(turns, "GoalEvent.turns"),
                   str_(detail, "GoalEvent.detail"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class AfterTurnFailed(Message):
    """Event: the after-turn command of turn `turn` failed (a non-zero exit, the time
    limit, or it could not start); `detail` says how, with the end of its output. The
    turn's reply stays saved."""
    turn: int
    detail: str

    def to_wire(self) -> list:
        return [self.turn, self.detail]

    @classmethod
    def from_wire(cls, obj: Any) -> AfterTurnFailed:
        turn, detail = fields(obj, 2, cls)
        return cls(int_(turn, "AfterTurnFailed.turn"), str_(detail, "AfterTurnFailed.detail"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class CloseAfterTurn(Message):
    """Closing session -> turn runner (ask -> AfterTurnClosed), before the actors stop: end
    the turns, take no more after-turn commands and wait while the queued ones run (at most
    `after_turn.STOP_SECONDS`). A session attached to another's chat never sends it."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> CloseAfterTurn:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class AfterTurnClosed(Message):
    """Reply to CloseAfterTurn: `(turn, detail)` of each after-turn command that failed
    after the close began, in order (each also went out as AfterTurnFailed, which the
    closing session may no longer hear)."""
    failures: list[tuple[int, str]]

    def to_wire(self) -> list:
        return [[[turn, detail] for turn, detail in self.failures]]

    @classmethod
    def from_wire(cls, obj: Any) -> AfterTurnClosed:
        (failures,) = fields(obj, 1, cls)
        rows = []
        for row in list_(failures, "AfterTurnClosed.failures"):
            turn, detail = fields(row, 2, cls)
            rows.append((int_(turn, "AfterTurnClosed.failures[].turn"),
                         str_(detail, "AfterTurnClosed.failures[].detail")))
        return cls(rows)


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class SaveGoal(Message):
    """Turn runner -> log writer (ask -> Ack): replace `goal.json` with `goal` (a
    `goals.Goal` record); None removes it."""
    goal: dict | None

    def to_wire(self) -> list:
        return [self.goal]

    @classmethod
    def from_wire(cls, obj: Any) -> SaveGoal:
        (goal,) = fields(obj, 1, cls)
        return cls(opt_dict(goal, "SaveGoal.goal"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class LoadGoal(Message):
    """Turn runner -> log writer (ask -> GoalState): the saved goal, at the turn runner's start."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> LoadGoal:
        fields(obj, 0, cls)
        return cls()
