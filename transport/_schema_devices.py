"""The device hub's messages (docs/HANDS.md §3, §5; R39): jobs on this computer or a joined
one, their results and output, and the remote device's own protocol (enrollment, long
polls, reports, output chunks).

Received by `devices` (actors/devices/actor.py), except `EnrollDevice`, which a joining device
sends to the hub's enrollment socket (actors/enrollment/actor.py). `JobOutput` is published on
topic "device" (DROP: a hint). Job ids are the tool calls' idempotency keys.

Part of `everchat.transport.schema`: import them from there (`schema.RunJob`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._check import bool_, dict_, fields, float_, list_, str_, strs
from ._schema_base import BLOCK, DROP, REFUSE, Message, message

__all__ = [
    "RunJob",
    "JobResult",
    "StopJobs",
    "ListDevices",
    "DeviceList",
    "JobOutput",
    "AddDevice",
    "DeviceLink",
    "RemoveDevice",
    "EnrollDevice",
    "DeviceEnrolled",
    "PollJobs",
    "DeviceWork",
    "ReportJob",
    "DeviceOutput",
    "LeaveDevice",
]


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class RunJob(Message):
    """Anyone -> devices (ask -> JobResult, answered when the job ends; HANDS.md §3, R39): run
    `tool` with `arguments` on `device` ("" or this computer's name: here). `job` is the job's
    id, the tool call's idempotency key: a RunJob sent again with a known id gets that job's
    result and never runs it twice. `caller` is "main" or an agent's name; `timeout` in
    seconds (0: the default, 600 s)."""
    job: str
    device: str
    tool: str
    arguments: dict
    caller: str
    timeout: float

    def to_wire(self) -> list:
        return [self.job, self.device, self.tool, self.arguments, self.caller, self.timeout]

    @classmethod
    def from_wire(cls, obj: Any) -> RunJob:
        job, device, tool, arguments, caller, timeout = fields(obj, 6, cls)
        return cls(
            str_(job, "RunJob.job"),
            str_(device, "RunJob.device"),
            str_(tool, "RunJob.tool"),
            dict_(arguments, "RunJob.arguments"),
            str_(caller, "RunJob.caller"),
            float_(timeout, "RunJob.timeout"),
        )


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class JobResult(Message):
    """Reply to RunJob: the job's outcome. `uncertain`: the job may have run (its device
    restarted or was cut off while it ran) and was not run again (R39)."""
    job: str
    text: str
    is_error: bool
    uncertain: bool

    def to_wire(self) -> list:
        return [self.job, self.text, self.is_error, self.uncertain]

    @classmethod
    def from_wire(cls, obj: Any) -> JobResult:
        job, text, is_error, uncertain = fields(obj, 4, cls)
        return cls(
            str_(job, "JobResult.job"),
            str_(text, "JobResult.text"),
            bool_(is_error, "JobResult.is_error"),
            bool_(uncertain, "JobResult.uncertain"),
        )


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class StopJobs(Message):
    """Anyone -> devices (ask -> Ack): kill the process group of every running job of
    `caller`, here and on every remote device; its jobs not started yet are answered
    "stopped"."""
    caller: str

    def to_wire(self) -> list:
        return [self.caller]

    @classmethod
    def from_wire(cls, obj: Any) -> StopJobs:
        (caller,) = fields(obj, 1, cls)
        return cls(str_(caller, "StopJobs.caller"))


@message(REFUSE)
@dataclass(frozen=True, slots=True)
class ListDevices(Message):
    """Anyone -> devices (ask -> DeviceList): the computers jobs can run on."""

    def to_wire(self) -> list:
        return []

    @classmethod
    def from_wire(cls, obj: Any) -> ListDevices:
        fields(obj, 0, cls)
        return cls()


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class DeviceList(Message):
    """Reply to ListDevices: rows `{name, online, last_seen, running, local}`; the computer
    running the chat is the row with `local: true` (named by its host name)."""
    devices: list[dict]

    def to_wire(self) -> list:
        return [self.devices]

    @classmethod
    def from_wire(cls, obj: Any) -> DeviceList:
        (devices,) = fields(obj, 1, cls)
        for item in list_(devices, "DeviceList.devices"):
            dict_(item, "DeviceList.devices[]")
        return cls(devices)


@message(DROP)
@dataclass(frozen=True, slots=True)
class JobOutput(Message):
    """Event on topic "device": a running shell job's output as it comes (a hint: the
    JobResult has what counts)."""
    job: str
    caller: str
    text: str

    def to_wire(self) -> list:
        return [self.job, self.caller, self.text]

    @classmethod
    def from_wire(cls, obj: Any) -> JobOutput:
        job, caller, text = fields(obj, 3, cls)
        return cls(
            str_(job, "JobOutput.job"),
            str_(caller, "JobOutput.caller"),
            str_(text, "JobOutput.text"),
        )


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class AddDevice(Message):
    """`everchat device add` -> devices (ask -> DeviceLink): make a single-use join secret for
    `name`, valid `ttl` seconds (docs/HANDS.md §5)."""
    name: str
    ttl: float

    def to_wire(self) -> list:
        return [self.name, self.ttl]

    @classmethod
    def from_wire(cls, obj: Any) -> AddDevice:
        name, ttl = fields(obj, 2, cls)
        return cls(str_(name, "AddDevice.name"), float_(ttl, "AddDevice.ttl"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class DeviceLink(Message):
    """Reply to AddDevice: the link `everchat device join` takes (it holds the secret: shown
    once, stored only as its hash); `expires` is wall-clock time."""
    name: str
    link: str
    expires: float

    def to_wire(self) -> list:
        return [self.name, self.link, self.expires]

    @classmethod
    def from_wire(cls, obj: Any) -> DeviceLink:
        name, link, expires = fields(obj, 3, cls)
        return cls(
            str_(name, "DeviceLink.name"),
            str_(link, "DeviceLink.link"),
            float_(expires, "DeviceLink.expires"),
        )


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class RemoveDevice(Message):
    """`everchat device remove` -> devices (ask -> Ack): revoke the device's key; a connected
    device is cut off."""
    name: str

    def to_wire(self) -> list:
        return [self.name]

    @classmethod
    def from_wire(cls, obj: Any) -> RemoveDevice:
        (name,) = fields(obj, 1, cls)
        return cls(str_(name, "RemoveDevice.name"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class EnrollDevice(Message):
    """A joining device -> the hub's enrollment socket (reply DeviceEnrolled or ErrorReply):
    present the join secret for `name` and this computer's CURVE public key (which must be
    the key the connection was made with)."""
    name: str
    secret: str
    public_key: str

    def to_wire(self) -> list:
        return [self.name, self.secret, self.public_key]

    @classmethod
    def from_wire(cls, obj: Any) -> EnrollDevice:
        name, secret, public_key = fields(obj, 3, cls)
        return cls(
            str_(name, "EnrollDevice.name"),
            str_(secret, "EnrollDevice.secret"),
            str_(public_key, "EnrollDevice.public_key"),
        )


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class DeviceEnrolled(Message):
    """Reply to EnrollDevice: the device's key is authorized; `endpoint` is the hub node's
    address (its port, events port and pinned CURVE key) the device dials from now on."""
    name: str
    endpoint: str

    def to_wire(self) -> list:
        return [self.name, self.endpoint]

    @classmethod
    def from_wire(cls, obj: Any) -> DeviceEnrolled:
        name, endpoint = fields(obj, 2, cls)
        return cls(str_(name, "DeviceEnrolled.name"), str_(endpoint, "DeviceEnrolled.endpoint"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class PollJobs(Message):
    """Remote device -> devices (ask -> DeviceWork): a long poll, answered when there is work
    or after `wait` seconds with none. `holding`: the ids of jobs the device has begun
    (journaled) and whose report was not acknowledged yet."""
    device: str
    wait: float
    holding: list[str]

    def to_wire(self) -> list:
        return [self.device, self.wait, self.holding]

    @classmethod
    def from_wire(cls, obj: Any) -> PollJobs:
        device, wait, holding = fields(obj, 3, cls)
        return cls(
            str_(device, "PollJobs.device"),
            float_(wait, "PollJobs.wait"),
            strs(holding, "PollJobs.holding"),
        )


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class DeviceWork(Message):
    """Reply to PollJobs: jobs to run (`{id, tool, arguments, caller, timeout, created}`) and
    the callers whose running jobs to stop; both empty means "none"."""
    jobs: list[dict]
    stop: list[str]

    def to_wire(self) -> list:
        return [self.jobs, self.stop]

    @classmethod
    def from_wire(cls, obj: Any) -> DeviceWork:
        jobs, stop = fields(obj, 2, cls)
        for item in list_(jobs, "DeviceWork.jobs"):
            dict_(item, "DeviceWork.jobs[]")
        return cls(jobs, strs(stop, "DeviceWork.stop"))


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class ReportJob(Message):
    """Remote device -> devices (ask -> Ack): a job's outcome (a finished one, or an uncertain
    one after a restart). It counts only for a job the hub sent to this device (P1); the
    hub keeps the first one. Any other is refused with a LookupError and not kept: the
    device holds it until the job is sent to it again."""
    device: str
    job: str
    text: str
    is_error: bool
    uncertain: bool

    def to_wire(self) -> list:
        return [self.device, self.job, self.text, self.is_error, self.uncertain]

    @classmethod
    def from_wire(cls, obj: Any) -> ReportJob:
        device, job, text, is_error, uncertain = fields(obj, 5, cls)
        return cls(
            str_(device, "ReportJob.device"),
            str_(job, "ReportJob.job"),
            str_(text, "ReportJob.text"),
            bool_(is_error, "ReportJob.is_error"),
            bool_(uncertain, "ReportJob.uncertain"),
        )


@message(DROP)
@dataclass(frozen=True, slots=True)
class DeviceOutput(Message):
    """Remote device -> devices (tell): a chunk of a shell job's output, published again as
    JobOutput (clipped, P4) when the job is out on this device (P1)."""
    device: str
    job: str
    text: str

    def to_wire(self) -> list:
        return [self.device, self.job, self.text]

    @classmethod
    def from_wire(cls, obj: Any) -> DeviceOutput:
        device, job, text = fields(obj, 3, cls)
        return cls(
            str_(device, "DeviceOutput.device"),
            str_(job, "DeviceOutput.job"),
            str_(text, "DeviceOutput.text"),
        )


@message(BLOCK)
@dataclass(frozen=True, slots=True)
class LeaveDevice(Message):
    """Remote device -> devices (ask -> Ack): this device stops (Ctrl-C, SIGTERM). It is
    offline at once; its jobs without a report fail now ("laptop left")."""
    device: str

    def to_wire(self) -> list:
        return [self.device]

    @classmethod
    def from_wire(cls, obj: Any) -> LeaveDevice:
        (device,) = fields(obj, 1, cls)
        return cls(str_(device, "LeaveDevice.device"))
