"""Where the CLI meets the person: one line each on stderr, tracebacks in a file (P9, P10).

- `say(text)`: one line on stderr, its control characters made visible (P20).
- `person_logging(command)`: while a command runs, log records reach stderr as
  `everchat: warning: <text>` (one line; an object that names a folder in its repr,
  such as the store's `<ChatStore /path reader pid=… T=0>`, is shown as its folder). A
  record with a traceback shows the error's type and text, and the traceback goes to the
  details file. `EVERCHAT_LOG_LEVEL` (default WARNING) says how much is shown.
- `first_time(line)`: a line said once per command (a warning that comes both as a log
  record and as a session notice).
- `hold_log_lines()`: holds those lines back while a step runs whose failure is said
  in one line of its own (the chat's actors starting).
- `write_details(error, command)`: appends the traceback of an error nobody expected to
  `$EVERCHAT_HOME/logs/errors.log` (else `~/.everchat/logs/errors.log`; else a file in
  the temporary folder) and returns `details in <file>` for the one line. The file is
  rotated past `DETAILS_BYTES` (one older file kept, `errors.log.1`), an entry is clipped
  to `ENTRY_BYTES`, and several processes append to it safely (flock) (P3).
- A repeated error (same type, same traceback: `actors/folder/log_repeats.py`) is counted, not
  written or said again: once a minute at most, one short line says how many more came,
  in the file (`write_repeat`) and on the terminal (P3).

The details file lives in Everchat's home, not in a chat folder: read-only commands never
write to the chat (R5), and a chat folder that cannot be written is a common cause.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from everchat.actors.folder.log_repeats import Repeats, error_key
from everchat.frontends.cli.safe_text import printable

__all__ = ["say", "first_time", "person_logging", "hold_log_lines", "Held", "write_details", "write_repeat",
           "details_file", "DETAILS_BYTES", "ENTRY_BYTES"]

DETAILS_BYTES = 1 << 20
"""errors.log is rotated before it passes 1 MB: it becomes errors.log.1 (the one older file
kept) and a new one starts (P3)."""
ENTRY_BYTES = 64 << 10
"""One traceback is clipped to 64 KB, so one entry never fills the file."""

def say(text: str) -> None:
    """`text` as one line on stderr (newlines become spaces; controls are shown, P20)."""
    sys.stderr.write(printable(text).replace("\n", " ") + "\n")
    sys.stderr.flush()


def details_file() -> Path:
    """Where tracebacks go: `logs/errors.log` in Everchat's home."""
    home = os.environ.get("EVERCHAT_HOME")
    return (Path(home) if home else Path.home() / ".everchat") / "logs" / "errors.log"


def _append(path: Path, text: str) -> None:
    """Append `text` (clipped to ENTRY_BYTES) to `path` (0600), rotating it first when it
    would pass DETAILS_BYTES. An advisory lock on the file orders the size check, the
    rotation and the write of every process writing it; one that waited while another
    rotated opens the new file."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) > ENTRY_BYTES:
        data = data[:ENTRY_BYTES - 40] + f"\n[… {len(data) - ENTRY_BYTES + 40} more bytes]\n".encode()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for _ in range(8):  # another process rotating at each attempt is all that makes one fail
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            here = os.fstat(fd)
            try:
                if os.stat(path).st_ino != here.st_ino:
                    continue  # rotated while this one waited: write the new file
            except FileNotFoundError:
                continue
            if here.st_size and here.st_size + len(data) > DETAILS_BYTES:
                os.replace(path, path.with_name(path.name + ".1"))
                continue
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            return
        finally:
            os.close(fd)  # and the lock with it
    raise OSError(f"{path} kept being rotated by another process")


def _header(context: str) -> str:
    stamp = datetime.now().astimezone().isoformat(timespec="seconds")
    return f"--- {stamp} pid {os.getpid()}: {context}\n"


def write_details(error: BaseException, context: str) -> str:
    """Append `error`'s traceback to the details file under a line naming `context` (the
    command); returns `details in <file>` (or, when no file can be written, why there
    are no details)."""
    return _write(_header(context) + "".join(traceback.format_exception(type(error), error, error.__traceback__)))


def write_repeat(error: BaseException, context: str, count: int) -> str:
    """One line for an error written before (same type and traceback): it came `count`
    more times since it was last written; the latest is `context` and `error`'s text."""
    return _write(_header(context) + f"{type(error).__name__}: {printable(str(error))[:500]}: the same error "
                  f"{count} more time(s) since it was last written (its traceback was written then)\n")


def _write(text: str) -> str:
    candidates = []
    try:
        candidates.append(details_file())
    except RuntimeError:  # no home directory to be found
        pass
    candidates.append(Path(tempfile.gettempdir()) / f"everchat-{os.getuid()}-errors.log")
    problem = None
    for path in candidates:
        try:
            _append(path, text)
            return f"details in {path}"
        except OSError as failure:
            problem = failure
    return f"no details: the log file cannot be written: {problem}"


def _plain(arg: object) -> object:
    """An argument of a log message as a person reads it: an object whose repr is an
    identity in angle brackets and that has a folder (`path`) is shown as that folder."""
    if isinstance(arg, (str, int, float, bytes, Path, BaseException)) or arg is None:
        return arg
    path = getattr(arg, "path", None)
    if isinstance(path, (str, Path)) and repr(arg).startswith("<"):
        return str(path)
    return arg


class Held:
    """Log lines held back (see `hold_log_lines`): `lines` to say, and `details`, the
    `details in <file>` of the last traceback among them (None without one). With a
    `sink`, each line goes to it instead, as it comes (from any thread)."""

    def __init__(self, sink: Callable[[str], None] | None = None) -> None:
        self.lines: list[str] = []
        self.details: str | None = None
        self.sink = sink

    def say(self) -> None:
        for line in self.lines:
            say(line)
        self.lines = []


class PersonHandler(logging.Handler):
    """Log records as one line each on the current stderr: `everchat: <level>: <text>`;
    `command` heads a traceback in the details file. While `held` is set, lines go there."""

    def __init__(self, level: int, command: str) -> None:
        super().__init__(level)
        self.command = command
        self.held: Held | None = None
        self.said: set[str] = set()  # lines said so far without a traceback: each is said once
        self.repeats = Repeats()  # errors with a traceback: each said (and written) once, then counted (P3)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            args = record.args
            if isinstance(args, tuple):
                args = tuple(_plain(arg) for arg in args)
            text = str(record.msg) % args if args else str(record.msg)
            details = None
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                again = self.repeats.note(error_key(error))
                if again is None:
                    return  # counted: told with the next line about it
                if again:
                    details = write_repeat(error, f"{self.command}: {text}", again)
                    text = (f"{text.rstrip(': ')}: {type(error).__name__}: {error} (the same error {again} more "
                            f"time(s) since it was last shown; {details})")
                else:
                    details = write_details(error, f"{self.command}: {text}")
                    text = f"{text.rstrip(': ')}: {type(error).__name__}: {error} ({details})"
            line = printable(f"everchat: {record.levelname.lower()}: {text}").replace("\n", " ")
            if details is None and not first_time(line):
                return
            held = self.held
            if held is None:
                say(line)
                return
            held.details = details or held.details
            if held.sink is not None:
                held.sink(line)
            else:
                held.lines.append(line)
        except Exception:  # logging's own rule: a broken record is reported, never raised
            self.handleError(record)


def first_time(line: str) -> bool:
    """Whether this command has not said `line` yet (and now counts it as said). A
    warning may come both as a log record of an actor in this process and as the
    session's notice: the person reads it once. True when the CLI's logging is not set up."""
    new = True
    for handler in logging.getLogger().handlers:
        if isinstance(handler, PersonHandler):
            new = new and line not in handler.said
            handler.said.add(line)
    return new


@contextmanager
def hold_log_lines(sink: Callable[[str], None] | None = None) -> Iterator[Held]:
    """Log lines said while this runs are held back (their tracebacks are still written to
    the details file): a step whose failure is then said in one line of its own (an actor
    that failed at its start) need not say it twice. `Held.say()` prints them after all.
    With `sink`, each line goes there instead (the terminal chat shows them in its
    transcript rather than over its screen). Does nothing when the CLI's logging is not
    set up (a test calling in)."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, PersonHandler)]
    held = Held(sink)
    for handler in handlers:
        handler.held = held
    try:
        yield held
    finally:
        for handler in handlers:
            handler.held = None


@contextmanager
def person_logging(command: str) -> Iterator[PersonHandler]:
    """While `command` (`everchat view`) runs, log records (this process's actors' included) reach the
    person as `everchat: <level>: <text>`, never as tracebacks."""
    level = getattr(logging, os.environ.get("EVERCHAT_LOG_LEVEL", "WARNING").upper(), logging.WARNING)
    root = logging.getLogger()
    handler = PersonHandler(level, command)
    before = root.level
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > level:
        root.setLevel(level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
