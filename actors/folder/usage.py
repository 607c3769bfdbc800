"""The chat's token usage and failed compaction calls, kept across runs in `usage.json`.

Every model call reports its `Usage` (input, output, cache read, cache write tokens) to the
log writer as a `RecordUsage` tell: the turn runner for its turns' calls, each compactor
for its compactions' calls, and a compactor for each failed compaction call (R30: never
silent). The log writer, the one owner of the chat folder (R5), adds them up and replaces
`usage.json` atomically (R4: temporary file, fsync, rename, folder fsync), at most once a
second while reports keep coming and always when it stops. So `everchat status` reads what
every run of the chat used without asking a running process (a crash loses at most the
last second's figures; the log is never at stake).

    {"version": 1,
     "turns": {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0, "calls": 0, "failures": 0},
     "compactions": {"input": …, "output": …, "cache_read": …, "cache_write": …, "calls": …, "failures": …}}

`failures` counts failed calls (a turn's failed call is not reported yet: the turn says so
itself). A missing file is a chat that used nothing yet (or predates this file).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

from everchat.actors.folder import _crash
from everchat.actors.folder._files import atomic_write, read_small

__all__ = ["USAGE_NAME", "USAGE_VERSION", "ROLES", "Tally", "UsageTotals", "UsageNotSaved", "load_usage",
           "save_usage", "report", "metered"]

USAGE_NAME = "usage.json"
USAGE_VERSION = 1
ROLES = ("turns", "compactions")


@dataclass
class Tally:
    """One role's sums."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    calls: int = 0
    failures: int = 0

    def add(self, other: Tally) -> None:
        for name in _NAMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def count(self, usage) -> None:
        """Add one answered call's `models.Usage`."""
        self.input += usage.input
        self.output += usage.output
        self.cache_read += usage.cache_read
        self.cache_write += usage.cache_write
        self.calls += 1

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in _NAMES}

    @classmethod
    def from_dict(cls, data: object, where: str) -> Tally:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: not an object")
        values = {}
        for name in _NAMES:
            value = data.get(name, 0)
            if type(value) is not int or value < 0:
                raise ValueError(f"{where}.{name}: not a natural number ({value!r})")
            values[name] = value
        return cls(**values)


_NAMES = tuple(f.name for f in fields(Tally))


@dataclass
class UsageTotals:
    """Both roles' sums; `total()` adds them up."""

    turns: Tally = field(default_factory=Tally)
    compactions: Tally = field(default_factory=Tally)

    def role(self, role: str) -> Tally:
        if role not in ROLES:
            raise ValueError(f"usage is kept for {' and '.join(ROLES)}, not {role!r}")
        return getattr(self, role)

    def total(self) -> Tally:
        whole = Tally()
        for role in ROLES:
            whole.add(self.role(role))
        return whole

    def to_dict(self) -> dict:
        return {"version": USAGE_VERSION, **{role: self.role(role).to_dict() for role in ROLES}}


def load_usage(chat: str | Path) -> UsageTotals:
    """The totals saved in `chat`'s usage.json (zeros when there is none). Reads only:
    safe while another process owns the chat. A file of another version, a broken one or
    one that cannot be read is a ValueError naming the file."""
    path = Path(chat) / USAGE_NAME
    try:
        data = read_small(path)
    except IsADirectoryError:
        raise ValueError(f"{path}: a folder, not a usage file") from None
    except OSError as error:
        raise ValueError(f"{path}: cannot be read ({error.strerror or error})") from None
    if data is None:
        return UsageTotals()
    try:
        record = json.loads(data)
    except ValueError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(record, dict) or record.get("version") != USAGE_VERSION:
        raise ValueError(f"{path}: not a version {USAGE_VERSION} usage file")
    return UsageTotals(**{role: Tally.from_dict(record.get(role, {}), f"{path}: {role}") for role in ROLES})


class UsageNotSaved(OSError):
    """usage.json could not be replaced (the disk is full, the file or the folder cannot
    be written). Raised by `save_usage`, with the OSError's `errno`; the message is one line
    naming the file. Only the figures are at stake (the log never is); the totals stay in
    memory, so a later save may still succeed."""

    def __str__(self) -> str:
        return str(self.strerror)


def save_usage(chat: str | Path, totals: UsageTotals) -> None:
    """Replace `chat`'s usage.json atomically (R4). The log writer's only. A failure is
    `UsageNotSaved`, and leaves no temporary file behind."""
    path = Path(chat) / USAGE_NAME
    try:
        atomic_write(path, (json.dumps(totals.to_dict()) + "\n").encode())
        _crash.hit("usage")
    except OSError as error:
        try:
            os.unlink(path.with_name(f".{USAGE_NAME}.tmp.{os.getpid()}"))
        except OSError:
            pass  # never made, or the folder refuses: the next writer's open removes it
        if error.errno == errno.EISDIR:
            cause = "it is a folder, not a file"
        else:
            cause = error.strerror or str(error)
        raise UsageNotSaved(error.errno, f"{path} could not be saved: {cause}") from error


def metered(events: Iterator, on_usage: Callable) -> Iterator:
    """A model stream's events, unchanged; `on_usage(usage)` runs for each `Usage` among
    them. Closing this generator closes `events` (a stopped turn closes its HTTP stream)."""
    from everchat.actors.models import Usage

    try:
        for event in events:
            if isinstance(event, Usage):
                on_usage(event)
            yield event
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
