"""The device hub (docs/HANDS.md §1, §3, §5; R39): jobs on this computer and on the
computers joined to the chat, never one run twice.

    node.host("devices", DevicesActor, home=Path("~/.everchat"), chat=Path("~/.everchat/chat"))
    node.ask("devices", schema.RunJob("call-7", "", "shell", {"command": "ls"}, "main", 0.0), timeout=700)

`DeviceHub` (actors/devices/hub.py) is the pure core: the enrolled devices, who is online,
each device's queue, every job by its id with its askers, and who may report what (P1).

`DevicesActor` is the shell, named "devices". A job's id is the hub's own, made from the
asker's id with the secret `home/devices/job-ids.key` (P1: unguessable; the same after a
restart). Local jobs (device "" or this computer's host name) run in threads with
`run_job` in `work_folder(home, caller)`, each journaled first
(`home/devices/local-journal.jsonl`): after a crash the journal answers a job that may
have run as uncertain and never runs it again. A remote device long-polls (`PollJobs`),
and the poll is answered when a job or a stop comes, or after its wait with none; it says
`LeaveDevice` when it stops. Every request of a device is checked against the CURVE key
its connection was made with (`Delivery.peer`): a device polls and reports only as the
name its key was enrolled under, and only about jobs sent to it; each refusal is logged
with its name (`_Refusals`: at most a line every few seconds a device). What a job
prints is published as `JobOutput` through an `OutputClip` (P4: about 30,000 characters a
job, whatever it prints). Enrollment (a join secret, `devices.json`) is in
actors/enrollment/actor.py (`DeviceBook`, `EnrollmentServer`).

`config/devices.json` (0600, written atomically, versioned) is this actor's alone while
it runs; `everchat device remove` edits it only when no server runs
(`device_remote.remove_device`).
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from pathlib import Path

from everchat.actors.devices.hub import EXPIRY_SECONDS, KEEP_SECONDS, OFFLINE_SECONDS, POLL_SECONDS, DeviceHub, job_id
from everchat.actors.devices.jobs import Job, Outcome, OutputClip, job_from_call, run_job, work_folder
from everchat.actors.devices.journal import Journal
from everchat.actors.enrollment.actor import LINK_SECONDS, DeviceBook, EnrollmentServer
from everchat.transport import Actor, KeyStore, parse_address, schema

__all__ = ["DeviceHub", "DevicesActor", "OFFLINE_SECONDS", "KEEP_SECONDS", "EXPIRY_SECONDS", "POLL_SECONDS",
           "load_job_secret"]

log = logging.getLogger("everchat.devices")

REFUSAL_LOG_SECONDS = 10.0
"""A device's refused reports and output are logged at most once per this many seconds
(the first at once), each line saying how many more came since: every refusal is in the
log, and a device cannot flood it."""


def load_job_secret(path: Path) -> bytes:
    """The hub's secret for job ids (P1): 32 random bytes kept as hex in `path` (0600),
    made on first use. ValueError naming the file when it holds anything else."""
    try:
        text = path.read_text("ascii").strip()
    except FileNotFoundError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another hub of this home made it meanwhile
            return load_job_secret(path)
        try:
            os.write(fd, (secrets.token_hex(32) + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        return load_job_secret(path)
    except UnicodeDecodeError:
        text = ""
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != 32:
        raise ValueError(f"{path} is not a job-id key (64 hex digits); move it away and start again "
                         "(jobs asked again after that run again)")
    return secret


class _Refusals:
    """Refused reports and output of joined computers, logged with the device's name
    (P1; see REFUSAL_LOG_SECONDS). Used under the actor's lock."""

    def __init__(self, every: float = REFUSAL_LOG_SECONDS) -> None:
        self.every = every
        self.last: dict[str, float] = {}
        self.more: dict[str, int] = {}

    def note(self, hub, device: str, what: str, now: float) -> None:
        if now - self.last.get(device, float("-inf")) < self.every:
            self.more[device] = self.more.get(device, 0) + 1
            return
        self.last[device] = now
        more = self.more.pop(device, 0)
        log.warning("%s: refused from device %r: %s%s", hub, device, what,
                    f" ({more} more of its reports or output refused before this)" if more else "")

    def flush(self, hub, now: float) -> None:
        """Say how many more were refused, once a device's quiet time is over."""
        for device in [d for d, n in self.more.items() if n and now - self.last.get(d, 0.0) >= self.every]:
            log.warning("%s: refused %d more reports or output from device %r", hub, self.more.pop(device), device)
            self.last[device] = now


# ---- the shell ---------------------------------------------------------------------------


class DevicesActor(Actor):
    """The device hub, hosted as "devices" (see the module docstring).

    home: Everchat's home (`work/`, `devices/local-journal.jsonl` and `devices/job-ids.key`
    live there); chat: the chat folder (its `config/` holds devices.json and the keys).
    enroll_bind: where the enrollment socket listens (tcp://HOST:PORT; default: the node's
    tcp host, a free port; none when the node binds no tcp and this is None). local_name:
    this computer's name in ListDevices (default: its host name). offline_seconds,
    keep_seconds: when a quiet device is offline, and how long its jobs wait for it then
    (HANDS.md §5; tests shrink them)."""

    def __init__(self, home: Path, chat: Path, enroll_bind: str | None = None, local_name: str | None = None,
                 offline_seconds: float = OFFLINE_SECONDS, keep_seconds: float = KEEP_SECONDS) -> None:
        super().__init__()
        self.home = Path(home)
        self.chat = Path(chat)
        self.enroll_bind = enroll_bind
        self.core = DeviceHub(local_name or socket.gethostname(), offline_seconds, keep_seconds)
        self.book = DeviceBook(self.chat)
        self.keys = KeyStore(self.chat / "config")
        self.journal: Journal | None = None
        self.secret = b""
        self.enrollment = None
        self._lock = threading.Lock()                  # the core, the clips, from the actor and job threads
        self._cancels: dict[str, tuple[str, threading.Event]] = {}   # local job id -> (caller, cancel)
        self._clips: dict[str, OutputClip] = {}        # remote job id -> what is shown of its output (P4)
        self._refusals = _Refusals()
        self._threads: set[threading.Thread] = set()
        self._closing = threading.Event()
        self._ticker: threading.Thread | None = None

    def on_start(self) -> None:
        """Runs in the actor's thread before any message: opens the local journal (what a
        crash left is kept, never rerun), loads the job-id secret and the enrolled devices,
        and starts the enrollment socket and the ticker (poll timeouts, offline devices,
        expiry). A failure stops the actor."""
        folder = self.home / "devices"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.secret = load_job_secret(folder / "job-ids.key")
        self.journal = Journal(folder / "local-journal.jsonl")
        self.journal.recover(time.time())              # a job begun and never ended: uncertain from now on
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
        """Runs in the actor's thread at stop: local jobs are cancelled (their processes
        killed) and waited for a little, the enrollment socket closes."""
        self._closing.set()
        for _, cancel in list(self._cancels.values()):
            cancel.set()
        for thread in list(self._threads):
            thread.join(5.0)
        if self._ticker is not None:
            self._ticker.join(5.0)
        if self.enrollment is not None:
            self.enrollment.stop()
        if self.journal is not None:
            self.journal.close()

    # -- jobs --

    def on_run_job(self, msg: schema.RunJob, delivery) -> None:
        self._check_not_device(delivery, msg)
        try:
            job = job_from_call(job_id(self.secret, msg.job), msg.tool, msg.arguments, msg.caller,
                                **({"timeout_default": msg.timeout} if msg.timeout > 0 else {}))
        except ValueError as error:
            delivery.reply(schema.JobResult(msg.job, str(error), True, False))
            return None
        with self._lock:
            if (job.id not in self.core.records and self.core.is_local(msg.device)
                    and self.journal.known(job.id)):   # ran here before a restart of ours: never again
                self.core.remember(self.journal.job(job.id) or job, msg.job, self.journal.outcome(job.id) or Outcome(
                    "this job may have run before the chat restarted; it was not run again", True, True), time.time())
            answers, local = self.core.submit(job, msg.job, msg.device, delivery, time.time())
            answers += self.core.ready(time.time())
        self._answer(answers)
        if local is not None:
            self._start_local(local, msg.job)
        return None

    def on_stop_jobs(self, msg: schema.StopJobs, delivery) -> schema.Ack:
        self._check_not_device(delivery, msg)
        for caller, cancel in list(self._cancels.values()):
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

    def _start_local(self, job: Job, key: str) -> None:
        cancel = threading.Event()
        self._cancels[job.id] = (job.caller, cancel)
        thread = threading.Thread(target=self._run_local, args=(job, key, cancel), name=f"devices-job-{job.id}",
                                  daemon=True)
        self._threads.add(thread)
        thread.start()

    def _run_local(self, job: Job, key: str, cancel: threading.Event) -> None:
        """A job thread: journal, run, journal (STYLE 16), then answer every asker."""
        clip = OutputClip(lambda text: self._publish(key, job.caller, text))
        try:
            try:
                self.journal.begin(job)
                outcome = run_job(job, work_folder(self.home, job.caller), clip.add, cancel)
                self.journal.finish(job.id, outcome)
            except Exception as error:  # the asker hears of it; the log has the traceback
                log.exception("%s: local job %s failed", self, key)
                outcome = Outcome(f"the job could not run: {type(error).__name__}: {error}", is_error=True)
            clip.close()
            with self._lock:
                answers = self.core.finished(job.id, outcome, time.time())
            if self._answer(answers) and self.journal.state(job.id) == "finished":
                self.journal.delivered(job.id)
        finally:
            self._cancels.pop(job.id, None)
            self._threads.discard(threading.current_thread())

    def _publish(self, key: str, caller: str, text: str) -> None:
        try:
            self.node.publish("device", schema.JobOutput(key, caller, text))
        except Exception:  # output is a hint; the result carries what counts
            log.exception("%s: output of job %s not published", self, key)

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
            wait = self.core.poll_wait(msg.wait) if math.isfinite(msg.wait) else 0.0
            answers = self.core.poll(device, delivery, msg.holding, wait, time.time())
        self._answer(answers)
        return None

    def on_report_job(self, msg: schema.ReportJob, delivery) -> schema.Ack:
        """P1: only a report of a job sent to this device counts; any other is refused
        (LookupError: the device keeps it until the job comes to it again), logged, and
        not kept."""
        device = self._device(delivery, msg.device)
        with self._lock:
            now = time.time()
            answers, why = self.core.report(device, msg.job, Outcome(msg.text, msg.is_error, msg.uncertain), now)
            if why is not None:
                self._refusals.note(self, device, why, now)
        if why is not None:
            raise LookupError(f"not taken: {why}")
        self._answer(answers)
        return schema.Ack()

    def on_device_output(self, msg: schema.DeviceOutput, delivery) -> None:
        """P1: output counts only for a job out on this device (else refused and logged);
        P4: it is shown through the job's clip."""
        device = self._device(delivery, msg.device)
        with self._lock:
            record, why = self.core.output(device, msg.job)
            if why is not None:
                self._refusals.note(self, device, why, time.time())
                return
            clip = self._clips.get(record.job.id)
            if clip is None:
                key, caller = record.key, record.job.caller
                clip = self._clips[record.job.id] = OutputClip(lambda text: self._publish(key, caller, text))
            clip.add(msg.text)

    def on_leave_device(self, msg: schema.LeaveDevice, delivery) -> schema.Ack:
        """The device stops (Ctrl-C, SIGTERM): it is offline at once and its jobs without a
        report fail now ("laptop left"), instead of waiting for it."""
        device = self._device(delivery, msg.device)
        with self._lock:
            online = self.core.online(device, time.time())
            answers = self.core.leave(device, time.time())
        if online:
            log.info("%s: %r left", self, device)
        self._answer(answers)
        return schema.Ack()

    # -- enrollment and the book --

    def on_add_device(self, msg: schema.AddDevice, delivery) -> schema.DeviceLink:
        self._check_not_device(delivery, msg)
        if not math.isfinite(msg.ttl) or msg.ttl < 0:
            raise ValueError(f"a join link's life (--ttl) is a number of seconds above 0, not {msg.ttl!r}")
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
        key, links = DeviceBook.remove(data, msg.name)
        if key is None and not links:
            raise KeyError(f"no device called {msg.name!r} is enrolled in this chat")
        if key is not None:
            self.keys.revoke(key)
        self.book.save(data)
        with self._lock:
            gone, answers = self.core.set_devices(self.book.keys(), time.time())
        for waiter, why in gone:
            waiter.fail("PermissionError", why)
        self._answer(answers)
        log.warning("%s: device %r removed%s; %d unused join link(s) of it made void", self, msg.name,
                    f", its key {key} revoked" if key else " (it had not joined)", links)
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
            self.core.set_devices(self.book.keys(), time.time())
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
        """Send each answer; a poll's answer that could not leave puts its work back. The
        clips of jobs that ended show their last part (P4). True when every answer left."""
        ok = True
        for waiter, reply in answers:
            if waiter.reply(reply):
                continue
            ok = False
            if isinstance(reply, schema.DeviceWork) and (reply.jobs or reply.stop):
                with self._lock:
                    self.core.unsent(waiter.msg.device, reply, time.time())
        with self._lock:
            ended = [job for job in self._clips if (r := self.core.records.get(job)) is None or r.result is not None]
            for job in ended:
                self._clips.pop(job).close()
        return ok

    def _tick(self) -> None:
        """Answers polls past their wait, fails the jobs of devices gone, expires records
        and logs the refusals held back, every half second."""
        while not self._closing.wait(0.5):
            try:
                with self._lock:
                    now = time.time()
                    answers = self.core.ready(now) + self.core.expire(now)
                    self._refusals.flush(self, now)
                self._answer(answers)
            except Exception:  # the ticker must go on
                log.exception("%s: ticker error", self)
