"""Two parts of the supervisor that stand on their own: its lock on the chat folder, and
the thread that starts the actor processes.

- `ChatLock` (P6, R5): the supervisor's OS lock on `supervisor.lock` in the chat folder,
  taken before anything of the chat is touched, its owner written in it so a second
  supervisor can name it.
- `Launcher` (P16): every actor process is started from one thread that lives as long as
  the supervisor, because Linux's parent-death signal follows the thread that forked.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import socket
import subprocess
import threading
from concurrent.futures import Future
from pathlib import Path

from everchat.actors.store import ChatLocked

__all__ = ["ChatLock", "Launcher", "LOCK_NAME"]

LOCK_NAME = "supervisor.lock"  # in the chat folder, beside the store's writer.lock


class ChatLock:
    """The supervisor's OS lock on its chat folder (P6): `fcntl.flock` on `supervisor.lock`,
    taken without waiting, the owner written in it as `{"v": 1, "pid": ..., "host": ...}`
    (the same form as the store's writer.lock) so a second supervisor can name it. The
    kernel drops it when the owner dies, also by kill -9."""

    def __init__(self, chat: Path) -> None:
        self.path = chat / LOCK_NAME
        self.held = False
        self._fd: int | None = None

    def __repr__(self) -> str:
        return f"<ChatLock {self.path} {'held' if self.held else 'free'} pid={os.getpid()}>"

    def acquire(self) -> None:
        """Take the lock at once, or raise ChatLocked naming its owner."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, host = _lock_owner(fd)
            os.close(fd)
            raise ChatLocked(str(self.path.parent), pid, host) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd, self.held = fd, True
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"v": 1, "pid": os.getpid(), "host": socket.gethostname()}).encode() + b"\n", 0)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd, self.held = self._fd, None, False
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)


def _lock_owner(fd: int) -> tuple[int | None, str | None]:
    try:
        owner = json.loads(os.pread(fd, 4096, 0))
        pid, host = owner.get("pid"), owner.get("host")
    except (ValueError, AttributeError):
        return None, None
    return (pid if type(pid) is int else None), (host if type(host) is str else None)


class Launcher:
    """Starts the actor processes, all from one thread of its own (P16).

    An actor process asks Linux to kill it when its parent ends (PR_SET_PDEATHSIG), and the
    kernel means the parent *thread*: the one that forked it. Children started from the
    thread that called `start()` (which may be a short-lived worker of a front end) or from
    the monitor would die with that thread. This thread lives from the first launch until
    `close()`, which the supervisor calls after its children have stopped."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def __repr__(self) -> str:
        return f"<Launcher {self.thread.name} pid={os.getpid()}>"

    def popen(self, command: list[str], env: dict | None) -> subprocess.Popen:
        """subprocess.Popen(command) run in the launcher's thread; its errors are raised here."""
        started: Future = Future()
        self._jobs.put((command, env, started))
        return started.result()

    def close(self) -> None:
        self._jobs.put(None)
        self.thread.join(timeout=5)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            command, env, started = job
            try:
                started.set_result(subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env))
            except BaseException as error:  # handed to the caller of popen()
                started.set_exception(error)
