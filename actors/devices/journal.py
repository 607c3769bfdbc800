"""A device's journal of its jobs: R39's "never twice" across a crash (issue 11; docs/HANDS.md
section 4; P13 of issue 20). The device hub's local jobs (`actors/devices/actor.py`) and a joined
computer's (`actors/joined/actor.py`) are journaled here before they run:

    journal = Journal(home / "device" / "journal.jsonl")
    outcome = journal.run_once(job, lambda: run_job(job, work_folder(home, "main"), show, cancel))
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from everchat.actors.devices.jobs import EXPIRY, Job, Outcome, _fsync_folder

__all__ = ["Journal", "JournalError", "AlreadyRunning"]

log = logging.getLogger("everchat.actors.devices.jobs")   # the name its warnings always had


class JournalError(Exception):
    """A damaged journal record that could not be set aside (P13: the file beside it could
    not be written): the message names the file and the byte offset."""


class AlreadyRunning(Exception):
    """`run_once` was given a job that has begun and not finished in this process: its
    outcome is still to come."""


@dataclass
class _Entry:
    job: Job
    began: float
    state: str = "started"
    outcome: Outcome | None = None
    running: bool = field(default=False, repr=False)


_VERSION = 1
_COMPACT_BYTES = 1 << 20
_ID_PATTERN = re.compile(rb'"id"\s*:\s*"((?:[^"\\]|\\.){1,400})"')  # a job id in a line that does not read


class Journal:
    """A device's jobs, one JSON line per event, each written with one `os.write` and an
    `fsync` (the folder is fsynced when the file is made; the file is 0600):

        {"v": 1, "op": "begin", "job": {...}, "t": T}     before the job runs
        {"v": 1, "op": "finish", "id": ID, "outcome": {...}}
        {"v": 1, "op": "delivered", "id": ID}             the hub has the outcome

    The order is the guarantee (STYLE 16): a job whose "begin" is on disk and whose
    "finish" is not may have run, so `recover` reports it uncertain and never runs it again.
    A torn last line is cut off. A damaged record before it (P13) is not an error: the rest
    of the file is set aside in `NAME.damaged-OFFSET` beside it, with one warning naming
    both, and every job id the set-aside part names is kept as may-have-run (never run
    again). Safe to use from several threads."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._load()
        self._fd = self._open()

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r}, {len(self._entries)} entries)"

    # -- reading and opening --

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        offset = 0
        for line in data[:end].splitlines(keepends=True):
            try:
                self._apply(json.loads(line))
            except (ValueError, KeyError, TypeError) as error:
                self._set_aside(data, offset, error)
                return
            offset += len(line)
        if end < len(data):  # cut off, so the next record starts on a line of its own
            log.warning("%s: a torn last line at byte %d (%d bytes) skipped: the device stopped while "
                        "writing it", self.path, end, len(data) - end)
            with open(self.path, "r+b") as file:
                file.truncate(end)
                os.fsync(file.fileno())

    def _set_aside(self, data: bytes, offset: int, error: Exception) -> None:
        """P13: a damaged record at `offset`: the rest of the file goes to a file beside it
        (nothing is lost), every job id it names is kept as may-have-run (R39: never run
        again), and the journal is rewritten from what it knows; one warning says so."""
        rest = data[offset:]
        aside = self.path.with_name(f"{self.path.name}.damaged-{offset}")
        number = 1
        while aside.exists():
            number += 1
            aside = self.path.with_name(f"{self.path.name}.damaged-{offset}-{number}")
        try:
            _write_private(aside, rest)
        except OSError as failed:
            raise JournalError(f"{self.path}: bad record at byte {offset}: {error}; the rest could not be set "
                               f"aside in {aside}: {failed.strerror or failed}") from None
        kept = self._salvage(rest)
        self._rewrite(self._entries)
        log.warning("%s: a damaged record at byte %d (%s): the rest of the file (%d bytes) is set aside in %s; "
                    "%d job(s) it names are kept as may-have-run and are never run again", self.path, offset,
                    error, len(rest), aside.name, kept)

    def _salvage(self, rest: bytes) -> int:
        """The records of a set-aside tail that still read are applied; a job id any other
        line names becomes an entry that may have run. How many jobs the tail names."""
        named: set[str] = set()
        for line in rest.splitlines():
            try:
                record = json.loads(line)
                self._apply(record)
                named.add(str(record["job"]["id"] if record["op"] == "begin" else record["id"]))
                continue
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
            for match in _ID_PATTERN.finditer(line):
                try:
                    named.add(str(json.loads(b'"' + match.group(1) + b'"')))
                except ValueError:
                    continue
        now = self._clock()
        for job_id in named - set(self._entries):
            job = Job(job_id, "unknown", {}, "main", 0.0, now)
            self._entries[job_id] = _Entry(job, now, "finished", Outcome(
                "this job's record in the device's journal was damaged; it may have run: not run again",
                is_error=True, uncertain=True))
        return len(named)

    def _apply(self, record: dict) -> None:
        if record["v"] != _VERSION:
            raise ValueError(f"unknown journal version {record['v']!r}")
        op = record["op"]
        if op == "begin":
            job = Job.from_dict(record["job"])
            self._entries[job.id] = _Entry(job, float(record["t"]))
        elif op in ("finish", "delivered"):
            entry = self._entries[str(record["id"])]
            if op == "finish":
                entry.outcome = Outcome.from_dict(record["outcome"])
            entry.state = "finished" if op == "finish" else "delivered"
        else:
            raise ValueError(f"unknown op {op!r}")

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags | os.O_EXCL, 0o600)
        except FileExistsError:
            return os.open(self.path, flags, 0o600)
        os.fchmod(fd, 0o600)
        os.fsync(fd)
        _fsync_folder(self.path.parent)
        return fd

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --

    def _append(self, record: dict) -> None:
        if self._fd < 0:
            raise ValueError(f"{self!r} is closed")
        data = _record_line(record)
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)

    def begin(self, job: Job) -> None:
        """Record (fsynced) that `job` is about to start: call it before anything runs."""
        with self._lock:
            if job.id in self._entries:
                raise ValueError(f"job {job.id!r} is already in {self.path}: a job id runs once")
            self._begin(job)

    def _begin(self, job: Job) -> None:
        began = self._clock()
        self._append({"op": "begin", "job": job.to_dict(), "t": began})
        self._entries[job.id] = _Entry(job, began, running=True)

    def finish(self, job_id: str, outcome: Outcome) -> None:
        """Record (fsynced) the outcome of a begun job."""
        with self._lock:
            entry = self._entries[job_id]
            self._append({"op": "finish", "id": job_id, "outcome": outcome.to_dict()})
            entry.state, entry.outcome, entry.running = "finished", outcome, False

    def delivered(self, job_id: str) -> None:
        """Record (fsynced) that the hub has the job's outcome; compacts a big file."""
        with self._lock:
            entry = self._entries[job_id]
            if entry.state == "delivered":
                return
            if entry.state != "finished":
                raise ValueError(f"job {job_id!r} has no outcome to deliver yet")
            self._append({"op": "delivered", "id": job_id})
            entry.state = "delivered"
            if os.fstat(self._fd).st_size > _COMPACT_BYTES:
                self._compact(self._clock())

    # -- asking --

    def state(self, job_id: str) -> str | None:
        """None (never seen), "started", "finished" or "delivered"."""
        with self._lock:
            entry = self._entries.get(job_id)
            return entry.state if entry else None

    def known(self, job_id: str) -> bool:
        """Whether this job id was seen (and has not expired): it must not run again."""
        return self.state(job_id) is not None

    def job(self, job_id: str) -> Job | None:
        """The job as it was journaled (to check a job sent again against), else None."""
        with self._lock:
            entry = self._entries.get(job_id)
            return entry.job if entry else None

    def outcome(self, job_id: str) -> Outcome | None:
        """The recorded outcome of a finished (or delivered) job, else None."""
        with self._lock:
            entry = self._entries.get(job_id)
            return entry.outcome if entry else None

    def run_once(self, job: Job, run: Callable[[], Outcome]) -> Outcome:
        """R39: begin, run, finish, and answer the outcome; for a job id already known,
        answer its recorded outcome without running anything. An exception from `run`
        becomes an error outcome (the job did start). AlreadyRunning when the job has begun
        in this process and not finished yet."""
        with self._lock:  # the look and the "begin" are one step: two callers cannot both run it
            entry = self._entries.get(job.id)
            if entry is not None and entry.outcome is not None:
                return entry.outcome
            if entry is not None:
                raise AlreadyRunning(f"job {job.id!r} is running: its outcome is still to come")
            self._begin(job)
        try:
            outcome = run()
        except Exception as error:  # the job is begun: its failure is its outcome (and logged)
            log.exception("job %s (%s) failed", job.id, job.tool)
            outcome = Outcome(f"{job.tool} failed on the device: {type(error).__name__}: {error}", is_error=True)
        self.finish(job.id, outcome)
        return outcome

    def recover(self, now: float | None = None) -> list[tuple[Job, Outcome]]:
        """At a device's start: the outcomes still to deliver, oldest first. A job begun and
        never finished is finished now as uncertain (never run again, R39); entries of jobs
        made more than `EXPIRY` seconds before `now` are dropped."""
        now = self._clock() if now is None else now
        with self._lock:
            for job_id, entry in list(self._entries.items()):
                if now - (entry.job.created or entry.began) > EXPIRY:
                    del self._entries[job_id]
                elif entry.state == "started" and not entry.running:
                    outcome = Outcome(f"{_what(entry.job)} may have run before the device stopped: not run again",
                                      is_error=True, uncertain=True)
                    self._append({"op": "finish", "id": job_id, "outcome": outcome.to_dict()})
                    entry.state, entry.outcome = "finished", outcome
            return [(entry.job, entry.outcome) for entry in sorted(self._entries.values(), key=lambda e: e.began)
                    if entry.state == "finished"]

    def compact(self, now: float | None = None) -> None:
        """Rewrite the file with only the entries that have not expired (atomically)."""
        with self._lock:
            self._compact(self._clock() if now is None else now)

    def _compact(self, now: float) -> None:
        live = {job_id: entry for job_id, entry in self._entries.items()
                if entry.running or now - (entry.job.created or entry.began) <= EXPIRY}
        self._rewrite(live)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
        self._entries = live

    def _rewrite(self, entries: dict[str, _Entry]) -> None:
        """Replace the file (atomically) by the records of `entries`."""
        lines = []
        for job_id, entry in entries.items():
            lines.append({"op": "begin", "job": entry.job.to_dict(), "t": entry.began})
            if entry.outcome is not None:
                lines.append({"op": "finish", "id": job_id, "outcome": entry.outcome.to_dict()})
            if entry.state == "delivered":
                lines.append({"op": "delivered", "id": job_id})
        _write_private(self.path, b"".join(_record_line(line) for line in lines))


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` as the file `path` (0600) through a temporary file, fsync, rename and
    an fsync of the folder."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def _record_line(record: dict) -> bytes:
    """One journal line: compact JSON, ASCII only (so any text the model sent, even a lone
    surrogate, is written), ended by a newline."""
    return (json.dumps({"v": _VERSION, **record}, separators=(",", ":")) + "\n").encode("ascii")


def _what(job: Job) -> str:
    if job.tool == "shell":
        return f"the shell command `{job.arguments.get('command', '')[:200]}`"
    return f"the {job.tool} of {job.arguments.get('path', '?')}"
