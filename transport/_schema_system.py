"""The messages of the system itself: the supervisor's directory (`Register`,
`Directory`), the ops console's statistics, `Ping`/`Pong`, and the replies any actor or
the transport gives (`Ack`, `ErrorReply`), and what a client attaching to a running chat asks
the supervisor (`SupervisorStatus` -> `SupervisorState`, issue 10).

Part of `everchat.transport.schema`: import them from there (`schema.Ping`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._check import bool_, bytes_, dict_, fields, int_, list_, str_, wrong
from ._schema_base import BLOCK, Message, REFUSE, message

__all__ = [
    "Register",
    "Directory",
    "StatsRequest",
    "StatsReply",
    "Ping",
    "Pong",
    "ErrorReply",
    "Ack",
    "SupervisorStatus",
    "SupervisorState",
]


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class Register(Message):
    """An actor's node tells the supervisor where `name` lives (ask -> Ack)."""
    name: str
    host: str
    pid: int
    endpoint: str

    def to_wire(self) -> list:
        return [self.name, self.host, self.pid, self.endpoint]

    @classmethod
    def from_wire(cls, obj: Any) -> Register:
        name, host, pid, endpoint = fields(obj, 4, cls)
        return cls(str_(name, "Register.name"), str_(host, "Register.host"), int_(pid, "Register.pid"),
                   str_(endpoint, "Register.endpoint"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class Directory(Message):
    """Supervisor -> every node: where each name lives (name -> endpoint); apply each entry
    with `node.route`."""
    routes: dict[str, str]

    def to_wire(self) -> list:
        return [self.routes]

    @classmethod
    def from_wire(cls, obj: Any) -> Directory:
        (routes,) = fields(obj, 1, cls)
        if type(routes) is not dict:
            raise wrong("Directory.routes", "map", routes)
        for name, endpoint in routes.items():
            str_(name, "Directory.routes key")
            str_(endpoint, "Directory.routes value")
        return cls(routes)


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class StatsRequest(Message):
    """Ask an actor or node for mailbox statistics (ask -> StatsReply)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> StatsRequest:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class StatsReply(Message):
    """Reply to StatsRequest: one dict per actor (`MailboxStats.to_dict()`)."""
    actors: list[dict]

    def to_wire(self) -> list:
        return [self.actors]

    @classmethod
    def from_wire(cls, obj: Any) -> StatsReply:
        (actors,) = fields(obj, 1, cls)
        for item in list_(actors, "StatsReply.actors"):
            dict_(item, "StatsReply.actors[]")
        return cls(actors)


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class Ping(Message):
    """Ask for an echo (ask -> Pong); used by health checks and the benchmarks."""
    payload: bytes

    def to_wire(self) -> list:
        return [self.payload]

    @classmethod
    def from_wire(cls, obj: Any) -> Ping:
        (payload,) = fields(obj, 1, cls)
        return cls(bytes_(payload, "Ping.payload"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class Pong(Message):
    """Reply to Ping: the same payload."""
    payload: bytes

    def to_wire(self) -> list:
        return [self.payload]

    @classmethod
    def from_wire(cls, obj: Any) -> Pong:
        (payload,) = fields(obj, 1, cls)
        return cls(bytes_(payload, "Pong.payload"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class ErrorReply(Message):
    """Reply when the handler raised (`kind` = exception class name) or the transport could
    not deliver (kinds starting with "transport:"); `ask` raises it as an exception."""
    kind: str
    text: str

    def to_wire(self) -> list:
        return [self.kind, self.text]

    @classmethod
    def from_wire(cls, obj: Any) -> ErrorReply:
        kind, text = fields(obj, 2, cls)
        return cls(str_(kind, "ErrorReply.kind"), str_(text, "ErrorReply.text"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class Ack(Message):
    """Reply: done."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> Ack:
        fields(obj, 0, cls)
        return cls()


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class SupervisorStatus(Message):
    """A client attaching to the running chat asks its supervisor where each actor lives
    and which run of it serves (ask -> SupervisorState); it asks again while it repeats a
    request across a restart (P4)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> SupervisorStatus:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class SupervisorState(Message):
    """Reply to SupervisorStatus. `actors`: one row per actor of the chat, `(name, running,
    restarts, pid, endpoint, gave_up)`: whether it runs from the run that registered now,
    how often it was restarted, the pid it registered from, the endpoint that reaches it
    ("" before it registered) and, once the supervisor gave up on it, why ("" otherwise).
    `stopping`: the chat is being stopped (no actor is restarted). `mode`: the placement
    ("single" or "processes")."""
    actors: list[tuple[str, bool, int, int, str, str]]
    stopping: bool
    mode: str

    def to_wire(self) -> list:
        return [[list(row) for row in self.actors], self.stopping, self.mode]

    @classmethod
    def from_wire(cls, obj: Any) -> SupervisorState:
        actors, stopping, mode = fields(obj, 3, cls)
        rows = []
        for row in list_(actors, "SupervisorState.actors"):
            name, running, restarts, pid, endpoint, gave_up = fields(row, 6, cls)
            what = "SupervisorState.actors[]."
            rows.append((str_(name, what + "name"), bool_(running, what + "running"),
                         int_(restarts, what + "restarts"), int_(pid, what + "pid"),
                         str_(endpoint, what + "endpoint"), str_(gave_up, what + "gave_up")))
        return cls(rows, bool_(stopping, "SupervisorState.stopping"), str_(mode, "SupervisorState.mode"))
