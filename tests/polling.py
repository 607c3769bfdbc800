"""Small helpers the actor tests share: waiting on a condition (never a sleep as a
synchronisation) and the chat's snapshot on disk."""

from __future__ import annotations

import threading
import time
from pathlib import Path

__all__ = ["wait_until", "folder_bytes", "message_text", "events_until_end"]


def wait_until(condition, timeout: float, what: str):
    """Poll `condition` (a callable returning a truthy value when done) every 20 ms and
    return its value; AssertionError naming `what` after `timeout` seconds."""
    pause = threading.Event()
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout} s")
        pause.wait(0.02)


def folder_bytes(chat: Path) -> dict[str, bytes]:
    """Every file of the chat folder but the sockets in run/: messages, nodes and merge
    records, view.json, compaction-view.json, the index, chat.json."""
    return {str(path.relative_to(chat)): path.read_bytes() for path in sorted(chat.rglob("*"))
            if path.is_file() and path.relative_to(chat).parts[0] != "run"}


def message_text(n: int) -> str:
    """Message n of a scripted chat: every third a short note, the others ~800 bytes."""
    return f"m{n} " + ("a long message about amber-42 and path/to/file.py " * 16 if n % 3 else "short note")


def events_until_end(session, turn: int, timeout: float = 60.0) -> list:
    """A session's events (`next_event`) up to and with the end of turn `turn`; fails
    naming what came when an event does not come within `timeout`."""
    events = []
    while True:
        event = session.next_event(timeout=timeout)
        assert event is not None, f"no end of turn {turn}; got {events}"
        events.append(event)
        if type(event).__name__ == "TurnEnded" and event.turn == turn:
            return events
