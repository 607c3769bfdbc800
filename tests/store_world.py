"""A deterministic world for the log store tests: a clock you control, tiny images, and
helpers to snapshot and damage a chat folder on disk."""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

__all__ = ["FakeClock", "PNG", "JPEG", "GIF", "WEBP", "folder_bytes", "lines_of",
           "day_file", "TZ"]

TZ = timezone(timedelta(hours=2))

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(17)
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(16)
GIF = b"GIF89a" + bytes(20)
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8 " + bytes(14)


class FakeClock:
    """A clock the test moves by hand: returns an aware local datetime (UTC+2)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 10, 8, 23, 59, 58, tzinfo=TZ)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def folder_bytes(path: Path) -> dict[str, str]:
    """Every file under `path` by relative name, with a digest of its bytes."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = Path(root) / name
            out[str(full.relative_to(path))] = hashlib.sha256(full.read_bytes()).hexdigest()
    return out


def lines_of(path: Path) -> list[tuple[int, bytes]]:
    """(offset, line with its newline) of every line of a file."""
    data, out, offset = path.read_bytes(), [], 0
    while offset < len(data):
        end = data.find(b"\n", offset)
        end = len(data) if end < 0 else end + 1
        out.append((offset, data[offset:end]))
        offset = end
    return out


def day_file(chat: Path, stream: str, day: str) -> Path:
    return chat / stream / f"{day}.jsonl"
