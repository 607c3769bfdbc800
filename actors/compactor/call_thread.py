"""A blocking call an actor can give up on: `CallThread` (P10).

A model call that never answers blocks the thread that makes it (a socket read has no
way to be woken from another thread). An actor that makes such a call in its own
thread cannot stop until the call ends, and its process cannot end either: `ask
--no-wait` with a compaction model that accepted the connection and never answered had
not exited after 300 s. So the call runs in a daemon thread of its own, the actor's
thread waits for it, and `cancel()` (from the thread that stops the actor) ends that
wait at once. The abandoned call is left to end by itself; whatever it returns or posts
afterwards is dropped, and a daemon thread never holds the process open.

    calls = CallThread("compactor.0")
    text = calls.run(lambda: summarize(job), handle)   # in the actor's thread
    calls.post(item)                                    # from inside the call: handle(item) runs in the actor's thread
    calls.cancel()                                      # from any thread: run() raises Cancelled
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CallThread", "Cancelled"]

T = TypeVar("T")

_DONE, _FAILED, _POSTED, _CANCELLED = "done", "failed", "posted", "cancelled"


class Cancelled(Exception):
    """`CallThread.run` gave up on its call: `cancel()` was called (the actor is stopping)."""


class CallThread:
    """Runs one call at a time in a daemon thread; the caller's thread handles what the
    call posts, in order, and can be released by `cancel()` (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._cancelled = False
        self._items: queue.SimpleQueue | None = None  # the running call's

    def __repr__(self) -> str:
        return f"<CallThread {self.name}{' cancelled' if self._cancelled else ''}>"

    def run(self, call: Callable[[], T], handle: Callable[[Any], None] = lambda item: None) -> T:
        """`call()` in a daemon thread; returns its result or raises its exception. Each
        `post(item)` made while it runs is handed to `handle(item)` here, in order, before
        the result. Raises Cancelled at once when `cancel()` was or is called."""
        items: queue.SimpleQueue = queue.SimpleQueue()
        with self._lock:
            if self._cancelled:
                raise Cancelled(f"{self.name}: cancelled before the call")
            self._items = items

        def work() -> None:
            try:
                items.put((_DONE, call()))
            except BaseException as error:  # handed to run(), which raises it in the caller's thread
                items.put((_FAILED, error))

        threading.Thread(target=work, name=f"{self.name}-call", daemon=True).start()
        try:
            while True:
                kind, value = items.get()
                if kind == _POSTED:
                    handle(value)
                elif kind == _DONE:
                    return value
                elif kind == _FAILED:
                    raise value
                else:
                    raise Cancelled(f"{self.name}: the call was given up (stopping)")
        finally:
            with self._lock:
                if self._items is items:
                    self._items = None

    def post(self, item: Any) -> None:
        """From inside the running call: hand `item` to the caller's `handle` (dropped once
        the call was given up)."""
        items = self._items
        if items is not None:
            items.put((_POSTED, item))

    def cancel(self) -> None:
        """From any thread: the running call's `run` raises Cancelled now, and every later
        `run` at once. Never blocks."""
        with self._lock:
            self._cancelled = True
            items = self._items
        if items is not None:
            items.put((_CANCELLED, None))
