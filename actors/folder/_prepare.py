"""Turning a caller's message or node into what the log holds, or refusing it (BadInput).

Everything here runs before a byte is written, so a refused batch leaves the chat folder
unchanged. Messages: kind (R3), R7 clip for echoes, size limits, R8 split, key, images (R9),
meta. Nodes: ids, coverage and the 1 ... 512-byte text (R10).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from . import _assets
from ._errors import BadInput
from ._records import (KINDS, MAX_LEVEL, MAX_TEXT_BYTES, NODE_BYTES, PART_BYTES,
                       check_meta, check_work_head, clip_echo, split_text, utf8_size)

__all__ = ["Prepared", "MAX_KEY_BYTES", "prepare_message", "check_date", "check_node_id", "check_node"]

MAX_KEY_BYTES = 1024
_FIELDS = frozenset(("kind", "text", "key", "images", "meta", "date"))


class Prepared(NamedTuple):
    """A message ready to log: its parts (R8) with their sizes and metas."""

    kind: str
    parts: list[str]
    sizes: list[int]
    key: str | None
    images: tuple[str, ...]
    metas: list[dict | None]
    date: str | None = None  # the record's date when the caller gave one (an import), else now



def _arguments(item: Any) -> tuple:
    if isinstance(item, dict):
        unknown = item.keys() - _FIELDS
        if unknown:
            raise BadInput(f"unknown message fields {sorted(unknown)}")
        return (item.get("kind"), item.get("text"), item.get("key"), item.get("images", ()),
                item.get("meta"), item.get("date"))
    if isinstance(item, (tuple, list)) and 2 <= len(item) <= 6:
        return tuple(item) + (None, (), None, None)[len(item) - 2:]
    raise BadInput(f"a message is a dict or a (kind, text, key, images, meta, date) tuple, got "
                   f"{item!r:.80}")


def _check_key(key: Any) -> None:
    if key is None:
        return
    if not isinstance(key, str) or not key:
        raise BadInput("key must be a non-empty str")
    try:
        size = utf8_size(key)
    except UnicodeEncodeError:
        raise BadInput("the key holds a lone surrogate") from None
    if size > MAX_KEY_BYTES:
        raise BadInput(f"key is over {MAX_KEY_BYTES} bytes")


def check_date(date: Any) -> str | None:
    """A caller's record date (R1): an ISO 8601 date and time with its timezone, returned
    as the store writes dates (to the second, with its offset); None stays None (now).
    BadInput for anything else: a date without a timezone would be read as whatever the
    reader's zone is."""
    if date is None:
        return None
    if not isinstance(date, str):
        raise BadInput(f"date must be an ISO date and time with a timezone, got {type(date).__name__}")
    try:
        when = datetime.fromisoformat(date)
    except ValueError:
        raise BadInput(f"date {date[:40]!r} is not an ISO date and time") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise BadInput(f"date {date[:40]!r} has no timezone")
    return when.isoformat(timespec="seconds")


def _check_images(chat: Path, images: Any) -> tuple[str, ...]:
    if images is None or images == () or images == []:
        return ()
    if isinstance(images, (str, bytes)) or not isinstance(images, Iterable):
        raise BadInput("images must be a list of asset digests")
    images = tuple(_assets.check_digest(d) for d in images)
    for digest in images:
        if not _assets.has_asset(chat, digest):
            raise BadInput(f"no asset {digest}: store it with put_asset first (R9)")
    return images


def prepare_message(chat: Path, item: Any) -> Prepared:
    """Validate one message (a dict or a tuple, see `ChatStore.append_messages`), clip an
    echo by R7 and split the text by R8. Meta gets `cut` (R7: characters cut) and, on each
    part of a split text, `part` (1-based) and `parts`."""
    kind, text, key, images, meta, date = _arguments(item)
    if kind not in KINDS:
        raise BadInput(f"kind {kind!r} is not one of {sorted(KINDS)} (R3)")
    if not isinstance(text, str):
        raise BadInput(f"text must be a str, got {type(text).__name__}")
    cut = 0
    if kind == "echo":
        text, cut = clip_echo(text)
    if len(text) > MAX_TEXT_BYTES:  # characters: a cheap first look at absurd sizes
        raise BadInput(f"a text of {len(text)} characters is over {MAX_TEXT_BYTES} bytes")
    try:
        size = utf8_size(text)
    except UnicodeEncodeError:
        raise BadInput("the text holds a lone surrogate; it is not UTF-8") from None
    if size > MAX_TEXT_BYTES:
        raise BadInput(f"a text of {size} bytes is over {MAX_TEXT_BYTES} bytes")
    check_work_head(kind, text)
    _check_key(key)
    images = _check_images(chat, images)
    meta = check_meta(meta)
    date = check_date(date)
    parts = [text] if size <= PART_BYTES else split_text(text)
    base = dict(meta or {}, cut=cut) if cut else meta
    if len(parts) == 1:
        return Prepared(kind, parts, [size], key, images, [base], date)
    n = len(parts)
    metas = [dict(base or {}, part=k + 1, parts=n) for k in range(n)]
    return Prepared(kind, parts, [utf8_size(p) for p in parts], key, images, metas, date)


def check_node_id(level: Any, i: Any) -> None:
    """l and i are natural numbers, l at most MAX_LEVEL (BadInput otherwise)."""
    if type(level) is not int or type(i) is not int or level < 0 or i < 0:
        raise BadInput(f"node({level!r}, {i!r}): l and i are natural numbers")
    if level > MAX_LEVEL:
        raise BadInput(f"level {level} is above {MAX_LEVEL}")


def check_node(item: Any, count: int) -> tuple[int, int, str, int]:
    """Validate one `(l, i, text)` for a chat of `count` messages: the node covers only
    logged messages and its text is 1 ... 512 UTF-8 bytes (R10). Returns it with its size."""
    try:
        level, i, text = item
    except (TypeError, ValueError):
        raise BadInput(f"a node is (l, i, text), got {item!r:.80}") from None
    check_node_id(level, i)
    if (i + 1) << level > count:
        raise BadInput(f"node({level}, {i}) covers messages up to {((i + 1) << level) - 1};"
                       f" the chat has {count} (R10)")
    if not isinstance(text, str):
        raise BadInput(f"node text must be a str, got {type(text).__name__}")
    try:
        size = utf8_size(text)
    except UnicodeEncodeError:
        raise BadInput("the node text holds a lone surrogate") from None
    if not 1 <= size <= NODE_BYTES:
        raise BadInput(f"node({level}, {i}) text is {size} bytes, not 1 ... {NODE_BYTES} (R10)")
    return level, i, text, size
