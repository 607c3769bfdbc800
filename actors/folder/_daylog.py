"""Day files: one stream of `YYYY-MM-DD.jsonl` files (`main/` or `tree/`), R1 and R4.

A position in a stream is `(ordinal, offset)`: the day file's date as `date.toordinal()`
(always >= 1, so 0 means "no file") and a byte offset in it. Sorting day files by name is
sorting them by ordinal, and the writer never appends to a day earlier than the stream's
latest file, so that order is log order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

from ._errors import CorruptRecord
from ._files import fsync_dir, write_all
from ._records import Malformed

__all__ = ["DayLog", "day_name"]

_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})\.jsonl")
_MAX_READ_FDS = 32


def day_name(ordinal: int) -> str:
    """The file name of the day with this ordinal, e.g. `2026-10-08.jsonl`."""
    return f"{date.fromordinal(ordinal).isoformat()}.jsonl"


class DayLog:
    """One stream of day files. Reads by position with `pread`, walks lines from a
    position, and (writer only) appends with one write and one fsync (R4)."""

    def __init__(self, chat: Path, name: str) -> None:
        self.name = name
        self.folder = chat / name
        self._read_fds: dict[int, int] = {}
        self._rels: dict[int, str] = {}
        self._fd: int | None = None
        #: Where the next append goes: the latest day file and its size.
        self.ordinal = 0
        self.end = 0
        #: From this position on every record carries its checksum (P3; chat.json says
        #: where, `(0, 0)` for a chat made with checksums); None: no record must.
        self.sealed_from: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"<DayLog {self.folder} at {self.position}>"

    @property
    def position(self) -> tuple[int, int]:
        """The append position `(ordinal, offset)`; `(0, 0)` before any file exists."""
        return (self.ordinal, self.end)

    def sealed(self, ordinal: int, offset: int) -> bool:
        """Must the record at this position carry its checksum (P3)?"""
        return self.sealed_from is not None and (ordinal, offset) >= self.sealed_from

    def rel(self, ordinal: int) -> str:
        """The day file's path relative to the chat folder, for error messages."""
        rel = self._rels.get(ordinal)
        if rel is None:
            rel = self._rels[ordinal] = f"{self.name}/{day_name(ordinal)}"
        return rel

    def path(self, ordinal: int) -> Path:
        return self.folder / day_name(ordinal)

    def days(self) -> list[int]:
        """Ordinals of the stream's day files, oldest first (other names are ignored)."""
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            m = _DAY.fullmatch(name)
            if m:
                try:
                    found.append(date(int(m[1]), int(m[2]), int(m[3])).toordinal())
                except ValueError:
                    continue
        return sorted(found)

    def size(self, ordinal: int) -> int | None:
        try:
            return os.stat(self.path(ordinal)).st_size
        except FileNotFoundError:
            return None

    # -- reading ------------------------------------------------------------------------

    def pread(self, ordinal: int, offset: int, length: int) -> bytes:
        """Up to `length` bytes at `offset` of a day file (short at end of file)."""
        fd = self._read_fds.get(ordinal)
        if fd is None:
            if len(self._read_fds) >= _MAX_READ_FDS:
                os.close(self._read_fds.pop(next(iter(self._read_fds))))
            try:
                fd = os.open(self.path(ordinal), os.O_RDONLY)
            except FileNotFoundError:
                return b""
            self._read_fds[ordinal] = fd
        return os.pread(fd, length, offset)

    def read_line(self, ordinal: int, offset: int, length: int, what: str) -> bytes:
        """The `length`-byte line at `offset` (without its newline), where the index says
        `what` lives; CorruptRecord when the log has no such line there."""
        data = self.pread(ordinal, offset, length + 1)
        if len(data) != length + 1 or data[-1:] != b"\n":
            raise CorruptRecord(self.path(ordinal), offset, f"the index puts {what} in a "
                                f"{length}-byte line here; the log disagrees (run check)")
        return data[:-1]

    def read_record(self, parse: Callable[[bytes, bool], Any], ordinal: int, offset: int,
                    length: int, what: str) -> Any:
        """`read_line`, then `parse` it (checksum included, P3); a malformed line is a
        CorruptRecord (R2)."""
        line = self.read_line(ordinal, offset, length, what)
        try:
            return parse(line, self.sealed(ordinal, offset))
        except Malformed as exc:
            raise CorruptRecord(self.path(ordinal), offset, str(exc)) from None

    def lines_from(self, start: tuple[int, int], stop: tuple[int, int] | None = None,
                   ) -> Iterator[tuple[int, int, bytes, bool]]:
        """Every line at or after `start` (and before `stop`), in log order, as `(ordinal,
        offset, line, terminated)`; `line` is without its newline, `terminated` is False
        only for a last line with no newline (torn, R2)."""
        first, skip = start
        for ordinal in self.days():
            if ordinal < first:
                continue
            if stop is not None and ordinal > stop[0]:
                return
            offset = skip if ordinal == first else 0
            end = stop[1] if stop is not None and ordinal == stop[0] else None
            with open(self.path(ordinal), "rb", buffering=1 << 20) as f:
                f.seek(offset)
                for line in f:
                    if end is not None and offset >= end:
                        return
                    if line[-1:] == b"\n":
                        yield ordinal, offset, line[:-1], True
                    else:
                        yield ordinal, offset, line, False
                    offset += len(line)

    # -- writing (the writer only) --------------------------------------------------------

    def open_tail(self) -> None:
        """Find the append position: the end of the latest day file."""
        days = self.days()
        if days:
            self.ordinal = days[-1]
            self.end = self.size(self.ordinal) or 0

    def append(self, ordinal: int, data: bytes) -> int:
        """Append `data` to the day file `ordinal` with one write and one fsync (R4); a new
        day file also fsyncs the folder. Returns the offset the data starts at."""
        if ordinal < self.ordinal:
            raise ValueError(f"day {ordinal} is before the latest day file {self.ordinal}")
        if self._fd is None or ordinal != self.ordinal:
            self._close_append()
            is_new = ordinal != self.ordinal or self.size(ordinal) is None
            fd = os.open(self.path(ordinal), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._fd = fd
            if is_new:
                fsync_dir(self.folder)
            self.ordinal = ordinal
            self.end = os.fstat(fd).st_size
        offset = self.end
        write_all(self._fd, data)
        os.fsync(self._fd)
        self.end += len(data)
        return offset

    def terminate(self, ordinal: int) -> None:
        """R2: end a torn last line with a newline (one write, one fsync)."""
        fd = os.open(self.path(ordinal), os.O_WRONLY | os.O_APPEND)
        try:
            write_all(fd, b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        if ordinal == self.ordinal:
            self.end += 1

    def _close_append(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close_append()
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
