"""Every message Everchat's actors exchange, its fields and types, and its msgpack encoding.

A message is a frozen dataclass registered under its class name. Each has one explicit pair:
`to_wire()` returns a msgpack-able list of its fields in order, `from_wire(obj)` checks every
field's type strictly and builds the message, raising `BadFrame(reason)` otherwise. On the
wire a message is the msgpack array `[type name, to_wire()]`:

    data = schema.encode(Append("user", "hello", "client-1", [], None))
    schema.decode(data)    # Append(kind='user', text='hello', key='client-1', ...)

`decode` raises `BadFrame` for anything wrong: not msgpack, an unknown type, a field of the
wrong type, a field missing or extra, a frame over `MAX_FRAME` bytes. msgpack's own length
limits default to the frame's length, so a frame that claims a huge string or array fails
without allocating it. Dict fields (`meta`, `view`, `cview`, `StatsReply.actors`) carry
JSON-like data only: str keys; str, int, float, bool, None, list and dict values, at most
`MAX_DEPTH` levels deep. An int is accepted where a float is expected (and made a float);
a bool is never an int.

Each type also says how a full mailbox treats it (`policy`, see the transport README table):
`BLOCK` waits for room (nothing that must not be lost is ever dropped), `REFUSE` answers
`Refused` at once so the asker can retry, `DROP` drops and counts (events only; the
receiver learns about it through `Actor.on_events_missed`). Replies go to their asker, never
through a mailbox; they are marked `BLOCK`.

Messages are shared, not copied, between actors of one process: treat their list and dict
fields as read-only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import msgpack

from ._check import (MAX_DEPTH, bool_, bytes_, dict_, fields, float_, int_, ints, list_,
                     no_ext, opt_dict, opt_str, pairs, show, str_, strs, wrong)
from ._errors import BadFrame

__all__ = [
    "Message", "encode", "decode", "to_obj", "from_obj", "unpack", "types",
    "BLOCK", "DROP", "REFUSE", "MAX_FRAME", "MAX_DEPTH",
    "Append", "Appended", "AppendMany", "AppendedMany", "ReadMessage", "MessageRecord",
    "ReadNodes", "NodeTexts", "SaveNodes", "SaveMerge", "SaveViews", "Ack", "LoadState",
    "ChatState", "MessageLogged", "BuildJob", "Built", "BuildFailed", "NodeBuilt",
    "SettleView", "SettledView", "FitView", "PoolIdle", "Idle", "Register", "Directory",
    "StatsRequest", "StatsReply", "Ping", "Pong", "ErrorReply",
    "Logged", "CountMessages", "MessageCount", "NextJob", "NoJob", "PullWork", "Tick",
    "ActorRestarted", "CompactionFailed",
    "UserInput", "InputLogged", "StopTurn", "TurnStatus", "TurnState", "AwaitSubscriber", "SaveDraft", "PutAsset",
    "AssetPut", "ReadAsset", "AssetData", "PlannerStatus", "PlannerState", "TurnStarted", "TurnText",
    "TurnThinking", "TurnThinkingDone", "TurnToolCall", "TurnToolResult", "TurnJoined", "TurnEnded",
    "Notice", "ResponseStarted", "WaitBacklog", "RecordUsage",
]

BLOCK = "block"
DROP = "drop"
REFUSE = "refuse"
MAX_FRAME = 16 * 1024 * 1024

_TYPES: dict[str, type[Message]] = {}


class Message:
    """Base class of every message. Subclasses are registered with `_message(policy)`."""

    __slots__ = ()
    type_name: ClassVar[str]   # the name on the wire: the class name
    handler: ClassVar[str]     # the Actor method that handles it: on_<snake_case name>
    policy: ClassVar[str]      # BLOCK, REFUSE or DROP

    def to_wire(self) -> list:
        raise NotImplementedError

    @classmethod
    def from_wire(cls, obj: Any) -> Message:
        raise NotImplementedError


def _message(policy: str):
    def register(cls: type[Message]) -> type[Message]:
        cls.type_name = cls.__name__
        cls.handler = "on_" + re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        cls.policy = policy
        _TYPES[cls.__name__] = cls
        return cls
    return register


def types() -> dict[str, type[Message]]:
    """Every registered message type by its wire name."""
    return dict(_TYPES)


def to_obj(msg: Message) -> list:
    """`[type name, fields]`: what `encode` packs (the transport nests it in its frames)."""
    return [msg.type_name, msg.to_wire()]


def from_obj(obj: Any) -> Message:
    """The message for an unpacked `[type name, fields]`, or BadFrame(reason)."""
    if type(obj) is not list or len(obj) != 2:
        raise BadFrame(f"expected [type, fields], got {show(obj)}")
    name, fields_ = obj
    cls = _TYPES.get(name) if type(name) is str else None
    if cls is None:
        raise BadFrame(f"unknown message type {show(name)}")
    try:
        return cls.from_wire(fields_)
    except (TypeError, ValueError) as exc:     # a checker missed something: still a bad frame
        raise BadFrame(f"{name}: {type(exc).__name__}: {str(exc):.80}") from None


def encode(msg: Message) -> bytes:
    """The frame for `msg`. Raises BadFrame when a field cannot be encoded or the frame
    would be over MAX_FRAME (a decoder would drop it anyway)."""
    try:
        data = msgpack.packb([msg.type_name, msg.to_wire()])
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadFrame(f"cannot encode {type(msg).__name__}: {exc}") from None
    if len(data) > MAX_FRAME:
        raise BadFrame(f"{type(msg).__name__} is {len(data)} bytes, over the {MAX_FRAME}-byte limit")
    return data


def decode(data: bytes) -> Message:
    """The message in `data`; BadFrame(reason) when anything about it is wrong."""
    return from_obj(unpack(data, MAX_FRAME))


def unpack(data: bytes, limit: int) -> Any:
    """msgpack.unpackb for untrusted bytes: BadFrame for anything over `limit` bytes, not
    msgpack, or using extension types. Lengths inside are capped by the data's length."""
    if len(data) > limit:
        raise BadFrame(f"frame of {len(data)} bytes is over the {limit}-byte limit")
    try:
        return msgpack.unpackb(data, ext_hook=no_ext)
    except BadFrame:
        raise
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as exc:
        raise BadFrame(f"not msgpack: {type(exc).__name__}: {str(exc):.80}") from None


# ---- the log writer ----

@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class Append(Message):
    """Log one message (ask -> Appended). `key` makes a resent ask idempotent."""
    kind: str
    text: str
    key: str | None
    images: list[str]
    meta: dict | None

    def to_wire(self) -> list:
        return [self.kind, self.text, self.key, self.images, self.meta]

    @classmethod
    def from_wire(cls, obj: Any) -> Append:
        kind, text, key, images, meta = fields(obj, 5, cls)
        return cls(str_(kind, "Append.kind"), str_(text, "Append.text"), opt_str(key, "Append.key"),
                   strs(images, "Append.images"), opt_dict(meta, "Append.meta"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class Appended(Message):
    """Reply to Append: the ids the message was logged under (several when it was split)."""
    ids: list[int]

    def to_wire(self) -> list:
        return [self.ids]

    @classmethod
    def from_wire(cls, obj: Any) -> Appended:
        (ids,) = fields(obj, 1, cls)
        return cls(ints(ids, "Appended.ids"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class AppendMany(Message):
    """Log several messages in one group commit (ask -> AppendedMany)."""
    items: list[Append]

    def to_wire(self) -> list:
        return [[item.to_wire() for item in self.items]]

    @classmethod
    def from_wire(cls, obj: Any) -> AppendMany:
        (items,) = fields(obj, 1, cls)
        return cls([Append.from_wire(item) for item in list_(items, "AppendMany.items")])


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class AppendedMany(Message):
    """Reply to AppendMany: the ids of each item, in order."""
    ids: list[list[int]]

    def to_wire(self) -> list:
        return [self.ids]

    @classmethod
    def from_wire(cls, obj: Any) -> AppendedMany:
        (ids,) = fields(obj, 1, cls)
        for item in list_(ids, "AppendedMany.ids"):
            ints(item, "AppendedMany.ids[]")
        return cls(ids)


@_message(REFUSE)
@dataclass(frozen=True, slots=True)
class ReadMessage(Message):
    """Read message `i` (ask -> MessageRecord)."""
    i: int

    def to_wire(self) -> list:
        return [self.i]

    @classmethod
    def from_wire(cls, obj: Any) -> ReadMessage:
        (i,) = fields(obj, 1, cls)
        return cls(int_(i, "ReadMessage.i"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class MessageRecord(Message):
    """Reply to ReadMessage: one logged message."""
    i: int
    kind: str
    text: str
    size: int
    date: str
    images: list[str]
    meta: dict | None

    def to_wire(self) -> list:
        return [self.i, self.kind, self.text, self.size, self.date, self.images, self.meta]

    @classmethod
    def from_wire(cls, obj: Any) -> MessageRecord:
        i, kind, text, size, date, images, meta = fields(obj, 7, cls)
        return cls(int_(i, "MessageRecord.i"), str_(kind, "MessageRecord.kind"),
                   str_(text, "MessageRecord.text"), int_(size, "MessageRecord.size"),
                   str_(date, "MessageRecord.date"), strs(images, "MessageRecord.images"),
                   opt_dict(meta, "MessageRecord.meta"))


@_message(REFUSE)
@dataclass(frozen=True, slots=True)
class ReadNodes(Message):
    """Read the texts of tree nodes (l, i) (ask -> NodeTexts)."""
    nodes: list[tuple[int, int]]

    def to_wire(self) -> list:
        return [self.nodes]

    @classmethod
    def from_wire(cls, obj: Any) -> ReadNodes:
        (nodes,) = fields(obj, 1, cls)
        return cls(pairs(nodes, "ReadNodes.nodes"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class NodeTexts(Message):
    """Reply to ReadNodes: each node's text, None for a node not built."""
    texts: list[str | None]

    def to_wire(self) -> list:
        return [self.texts]

    @classmethod
    def from_wire(cls, obj: Any) -> NodeTexts:
        (texts,) = fields(obj, 1, cls)
        for text in list_(texts, "NodeTexts.texts"):
            opt_str(text, "NodeTexts.texts[]")
        return cls(texts)


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class SaveNodes(Message):
    """Log built tree nodes (l, i, text) (ask -> Ack)."""
    nodes: list[tuple[int, int, str]]

    def to_wire(self) -> list:
        return [self.nodes]

    @classmethod
    def from_wire(cls, obj: Any) -> SaveNodes:
        (nodes,) = fields(obj, 1, cls)
        out = []
        for item in list_(nodes, "SaveNodes.nodes"):
            if (type(item) is not list or len(item) != 3 or type(item[0]) is not int
                    or type(item[1]) is not int or type(item[2]) is not str):
                raise wrong("SaveNodes.nodes[]", "[int, int, str]", item)
            out.append((item[0], item[1], item[2]))
        return cls(out)


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class SaveMerge(Message):
    """Log a merge record: the merged pairs by left member, at message count t (ask -> Ack)."""
    merges: list[tuple[int, int]]
    t: int
    open: bool

    def to_wire(self) -> list:
        return [self.merges, self.t, self.open]

    @classmethod
    def from_wire(cls, obj: Any) -> SaveMerge:
        merges, t, open_ = fields(obj, 3, cls)
        return cls(pairs(merges, "SaveMerge.merges"), int_(t, "SaveMerge.t"), bool_(open_, "SaveMerge.open"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class SaveViews(Message):
    """Save view.json and the compaction view (ask -> Ack)."""
    view: dict
    cview: dict

    def to_wire(self) -> list:
        return [self.view, self.cview]

    @classmethod
    def from_wire(cls, obj: Any) -> SaveViews:
        view, cview = fields(obj, 2, cls)
        return cls(dict_(view, "SaveViews.view"), dict_(cview, "SaveViews.cview"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class Ack(Message):
    """Reply: done."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> Ack:
        fields(obj, 0, cls)
        return cls()


@_message(REFUSE)
@dataclass(frozen=True, slots=True)
class LoadState(Message):
    """Ask the log writer for what a restarted planner needs (ask -> ChatState)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> LoadState:
        fields(obj, 0, cls)
        return cls()


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class ChatState(Message):
    """Reply to LoadState: message count, saved views, the merge records (merges, t, open)
    logged after the saved view, and the number of the first of them (R24)."""
    messages: int
    view: dict | None
    cview: dict | None
    records: list[tuple[list[tuple[int, int]], int, bool]]
    first: int = 0

    def to_wire(self) -> list:
        return [self.messages, self.view, self.cview, self.records, self.first]

    @classmethod
    def from_wire(cls, obj: Any) -> ChatState:
        messages, view, cview, records, first = fields(obj, 5, cls)
        out = []
        for item in list_(records, "ChatState.records"):
            if type(item) is not list or len(item) != 3:
                raise wrong("ChatState.records[]", "[merges, t, open]", item)
            out.append((pairs(item[0], "ChatState.records[].merges"),
                        int_(item[1], "ChatState.records[].t"), bool_(item[2], "ChatState.records[].open")))
        return cls(int_(messages, "ChatState.messages"), opt_dict(view, "ChatState.view"),
                   opt_dict(cview, "ChatState.cview"), out, int_(first, "ChatState.first"))


@_message(DROP)
@dataclass(frozen=True, slots=True)
class MessageLogged(Message):
    """Event, topic "logged": message i is on disk (published after its fsync)."""
    i: int
    line_bytes: int

    def to_wire(self) -> list:
        return [self.i, self.line_bytes]

    @classmethod
    def from_wire(cls, obj: Any) -> MessageLogged:
        i, line_bytes = fields(obj, 2, cls)
        return cls(int_(i, "MessageLogged.i"), int_(line_bytes, "MessageLogged.line_bytes"))


# ---- the planner and the compactor pool ----

@_message(BLOCK)
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


@_message(BLOCK)
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


@_message(BLOCK)
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


@_message(DROP)
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


@_message(REFUSE)
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


@_message(BLOCK)
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


@_message(BLOCK)
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


@_message(REFUSE)
@dataclass(frozen=True, slots=True)
class PoolIdle(Message):
    """Ask whether the compactor pool is idle (ask -> Idle)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> PoolIdle:
        fields(obj, 0, cls)
        return cls()


@_message(BLOCK)
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


# ---- the supervisor, the ops console, the transport ----

@_message(BLOCK)
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


@_message(BLOCK)
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


@_message(REFUSE)
@dataclass(frozen=True, slots=True)
class StatsRequest(Message):
    """Ask an actor or node for mailbox statistics (ask -> StatsReply)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> StatsRequest:
        fields(obj, 0, cls)
        return cls()


@_message(BLOCK)
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


@_message(REFUSE)
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


@_message(BLOCK)
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


@_message(BLOCK)
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


# ---- the planner and the compactor pool (added with the actors) ----

@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class Logged(Message):
    """Log writer -> planner (tell) after each append's fsync: the new messages' `kind: text`
    lines, from id `first` on. A reliable tell: the planner must plan every message."""
    first: int
    lines: list[str]

    def to_wire(self) -> list:
        return [self.first, self.lines]

    @classmethod
    def from_wire(cls, obj: Any) -> Logged:
        first, lines = fields(obj, 2, cls)
        return cls(int_(first, "Logged.first"), strs(lines, "Logged.lines"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class CountMessages(Message):
    """How many messages the chat has (ask -> MessageCount); the planner catches up with it."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> CountMessages:
        fields(obj, 0, cls)
        return cls()


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class MessageCount(Message):
    """Reply to CountMessages."""
    messages: int

    def to_wire(self) -> list:
        return [self.messages]

    @classmethod
    def from_wire(cls, obj: Any) -> MessageCount:
        (messages,) = fields(obj, 1, cls)
        return cls(int_(messages, "MessageCount.messages"))


@_message(REFUSE)
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


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class NoJob(Message):
    """Reply to NextJob when nothing came for a while: ask again."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> NoJob:
        fields(obj, 0, cls)
        return cls()


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class PullWork(Message):
    """A worker's note to itself: ask the planner for the next job."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> PullWork:
        fields(obj, 0, cls)
        return cls()


@_message(DROP)
@dataclass(frozen=True, slots=True)
class Tick(Message):
    """The planner's clock (once a second): expire waits, retry failures (R30). The log
    writer tells itself one to save usage.json it held back (actors/usage.py)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> Tick:
        fields(obj, 0, cls)
        return cls()


@_message(BLOCK)
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


@_message(DROP)
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


# ---- the turn runner, its front ends, drafts and assets (R35-R37) ----

@_message(BLOCK)
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


@_message(BLOCK)
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


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class StopTurn(Message):
    """Front end -> turn runner (tell, or ask -> Ack): end the running call (R37, /stop)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> StopTurn:
        fields(obj, 0, cls)
        return cls()


@_message(REFUSE)
@dataclass(frozen=True, slots=True)
class TurnStatus(Message):
    """Ask the turn runner what it is doing (ask -> TurnState)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> TurnStatus:
        fields(obj, 0, cls)
        return cls()


@_message(BLOCK)
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


@_message(REFUSE)
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


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class SaveDraft(Message):
    """Turn runner -> log writer (ask -> Ack): the reply streamed so far, to be logged
    under `key` (marked incomplete) if the process dies before the reply is (R37). A
    `key` of None clears the draft."""
    key: str | None
    text: str
    meta: dict | None

    def to_wire(self) -> list:
        return [self.key, self.text, self.meta]

    @classmethod
    def from_wire(cls, obj: Any) -> SaveDraft:
        key, text, meta = fields(obj, 3, cls)
        return cls(opt_str(key, "SaveDraft.key"), str_(text, "SaveDraft.text"), opt_dict(meta, "SaveDraft.meta"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class RecordUsage(Message):
    """Turn runner or compactor -> log writer (tell): what model calls used, to be added to
    the chat's usage.json (actors/usage.py). `role` is "turns" or "compactions"; `calls`
    answered calls, `failures` failed ones (R30: a failed compaction call is never silent)."""
    role: str
    input: int
    output: int
    cache_read: int
    cache_write: int
    calls: int
    failures: int

    def to_wire(self) -> list:
        return [self.role, self.input, self.output, self.cache_read, self.cache_write, self.calls, self.failures]

    @classmethod
    def from_wire(cls, obj: Any) -> RecordUsage:
        role, input_, output, cache_read, cache_write, calls, failures = fields(obj, 7, cls)
        return cls(str_(role, "RecordUsage.role"), int_(input_, "RecordUsage.input"),
                   int_(output, "RecordUsage.output"), int_(cache_read, "RecordUsage.cache_read"),
                   int_(cache_write, "RecordUsage.cache_write"), int_(calls, "RecordUsage.calls"),
                   int_(failures, "RecordUsage.failures"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class PutAsset(Message):
    """Store an image under assets/<sha256> (R9) (ask -> AssetPut)."""
    data: bytes

    def to_wire(self) -> list:
        return [self.data]

    @classmethod
    def from_wire(cls, obj: Any) -> PutAsset:
        (data,) = fields(obj, 1, cls)
        return cls(bytes_(data, "PutAsset.data"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class AssetPut(Message):
    """Reply to PutAsset: the image's digest."""
    digest: str

    def to_wire(self) -> list:
        return [self.digest]

    @classmethod
    def from_wire(cls, obj: Any) -> AssetPut:
        (digest,) = fields(obj, 1, cls)
        return cls(str_(digest, "AssetPut.digest"))


@_message(REFUSE)
@dataclass(frozen=True, slots=True)
class ReadAsset(Message):
    """Read a stored image (ask -> AssetData)."""
    digest: str

    def to_wire(self) -> list:
        return [self.digest]

    @classmethod
    def from_wire(cls, obj: Any) -> ReadAsset:
        (digest,) = fields(obj, 1, cls)
        return cls(str_(digest, "ReadAsset.digest"))


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class AssetData(Message):
    """Reply to ReadAsset: the image's bytes."""
    data: bytes

    def to_wire(self) -> list:
        return [self.data]

    @classmethod
    def from_wire(cls, obj: Any) -> AssetData:
        (data,) = fields(obj, 1, cls)
        return cls(bytes_(data, "AssetData.data"))


@_message(REFUSE)
@dataclass(frozen=True, slots=True)
class PlannerStatus(Message):
    """Ask the planner for its figures and the view as it stands (ask -> PlannerState).
    Unlike SettleView it never waits and never changes what compactions start."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> PlannerStatus:
        fields(obj, 0, cls)
        return cls()


@_message(BLOCK)
@dataclass(frozen=True, slots=True)
class PlannerState(Message):
    """Reply to PlannerStatus: `Planning.status()` and the rendered view (R14, R15)."""
    status: dict
    view: str

    def to_wire(self) -> list:
        return [self.status, self.view]

    @classmethod
    def from_wire(cls, obj: Any) -> PlannerState:
        status, view = fields(obj, 2, cls)
        return cls(dict_(status, "PlannerState.status"), str_(view, "PlannerState.view"))


# Turn events: published by the turn runner on topic "turn"; `turn` is the id of the
# user message that opened the turn. Events are hints (DROP): what matters is in the log.

@_message(DROP)
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


@_message(DROP)
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


@_message(DROP)
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


@_message(DROP)
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


@_message(DROP)
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


@_message(DROP)
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


@_message(DROP)
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


@_message(DROP)
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


@_message(DROP)
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


# ---- R23's prefix gate and bulk imports (issue 4) ----

@_message(BLOCK)
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


@_message(REFUSE)
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
