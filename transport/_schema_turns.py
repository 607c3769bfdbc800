"""The turn runner's messages (R35-R37): the person's input and its answer, stopping and
asking about a turn, and the turn events the front ends show.

Turn events are published by the turn runner on topic "turn"; `turn` is the id of the
user message that opened the turn. Events are hints (DROP): what matters is in the log.

Part of `everchat.transport.schema`: import them from there (`schema.UserInput`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._check import bool_, dict_, fields, float_, int_, ints, str_, strs
from ._schema_base import BLOCK, DROP, Message, REFUSE, message

__all__ = [
    "UserInput",
    "InputLogged",
    "StopTurn",
    "TurnStatus",
    "TurnState",
    "AwaitSubscriber",
    "TurnStarted",
    "TurnText",
    "TurnThinking",
    "TurnThinkingDone",
    "TurnToolCall",
    "TurnToolResult",
    "TurnJoined",
    "TurnEnded",
    "Notice",
]


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class UserInput(Message):
    """Front end -> turn runner (ask -> InputLogged): the person's message m (R36). `images`
    are asset digests (PutAsset first); `key` makes a resent ask idempotent."""
    text: str
    images: list[str]
    key: str

    def to_wire(self) -> list:
        return [self.text, self.images, self.key]

    @classmethod
    def from_wire(cls, obj: Any) -> UserInput:
        text, images, key = fields(obj, 3, cls)
        return cls(str_(text, "UserInput.text"), strs(images, "UserInput.images"), str_(key, "UserInput.key"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class InputLogged(Message):
    """Reply to UserInput once m is on disk: its ids, the turn it belongs to (the user
    message id that opened the turn), and whether it joined a running turn."""
    ids: list[int]
    turn: int
    joined: bool

    def to_wire(self) -> list:
        return [self.ids, self.turn, self.joined]

    @classmethod
    def from_wire(cls, obj: Any) -> InputLogged:
        ids, turn, joined = fields(obj, 3, cls)
        return cls(ints(ids, "InputLogged.ids"), int_(turn, "InputLogged.turn"), bool_(joined, "InputLogged.joined"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class StopTurn(Message):
    """Front end -> turn runner (tell, or ask -> Ack): end the running call (R37, /stop)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> StopTurn:
        fields(obj, 0, cls)
        return cls()


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class TurnStatus(Message):
    """Ask the turn runner what it is doing (ask -> TurnState)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> TurnStatus:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class TurnState(Message):
    """Reply to TurnStatus: whether a turn is on (`running`, also while its view settles),
    its message id once logged (else -1), the reply model, and token usage summed over
    this run (`input`, `output`, `cache_read`, `cache_write`, `calls`)."""
    running: bool
    turn: int
    model: str
    usage: dict

    def to_wire(self) -> list:
        return [self.running, self.turn, self.model, self.usage]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnState:
        running, turn, model, usage = fields(obj, 4, cls)
        return cls(bool_(running, "TurnState.running"), int_(turn, "TurnState.turn"), str_(model, "TurnState.model"),
                   dict_(usage, "TurnState.usage"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class AwaitSubscriber(Message):
    """Ask an actor to wait until a subscriber in another process has reached its node's
    events for `topic` (ask -> Ack, or an error after `timeout` seconds): a session whose
    turn runner runs elsewhere asks this before its first input, so no event is missed."""
    topic: str
    timeout: float

    def to_wire(self) -> list:
        return [self.topic, float(self.timeout)]

    @classmethod
    def from_wire(cls, obj: Any) -> AwaitSubscriber:
        topic, timeout = fields(obj, 2, cls)
        return cls(str_(topic, "AwaitSubscriber.topic"), float_(timeout, "AwaitSubscriber.timeout"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class TurnStarted(Message):
    """Event: a fresh call for message `turn` is about to go out (R36)."""
    turn: int

    def to_wire(self) -> list:
        return [self.turn]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnStarted:
        (turn,) = fields(obj, 1, cls)
        return cls(int_(turn, "TurnStarted.turn"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class TurnText(Message):
    """Event: a piece of the reply as it streams."""
    turn: int
    text: str

    def to_wire(self) -> list:
        return [self.turn, self.text]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnText:
        turn, text = fields(obj, 2, cls)
        return cls(int_(turn, "TurnText.turn"), str_(text, "TurnText.text"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class TurnThinking(Message):
    """Event: a piece of the model's thinking; shown, never logged (R6, R37)."""
    turn: int
    text: str

    def to_wire(self) -> list:
        return [self.turn, self.text]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnThinking:
        turn, text = fields(obj, 2, cls)
        return cls(int_(turn, "TurnThinking.turn"), str_(text, "TurnThinking.text"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class TurnThinkingDone(Message):
    """Event: a stretch of thinking ended."""
    turn: int

    def to_wire(self) -> list:
        return [self.turn]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnThinkingDone:
        (turn,) = fields(obj, 1, cls)
        return cls(int_(turn, "TurnThinkingDone.turn"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class TurnToolCall(Message):
    """Event: the model called a tool (logged as `tool` before it runs, R37)."""
    turn: int
    call_id: str
    name: str
    arguments_json: str

    def to_wire(self) -> list:
        return [self.turn, self.call_id, self.name, self.arguments_json]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnToolCall:
        turn, call_id, name, arguments = fields(obj, 4, cls)
        return cls(int_(turn, "TurnToolCall.turn"), str_(call_id, "TurnToolCall.call_id"),
                   str_(name, "TurnToolCall.name"), str_(arguments, "TurnToolCall.arguments_json"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class TurnToolResult(Message):
    """Event: a tool's result (logged as `echo`, R37); `preview` is its first 200 characters."""
    turn: int
    call_id: str
    name: str
    is_error: bool
    preview: str

    def to_wire(self) -> list:
        return [self.turn, self.call_id, self.name, self.is_error, self.preview]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnToolResult:
        turn, call_id, name, is_error, preview = fields(obj, 5, cls)
        return cls(int_(turn, "TurnToolResult.turn"), str_(call_id, "TurnToolResult.call_id"),
                   str_(name, "TurnToolResult.name"), bool_(is_error, "TurnToolResult.is_error"),
                   str_(preview, "TurnToolResult.preview"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class ReportLogged(Message):
    """Agents -> turn runner (tell): an agent's report was logged as `work` message(s) `ids`
    with `text` (R38). A turn whose view does not hold it takes it in between its tool calls,
    as the person's messages (R34: input and reports arrive between tool calls)."""
    ids: list[int]
    text: str

    def to_wire(self) -> list:
        return [self.ids, self.text]

    @classmethod
    def from_wire(cls, obj: Any) -> ReportLogged:
        ids, text = fields(obj, 2, cls)
        return cls(ints(ids, "ReportLogged.ids"), str_(text, "ReportLogged.text"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class TurnJoined(Message):
    """Event: message `message`, typed while turn `turn` ran, was handed to its call (R36)."""
    turn: int
    message: int

    def to_wire(self) -> list:
        return [self.turn, self.message]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnJoined:
        turn, message = fields(obj, 2, cls)
        return cls(int_(turn, "TurnJoined.turn"), int_(message, "TurnJoined.message"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class TurnEnded(Message):
    """Event: the turn is over. `reason`: "done", "stopped", "error" or "round_limit";
    `incomplete`: a reply was cut short (logged so, R37); `detail`: words for the person."""
    turn: int
    reason: str
    incomplete: bool
    detail: str

    def to_wire(self) -> list:
        return [self.turn, self.reason, self.incomplete, self.detail]

    @classmethod
    def from_wire(cls, obj: Any) -> TurnEnded:
        turn, reason, incomplete, detail = fields(obj, 4, cls)
        return cls(int_(turn, "TurnEnded.turn"), str_(reason, "TurnEnded.reason"),
                   bool_(incomplete, "TurnEnded.incomplete"), str_(detail, "TurnEnded.detail"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class Notice(Message):
    """Event: something the person should hear about (`level`: "info", "warning",
    "error"), e.g. a turn that stopped waiting for its view, a failed compaction (R30)."""
    level: str
    text: str

    def to_wire(self) -> list:
        return [self.level, self.text]

    @classmethod
    def from_wire(cls, obj: Any) -> Notice:
        level, text = fields(obj, 2, cls)
        return cls(str_(level, "Notice.level"), str_(text, "Notice.text"))
