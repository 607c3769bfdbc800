"""The log writer's messages: appends and reads of the log, the tree's nodes, merge
records and views, drafts, usage and assets, and its events (`MessageLogged`, `Logged`).

Part of `everchat.transport.schema`: import them from there (`schema.Append`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._check import bool_, bytes_, dict_, fields, int_, ints, list_, opt_dict, opt_str, pairs, str_, strs, wrong
from ._schema_base import BLOCK, DROP, Message, REFUSE, message

__all__ = [
    "Append",
    "Appended",
    "AppendMany",
    "AppendedMany",
    "ReadMessage",
    "MessageRecord",
    "ReadNodes",
    "NodeTexts",
    "SaveNodes",
    "SaveMerge",
    "SaveViews",
    "LoadState",
    "ChatState",
    "MessageLogged",
    "Logged",
    "CountMessages",
    "MessageCount",
    "SaveDraft",
    "RecordUsage",
    "PutAsset",
    "AssetPut",
    "ReadAsset",
    "AssetData",
]


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class Append(Message):
    """Log one message (ask -> Appended). `key` makes a resent ask idempotent. `date`, when
    given, is the record's date (an ISO date and time with its timezone, checked by the
    store) instead of now: an imported message keeps when it was said (R1); the day file
    is still today's, so ids stay in file order (R2)."""
    kind: str
    text: str
    key: str | None
    images: list[str]
    meta: dict | None
    date: str | None = None

    def to_wire(self) -> list:
        return [self.kind, self.text, self.key, self.images, self.meta, self.date]

    @classmethod
    def from_wire(cls, obj: Any) -> Append:
        kind, text, key, images, meta, date = fields(obj, 6, cls)
        return cls(str_(kind, "Append.kind"), str_(text, "Append.text"), opt_str(key, "Append.key"),
                   strs(images, "Append.images"), opt_dict(meta, "Append.meta"), opt_str(date, "Append.date"))


@message(BLOCK)
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


@message(BLOCK)
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


@message(BLOCK)
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


@message(REFUSE)
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


@message(BLOCK)
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


@message(REFUSE)
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


@message(BLOCK)
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


@message(BLOCK)
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


@message(BLOCK)
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


@message(BLOCK)
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


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class LoadState(Message):
    """Ask the log writer for what a restarted planner needs (ask -> ChatState)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> LoadState:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
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


@message(DROP)
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


@message(BLOCK)
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


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class CountMessages(Message):
    """How many messages the chat has (ask -> MessageCount); the planner catches up with it."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> CountMessages:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
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


@message(BLOCK)
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


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class RecordUsage(Message):
    """Turn runner or compactor -> log writer (tell): what model calls used, to be added to
    the chat's usage.json (actors/folder/usage.py). `role` is "turns" or "compactions"; `calls`
    answered calls, `failures` failed ones (R30: a failed compaction call is never silent)."""
    role: str
    input: int
    output: int
    cache_read: int
    cache_write: int
    calls: int
    failures: int

    @classmethod
    def of(cls, role: str, usage=None, failures: int = 0) -> "RecordUsage":
        """The tell for one answered call's `models.Usage`, or for `failures` failed calls."""
        if usage is None:
            return cls(role, 0, 0, 0, 0, 0, failures)
        return cls(role, usage.input, usage.output, usage.cache_read, usage.cache_write, 1, failures)

    def to_wire(self) -> list:
        return [self.role, self.input, self.output, self.cache_read, self.cache_write, self.calls, self.failures]

    @classmethod
    def from_wire(cls, obj: Any) -> RecordUsage:
        role, input_, output, cache_read, cache_write, calls, failures = fields(obj, 7, cls)
        return cls(str_(role, "RecordUsage.role"), int_(input_, "RecordUsage.input"),
                   int_(output, "RecordUsage.output"), int_(cache_read, "RecordUsage.cache_read"),
                   int_(cache_write, "RecordUsage.cache_write"), int_(calls, "RecordUsage.calls"),
                   int_(failures, "RecordUsage.failures"))


@message(BLOCK)
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


@message(BLOCK)
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


@message(REFUSE)
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


@message(BLOCK)
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
