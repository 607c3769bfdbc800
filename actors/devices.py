"""The device hub (docs/HANDS.md §1, §3, §5; R39): jobs on this computer and on the
computers joined to the chat, never one run twice.

    node.host("devices", DevicesActor, home=Path("~/.everchat"), chat=Path("~/.everchat/chat"))
    node.ask("devices", schema.RunJob("call-7", "", "shell", {"command": "ls"}, "main", 0.0), timeout=700)

`DeviceHub` is the pure core (no sockets, threads or files; times are passed in): the
enrolled devices, who is online (a poll within `ONLINE_SECONDS`), each device's queue, and
every job by its id, with the askers waiting for it. A job id it knows is never started
again: a resent RunJob waits for (or gets) the first one's result. Records expire
`EXPIRY_SECONDS` after their job ended (or after it was made, for one never taken).

`DevicesActor` is the shell, named "devices". Local jobs (device "" or this computer's
host name) run in threads with `run_job` in `work_folder(home, caller)`, each journaled
first (`home/devices/local-journal.jsonl`): after a crash the journal answers a job that
may have run as uncertain and never runs it again. A remote device long-polls
(`PollJobs`), and the poll is answered when a job or a stop comes, or after its wait with
none. Every request of a device is checked against the CURVE key its connection was made
with (`Delivery.peer`): a device polls and reports only as the name its key was enrolled
under. Enrollment (a join secret, `devices.json`) is in actors/device_remote.py
(`DeviceBook`, `EnrollmentServer`).

`config/devices.json` (0600, written atomically, versioned) is this actor's alone while
it runs; `everchat device remove` edits it only when no server runs
(`device_remote.remove_device`).
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from everchat.actors.device_jobs import Job, Journal, Outcome, job_from_call, run_job, work_folder
from everchat.actors.device_remote import LINK_SECONDS, DeviceBook, EnrollmentServer
from everchat.transport import Actor, KeyStore, parse_address, schema

__all__ = ["DeviceHub", "DevicesActor", "ONLINE_SECONDS", "EXPIRY_SECONDS", "POLL_SECONDS"]

log = logging.getLogger("everchat.devices")

ONLINE_SECONDS = 45.0     # a device is online while a poll waits or its last one is this recent
EXPIRY_SECONDS = 600.0    # a job's record lives this long after it ended (HANDS.md §4: 10 minutes)
POLL_SECONDS = 20.0       # how long a device's poll waits for work (the device asks for it)

# ---- the pure core ---------------------------------------------------------------------


@dataclass
class _Record:
    job: Job
    device: str                  # "" for this computer
    state: str                   # queued (remote, not sent), sent, running (local), done
    since: float                 # time.time() of the last change of state
    result: schema.JobResult | None = None
    waiters: list = field(default_factory=list)


class DeviceHub:
    """What the hub knows (see the module docstring). Every method returns what the shell
    must do: answers as `(waiter, message)` pairs (a waiter is whatever the shell passed:
    a Delivery), local jobs to start."""

    def __init__(self, local_name: str) -> None:
        self.local_name = local_name
        self.devices: dict[str, str] = {}            # enrolled name -> z85 public key
        self.last_poll: dict[str, float] = {}
        self.polls: dict[str, tuple[Any, float]] = {}  # device -> (waiting poll, answer-by time)
        self.queues: dict[str, deque[str]] = {}
        self.stops: dict[str, set[str]] = {}
        self.records: dict[str, _Record] = {}

    def __repr__(self) -> str:
        return f"<DeviceHub {self.local_name}: {len(self.devices)} devices, {len(self.records)} jobs>"

    # -- devices --

    def set_devices(self, devices: dict[str, str]) -> list[tuple[Any, str]]:
        """The enrolled devices now (name -> key); the waiting polls of devices no longer
        among them, each with why, for the shell to fail."""
        self.devices = dict(devices)
        gone = [name for name in self.polls if name not in self.devices]
        return [(self.polls.pop(name)[0], f"device {name!r} was removed from this chat") for name in gone]

    def device_of_key(self, key: str | None) -> str | None:
        for name, known in self.devices.items():
            if key is not None and hmac.compare_digest(known, key):
                return name
        return None

    def is_local(self, device: str) -> bool:
        return device in ("", self.local_name)

    def online(self, name: str, now: float) -> bool:
        return name in self.polls or now - self.last_poll.get(name, float("-inf")) < ONLINE_SECONDS

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

    def submit(self, job: Job, device: str, waiter: Any, now: float) -> tuple[list, Job | None]:
        """A RunJob: (answers now, a local job to start). A known id never starts again."""
        record = self.records.get(job.id)
        if record is not None:
            if record.result is not None:
                return [(waiter, record.result)], None
            record.waiters.append(waiter)
            return [], None
        if self.is_local(device):
            self.records[job.id] = _Record(job, "", "running", now, waiters=[waiter])
            return [], job
        if device not in self.devices:
            joined = ", ".join(sorted(self.devices)) or "none"
            return [(waiter, _error(job.id, f"no computer called {device!r} is joined to this chat "
                                            f"(this computer is {self.local_name!r}; joined: {joined})"))], None
        if not self.online(device, now):
            return [(waiter, _error(job.id, f"the computer {device!r} is not connected now; nothing was run"))], None
        self.records[job.id] = _Record(job, device, "queued", now, waiters=[waiter])
        self.queues.setdefault(device, deque()).append(job.id)
        return [], None

    def finished(self, job_id: str, outcome: Outcome, now: float, device: str = "") -> list:
        """A job's outcome (local, or reported by `device`): the answers for its waiters.
        The first outcome of an id stays; one for an id we do not know (the hub restarted)
        is kept for a RunJob that comes again."""
        record = self.records.get(job_id)
        result = schema.JobResult(job_id, outcome.text, outcome.is_error, outcome.uncertain)
        if record is None:
            job = Job(id=job_id, tool="", arguments={}, caller="", created=now)
            self.records[job_id] = _Record(job, device, "done", now, result)
            return []
        if record.result is not None:
            return []
        if record.device != device:
            log.warning("%s: job %s belongs to %r; a report of it by %r is ignored", self, job_id,
                        record.device or self.local_name, device or self.local_name)
            return []
        self._unqueue(record)
        record.state, record.since, record.result = "done", now, result
        answers, record.waiters = [(waiter, result) for waiter in record.waiters], []
        return answers

    def remember(self, job: Job, outcome: Outcome, now: float) -> None:
        """A local job the journal recovered at start: kept (never run again) for a RunJob
        of its id that comes again."""
        result = schema.JobResult(job.id, outcome.text, outcome.is_error, outcome.uncertain)
        self.records[job.id] = _Record(job, "", "done", now, result)

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
            job = record.job
            jobs.append({"id": job.id, "tool": job.tool, "arguments": job.arguments, "caller": job.caller,
                         "timeout": job.timeout, "created": job.created})
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
                self._unqueue(record)
                text = f"stopped before it started on {record.device}"
                answers += self.finished(record.job.id, Outcome(text, is_error=True), now, record.device)
            elif record.state == "sent":
                self.stops.setdefault(record.device, set()).add(caller)
        return answers + self.ready(now)

    def expire(self, now: float) -> list:
        """Drop records past their time; a job never taken, or sent and never reported, is
        answered: never taken is an error; sent may have run, so it is uncertain."""
        answers = []
        for record in list(self.records.values()):
            limit = EXPIRY_SECONDS if record.state in ("queued", "done") else EXPIRY_SECONDS + record.job.timeout
            if now - record.since < limit:
                continue
            if record.state == "queued":
                answers += self.finished(record.job.id, Outcome(
                    f"{record.device} did not take the job within {EXPIRY_SECONDS / 60:.0f} minutes; nothing was run",
                    is_error=True), now, record.device)
            elif record.state == "sent":
                answers += self.finished(record.job.id, Outcome(
                    f"{record.device} did not report the job; it may have run (uncertain, not run again)",
                    is_error=True, uncertain=True), now, record.device)
            if record.state == "done" and now - record.since >= EXPIRY_SECONDS:
                del self.records[record.job.id]
        return answers


def _error(job_id: str, text: str) -> schema.JobResult:
    return schema.JobResult(job_id, text, True, False)


# ---- the shell ---------------------------------------------------------------------------


class DevicesActor(Actor):
    """The device hub, hosted as "devices" (see the module docstring).

    home: Everchat's home (`work/` and `devices/local-journal.jsonl` live there); chat:
    the chat folder (its `config/` holds devices.json and the keys). enroll_bind: where the
    enrollment socket listens (tcp://HOST:PORT; default: the node's tcp host, a free port;
    none when the node binds no tcp and this is None). local_name: this computer's name in
    ListDevices (default: its host name)."""

    def __init__(self, home: Path, chat: Path, enroll_bind: str | None = None, local_name: str | None = None) -> None:
        super().__init__()
        self.home = Path(home)
        self.chat = Path(chat)
        self.enroll_bind = enroll_bind
        self.core = DeviceHub(local_name or socket.gethostname())
        self.book = DeviceBook(self.chat)
        self.keys = KeyStore(self.chat / "config")
        self.journal: Journal | None = None
        self.enrollment = None
        self._lock = threading.Lock()                  # the core, from the actor and job threads
        self._cancels: dict[str, tuple[str, threading.Event]] = {}   # local job id -> (caller, cancel)
        self._threads: set[threading.Thread] = set()
        self._closing = threading.Event()
        self._ticker: threading.Thread | None = None

    def on_start(self) -> None:
        """Runs in the actor's thread before any message: opens the local journal (what a
        crash left is kept, never rerun), loads the enrolled devices, and starts the
        enrollment socket and the ticker (poll timeouts, expiry). A failure stops the actor."""
        folder = self.home / "devices"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.journal = Journal(folder / "local-journal.jsonl")
        now = time.time()
        for job, outcome in self.journal.recover(now):
            self.core.remember(job, outcome, now)
        self.core.set_devices(self.book.keys())
        bind = self.enroll_bind
        if bind is None and self.node.endpoint and self.node.endpoint.startswith("tcp://"):
            host = parse_address(self.node.endpoint).requests[len("tcp://"):].rpartition(":")[0]
            bind = f"tcp://{host}:0"
        if bind is not None:
            self.enrollment = EnrollmentServer(self.keys.ensure("devices"), bind, self._enroll).start()
        self._ticker = threading.Thread(target=self._tick, name="devices-ticker", daemon=True)
        self._ticker.start()

    def on_stop(self) -> None:
        """Runs in the actor's thread at stop: local jobs are cancelled (their groups
        killed) and waited for a little, the enrollment socket closes."""
        self._closing.set()
        for _, cancel in list(self._cancels.values()):
            cancel.set()
        for thread in list(self._threads):
            thread.join(5.0)
        if self.enrollment is not None:
            self.enrollment.stop()
        if self.journal is not None:
            self.journal.close()

    # -- jobs --

    def on_run_job(self, msg: schema.RunJob, delivery) -> None:
        self._check_not_device(delivery, msg)
        try:
            job = job_from_call(msg.job, msg.tool, msg.arguments, msg.caller,
                                **({"timeout_default": msg.timeout} if msg.timeout > 0 else {}))
        except ValueError as error:
            delivery.reply(_error(msg.job, str(error)))
            return None
        with self._lock:
            answers, local = self.core.submit(job, msg.device, delivery, time.time())
            if local is not None and self.journal.known(job.id):    # ran before a restart of ours
                outcome = self.journal.outcome(job.id) or Outcome(
                    "this job may have run before the chat restarted; it was not run again", True, True)
                answers += self.core.finished(job.id, outcome, time.time())
                local = None
            answers += self.core.ready(time.time())
        self._answer(answers)
        if local is not None:
            self._start_local(local)
        return None

    def on_stop_jobs(self, msg: schema.StopJobs, delivery) -> schema.Ack:
        self._check_not_device(delivery, msg)
        for job_id, (caller, cancel) in list(self._cancels.items()):
            if caller == msg.caller:
                cancel.set()
        with self._lock:
            answers = self.core.stop(msg.caller, time.time())
        self._answer(answers)
        return schema.Ack()

    def on_list_devices(self, msg: schema.ListDevices, delivery) -> schema.DeviceList:
        self._check_not_device(delivery, msg)
        with self._lock:
            return schema.DeviceList(self.core.rows(time.time(), len(self._cancels)))

    def _start_local(self, job: Job) -> None:
        cancel = threading.Event()
        self._cancels[job.id] = (job.caller, cancel)
        thread = threading.Thread(target=self._run_local, args=(job, cancel), name=f"devices-job-{job.id}",
                                  daemon=True)
        self._threads.add(thread)
        thread.start()

    def _run_local(self, job: Job, cancel: threading.Event) -> None:
        """A job thread: journal, run, journal (STYLE 16), then answer every asker."""
        try:
            try:
                self.journal.begin(job)
                outcome = run_job(job, work_folder(self.home, job.caller), lambda text: self._output(job, text),
                                  cancel)
                self.journal.finish(job.id, outcome)
            except Exception as error:  # the asker hears of it; the log has the traceback
                log.exception("%s: local job %s failed", self, job.id)
                outcome = Outcome(f"the job could not run: {type(error).__name__}: {error}", is_error=True)
            with self._lock:
                answers = self.core.finished(job.id, outcome, time.time())
            if self._answer(answers):
                self.journal.delivered(job.id)
        finally:
            self._cancels.pop(job.id, None)
            self._threads.discard(threading.current_thread())

    def _output(self, job: Job, text: str) -> None:
        try:
            self.node.publish("device", schema.JobOutput(job.id, job.caller, text))
        except Exception:  # output is a hint; the result carries what counts
            log.exception("%s: output of job %s not published", self, job.id)

    # -- remote devices --

    def _device(self, delivery, claimed: str) -> str:
        """The device this request comes from, by its connection's key: it must be the one
        enrolled as `claimed`, else PermissionError (the asker hears why; logged)."""
        with self._lock:
            name = self.core.device_of_key(delivery.peer)
        if name is not None and name == claimed:
            return name
        removed = self.book.load()["removed"]
        if name is None and delivery.peer is not None and removed.get(claimed) == delivery.peer:
            why = f"the device {claimed!r} was removed from this chat (`everchat device remove`)"
        elif name is None:
            why = f"the key {delivery.peer} is not enrolled as any device of this chat"
        else:
            why = f"this computer is enrolled as {name!r}, not {claimed!r}"
        log.warning("%s: refused %s from %s: %s", self, delivery.msg.type_name, delivery.sender, why)
        raise PermissionError(why)

    def _check_not_device(self, delivery, msg) -> None:
        if delivery.peer is not None and self.core.device_of_key(delivery.peer) is not None:
            log.warning("%s: refused %s from device key %s", self, msg.type_name, delivery.peer)
            raise PermissionError(f"a joined computer may not send {msg.type_name}")

    def on_poll_jobs(self, msg: schema.PollJobs, delivery) -> None:
        device = self._device(delivery, msg.device)
        with self._lock:
            answers = self.core.poll(device, delivery, msg.holding, min(msg.wait, 60.0), time.time())
        self._answer(answers)
        return None

    def on_report_job(self, msg: schema.ReportJob, delivery) -> schema.Ack:
        device = self._device(delivery, msg.device)
        with self._lock:
            answers = self.core.finished(msg.job, Outcome(msg.text, msg.is_error, msg.uncertain), time.time(), device)
        self._answer(answers)
        return schema.Ack()

    def on_device_output(self, msg: schema.DeviceOutput, delivery) -> None:
        self._device(delivery, msg.device)
        with self._lock:
            record = self.core.records.get(msg.job)
        caller = record.job.caller if record is not None else ""
        self.node.publish("device", schema.JobOutput(msg.job, caller, msg.text))

    # -- enrollment and the book --

    def on_add_device(self, msg: schema.AddDevice, delivery) -> schema.DeviceLink:
        self._check_not_device(delivery, msg)
        if self.enrollment is None:
            raise ValueError("this chat's server listens on no tcp address, so no computer can join it: "
                             "run `everchat serve --tcp --listen ADDRESS`")
        data = self.book.load()
        secret, expires = DeviceBook.add_secret(data, msg.name, time.time(), msg.ttl if msg.ttl > 0 else LINK_SECONDS)
        self.book.save(data)
        link = f"{self.enrollment.address};key={self.enrollment.public_key};secret={secret}"
        log.info("%s: join secret made for %r (expires %s)", self, msg.name, time.strftime("%H:%M:%S UTC",
                                                                                          time.gmtime(expires)))
        return schema.DeviceLink(msg.name, link, expires)

    def on_remove_device(self, msg: schema.RemoveDevice, delivery) -> schema.Ack:
        self._check_not_device(delivery, msg)
        data = self.book.load()
        key = DeviceBook.remove(data, msg.name)
        if key is None:
            raise KeyError(f"no device called {msg.name!r} is enrolled in this chat")
        self.keys.revoke(key)
        self.book.save(data)
        with self._lock:
            gone = self.core.set_devices(self.book.keys())
        for waiter, why in gone:
            waiter.fail("PermissionError", why)
        log.warning("%s: device %r removed; its key %s is revoked", self, msg.name, key)
        return schema.Ack()

    def on_enroll_device(self, msg: schema.EnrollDevice, delivery) -> schema.DeviceEnrolled:
        """From the enrollment socket's thread only (this process: no peer). Over the
        transport it is refused: enrollment goes through the secret and that socket."""
        if delivery.peer is not None:
            raise PermissionError("EnrollDevice goes to the enrollment socket, not the chat's")
        data = self.book.load()
        why = DeviceBook.enroll(data, msg.name, msg.secret, msg.public_key, time.time())
        if why is not None:
            log.warning("%s: refused to enroll %r (key %s): %s", self, msg.name, msg.public_key, why)
            raise PermissionError(why)
        self.keys.authorize(msg.public_key, f"device.{msg.name}")
        self.book.save(data)
        with self._lock:
            self.core.set_devices(self.book.keys())
        log.info("%s: enrolled %r with key %s", self, msg.name, msg.public_key)
        return schema.DeviceEnrolled(msg.name, self.node.endpoint or "")

    def _enroll(self, msg: schema.EnrollDevice) -> schema.Message:
        """The enrollment socket's callback (its thread): asks this actor, so the book has
        one writer."""
        from everchat.transport import RemoteError

        try:
            return self.node.ask(self.name, msg, timeout=10.0)
        except RemoteError as error:
            return schema.ErrorReply(error.kind, error.text)

    # -- threads --

    def _answer(self, answers: list) -> bool:
        """Send each answer; a poll's answer that could not leave puts its work back.
        True when every answer left."""
        ok = True
        for waiter, reply in answers:
            if waiter.reply(reply):
                continue
            ok = False
            if isinstance(reply, schema.DeviceWork) and (reply.jobs or reply.stop):
                with self._lock:
                    self.core.unsent(waiter.msg.device, reply, time.time())
        return ok

    def _tick(self) -> None:
        """Answers polls past their wait and expires records, every half second."""
        while not self._closing.wait(0.5):
            try:
                with self._lock:
                    now = time.time()
                    answers = self.core.ready(now) + self.core.expire(now)
                self._answer(answers)
            except Exception:  # the ticker must go on
                log.exception("%s: ticker error", self)
