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

The types live in private modules by the actor that receives them (`_schema_store` for the
log writer, `_schema_planner`, `_schema_turns`, `_schema_system`, `_schema_devices`, `_schema_goals`) on the base in
`_schema_base`; this module is their one namespace: `schema.Append`, `schema.types()`.
"""

from __future__ import annotations

from ._check import MAX_DEPTH
from ._schema_base import (BLOCK, DROP, MAX_FRAME, REFUSE, Message, decode, encode, from_obj,
                           to_obj, types, unpack)
from ._schema_store import (Append, Appended, AppendMany, AppendedMany, ReadMessage, MessageRecord,
                            ReadNodes, NodeTexts, SaveNodes, SaveMerge, SaveViews, LoadState,
                            ChatState, MessageLogged, Logged, CountMessages, MessageCount,
                            SaveDraft, RecordUsage, PutAsset, AssetPut, ReadAsset, AssetData)
from ._schema_planner import (BuildJob, Built, BuildFailed, NodeBuilt, SettleView, FitView,
                              SettledView, PoolIdle, Idle, NextJob, NoJob, PullWork, Tick,
                              ActorRestarted, CompactionFailed, PlannerStatus, PlannerState,
                              ResponseStarted, WaitBacklog)
from ._schema_turns import (UserInput, InputLogged, StopTurn, TurnStatus, TurnState,
                            AwaitSubscriber, TurnStarted, TurnText, TurnThinking, TurnThinkingDone,
                            TurnToolCall, TurnToolResult, TurnJoined, TurnEnded, Notice, ReportLogged)
from ._schema_system import (Register, Directory, StatsRequest, StatsReply, Ping, Pong, ErrorReply,
                             Ack, SupervisorStatus, SupervisorState)
from ._schema_devices import (RunJob, JobResult, StopJobs, ListDevices, DeviceList, JobOutput, AddDevice,
                              DeviceLink, RemoveDevice, EnrollDevice, DeviceEnrolled, PollJobs, DeviceWork,
                              ReportJob, DeviceOutput, LeaveDevice)
from ._schema_agents import (SpawnAgent, AgentAccepted, TellAgent, StopAgent, ListAgents, AgentList,
                             AgentEvent, AppendTranscript, ReadTranscript, TranscriptPage,
                             ReadTranscriptRecords, TranscriptRecords, ListTranscripts, TranscriptList)
from ._schema_goals import (SetGoal, HaltGoal, GoalStatus, GoalState, GoalEvent, AfterTurnFailed, CloseAfterTurn,
                            AfterTurnClosed, SaveGoal, LoadGoal)

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
    "Notice", "ReportLogged", "ResponseStarted", "WaitBacklog", "RecordUsage", "SupervisorStatus", "SupervisorState",
    "RunJob", "JobResult", "StopJobs", "ListDevices", "DeviceList", "JobOutput", "AddDevice", "DeviceLink",
    "RemoveDevice", "EnrollDevice", "DeviceEnrolled", "PollJobs", "DeviceWork", "ReportJob", "DeviceOutput",
    "LeaveDevice",
    # the agents' (R38)
    "SpawnAgent", "AgentAccepted", "TellAgent", "StopAgent", "ListAgents", "AgentList", "AgentEvent",
    "AppendTranscript", "ReadTranscript", "TranscriptPage", "ReadTranscriptRecords", "TranscriptRecords",
    "ListTranscripts", "TranscriptList",
    # goals and after-turn hooks (issue 13)
    "SetGoal", "HaltGoal", "GoalStatus", "GoalState", "GoalEvent", "AfterTurnFailed", "CloseAfterTurn",
    "AfterTurnClosed", "SaveGoal", "LoadGoal",
]
