"""What a device does with one job (issue 11, R39; docs/HANDS.md section 4).

Pure: no sockets, no actors. The device hub (`actors/devices/actor.py`) and a joined computer
(`actors/joined/actor.py`) both run their jobs with `run_job`, show their output through
an `OutputClip` (P4), and keep their promise of "never twice" with a `Journal`
(`actors/devices/journal.py`):

    job = job_from_call(call_id, "shell", {"command": "make test"}, caller="main")
    outcome = journal.run_once(job, lambda: run_job(job, work_folder(home, "main"), show, cancel))

Choices this module makes (and documents here):

- `shell` runs `/bin/sh -c COMMAND` in the work folder through its keeper
  (actors/devices/keeper.py: a session of its own, the shell leading a process group of its
  own), stdin from /dev/null, stdout and stderr merged. Output is handed to `on_output`
  as it comes. The timeout defaults to 600 s and is capped at `MAX_TIMEOUT` (600 s): a
  journal entry expires 10 minutes after its job was made, so a longer job could never be
  delivered after a restart. A cancel or the timeout kills every process the job started,
  also those that left its group with `setsid` or a double fork (P16: the keeper is their
  subreaper; SIGTERM, then SIGKILL after `KILL_GRACE` seconds). Background processes still running when the shell
  itself exits normally are left alone (so `nohup server > log &` works); what they print
  after that is not part of the result (at most 1 MiB more is read, then the pipe is
  closed, and one that still writes to it dies of SIGPIPE).
- The result's last line says how the command ended: `[exit N]`, `[killed by signal N]`,
  `[killed: timeout after T s]` or `[stopped]`. Anything but `[exit 0]` is an error.
- Only the first and last 15,000 characters of the output are kept in memory; the result is
  clipped by R7 exactly as `clip_echo` does.
- `read` answers numbered lines (`cat -n` style: the number right-aligned in six columns, a
  tab, the line), at most `READ_LIMIT` lines or `READ_CHARS` characters a page, with a last
  line saying which lines were shown and how to get the next page. `offset` counts the
  lines to skip, 0 being the first line (as `actors/hands/__init__.py`'s `read` tool tells the
  model); the numbers shown are line numbers, from 1, so `offset=N` starts at line N+1.
- Relative paths resolve in the work folder; absolute paths and `~` are allowed (a default,
  not a jail).
- `write` and `edit` write atomically (a temporary file in the same folder, fsync, rename,
  fsync of the folder), keep an existing file's mode, follow a symlink to its target, and
  answer with a unified diff. Bytes that are not UTF-8 survive an `edit` unchanged.
"""

from __future__ import annotations

import codecs
import difflib
import json
import logging
import math
import os
import selectors
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from everchat.actors.devices.keeper import SCRIPT as _KEEPER, end_keeper
from everchat.actors.folder import ECHO_KEEP_CHARS, clip_echo

__all__ = [
    "TOOLS",
    "MAX_TIMEOUT",
    "EXPIRY",
    "Job",
    "Outcome",
    "OutputClip",
    "work_folder",
    "job_from_call",
    "run_job",
    "group_alive",
]

log = logging.getLogger(__name__)

TOOLS = ("shell", "read", "write", "edit")
"""The device tools (HANDS.md section 2)."""
MAX_TIMEOUT = 600.0
"""The longest a shell job may run, in seconds: equal to `EXPIRY`, see the module's doc."""
EXPIRY = 600.0
"""A journal entry expires this many seconds after its job was made (HANDS.md section 4)."""
KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL when a job's process group is killed."""
READ_LIMIT = 2000
"""Lines a `read` shows when no `limit` is given."""
READ_CHARS = 25_000
"""Characters a `read` page holds at most (under R7's 30,000, so a page is never clipped)."""
BINARY_SNIFF = 8192
"""A file with a NUL byte in its first this-many bytes is binary and not shown."""

_READ_SIZE = 65536
_LAST_READ = 1 << 20  # bytes read after the shell ended: more than a pipe's buffer holds
_TICK = 0.05  # how often a running shell job looks at its cancel event and its clock


# --- jobs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One job for a device. `id` is the tool call's idempotency key: a job id is run once.
    `arguments` are the model's, without `device`. `caller` ("main" or an agent's name)
    picks the work folder. `timeout` applies to `shell` only. `created` is the `time.time()`
    the hub made it at (0 when unknown), for the 10-minute expiry."""

    id: str
    tool: str
    arguments: dict
    caller: str
    timeout: float = MAX_TIMEOUT
    created: float = 0.0

    def to_dict(self) -> dict:
        return {"id": self.id, "tool": self.tool, "arguments": self.arguments, "caller": self.caller,
                "timeout": self.timeout, "created": self.created}

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        return cls(str(data["id"]), str(data["tool"]), dict(data["arguments"]), str(data["caller"]),
                   float(data["timeout"]), float(data["created"]))


@dataclass(frozen=True)
class Outcome:
    """A job's result as the model reads it. `uncertain`: the device cannot tell whether the
    job ran (it stopped after the job may have started, R39)."""

    text: str
    is_error: bool = False
    uncertain: bool = False

    def to_dict(self) -> dict:
        return {"text": self.text, "is_error": self.is_error, "uncertain": self.uncertain}

    @classmethod
    def from_dict(cls, data: dict) -> Outcome:
        return cls(str(data["text"]), bool(data["is_error"]), bool(data["uncertain"]))


def _check_caller(caller: str) -> str:
    if (not isinstance(caller, str) or not caller or caller in (".", "..") or "/" in caller
            or "\\" in caller or "\0" in caller):
        raise ValueError(f"bad caller name {caller!r}: a folder name, without '/' and not '..'")
    return caller


def work_folder(home: Path, caller: str) -> Path:
    """`home/work/CALLER`, made (0700, parents too) when missing. `caller` is "main" or an
    agent's name; anything that is not a plain folder name raises ValueError."""
    folder = Path(home) / "work" / _check_caller(caller)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


_FIELDS: dict[str, dict[str, tuple[type, bool]]] = {
    # tool: {argument: (type, required)}
    "shell": {"command": (str, True), "timeout": (float, False)},
    "read": {"path": (str, True), "offset": (int, False), "limit": (int, False)},
    "write": {"path": (str, True), "content": (str, True)},
    "edit": {"path": (str, True), "old": (str, True), "new": (str, True)},
}
_TYPE_WORDS = {str: "a string", int: "a whole number", float: "a number of seconds"}


def job_from_call(job_id: str, tool: str, arguments: Any, caller: str,
                  timeout_default: float = MAX_TIMEOUT, now: float | None = None) -> Job:
    """A checked `Job` from a model's tool call. A `device` argument is dropped (the hub
    has used it). Raises ValueError with a message the model can act on for an unknown
    tool, a missing, unknown or wrongly typed argument, or a bad caller name.

    `timeout` (shell): the model's argument, else `timeout_default`, at most `MAX_TIMEOUT`."""
    if tool not in _FIELDS:
        raise ValueError(f"unknown device tool {tool!r}: use one of {', '.join(TOOLS)}")
    if not isinstance(arguments, dict):
        raise ValueError(f"{tool}: the arguments must be an object, not {type(arguments).__name__}")
    _check_caller(caller)
    fields = _FIELDS[tool]
    args = {key: value for key, value in arguments.items() if key != "device"}
    for key in args:
        if key not in fields:
            raise ValueError(f"{tool}: unknown argument {key!r} (it takes {', '.join(fields)})")
    for key, (kind, required) in fields.items():
        if key not in args:
            if required:
                raise ValueError(f"{tool}: missing argument {key!r}")
            continue
        value = args[key]
        if kind is str:
            ok = isinstance(value, str)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok:
            raise ValueError(f"{tool}: {key!r} must be {_TYPE_WORDS[kind]}, not {json.dumps(value, default=repr)[:60]}")
    if tool == "shell" and not args["command"].strip():
        raise ValueError("shell: 'command' is empty")
    if "path" in args and not args["path"].strip():
        raise ValueError(f"{tool}: 'path' is empty")
    for key in ("command", "path"):
        if "\0" in args.get(key, ""):
            raise ValueError(f"{tool}: {key!r} holds a NUL character")
    if tool == "edit" and not args["old"]:
        raise ValueError("edit: 'old' is empty: give the exact text to replace")
    if args.get("offset", 0) < 0:
        raise ValueError(f"read: 'offset' must be 0 (the first line) or more, not {args['offset']}")
    if args.get("limit", 1) < 1:
        raise ValueError(f"read: 'limit' must be 1 or more, not {args['limit']}")
    timeout = float(min(timeout_default, MAX_TIMEOUT))
    if tool == "shell" and "timeout" in args:
        if not args["timeout"] > 0:
            raise ValueError(f"shell: 'timeout' must be more than 0 seconds, not {args['timeout']}")
        timeout = float(min(args["timeout"], MAX_TIMEOUT))
    return Job(str(job_id), tool, args, caller, timeout, time.time() if now is None else float(now))


def run_job(job: Job, work_dir: Path, on_output: Callable[[str], None], cancel: threading.Event) -> Outcome:
    """Run `job` with relative paths in `work_dir` and answer its `Outcome`; never raises for
    what the job itself meets (a missing file, a failing command): that is an error outcome.
    `on_output` gets a shell job's output as it comes (other tools print nothing); `cancel`
    set stops a shell job and kills its process group."""
    work_dir = Path(work_dir)
    try:
        if job.tool == "shell":
            return _shell(job.arguments["command"], work_dir, job.timeout, on_output, cancel)
        path = _resolve(job.arguments["path"], work_dir)
        if job.tool == "read":
            return _read(path, job.arguments.get("offset", 0), job.arguments.get("limit", READ_LIMIT))
        if job.tool == "write":
            return _write(path, job.arguments["content"])
        if job.tool == "edit":
            return _edit(path, job.arguments["old"], job.arguments["new"])
    except OSError as error:
        where = f": {error.filename}" if error.filename else ""
        return Outcome(f"{job.tool} failed: {error.strerror or error}{where}", is_error=True)
    except UnicodeError as error:  # a lone surrogate in the model's text: no UTF-8 for it
        return Outcome(f"{job.tool} failed: the text cannot be written as UTF-8 ({error.reason})", is_error=True)
    return Outcome(f"unknown device tool {job.tool!r}", is_error=True)


# --- shell ----------------------------------------------------------------------------


@dataclass
class _Kept:
    """The first and last `keep` characters of a long text, and how many between them are
    gone: memory stays bounded however much a command prints."""

    keep: int = ECHO_KEEP_CHARS
    head: str = ""
    tail: str = ""
    total: int = 0

    def add(self, text: str) -> None:
        self.total += len(text)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += text[:room]
            text = text[room:]
        self.tail += text
        if len(self.tail) > 2 * self.keep:
            self.tail = self.tail[-self.keep:]

    @property
    def last(self) -> str:
        """The last character kept ("" when nothing was)."""
        return (self.tail or self.head)[-1:]

    def text(self) -> str:
        """The whole text when it was at most 2 * keep characters, else R7's clipped form
        (the same as `clip_echo` gives for the whole text)."""
        tail = self.tail[-self.keep:] if self.total > 2 * self.keep else self.tail
        cut = self.total - len(self.head) - len(tail)
        if cut == 0:
            return self.head + tail
        return f"{self.head}\n[{cut} characters cut]\n{tail}"


class OutputClip:
    """What is shown live of one job's output (P4, R7): `publish` gets the first `keep`
    characters as they come, then one line saying the rest comes at the end; `close()`
    (when the job ends) publishes what was held back, clipped as R7 clips a whole echo:
    all of it when the output was at most 2 * keep characters, else its last `keep` after
    a line saying how many were cut. So about 2 * keep characters a job are published, and
    held, whatever the command prints. Not thread-safe: one job's output comes in order."""

    def __init__(self, publish: Callable[[str], None], keep: int = ECHO_KEEP_CHARS) -> None:
        self.publish = publish
        self.keep = keep
        self.shown = 0       # characters published live
        self.total = 0       # characters seen
        self.held = ""       # the last ones after those, at most 2 * keep
        self.closed = False

    def __repr__(self) -> str:
        return f"<OutputClip {self.shown} shown, {self.total} seen>"

    def add(self, text: str) -> None:
        if self.closed or not text:
            return
        self.total += len(text)
        room = self.keep - self.shown
        if room > 0:
            self.shown += min(room, len(text))
            self.publish(text[:room])
            text = text[room:]
            if not text:
                return
        if self.total - len(text) == self.shown:   # the first character held back
            self.publish(f"\n[more output: shown when the command ends, at most its last {self.keep} characters]\n")
        self.held += text
        if len(self.held) > 2 * self.keep:
            self.held = self.held[-self.keep:]

    def close(self) -> None:
        """Publish what was held back (once); nothing more is taken after it."""
        if self.closed:
            return
        self.closed = True
        held = self.total - self.shown
        if held > self.keep:
            self.publish(f"\n[{held - self.keep} characters cut]\n{self.held[-self.keep:]}")
        elif held:
            self.publish(self.held)
        self.held = ""


def group_alive(pgid: int) -> bool:
    """Whether any live process (zombies do not count) is left in process group `pgid`.

    Linux: read from /proc, because a container's init may never reap orphans and a zombie
    still answers `killpg(pgid, 0)`. Elsewhere (macOS): `killpg(pgid, 0)`."""
    proc = Path("/proc")
    if sys.platform.startswith("linux") and proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                data = (entry / "stat").read_bytes()
            except OSError:
                continue  # gone meanwhile
            fields = data[data.rfind(b")") + 2:].split()
            if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_KEEPER_MARGIN = 10.0
"""Seconds past `KILL_GRACE` the keeper has to end the job's tree before we do it from here."""


def _kill_tree(process: subprocess.Popen) -> None:
    """Stop a job (P16): its keeper (actors/devices/keeper.py) kills every process the job
    started, wherever it went (SIGTERM, then SIGKILL after `KILL_GRACE` seconds), then
    ends. Should the keeper not end in time, the tree under it is killed from here."""
    end_keeper(process, KILL_GRACE + _KEEPER_MARGIN, log)


def _shell(command: str, work_dir: Path, timeout: float, on_output: Callable[[str], None],
           cancel: threading.Event) -> Outcome:
    kept = _Kept()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def take(data: bytes, final: bool = False) -> None:
        text = decoder.decode(data, final)
        if text:
            kept.add(text)
            on_output(text)

    # The keeper (P16) leads a session of its own and starts the shell in a group of its
    # own: Ctrl-C at the device's terminal reaches neither, and `kill 0` in a job hits its group.
    process = subprocess.Popen([sys.executable, "-I", "-S", str(_KEEPER), f"{KILL_GRACE:g}", "/bin/sh", "-c", command],
                               cwd=work_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    fd = process.stdout.fileno()
    os.set_blocking(fd, False)
    deadline = time.monotonic() + timeout
    try:
        ending = _watch(process, fd, take, deadline, timeout, cancel)
    except BaseException:  # `on_output` failed, or we are interrupted: leave no process behind
        _kill_tree(process)
        raise
    finally:
        process.stdout.close()
    take(b"", final=True)
    if not ending:
        code = process.returncode
        ending = f"[exit {code}]" if code >= 0 else f"[killed by signal {-code}]"
    separator = "" if kept.last in ("", "\n") else "\n"
    kept.add(separator + ending)
    return Outcome(kept.text(), is_error=ending != "[exit 0]")


def _watch(process: subprocess.Popen, fd: int, take: Callable[[bytes], None], deadline: float,
           timeout: float, cancel: threading.Event) -> str:
    """Read the job's output until the shell ends (""), or kill its group on a cancel or
    at the deadline and say so ("[stopped]", "[killed: timeout after T s]")."""
    ending = ""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        open_pipe = True
        while True:
            if cancel.is_set():
                ending = "[stopped]"
            elif time.monotonic() >= deadline:
                ending = f"[killed: timeout after {timeout:g} s]"
            if ending:
                _kill_tree(process)
                if open_pipe:
                    _drain(fd, take, _LAST_READ)
                break
            if open_pipe:
                if selector.select(min(_TICK, max(0.0, deadline - time.monotonic()))):
                    open_pipe = _drain(fd, take)
            else:
                cancel.wait(_TICK)  # the command closed its output and goes on
            if process.poll() is not None:
                # The shell has ended, so all it printed is in the pipe: take that and stop.
                # Something it left in the background may still hold the pipe; what that
                # prints from now on is not part of the result (the module's doc says why).
                if open_pipe:
                    _drain(fd, take, _LAST_READ)
                break
    process.wait()
    return ending


def _drain(fd: int, take: Callable[[bytes], None], most: int | None = None) -> bool:
    """Read what the pipe holds now (at most `most` bytes: a process that escaped the kill
    or outlives the shell may write without end); False once it is closed (end of file)."""
    read = 0
    while most is None or read < most:
        try:
            data = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return True
        if not data:
            return False
        read += len(data)
        take(data)
    return True


# --- files ----------------------------------------------------------------------------


def _resolve(path: str, work_dir: Path) -> Path:
    target = Path(path).expanduser()
    return target if target.is_absolute() else work_dir / target


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """An fd of the regular file `path` (a FIFO or device is opened without blocking and
    refused, as is a folder); raises _Refused with the reason."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _Refused(f"no such file: {path}") from None
    except IsADirectoryError:
        raise _Refused(f"{path} is a folder, not a file") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        what = ("a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "a socket" if stat.S_ISSOCK(info.st_mode) else "not a regular file")
        raise _Refused(f"{path} is {what}, not a file")
    os.set_blocking(fd, True)
    return fd, info


class _Refused(Exception):
    """A file tool will not do what it was asked; the argument is the model's reason."""


def _read(path: Path, offset: int, limit: int) -> Outcome:
    try:
        fd, _ = _open_regular(path)
    except _Refused as refused:
        return Outcome(str(refused), is_error=True)
    with os.fdopen(fd, "rb") as file:
        if b"\0" in file.read(BINARY_SNIFF):
            return Outcome(f"{path} looks binary (a NUL byte in its first {BINARY_SNIFF} bytes): not shown",
                           is_error=True)
        file.seek(0)
        shown: list[str] = []
        chars, total, last = 0, 0, offset
        for number, raw in enumerate(file, start=1):
            total = number
            if number <= offset or len(shown) >= limit or chars >= READ_CHARS:
                continue
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            row = f"{number:6}\t{line}"
            if shown and chars + len(row) + 1 > READ_CHARS:
                chars = READ_CHARS  # the page is full
                continue
            if len(row) > READ_CHARS:
                row = row[:READ_CHARS] + f" [line cut: {len(row) - READ_CHARS} more characters]"
            shown.append(row)
            chars += len(row) + 1
            last = number
    if total == 0:
        return Outcome(f"(the file {path} is empty)")
    if offset >= total:
        return Outcome(f"offset {offset} is past the end: {path} has {total} lines (offset 0 is the first)",
                       is_error=True)
    more = f"; more: offset={last}" if last < total else ""
    return Outcome("\n".join(shown) + f"\n[{path}: lines {offset + 1}-{last} of {total}{more}]")


def _old_text(path: Path) -> tuple[str | None, int | None, Path]:
    """(the text now at `path` or None when there is no file, its mode, the path to replace:
    a symlink's target). Raises _Refused for a folder, FIFO or device."""
    real = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        fd, info = _open_regular(real)
    except _Refused as refused:
        if str(refused).startswith("no such file"):
            return None, None, real
        raise
    with os.fdopen(fd, "rb") as file:
        return file.read().decode("utf-8", errors="surrogateescape"), stat.S_IMODE(info.st_mode), real


def _write_atomically(path: Path, text: str, mode: int | None) -> int:
    """Write `text` to `path` through a temporary file, fsync, rename and an fsync of the
    folder; returns the bytes written."""
    data = text.encode("utf-8", errors="surrogateescape")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fchmod(file.fileno(), 0o644 if mode is None else mode)
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
    return len(data)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # a folder that cannot be opened for reading: nothing more to do
    try:
        os.fsync(fd)
    except OSError as error:  # some file systems refuse to fsync a folder
        log.debug("fsync of folder %s: %s", folder, error)
    finally:
        os.close(fd)


def _shown(text: str) -> str:
    """`text` as the model may read it: bytes that were not UTF-8 become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _diff(old: str | None, new: str, path: Path) -> str:
    old_lines = [] if old is None else _shown(old).splitlines()
    lines = difflib.unified_diff(old_lines, _shown(new).splitlines(), "/dev/null" if old is None else f"a{path}",
                                 f"b{path}", lineterm="")
    text = "\n".join(lines)
    return clip_echo(text)[0] if text else "(no change)"


def _write(path: Path, content: str) -> Outcome:
    try:
        old, mode, real = _old_text(path)
    except _Refused as refused:
        return Outcome(str(refused), is_error=True)
    size = _write_atomically(real, content, mode)
    return Outcome(f"wrote {size} bytes to {path}\n{_diff(old, content, path)}")


def _edit(path: Path, old: str, new: str) -> Outcome:
    try:
        text, mode, real = _old_text(path)
    except _Refused as refused:
        return Outcome(str(refused), is_error=True)
    if text is None:
        return Outcome(f"no such file: {path}", is_error=True)
    count = text.count(old)
    if count != 1:
        hint = ": nothing was changed" if count == 0 else ": give more context so that it occurs once"
        return Outcome(f"old occurs {count} times in {path}{hint}", is_error=True)
    changed = text.replace(old, new, 1)
    _write_atomically(real, changed, mode)
    return Outcome(f"edited {path}\n{_diff(text, changed, path)}")
