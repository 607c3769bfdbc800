"""Small file-system helpers with the durability R4 asks for."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_all", "fsync_dir", "atomic_write", "remove_stale_temps", "read_small", "set_aside", "DAMAGED"]


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (one `write` call unless the kernel returns short)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(path: Path) -> None:
    """fsync a folder so that names created or renamed in it survive a crash (R4)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `path` by `data` atomically (R4): temporary file, fsync, rename, fsync folder.

    A crash leaves either the old file or the new one, never a mix; at worst a stray
    `.<name>.tmp.<pid>` file stays behind."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


def remove_stale_temps(folder: Path) -> list[str]:
    """Remove the temporary files `atomic_write` leaves when a crash comes before its rename
    (writer only, at open: no other process writes the folder then). Returns their names."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(".") and ".tmp." in n]
    except FileNotFoundError:
        return []
    for name in names:
        os.unlink(folder / name)
    return names


def read_small(path: Path) -> bytes | None:
    """The bytes of a small file, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


DAMAGED = "damaged"
"""The chat folder's `damaged/`: derived files that could not be read are moved here
(never deleted), named `<UTC time>-<name>`, so nothing is lost to a rebuild."""


def set_aside(chat: Path, name: str) -> Path:
    """Move the chat's file `name` into `damaged/` (writer only); returns where it went."""
    from datetime import datetime, timezone

    folder = chat / DAMAGED
    folder.mkdir(mode=0o700, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    target = folder / f"{stamp}-{name.replace('/', '-')}"
    os.replace(chat / name, target)
    fsync_dir(folder)
    fsync_dir(chat)
    return target
