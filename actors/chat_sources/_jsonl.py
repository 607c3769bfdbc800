"""What the two session-log formats share: JSON lines read leniently, and a title."""

from __future__ import annotations

import json
from collections.abc import Iterator

from ._types import ChatMessage

__all__ = ["json_lines", "first_line", "title_of"]

_TITLE_CHARS = 60


def json_lines(data: bytes) -> Iterator[tuple[int, dict]]:
    """(line number from 1, object) of each line holding a JSON object; a torn last line
    (a session being written) and other unreadable lines are skipped."""
    for n, line in enumerate(data.splitlines(), 1):
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            yield n, obj


def first_line(data: bytes) -> dict | None:
    return next((obj for _, obj in json_lines(data[:1 << 20])), None)


def title_of(messages: list[ChatMessage]) -> str:
    """A session's title when it has none: its first words from the person, shortened."""
    said = next((m.text for m in messages if m.role == "user"), "")
    line = " ".join(said.split())
    return line if len(line) <= _TITLE_CHARS else line[:_TITLE_CHARS - 1].rstrip() + "…"
