"""The streaming reply's draft: what survives a crash mid-stream (R37).

While a reply streams, the turn runner has the log writer save the text so far in
`draft.json` (beside the log; written atomically: temporary file, fsync, rename, folder
fsync), under the key its finished `everchat` message will have. When the message is
logged the draft is cleared. If the process dies in between, the log writer's next start
logs the draft as that message, marked incomplete, under the same key: a draft whose
message did reach the log is not logged twice (the key makes the append idempotent).

    {"version": 1, "key": "turn-12-3", "text": "…", "meta": {"turn": 12, "incomplete": "crashed"}}
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from everchat.actors.folder import BadInput, CorruptRecord
from everchat.actors.folder import _crash
from everchat.actors.folder._files import atomic_write, fsync_dir, read_small, set_aside

__all__ = ["DRAFT_NAME", "DRAFT_VERSION", "save_draft", "load_draft", "recover_draft"]

log = logging.getLogger("everchat.drafts")

DRAFT_NAME = "draft.json"
DRAFT_VERSION = 1


def save_draft(chat: Path, key: str | None, text: str, meta: dict | None) -> None:
    """Replace the draft (R4's atomic replace); `key` None removes it."""
    path = Path(chat) / DRAFT_NAME
    if key is None:
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(path.parent)
        _crash.hit("draft")
        return
    record = {"version": DRAFT_VERSION, "key": key, "text": text, "meta": meta or {}}
    atomic_write(path, (json.dumps(record, ensure_ascii=False) + "\n").encode())
    _crash.hit("draft")


def load_draft(chat: Path) -> dict | None:
    """The saved draft, or None. A file that is not a version 1 draft raises CorruptRecord
    naming it (a partial reply would be lost with it, so `check` reports it)."""
    path = Path(chat) / DRAFT_NAME
    data = read_small(path)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise CorruptRecord(path, 0, f"not a draft (not JSON: {error})") from None
    if not isinstance(record, dict) or record.get("version") != DRAFT_VERSION:
        raise CorruptRecord(path, 0, f"not a version {DRAFT_VERSION} draft")
    meta = record.get("meta")
    if not isinstance(record.get("key"), str) or not isinstance(record.get("text"), str) or not (
            meta is None or isinstance(meta, dict)):
        raise CorruptRecord(path, 0, "a draft needs a key, a text and a meta object")
    try:
        record["text"].encode("utf-8")
    except UnicodeEncodeError:
        raise CorruptRecord(path, 0, "the draft's text is not UTF-8") from None
    return record


def recover_draft(store) -> list[int]:
    """At a writer's open (the log writer's start, or a one-shot command's): log a draft
    left by a crash, marked incomplete (R37), then remove it, so it lands right after the
    message it followed (P18). Returns the ids it was logged under ([] when there was none).

    A draft that cannot be read (P2) is set aside in `damaged/` with a warning: it never
    keeps the chat from opening."""
    try:
        record = load_draft(store.path)
    except CorruptRecord as damage:
        moved = set_aside(Path(store.path), DRAFT_NAME)
        log.warning("%s: %s; set aside as %s (the partial reply it held is not logged)", store.path, damage,
                    moved.relative_to(store.path))
        return []
    if record is None:
        return []
    ids: list[int] = []
    if record["text"].strip():
        # Imported only for a draft: the turn's modules cost an open ~1 s to load.
        from everchat.actors.turns.turn import incomplete_text

        meta = dict(record.get("meta") or {})
        why = meta.setdefault("incomplete", "crashed")
        before = store.message_count
        try:
            ids = store.append_message("everchat", incomplete_text(record["text"], why), key=record["key"],
                                       meta=meta)
        except BadInput as refused:
            moved = set_aside(Path(store.path), DRAFT_NAME)
            log.warning("%s: draft.json cannot be logged (%s); set aside as %s", store.path, refused,
                        moved.relative_to(store.path))
            return []
        if ids and ids[0] >= before:
            log.warning("%s: logged the reply a crash cut short (%s) as message %d", store.path, record["key"], ids[0])
    save_draft(store.path, None, "", None)
    return ids
