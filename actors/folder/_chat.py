"""The chat folder's own small files: `chat.json` and `repairs.json` (R1, R2).

`chat.json` marks a folder as a chat and carries the folder format's version:
`{"format": "everchat-chat", "version": 2, "created": "<ISO date>", "sealed_from":
{"main": [ordinal, offset], "tree": [ordinal, offset]}}`. Version 2 records carry their
checksum (P3) from `sealed_from` on: `[0, 0]` for a chat made with them; for a version 1
chat, where its first writer of version 2 found the end of each log (the records before
stay readable as they are, with no checksum). Version 1 files read as before.

`repairs.json` remembers every torn last line the writer terminated (R2), so later opens
and `check` accept exactly those spans and nothing else:
`{"v": 1, "repairs": [{"file": "main/2026-10-08.jsonl", "offset": 1234, "length": 57,
"found": "<ISO date>"}, ...]}`. It is not derived data (the log alone cannot tell a torn
line from a damaged one), so it is replaced atomically, never rebuilt.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from ._errors import CorruptRecord, NotAChat, StoreError
from ._files import atomic_write, fsync_dir, read_small
from ._scan import Repair

__all__ = ["CHAT_VERSION", "is_chat", "make_layout", "read_chat_json", "seal_from", "load_repairs",
           "save_repairs"]

CHAT_VERSION = 2
REPAIRS_VERSION = 1
_FOLDERS = ("main", "tree", "assets")


def is_chat(path: Path) -> bool:
    """A chat folder has `chat.json` or, from before it existed, `main/` among nothing but
    a chat's own names (P17: a folder of someone's files that happens to hold a `main/`
    is not adopted)."""
    if not path.is_dir():
        return False
    if (path / "chat.json").is_file():
        return True
    return (path / "main").is_dir() and not foreign_entries(path)


_OWN_NAMES = frozenset(_FOLDERS) | {"index", "config", "run", "agents", "damaged", "chat.json", "writer.lock",
                                    "supervisor.lock", "view.json", "compaction-view.json", "usage.json",
                                    "draft.json", "repairs.json"}


def foreign_entries(path: Path) -> list[str]:
    """The names in folder `path` that are no part of a chat folder, sorted (none when the
    folder is missing or empty, or holds only what a chat being made leaves, like its keys)."""
    if not path.is_dir():
        return []
    return sorted(entry.name for entry in path.iterdir() if not _is_own(entry.name))


def _is_own(name: str) -> bool:
    """A chat folder's own name, or the `.<own name>.tmp.<pid>` a kill inside `atomic_write` leaves
    (a kill while the chat is being made must not turn its folder into "other files")."""
    if name in _OWN_NAMES:
        return True
    stem, _, pid = name.rpartition(".tmp.")
    return stem.startswith(".") and stem[1:] in _OWN_NAMES and pid.isdigit()


def make_layout(path: Path, now: datetime) -> None:
    """Create what is missing of a chat folder's layout (R1), durably (R4)."""
    changed = False
    for name in _FOLDERS:
        folder = path / name
        if not folder.is_dir():
            folder.mkdir(mode=0o700)
            changed = True
    if not (path / "chat.json").is_file():
        info = {"format": "everchat-chat", "version": CHAT_VERSION,
                "created": now.isoformat(timespec="seconds"),
                "sealed_from": {"main": [0, 0], "tree": [0, 0]}}
        atomic_write(path / "chat.json", (json.dumps(info) + "\n").encode(), sync_dir=False)
        changed = True
    if changed:
        fsync_dir(path)
        fsync_dir(path.parent)


def read_chat_json(path: Path) -> dict | None:
    """The chat's description, or None for a chat from before chat.json existed. Refuses
    a chat written by a newer Everchat (format versions, STYLE 11). For version 2 the
    result has `sealed_from`: `{"main": (ordinal, offset), "tree": (ordinal, offset)}`."""
    data = read_small(path / "chat.json")
    if data is None:
        if not (path / "main").is_dir():
            raise NotAChat(f"{path} holds no chat (no chat.json, no main/)")
        return None
    try:
        info = json.loads(data)
        version = info["version"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise CorruptRecord(path / "chat.json", 0, "not a chat description") from None
    if version not in (1, CHAT_VERSION):
        raise StoreError(f"{path}: chat format version {version!r}; this Everchat reads "
                         f"versions 1 and {CHAT_VERSION}")
    if version == CHAT_VERSION:
        try:
            spots = {name: tuple(info["sealed_from"][name]) for name in ("main", "tree")}
        except (KeyError, TypeError):
            spots = {}
        if len(spots) != 2 or any(len(spot) != 2 or any(type(x) is not int or x < 0 for x in spot)
                                  for spot in spots.values()):
            raise CorruptRecord(path / "chat.json", 0, "sealed_from must name a position in main/ and in tree/")
        info["sealed_from"] = spots
    return info


def seal_from(path: Path, info: dict | None, main: tuple[int, int], tree: tuple[int, int],
              now: datetime) -> dict:
    """Make a version 1 chat a version 2 one (writer only, at open, after its tails were
    scanned and repaired): records from these positions on carry their checksum (P3)."""
    info = dict(info or {"format": "everchat-chat", "created": now.isoformat(timespec="seconds")})
    info["version"] = CHAT_VERSION
    info["sealed_from"] = {"main": list(main), "tree": list(tree)}
    atomic_write(path / "chat.json", (json.dumps(info) + "\n").encode())
    info["sealed_from"] = {"main": tuple(main), "tree": tuple(tree)}
    return info


def load_repairs(path: Path) -> set[Repair]:
    """The torn spans terminated so far (R2)."""
    file = path / "repairs.json"
    data = read_small(file)
    if data is None:
        return set()
    try:
        raw = json.loads(data)
        if raw["v"] != REPAIRS_VERSION:
            raise StoreError(f"{file}: version {raw['v']!r}, this Everchat reads "
                             f"{REPAIRS_VERSION}")
        found = {Repair(r["file"], r["offset"], r["length"]) for r in raw["repairs"]}
    except (ValueError, KeyError, TypeError):
        raise CorruptRecord(file, 0, "not a list of repairs") from None
    return found


def save_repairs(path: Path, repairs: list[Repair], now: datetime) -> None:
    """Add repairs to `repairs.json` (atomic replace, R4)."""
    file = path / "repairs.json"
    data = read_small(file)
    raw = json.loads(data) if data is not None else {"v": REPAIRS_VERSION, "repairs": []}
    when = now.isoformat(timespec="seconds")
    raw["repairs"].extend({"file": r.file, "offset": r.offset, "length": r.length,
                           "found": when} for r in repairs)
    atomic_write(file, (json.dumps(raw, indent=1) + "\n").encode())
