"""From parsed conversations to the messages `import-chats` logs (pure: no I/O).

Each conversation arrives as a `note` naming it, then its messages in order, each with
its own date as the record's `date` (R1):

    note  ChatGPT conversation "Trip to Kyoto", from 2025-03-02, imported
    user  [ChatGPT, 2025-03-02] What should I see in Kyoto in three days?
    note  [ChatGPT replied] Day 1: Fushimi Inari at dawn, …

Kinds (R3): the person's words stay `user`, with a prefix naming the app and the day,
so they read as what the person said to that app then (the view has no dates, R14).
The other app's replies are `note`s (memories from before the chat), prefixed `[App
replied]`: never `everchat`, which is Everchat's own voice, so the model never takes
another AI's words for its own. Tool calls and results (only with --with-tools) are
notes too (`[App called NAME]`, `[NAME returned to App]`): `tool` and `echo` are
Everchat's own tool calls; a result keeps its two ends as R7 would. Thinking is never
parsed (R6). Every text (and title and folder) is redacted before it is logged. Images a
message held are logged with it (R9: PNG, JPEG, GIF or WebP of at most 5 MB; others are
left out, the text still says `[image]`).

Every record carries a durable source id as its key: `chat:<source>:<conversation>` for
the naming note, `chat:<source>:<conversation>:<message>` for a message, and
`chat:claude-code:uuid:<message>` for a Claude Code message, whose uuid names it in
whatever session log holds it (a resumed session's log starts with copies of the earlier
session's messages, under their own uuids). The store answers a resent key within its
horizon (a retry logs once); a rerun asks the chat's key index which of the import's
keys (`candidate_keys`) were ever logged (`ChatStore.logged_keys`: no record is read) and
plans only the others, so importing again brings only what is newer, past the horizon
too. Claude Code messages logged before their key named the uuid alone
(`chat:claude-code:<session>:<uuid>`) are found under that key too, for every session of
the import, and known by their uuid from there (`remember`). A conversation that gained
messages since its import gets a note saying it continues, unless the log's last
imported record is already its own (a run that was interrupted inside it).

A text longer than `CUT_CHARS` characters (about 2 MB: the store takes 8 MB of UTF-8 at
most, R8) is cut there, and the rest is said in one line, `[… N more characters not
imported]`; the item says how many were left out (`cut`) for the preview.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from everchat.actors.upkeep.redact import redact
from everchat.actors.folder import MAX_ASSET_BYTES, MAX_TEXT_BYTES, clip_echo, image_type

from ._types import ChatMessage, Conversation

__all__ = ["Item", "conversation_items", "imported_ids", "remember", "source_prefix", "head_key", "candidate_keys",
           "known_count", "KEY_PREFIX", "CUT_CHARS"]

KEY_PREFIX = "chat:"
_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins pairs: any left is alone
_MAX_ID = 200  # longer ids are shortened to a digest, so a key stays well within the store's limit
CUT_CHARS = MAX_TEXT_BYTES // 4 - 1024  # a text that could be over the store's limit is cut (said so)


class Item(NamedTuple):
    """One message to log (the fields of `schema.Append`, date as ISO with its offset, and
    the images' bytes, each a PNG, JPEG, GIF or WebP of at most 5 MB, R9)."""
    kind: str
    text: str
    key: str
    meta: dict
    date: str | None
    images: tuple[bytes, ...] = ()
    cut: int = 0  # characters past CUT_CHARS left out


def _id(value: str) -> str:
    """An id as it goes into a key: itself, or a digest when it is long, holds a `:` (the
    key's separator), is not clean UTF-8 or holds a secret (review P6: a key is logged)."""
    if len(value) <= _MAX_ID and ":" not in value and _clean(value) == value and redact(value) == value:
        return value
    return "sha256-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _clean(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate (JSON can escape one) becomes U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def source_prefix(source: str) -> str:
    return f"{KEY_PREFIX}{source}:"


def head_key(source: str, conversation_id: str) -> str:
    """The naming note's key of a conversation (`conversation_id` as it went into keys)."""
    return f"{source_prefix(source)}{conversation_id}"


def _head_key(conv: Conversation) -> str:
    return head_key(conv.source, _id(conv.id))


def _key(conv: Conversation, message: ChatMessage) -> str:
    if conv.source == "claude-code":
        return f"{KEY_PREFIX}claude-code:uuid:{_id(message.id)}"
    return f"{_head_key(conv)}:{_id(message.id)}"


def candidate_keys(conv: Conversation) -> list[str]:
    """The keys under which this conversation's naming note and messages may have been
    logged before: their keys, and for Claude Code the older `<session>:<uuid>` form."""
    keys = [_head_key(conv)] + [_key(conv, message) for message in conv.messages]
    if conv.source == "claude-code":
        keys += [f"{_head_key(conv)}:{_id(message.id)}" for message in conv.messages]
    return keys


def known_count(conv: Conversation, known: set[str]) -> int:
    """How many of this conversation's records (its naming note and messages) `known` holds."""
    said = [_head_key(conv)] + [_key(conv, message) for message in conv.messages]
    return sum(1 for key in said if key in known or _alias(key) in known)


def _alias(key: str) -> str | None:
    """A Claude Code message's id whatever session log holds it: a resumed session's log
    starts with copies of the earlier session's messages, under their own uuids."""
    parts = key.split(":")  # ids never hold a ":" (`_id`)
    if len(parts) == 4 and parts[1] == "claude-code" and not parts[3].startswith("+"):
        return f"{KEY_PREFIX}claude-code:uuid:{parts[3]}"
    return None


def remember(known: set[str], key: str) -> None:
    """Add a logged (or planned) key to `known`, with its alias."""
    known.add(key)
    alias = _alias(key)
    if alias is not None:
        known.add(alias)


def imported_ids(keys: Iterable[str | None]) -> tuple[set[str], str | None]:
    """The source ids among the chat's keys (every record's, in log order) and the last."""
    known, last = set(), None
    for key in keys:
        if key and key.startswith(KEY_PREFIX):
            remember(known, key)
            last = key
    return known, last


def _day(moment: datetime | None) -> str:
    return moment.date().isoformat() if moment else "an unknown day"


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") if moment else None


def _bounded(text: str) -> tuple[str, int]:
    """`text` cut at CUT_CHARS, the cut said; and how many characters were left out."""
    if len(text) <= CUT_CHARS:
        return text, 0
    return text[:CUT_CHARS] + f"\n[… {len(text) - CUT_CHARS:,} more characters not imported]", len(text) - CUT_CHARS


def _render(conv: Conversation, message: ChatMessage) -> tuple[str, str]:
    app = conv.app
    if message.role == "user":
        day = f", {_day(message.date or conv.date)}" if (message.date or conv.date) else ""
        return "user", f"[{app}{day}] {message.text}"
    if message.role == "assistant":
        return "note", f"[{app} replied] {message.text}"
    if message.role == "tool_call":
        return "note", f"[{app} called {message.name}] {message.text}"
    clipped, _ = clip_echo(message.text)  # R7's two ends for a long result
    return "note", f"[{message.name} returned to {app}] {clipped}"


def _heading(conv: Conversation, continued: bool) -> str:
    what = "session" if conv.source in ("claude-code", "codex") else "conversation"
    where = f", in {conv.where}" if conv.where else ""
    again = ", continued" if continued else ""
    return f'{conv.app} {what} "{conv.title}", from {_day(conv.date)}{where}{again}, imported'


def conversation_items(conv: Conversation, known: set[str], last: str | None = None, *,
                       with_tools: bool = False, since: datetime | None = None) -> list[Item]:
    """The messages to log for `conv`: its naming note (unless logged before), then each
    of its messages not logged before, in order; none when nothing is new. `since` drops
    messages said before it (a message without a date, in a conversation without one, is
    kept: nothing says it is older); tool calls and results only `with_tools`. `last` is
    the key of the log's last imported record, or its conversation's naming-note key."""
    meta = {"chat": conv.source, "conversation": _id(conv.id)}
    body: list[Item] = []
    first_new = ""  # the id of the first message not logged before
    for message in conv.messages:
        if message.role in ("tool_call", "tool_result") and not with_tools:
            continue
        moment = message.date or conv.date
        if since is not None and moment is not None and moment < since:
            continue
        key = _key(conv, message)
        if key in known or _alias(key) in known:
            continue
        kind, text = _render(conv, message)
        images = tuple(data for data in message.images if len(data) <= MAX_ASSET_BYTES and image_type(data))
        bounded, cut = _bounded(_clean(text))  # cut first: what is not imported need not be redacted
        body.append(Item(kind, redact(bounded), key, meta, _iso(moment), images, cut))
        first_new = first_new or _id(message.id)
    if not body:
        return []
    head = _head_key(conv)
    if head not in known:
        heading = Item("note", redact(_clean(_heading(conv, False))), head, meta, _iso(conv.date))
    elif last is not None and (last == head or last.startswith(head + ":")):
        return body  # the run that logged its first messages was interrupted: go on after them
    else:
        heading = Item("note", redact(_clean(_heading(conv, True))), f"{head}:+{first_new}", meta, body[0].date)
    return [heading, *body]
