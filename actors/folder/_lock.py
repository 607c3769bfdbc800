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

__all__ = ["OwnerLock", "WriterLock", "LOCK_NAME"]

LOCK_NAME = "writer.lock"


class OwnerLock:
    """An OS lock on one file of a chat folder (`fcntl.flock`, taken without waiting), its
    owner written in it as `{"v": 1, "pid": ..., "host": ...}` so that a second comer can
    say who holds it; 0600 whatever the umask (P5). Held from `acquire` until `release`.
    The writer's (`WriterLock`) and the supervisor's (`supervisor_parts.ChatLock`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.path} {'held' if self.held else 'free'} pid={os.getpid()} "
                f"host={socket.gethostname()}>")

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
        os.fchmod(fd, 0o600)  # a file made before, or under another umask
        os.ftruncate(fd, 0)
        owner = {"v": 1, "pid": os.getpid(), "host": socket.gethostname()}
        write_all(fd, json.dumps(owner).encode() + b"\n")

    def release(self) -> None:
        """Clear the owner and drop the lock (closing the file drops it)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)


class WriterLock(OwnerLock):
    """Held by the one writer of a chat (`writer.lock`)."""

    def __init__(self, chat: Path) -> None:
        super().__init__(chat / LOCK_NAME)


def _owner(fd: int) -> tuple[int | None, str | None]:
    """The pid and host a lock file names (None, None when it names nobody yet)."""
    data = os.pread(fd, 4096, 0)
    try:
        raw = json.loads(data)
        pid, host = raw.get("pid"), raw.get("host")
    except (ValueError, AttributeError):
        return None, None
    return (pid if type(pid) is int else None), (host if type(host) is str else None)
