"""`view.json` and `compaction-view.json` (R1, R4, R22, R24).

The contents are the planner's: opaque JSON objects the store saves atomically and loads
back unchanged. The store only insists that each is a JSON object.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import _crash
from ._errors import BadInput, CorruptRecord
from ._files import atomic_write, fsync_dir, read_small

__all__ = ["VIEW_NAME", "CVIEW_NAME", "FOLD_NAME", "save_views", "load_views", "save_fold", "load_fold",
           "view_bytes"]

VIEW_NAME = "view.json"
CVIEW_NAME = "compaction-view.json"
FOLD_NAME = "index/fold.json"
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _bytes(name: str, value: object) -> bytes:
    if not isinstance(value, dict):
        raise BadInput(f"{name} must be a dict, got {type(value).__name__}")
    try:
        return (_encode(value) + "\n").encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise BadInput(f"{name} is not JSON: {exc}") from None


def view_bytes(name: str, view: dict) -> bytes:
    """The bytes `save_views` writes for `view` into the file `name` (a backup writes a
    refolded view.json byte for byte as the planner would, actors/upkeep/backup/)."""
    return _bytes(name, view)


def save_views(chat: Path, view: dict, cview: dict) -> None:
    """Replace both files atomically (R4, R22): each is written to a temporary file,
    fsynced and renamed, then the folder is fsynced once. `view.json` is renamed first: a
    crash between the two renames leaves the new view with the previous compaction view,
    which R24 survives (the planner refits the compaction view)."""
    view_bytes = _bytes(VIEW_NAME, view)
    cview_bytes = _bytes(CVIEW_NAME, cview)
    atomic_write(chat / VIEW_NAME, view_bytes, sync_dir=False)
    _crash.hit("view")
    atomic_write(chat / CVIEW_NAME, cview_bytes, sync_dir=False)
    fsync_dir(chat)
    _crash.hit("cview")


def _load(chat: Path, name: str) -> dict | None:
    data = read_small(chat / name)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecord(chat / name, exc.start, "not UTF-8") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        pos = getattr(exc, "pos", 0)
        raise CorruptRecord(chat / name, len(text[:pos].encode()),
                            f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CorruptRecord(chat / name, 0, "not a JSON object")
    return value


def load_views(chat: Path) -> tuple[dict | None, dict | None, CorruptRecord | None]:
    """(view, compaction view, the compaction view's damage); a missing file gives None.
    An unreadable view is a CorruptRecord; an unreadable compaction view is returned as
    its damage (it is derived, R24: the caller rebuilds it)."""
    view = _load(chat, VIEW_NAME)
    try:
        return view, _load(chat, CVIEW_NAME), None
    except CorruptRecord as damage:
        return view, None, damage


def save_fold(chat: Path, fold: dict) -> None:
    """Replace `index/fold.json`, the fold checkpoint (derived, like the rest of `index/`:
    a crash may lose it, never the log)."""
    if (chat / "index").is_dir():
        atomic_write(chat / FOLD_NAME, _bytes(FOLD_NAME, fold), sync_dir=False)


def load_fold(chat: Path) -> dict | None:
    """The fold checkpoint, or None when it is missing or unreadable (it is derived)."""
    try:
        return _load(chat, FOLD_NAME)
    except CorruptRecord:
        return None
