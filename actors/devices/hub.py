"""The device hub's pure core (docs/HANDS.md §3, §5; R39, issue 20 P1): no sockets, threads
or files; times are passed in. `actors/devices/actor.py` is its shell.

`DeviceHub` knows the enrolled devices, when each was last heard from, each device's
queue, and every job by its id, with the askers waiting for it. Every method returns what
the shell must do: answers as `(waiter, message)` pairs (a waiter is whatever the shell
passed: a Delivery), local jobs to start, refusals to log.

Who may say what about a job (P1):
- a job's id (`Job.id`) is the hub's own, made by the shell from the asker's id
  (`RunJob.job`, kept as `_Record.key`) with a secret (`job_id`): a device sees only the
  ids of jobs sent to it and cannot guess any other;
- a report (`report`) or output (`output`) counts only from the device the job was sent
  to, and only while it is out there (state "sent"); anything else is refused with why,
  and nothing of it is kept, so a device cannot plant results or grow the hub's memory;
- a job id the hub knows is never started again: a resent RunJob waits for (or gets) the
  first result; one with the same id but another call is refused (nothing runs).

When a device is gone (HANDS.md §5): it tells the hub it leaves (`leave`): its jobs fail at
once ("laptop left"); or it goes quiet: it is offline once it was not heard from for
`offline_seconds`, and its jobs fail `keep_seconds` after that ("laptop is offline"),
unless it comes back first and reports them (its journal: never run twice). Records expire
`EXPIRY_SECONDS` after their job ended (or after it was made, for one never taken).
"""

from __future__ import annotations

import hashlib
import hmac
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from everchat.actors.devices.jobs import Job, Outcome
from everchat.transport import schema

__all__ = ["DeviceHub", "job_id", "same_call", "OFFLINE_SECONDS", "KEEP_SECONDS", "EXPIRY_SECONDS", "POLL_SECONDS"]

OFFLINE_SECONDS = 60.0    # a device not heard from this long is offline (it polls at least every POLL_SECONDS)
KEEP_SECONDS = 60.0       # an offline device's jobs wait this long for it to come back, then fail
EXPIRY_SECONDS = 600.0    # a job's record lives this long after it ended (HANDS.md §4: 10 minutes)
POLL_SECONDS = 20.0       # how long a device's poll waits for work at most (a third of OFFLINE_SECONDS)


def job_id(secret: bytes, key: str) -> str:
    """The hub's id of the job an asker calls `key` (P1): the same key always gives the
    same id (a RunJob sent again finds its job, also after a restart), and without the
    secret no id can be guessed from the keys, which are predictable (`turn-12-3`)."""
    digest = hmac.new(secret, key.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return f"job-{digest[:32]}"


def same_call(one: Job, other: Job) -> bool:
    """Whether two jobs are the same tool call (a job re-presented after a restart is
    checked against the RunJob asking for it)."""
    return (one.tool, one.arguments, one.caller) == (other.tool, other.arguments, other.caller)


@dataclass
class _Record:
    job: Job
    key: str                     # the asker's id of the job (RunJob.job): answers carry it
    device: str                  # "" for this computer
    state: str                   # queued (remote, not sent), sent, running (local), done
    since: float                 # time.time() of the last change of state
    result: schema.JobResult | None = None
    waiters: list = field(default_factory=list)


class DeviceHub:
    """What the hub knows (see the module docstring)."""

    def __init__(self, local_name: str, offline_seconds: float = OFFLINE_SECONDS,
                 keep_seconds: float = KEEP_SECONDS) -> None:
        self.local_name = local_name
        self.offline_seconds = offline_seconds
        self.keep_seconds = keep_seconds
        self.devices: dict[str, str] = {}            # enrolled name -> z85 public key
        self.last_poll: dict[str, float] = {}        # device -> when it was last heard from
        self.polls: dict[str, tuple[Any, float]] = {}  # device -> (waiting poll, answer-by time)
        self.queues: dict[str, deque[str]] = {}
        self.stops: dict[str, set[str]] = {}
        self.records: dict[str, _Record] = {}

    def __repr__(self) -> str:
        return f"<DeviceHub {self.local_name}: {len(self.devices)} devices, {len(self.records)} jobs>"

    # -- devices --

    def set_devices(self, devices: dict[str, str], now: float = 0.0) -> tuple[list[tuple[Any, str]], list]:
        """The enrolled devices now (name -> key): (the waiting polls of devices no longer
        among them, each with why, for the shell to fail; the answers for their jobs, which
        fail: nothing more can come of them)."""
        self.devices = dict(devices)
        gone = [name for name in set(self.polls) | {r.device for r in self.records.values() if r.device}
                if name not in self.devices]
        polls = [(self.polls.pop(name)[0], f"device {name!r} was removed from this chat") for name in gone
                 if name in self.polls]
        answers = []
        for name in gone:
            answers += self._fail(name, now, f"{name} was removed from this chat")
        return polls, answers

    def device_of_key(self, key: str | None) -> str | None:
        for name, known in self.devices.items():
            if key is not None and hmac.compare_digest(known, key):
                return name
        return None

    def is_local(self, device: str) -> bool:
        return device in ("", self.local_name)

    def online(self, name: str, now: float) -> bool:
        return now - self.last_poll.get(name, float("-inf")) < self.offline_seconds

    def poll_wait(self, asked: float) -> float:
        """How long a poll may wait: what the device asked, at most a third of
        `offline_seconds`, so a device that polls again at once never looks offline."""
        return max(0.0, min(asked, POLL_SECONDS, self.offline_seconds / 3))

    def rows(self, now: float, local_running: int) -> list[dict]:
        """ListDevices' rows: this computer first, then every enrolled device."""
        rows = [{"name": self.local_name, "online": True, "last_seen": now, "running": local_running,
                 "local": True}]
        for name in sorted(self.devices):
            running = sum(1 for r in self.records.values() if r.device == name and r.state == "sent")
            rows.append({"name": name, "online": self.online(name, now), "last_seen": self.last_poll.get(name),
                         "running": running, "local": False})
        return rows

    # -- jobs --

    def submit(self, job: Job, key: str, device: str, waiter: Any, now: float) -> tuple[list, Job | None]:
        """A RunJob (`job.id` the hub's id of the asker's `key`): (answers now, a local job
        to start). A known id never starts again."""
        record = self.records.get(job.id)
        if record is not None:
            if not same_call(record.job, job) or record.device != ("" if self.is_local(device) else device):
                return [(waiter, _error(key, f"the job id {key!r} was used for another call already ({record.job.tool} "
                                             "with other arguments); this one was not run"))], None
            if record.result is not None:
                return [(waiter, record.result)], None
            record.waiters.append(waiter)
            return [], None
        if self.is_local(device):
            self.records[job.id] = _Record(job, key, "", "running", now, waiters=[waiter])
            return [], job
        if device not in self.devices:
            joined = ", ".join(sorted(self.devices)) or "none"
            return [(waiter, _error(key, f"no computer called {device!r} is joined to this chat "
                                         f"(this computer is {self.local_name!r}; joined: {joined})"))], None
        if not self.online(device, now):
            return [(waiter, _error(key, f"the computer {device!r} is not connected now; nothing was run"))], None
        self.records[job.id] = _Record(job, key, device, "queued", now, waiters=[waiter])
        self.queues.setdefault(device, deque()).append(job.id)
        return [], None

    def finished(self, job_id: str, outcome: Outcome, now: float) -> list:
        """A job's outcome from this side (a local job's end, a stop, an expiry, a device
        gone): the answers for its waiters. The first outcome of a job stays."""
        record = self.records.get(job_id)
        if record is None or record.result is not None:
            return []
        self._unqueue(record)
        result = schema.JobResult(record.key, outcome.text, outcome.is_error, outcome.uncertain)
        record.state, record.since, record.result = "done", now, result
        answers, record.waiters = [(waiter, result) for waiter in record.waiters], []
        return answers

    def report(self, device: str, job_id: str, outcome: Outcome, now: float) -> tuple[list, str | None]:
        """A device's report of a job: (answers, None) when it counts; ([], why) when it
        does not (P1: only the job's own device, only once the job was sent to it). A second
        report of a job that device already answered changes nothing and is not refused."""
        why = self._not_out_there(device, job_id, "a result")
        if why is not None:
            record = self.records.get(job_id)
            if record is not None and record.device == device and record.result is not None:
                return [], None      # its report came again (the first Ack was lost): it stays the first
            return [], why
        self.last_poll[device] = max(now, self.last_poll.get(device, now))
        return self.finished(job_id, outcome, now), None

    def output(self, device: str, job_id: str) -> tuple[_Record | None, str | None]:
        """A device's output chunk of a job: (its record, None) when it may show it, else
        (None, why): the same rule as `report`."""
        why = self._not_out_there(device, job_id, "output")
        return (None, why) if why is not None else (self.records[job_id], None)

    def _not_out_there(self, device: str, job_id: str, what: str) -> str | None:
        record = self.records.get(job_id)
        if record is None:
            return f"{what} for job {job_id!r}, which this hub never sent to {device!r}"
        if record.device != device:
            return f"{what} for job {job_id!r}, which runs on another computer, not on {device!r}"
        if record.state != "sent":
            return f"{what} for job {job_id!r}, which is not out on {device!r} now ({record.state})"
        return None

    def remember(self, job: Job, key: str, outcome: Outcome, now: float) -> None:
        """A local job the journal knows from before a restart: kept (never run again) for
        the RunJob of its key that comes again."""
        result = schema.JobResult(key, outcome.text, outcome.is_error, outcome.uncertain)
        self.records[job.id] = _Record(job, key, "", "done", now, result)

    # -- remote devices --

    def poll(self, device: str, waiter: Any, holding: list[str], wait: float, now: float) -> list:
        """A device's long poll: answers now (work, or an older poll of the same device
        answered empty), else it waits until `wait` or work comes. A job sent to it that it
        does not hold never reached it (it journals a job before it polls again): it goes
        back to the front of its queue."""
        self.last_poll[device] = now
        held = set(holding)
        lost = [r for r in self.records.values() if r.device == device and r.state == "sent" and r.job.id not in held]
        for record in sorted(lost, key=lambda r: r.since, reverse=True):
            record.state, record.since = "queued", now
            self.queues.setdefault(device, deque()).appendleft(record.job.id)
        answers = []
        old = self.polls.pop(device, None)
        if old is not None:
            answers.append((old[0], schema.DeviceWork([], [])))
        self.polls[device] = (waiter, now + max(0.0, wait))
        return answers + self.ready(now)

    def leave(self, device: str, now: float) -> list:
        """The device says it leaves (Ctrl-C, SIGTERM): it is offline now, its waiting poll
        is answered with nothing, and its jobs fail at once ("laptop left")."""
        self.last_poll[device] = float("-inf")
        old = self.polls.pop(device, None)
        answers = [(old[0], schema.DeviceWork([], []))] if old is not None else []
        return answers + self._fail(device, now, f"{device} left")

    def _fail(self, device: str, now: float, why: str) -> list:
        """End every job of `device` that has no result: one never sent was not run; one
        sent may have run (uncertain; it is never sent again)."""
        answers = []
        for record in [r for r in self.records.values() if r.device == device and r.result is None]:
            if record.state == "queued":
                outcome = Outcome(f"{why}: the job was not run", is_error=True)
            else:
                outcome = Outcome(f"{why} while the job ran: it may have run (uncertain, not run again)",
                                  is_error=True, uncertain=True)
            answers += self.finished(record.job.id, outcome, now)
        return answers

    def ready(self, now: float) -> list:
        """Waiting polls to answer now: with work, or past their wait (with none)."""
        answers = []
        for device, (waiter, until) in list(self.polls.items()):
            work = self._work(device, now)
            if work.jobs or work.stop or now >= until:
                del self.polls[device]
                answers.append((waiter, work))
        return answers

    def unsent(self, device: str, work: schema.DeviceWork, now: float) -> None:
        """The answer to a poll could not leave (its connection is gone): its jobs go back
        to the front of the queue and its stops are kept, for the next poll."""
        for item in reversed(work.jobs):
            record = self.records.get(item["id"])
            if record is not None and record.state == "sent":
                record.state, record.since = "queued", now
                self.queues.setdefault(device, deque()).appendleft(record.job.id)
        if work.stop:
            self.stops.setdefault(device, set()).update(work.stop)

    def _work(self, device: str, now: float) -> schema.DeviceWork:
        jobs = []
        queue = self.queues.get(device)
        while queue:
            record = self.records.get(queue.popleft())
            if record is None or record.state != "queued":
                continue
            record.state, record.since = "sent", now
            jobs.append(record.job.to_dict())
        stop = sorted(self.stops.pop(device, ()))
        return schema.DeviceWork(jobs, stop)

    def _unqueue(self, record: _Record) -> None:
        queue = self.queues.get(record.device)
        if queue and record.job.id in queue:
            queue.remove(record.job.id)

    def stop(self, caller: str, now: float) -> list:
        """StopJobs(caller): its jobs not sent yet are answered "stopped" and dropped; each
        device running one of its jobs is told to stop them (with its next poll)."""
        answers = []
        for record in list(self.records.values()):
            if record.job.caller != caller or record.result is not None or not record.device:
                continue
            if record.state == "queued":
                text = f"stopped before it started on {record.device}"
                answers += self.finished(record.job.id, Outcome(text, is_error=True), now)
            elif record.state == "sent":
                self.stops.setdefault(record.device, set()).add(caller)
        return answers + self.ready(now)

    def expire(self, now: float) -> list:
        """Fail the jobs of devices offline for `keep_seconds` ("laptop is offline"); drop
        records past their time; a job never taken, or sent and never reported, is
        answered: never taken is an error; sent may have run, so it is uncertain."""
        answers = []
        gone = {r.device for r in self.records.values() if r.device and r.result is None
                and now - self.last_poll.get(r.device, float("-inf")) >= self.offline_seconds + self.keep_seconds}
        for device in sorted(gone):
            answers += self._fail(device, now, f"{device} is offline")
        for record in list(self.records.values()):
            limit = EXPIRY_SECONDS if record.state in ("queued", "done") else EXPIRY_SECONDS + record.job.timeout
            if now - record.since < limit:
                continue
            if record.state == "queued":
                answers += self.finished(record.job.id, Outcome(
                    f"{record.device} did not take the job within {EXPIRY_SECONDS / 60:.0f} minutes; nothing was run",
                    is_error=True), now)
            elif record.state == "sent":
                answers += self.finished(record.job.id, Outcome(
                    f"{record.device} did not report the job; it may have run (uncertain, not run again)",
                    is_error=True, uncertain=True), now)
            if record.state == "done" and now - record.since >= EXPIRY_SECONDS:
                del self.records[record.job.id]
        return answers


def _error(key: str, text: str) -> schema.JobResult:
    return schema.JobResult(key, text, True, False)
