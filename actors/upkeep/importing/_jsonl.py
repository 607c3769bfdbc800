"""What the two session-log formats share: JSON lines read leniently, and a title."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from ._types import ChatMessage

__all__ = ["json_lines", "read_lines", "title_of"]

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


def read_lines(lines: Iterable[bytes]) -> tuple[list[tuple[int, dict]], int]:
    """(line number from 1, object) of each line of `lines` holding a JSON object, and how
    many lines before the last could not be read (P12: said, not dropped without a word;
    a torn last line is a session being written, skipped as ever). A blank line is none."""
    out: list[tuple[int, dict]] = []
    bad: list[int] = []
    n = 0
    for n, line in enumerate(lines, 1):
        try:
            value = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            if line.strip():
                bad.append(n)
            continue
        if isinstance(value, dict):
            out.append((n, value))
    return out, len(bad) - (1 if bad and bad[-1] == n else 0)


def title_of(messages: list[ChatMessage]) -> str:
    """A session's title when it has none: its first words from the person, shortened."""
    said = next((m.text for m in messages if m.role == "user"), "")
    line = " ".join(said.split())
    return line if len(line) <= _TITLE_CHARS else line[:_TITLE_CHARS - 1].rstrip() + "…"
