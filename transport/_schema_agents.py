"""The agents' messages (R38; docs/HANDS.md §3): starting, telling, stopping and listing
agents (received by `agents`), the agent events the front ends show (topic "agent"), and
the transcripts the log writer keeps for them (`agents/NAME/`, received by `log_writer`).

Part of `everchat.transport.schema`: import them from there (`schema.SpawnAgent`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._check import bool_, dict_, fields, int_, list_, opt_dict, str_, strs
from ._schema_base import BLOCK, DROP, REFUSE, Message, message

__all__ = [
    "SpawnAgent",
    "AgentAccepted",
    "TellAgent",
    "StopAgent",
    "ListAgents",
    "AgentList",
    "AgentEvent",
    "AppendTranscript",
    "ReadTranscript",
    "TranscriptPage",
    "ReadTranscriptRecords",
    "TranscriptRecords",
    "ListTranscripts",
    "TranscriptList",
]


def _dicts(v: Any, what: str) -> list[dict]:
    for item in list_(v, what):
        dict_(item, what + "[]")
    return v


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class SpawnAgent(Message):
    """A call's `spawn` -> agents (ask -> AgentAccepted): start agent `name` on `task`.
    `key` (the tool result's idempotency key) makes it idempotent: the same key again gets
    the first answer, never a second agent (R38)."""
    name: str
    task: str
    key: str

    def to_wire(self) -> list:
        return [self.name, self.task, self.key]

    @classmethod
    def from_wire(cls, obj: Any) -> SpawnAgent:
        name, task, key = fields(obj, 3, cls)
        return cls(str_(name, "SpawnAgent.name"), str_(task, "SpawnAgent.task"), str_(key, "SpawnAgent.key"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class AgentAccepted(Message):
    """Reply to SpawnAgent and TellAgent: the agent's state after it (`queued`,
    `working`, `done`, `stopped`, `failed`) and a sentence for the model."""
    name: str
    state: str
    detail: str

    def to_wire(self) -> list:
        return [self.name, self.state, self.detail]

    @classmethod
    def from_wire(cls, obj: Any) -> AgentAccepted:
        name, state, detail = fields(obj, 3, cls)
        return cls(str_(name, "AgentAccepted.name"), str_(state, "AgentAccepted.state"),
                   str_(detail, "AgentAccepted.detail"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class TellAgent(Message):
    """A call's `tell` -> agents (ask -> AgentAccepted): `text` reaches a working agent
    between its tool calls, or continues a finished one from its transcript (R38).
    Idempotent by `key`."""
    name: str
    text: str
    key: str

    def to_wire(self) -> list:
        return [self.name, self.text, self.key]

    @classmethod
    def from_wire(cls, obj: Any) -> TellAgent:
        name, text, key = fields(obj, 3, cls)
        return cls(str_(name, "TellAgent.name"), str_(text, "TellAgent.text"), str_(key, "TellAgent.key"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class StopAgent(Message):
    """Front end -> agents (ask -> Ack): end agent `name`'s call and its device jobs."""
    name: str

    def to_wire(self) -> list:
        return [self.name]

    @classmethod
    def from_wire(cls, obj: Any) -> StopAgent:
        (name,) = fields(obj, 1, cls)
        return cls(str_(name, "StopAgent.name"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class ListAgents(Message):
    """Ask the agents actor for its agents (ask -> AgentList)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> ListAgents:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class AgentList(Message):
    """Reply to ListAgents: one row per agent, `{name, state, task, position}` (`position`
    is the place in the queue from 1 for a queued agent, else 0), in the order they were
    started."""
    agents: list[dict]

    def to_wire(self) -> list:
        return [self.agents]

    @classmethod
    def from_wire(cls, obj: Any) -> AgentList:
        (agents,) = fields(obj, 1, cls)
        return cls(_dicts(agents, "AgentList.agents"))


@message(DROP)
@dataclass(frozen=True, slots=True)
class AgentEvent(Message):
    """Event on topic "agent": agent `name` is now in `state`; `text` says what happened
    (a tool it called, a result, its end). A hint: the transcript has everything."""
    name: str
    state: str
    text: str

    def to_wire(self) -> list:
        return [self.name, self.state, self.text]

    @classmethod
    def from_wire(cls, obj: Any) -> AgentEvent:
        name, state, text = fields(obj, 3, cls)
        return cls(str_(name, "AgentEvent.name"), str_(state, "AgentEvent.state"), str_(text, "AgentEvent.text"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class AppendTranscript(Message):
    """Agents -> log writer (ask -> Appended): one record of agent `agent`'s transcript,
    fsynced before the answer; idempotent by `key` (the same key answers the first ids)."""
    agent: str
    kind: str
    text: str
    key: str
    meta: dict | None

    def to_wire(self) -> list:
        return [self.agent, self.kind, self.text, self.key, self.meta]

    @classmethod
    def from_wire(cls, obj: Any) -> AppendTranscript:
        agent, kind, text, key, meta = fields(obj, 5, cls)
        return cls(str_(agent, "AppendTranscript.agent"), str_(kind, "AppendTranscript.kind"),
                   str_(text, "AppendTranscript.text"), str_(key, "AppendTranscript.key"),
                   opt_dict(meta, "AppendTranscript.meta"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class ReadTranscript(Message):
    """Ask the log writer for page `page` (from 1) of agent `agent`'s transcript rendered
    `i kind: text` per record (R35's zoom("Name"); ask -> TranscriptPage)."""
    agent: str
    page: int

    def to_wire(self) -> list:
        return [self.agent, self.page]

    @classmethod
    def from_wire(cls, obj: Any) -> ReadTranscript:
        agent, page = fields(obj, 2, cls)
        return cls(str_(agent, "ReadTranscript.agent"), int_(page, "ReadTranscript.page"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class TranscriptPage(Message):
    """Reply to ReadTranscript: the page's text, its number and how many there are."""
    agent: str
    text: str
    page: int
    pages: int

    def to_wire(self) -> list:
        return [self.agent, self.text, self.page, self.pages]

    @classmethod
    def from_wire(cls, obj: Any) -> TranscriptPage:
        agent, text, page, pages = fields(obj, 4, cls)
        return cls(str_(agent, "TranscriptPage.agent"), str_(text, "TranscriptPage.text"),
                   int_(page, "TranscriptPage.page"), int_(pages, "TranscriptPage.pages"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class ReadTranscriptRecords(Message):
    """Ask the log writer for agent `agent`'s records from number `first` on (ask ->
    TranscriptRecords): what the agents actor recovers from and continues an agent from."""
    agent: str
    first: int

    def to_wire(self) -> list:
        return [self.agent, self.first]

    @classmethod
    def from_wire(cls, obj: Any) -> ReadTranscriptRecords:
        agent, first = fields(obj, 2, cls)
        return cls(str_(agent, "ReadTranscriptRecords.agent"), int_(first, "ReadTranscriptRecords.first"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class TranscriptRecords(Message):
    """Reply to ReadTranscriptRecords: records `{i, kind, text, date, key, meta}` in order
    (a bounded batch), and whether more follow (`more`: ask again from the next number)."""
    agent: str
    records: list[dict]
    more: bool

    def to_wire(self) -> list:
        return [self.agent, self.records, self.more]

    @classmethod
    def from_wire(cls, obj: Any) -> TranscriptRecords:
        agent, records, more = fields(obj, 3, cls)
        return cls(str_(agent, "TranscriptRecords.agent"), _dicts(records, "TranscriptRecords.records"),
                   bool_(more, "TranscriptRecords.more"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class ListTranscripts(Message):
    """Ask the log writer which agents have a transcript (ask -> TranscriptList)."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> ListTranscripts:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class TranscriptList(Message):
    """Reply to ListTranscripts: the agents' names, sorted."""
    agents: list[str]

    def to_wire(self) -> list:
        return [self.agents]

    @classmethod
    def from_wire(cls, obj: Any) -> TranscriptList:
        (agents,) = fields(obj, 1, cls)
        return cls(strs(agents, "TranscriptList.agents"))
