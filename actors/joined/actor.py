"""A joined computer's end of the device protocol (docs/HANDS.md §5, R39; issue 20):
`everchat device join LINK --name NAME` runs `run_device`, with its own `$EVERCHAT_HOME`.

It makes this computer's CURVE pair (`HOME/device/keys/device.key`, 0600), enrolls once (the
link's secret joins once; the result is kept in `HOME/device/joined.json`), then serves jobs
until stopped (`DeviceRunner`): it dials the hub (it listens on nothing), long-polls
`PollJobs`, runs each job with `run_job` in `work_folder(HOME, caller)` after journaling it
(`HOME/device/journal.jsonl`, fsynced), and reports the outcome (`ReportJob`); output goes
as `DeviceOutput` tells, clipped (P4), before the report. A lost connection is retried by
itself; at start (and so after a crash) the journal's finished but unreported jobs are
reported, and a job that may have started is reported uncertain, never run again. A report
the hub does not take (it restarted and forgot the job) is kept until the hub sends that
job again, and then checked against it (P1). On Ctrl-C or SIGTERM it stops its jobs and
tells the hub it leaves (`LeaveDevice`); when the chat refuses its key at the handshake
(the device was removed) it ends with one line.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from pathlib import Path

from everchat.actors.devices.hub import same_call
from everchat.actors.devices.jobs import TOOLS, Job, Outcome, OutputClip, run_job, work_folder
from everchat.actors.devices.journal import Journal
from everchat.actors.enrollment.actor import POLL_WAIT, JoinRefused, enroll, hash_secret, parse_link
from everchat.transport import (ActorStopped, AskTimeout, KeyPair, KeyStore, Node, PeerLost, RemoteError,
                                TransportError, schema)

__all__ = ["DeviceRunner", "run_device"]

log = logging.getLogger("everchat.device")


class _KeyRefused(logging.Filter):
    """Notices the chat refusing this computer's key at the handshake (the transport's
    warning, held back: the command's one last line says it instead), as the CLI's
    `_RefusedKey` does for `everchat actor --join`, and calls `on_refused` at once: an ask
    in flight would otherwise wait for its own deadline."""

    def __init__(self, on_refused) -> None:
        super().__init__()
        self.on_refused = on_refused

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(str(arg) == "HANDSHAKE_FAILED_AUTH" for arg in record.args):
            self.on_refused()
            return False
        return True


class DeviceRunner:
    """The joined computer's loop (module docstring). `serve()` returns when `stop` is set
    (0) or the chat removed this computer (1)."""

    def __init__(self, home: Path, name: str, endpoint: str, pair: KeyPair, stop: threading.Event) -> None:
        self.home = Path(home)
        self.name = name
        self.endpoint = endpoint
        self.stop = stop
        folder = self.home / "device"
        self.journal = Journal(folder / "journal.jsonl")
        self.node = Node(f"device.{name}", pair=pair, connect_timeout=5.0)
        self._lock = threading.Lock()
        self._running: dict[str, tuple[Job, threading.Event, threading.Thread]] = {}
        self._unreported: dict[str, Outcome] = {}
        self._parked: set[str] = set()   # reports the chat did not take (it restarted): kept till it sends the job again
        self._output: queue.Queue = queue.Queue(maxsize=1000)
        self._key_refused = _KeyRefused(lambda: self._gone(
            "this computer's key is refused there: it was removed from the chat (on the chat's computer, "
            f"`everchat device add {name}` makes a new link)"))
        self._left = False
        self.removed: str | None = None

    def __repr__(self) -> str:
        return f"<DeviceRunner {self.name} -> {self.endpoint.split(';')[0]}>"

    def serve(self) -> int:
        transport_log = logging.getLogger("everchat.transport")
        transport_log.addFilter(self._key_refused)
        self.node.start()
        self.node.route("devices", self.endpoint)
        sender = threading.Thread(target=self._send_output, name="device-output", daemon=True)
        sender.start()
        watcher = threading.Thread(target=self._watch_stop, name="device-stop", daemon=True)
        watcher.start()
        try:
            for job, outcome in self.journal.recover(time.time()):
                self._unreported[job.id] = outcome   # finished, or uncertain: reported, never rerun
                log.info("%s: job %s from before this start is reported as %s", self, job.id,
                         "uncertain" if outcome.uncertain else "finished")
            backoff = 0.2
            while not self.stop.is_set() and self.removed is None:
                self._report_all()
                try:
                    work = self.node.ask("devices", schema.PollJobs(self.name, POLL_WAIT, self._holding()),
                                         timeout=POLL_WAIT + 15.0)
                except (PeerLost, AskTimeout, ActorStopped) as error:
                    if self.removed is not None:
                        break
                    log.info("%s: the chat is not reachable (%s); trying again", self, error)
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                except RemoteError as error:
                    self._refused(error)
                    continue
                backoff = 0.2
                for caller in work.stop:
                    self._stop_caller(caller)
                for item in work.jobs:
                    self._start(item)
        finally:
            self.stop.set()
            watcher.join(15.0)
            if self._left:
                self._leave()     # again: our last word comes after any poll of ours
            self.node.stop()
            try:
                self._output.put(None, timeout=2.0)
            except queue.Full:
                pass
            sender.join(2.0)
            self.journal.close()
            transport_log.removeFilter(self._key_refused)
        if self.removed is not None:
            log.info("%s: %s", self, self.removed)   # the command says it, once
            return 1
        return 0

    def _watch_stop(self) -> None:
        """On stop: cancel the running jobs (every process of theirs is killed), let them
        report (what cannot is reported at the next start), then tell the chat this
        computer leaves (its other jobs fail at once; its waiting poll ends). When the chat
        cannot be told, the node stops, which also ends a poll waiting for work."""
        self.stop.wait()
        with self._lock:      # no job starts after this look (_start checks `stop` under the lock)
            running = list(self._running.values())
        for _, cancel, _ in running:
            cancel.set()
        for _, _, thread in running:
            thread.join(10.0)
        self._left = self._leave()
        if not self._left:
            self.node.stop()

    def _leave(self) -> bool:
        """LeaveDevice (HANDS.md §5); whether the chat heard it."""
        if self.removed is not None:
            return False
        try:
            self.node.ask("devices", schema.LeaveDevice(self.name), timeout=5.0)
        except TransportError as error:
            log.info("%s: the chat was not told that this computer leaves (%s): it sees it offline later", self, error)
            return False
        return True

    def _gone(self, why: str) -> None:
        """The chat refused this computer (removed): the first reason stays; everything stops."""
        if self.removed is None:
            self.removed = why
        self.stop.set()

    def _refused(self, error: RemoteError) -> None:
        if error.kind == "PermissionError":
            self._gone(error.text)
        else:
            log.warning("%s: the chat answered an error: %s", self, error)
            self.stop.wait(1.0)

    def _holding(self) -> list[str]:
        with self._lock:
            return sorted(set(self._running) | set(self._unreported))

    def _start(self, item: dict) -> None:
        job = Job(id=str(item["id"]), tool=str(item["tool"]), arguments=dict(item["arguments"]),
                  caller=str(item["caller"]), timeout=float(item["timeout"]), created=float(item["created"]))
        with self._lock:
            if self.stop.is_set() or job.id in self._running:
                return       # stopping: not journaled, so the hub's next look sends it again
            if job.id in self._unreported or self.journal.known(job.id):   # sent again: never run twice
                self._parked.discard(job.id)     # its report goes before the next poll
                self._unreported[job.id] = self._known_outcome(job)
                return
            self.journal.begin(job)              # before it starts (fsync): the order is the guarantee
            cancel = threading.Event()
            thread = threading.Thread(target=self._run, args=(job, cancel), name=f"device-job-{job.id}", daemon=True)
            self._running[job.id] = (job, cancel, thread)
        thread.start()

    def _known_outcome(self, job: Job) -> Outcome:
        """What a job the journal knows gets: its recorded outcome, checked against the
        job sent (the same id for another call is refused: nothing runs)."""
        known = self.journal.job(job.id)
        if known is not None and known.tool in TOOLS and not same_call(known, job):
            return Outcome("this computer ran another call under this job's id before; this one was not run",
                           is_error=True)
        return self.journal.outcome(job.id) or Outcome(
            "this job may have run before the device restarted; it was not run again", True, True)

    def _run(self, job: Job, cancel: threading.Event) -> None:
        clip = OutputClip(lambda text: self._queue_output(job, text))   # P4: about 30,000 characters a job
        try:
            outcome = run_job(job, work_folder(self.home, job.caller), clip.add, cancel)
        except Exception as error:
            log.exception("%s: job %s failed", self, job.id)
            outcome = Outcome(f"the job could not run: {type(error).__name__}: {error}", is_error=True)
        clip.close()
        self._flush_output()   # the output goes before the report: the hub takes none after it
        self.journal.finish(job.id, outcome)
        with self._lock:
            self._unreported[job.id] = outcome
            self._running.pop(job.id, None)
        self._report(job.id, outcome)

    def _report_all(self) -> None:
        with self._lock:
            pending = [(job_id, outcome) for job_id, outcome in self._unreported.items() if job_id not in self._parked]
        for job_id, outcome in pending:
            if not self._report(job_id, outcome):
                return

    def _report(self, job_id: str, outcome: Outcome) -> bool:
        """Report a job's outcome; False when it could not be said (the chat is away, or
        removed this computer). One the chat does not take (it restarted and forgot the
        job) is kept, and reported when the chat sends the job again."""
        try:
            self.node.ask("devices", schema.ReportJob(self.name, job_id, outcome.text, outcome.is_error,
                                                      outcome.uncertain), timeout=10.0)
        except RemoteError as error:
            if error.kind == "PermissionError":
                self._refused(error)
                return False
            log.info("%s: the chat did not take the report of %s (%s); it is kept until the chat asks for the job "
                     "again", self, job_id, error.text)
            with self._lock:
                self._parked.add(job_id)
            return True
        except TransportError as error:
            log.info("%s: report of %s not delivered (%s); it goes again after the next poll", self, job_id, error)
            return False
        self.journal.delivered(job_id)
        with self._lock:
            self._unreported.pop(job_id, None)
            self._parked.discard(job_id)
        return True

    def _stop_caller(self, caller: str) -> None:
        with self._lock:
            for job, cancel, _ in self._running.values():
                if job.caller == caller:
                    log.info("%s: stopping job %s of %s", self, job.id, caller)
                    cancel.set()

    def _queue_output(self, job: Job, text: str) -> None:
        try:
            self._output.put_nowait((job.id, text))
        except queue.Full:  # output is a hint: the result carries what counts
            pass

    def _flush_output(self) -> None:
        """Wait (a few seconds at most) until what was queued so far is sent."""
        sent = threading.Event()
        try:
            self._output.put(sent, timeout=5.0)
        except queue.Full:
            return
        sent.wait(5.0)

    def _send_output(self) -> None:
        while True:
            item = self._output.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self.node.tell("devices", schema.DeviceOutput(self.name, item[0], item[1]))
            except TransportError as error:
                log.info("%s: output chunk dropped: %s", self, error)


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def run_device(home: Path, link: str, name: str, stop: threading.Event) -> int:
    """`everchat device join`: enroll (once) and serve jobs until `stop` (module docstring);
    0. JoinRefused when enrollment is refused or the chat refused this computer later
    (removed); ValueError for a bad (or empty) link or name, before anything is written."""
    parse_link(link)
    folder = Path(home) / "device"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    pair = KeyStore(folder).ensure("device")
    joined_file = folder / "joined.json"
    joined = json.loads(joined_file.read_text("utf-8")) if joined_file.exists() else None
    if joined is not None and (not isinstance(joined, dict) or joined.get("version") != 1):
        raise JoinRefused(f"{joined_file} is not a joined-chat file of version 1; remove it and join again")
    if joined is not None and joined.get("name") != name:
        raise JoinRefused(f"this computer joined a chat as {joined.get('name')!r}; to join as {name!r}, remove "
                          f"{joined_file} first")
    # A link joins once: the one this computer joined with is not presented again (a
    # restart serves at once); a new one (a new `device add`: after a removal, or a server
    # that moved to another port) enrolls again, with the same key.
    secret_hash = hash_secret(parse_link(link)[2])
    if joined is None or secret_hash != joined.get("link"):
        endpoint = enroll(link, name, pair)
        joined = {"version": 1, "name": name, "endpoint": endpoint, "joined": time.time(), "link": secret_hash}
        _write_private(joined_file, json.dumps(joined))
        log.info("joined the chat at %s as %r", endpoint.split(";")[0], name)
    runner = DeviceRunner(home, name, joined["endpoint"], pair, stop)
    if runner.serve():
        raise JoinRefused(f"the chat refused {name!r}: {runner.removed}")
    return 0
