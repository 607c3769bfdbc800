"""The writer's OS lock on a chat folder (R5, R51).

`fcntl.flock` on `writer.lock` in the chat folder, taken without waiting. The lock file
holds the owner as one JSON object, `{"v": 1, "pid": ..., "host": ...}`, so a second writer
can say who owns the chat. The kernel drops the lock when the owner dies (also by
`kill -9`), so a stale lock file never blocks anyone; its content only matters while the
lock is held.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from ._errors import ChatLocked
from ._files import write_all

__all__ = ["WriterLock", "LOCK_NAME"]

LOCK_NAME = "writer.lock"


class WriterLock:
    """Held by the one writer of a chat from `acquire` until `release`."""

    def __init__(self, chat: Path) -> None:
        self.path = chat / LOCK_NAME
        self._fd: int | None = None
        self.pid = os.getpid()
        self.host = socket.gethostname()

    def __repr__(self) -> str:
        state = "held" if self._fd is not None else "free"
        return f"<WriterLock {self.path} {state} pid={self.pid} host={self.host}>"

    def acquire(self) -> None:
        """Take the lock at once or raise ChatLocked naming the owner (R5)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, host = _owner(fd)
            os.close(fd)
            raise ChatLocked(str(self.path.parent), pid, host) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        os.ftruncate(fd, 0)
        owner = {"v": 1, "pid": self.pid, "host": self.host}
        write_all(fd, json.dumps(owner).encode() + b"\n")

    def release(self) -> None:
        """Clear the owner and drop the lock (closing the file drops it)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)


def _owner(fd: int) -> tuple[int | None, str | None]:
    """The pid and host a lock file names (None, None when it names nobody yet)."""
    data = os.pread(fd, 4096, 0)
    try:
        raw = json.loads(data)
        pid, host = raw.get("pid"), raw.get("host")
    except (ValueError, AttributeError):
        return None, None
    return (pid if type(pid) is int else None), (host if type(host) is str else None)
