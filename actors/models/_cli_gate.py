"""A gate of N slots shared by every process of a machine that runs CLI model calls.

A slot is a file `slot-K.lock` held with `flock` for the whole run; the kernel drops the
lock when its holder dies, so a crashed process never keeps a slot. Waiters queue by
priority (0 replies, 1 leaf summaries, 2 merges; then first come): each holds a flock'd
ticket file `wait-P-T-PID-R` while it waits (locked before it takes that name), and takes
a free slot only when no live ticket is ahead of it. A ticket whose lock can be taken
belongs to a dead waiter and is removed. Waiting polls every `_POLL` (50 ms): slots are
held for seconds or minutes.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import threading
import time
from pathlib import Path

__all__ = ["Gate", "Slot"]

_POLL = 0.05  # seconds between looks while waiting


class Slot:
    """A held slot; `release()` (or the end of a `with`) frees it."""

    def __init__(self, fd: int, index: int) -> None:
        self._fd: int | None = fd
        self.index = index
        self._lock = threading.Lock()

    def release(self) -> None:
        """Free the slot; again is nothing (a run may be ended by two threads at once)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Slot({self.index}, {'held' if self._fd is not None else 'released'})"


def _try_lock(path: Path) -> int | None:
    """An open fd holding an exclusive flock on `path`, or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class Gate:
    """At most `slots` runs at once across processes sharing `folder`."""

    def __init__(self, folder: str | os.PathLike[str], slots: int) -> None:
        if not 1 <= slots <= 8:
            raise ValueError(f"CLI concurrency is 1 to 8, not {slots}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.slots = slots

    def __repr__(self) -> str:
        return f"Gate({self.folder}, slots={self.slots})"

    def acquire(self, priority: int, timeout: float) -> Slot | None:
        """A slot, waiting behind live waiters of a better (priority, arrival); None when
        `timeout` seconds pass first."""
        deadline = time.monotonic() + timeout
        name = f"wait-{priority}-{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
        ticket = self.folder / name
        # locked under a name other waiters do not look at, then renamed into place: an
        # unlocked ticket would read as a dead waiter's and be removed (issue 13)
        fresh = self.folder / f"new-{name}"
        ticket_fd = _try_lock(fresh)
        assert ticket_fd is not None  # a fresh, unique name
        try:
            os.rename(fresh, ticket)
        except OSError:
            fresh.unlink(missing_ok=True)
            os.close(ticket_fd)
            raise
        try:
            while True:
                if not self._anyone_ahead(name):
                    slot = self._free_slot()
                    if slot is not None:
                        return slot
                if time.monotonic() >= deadline:
                    return None
                time.sleep(_POLL)
        finally:
            ticket.unlink(missing_ok=True)
            os.close(ticket_fd)

    def _anyone_ahead(self, mine: str) -> bool:
        for other in sorted(p.name for p in self.folder.glob("wait-*")):
            if other >= mine:
                return False  # names sort by priority, then arrival
            fd = _try_lock(self.folder / other)
            if fd is None:
                return True  # a live waiter before us
            (self.folder / other).unlink(missing_ok=True)  # its waiter died
            os.close(fd)
        return False

    def _free_slot(self) -> Slot | None:
        for index in range(self.slots):
            fd = _try_lock(self.folder / f"slot-{index}.lock")
            if fd is not None:
                return Slot(fd, index)
        return None
