"""Claude's export (claude.ai, Settings > Privacy > Export data): `conversations.json`.

A list of conversations `{"uuid", "name", "created_at", "updated_at", "chat_messages"}`;
each message `{"uuid", "sender": "human"|"assistant", "created_at", "text", "content":
[blocks], "attachments": [{"file_name", "extracted_content"}], "files": [{"file_name"}]}`.
Blocks are `text`, `thinking` (never read, R6), `tool_use` (`name`, `input`) and
`tool_result` (`name`, `content`). The messages are listed in the order the app shows
them (the kept branch). A message whose blocks mix text and tools becomes several
messages in block order: the first keeps the message's uuid, the others `uuid#k`.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

from ._stream import json_list
from ._types import ChatMessage, Conversation, block_text, ident, obj, seq, tool_input, when

__all__ = ["parse_claude", "claude_conversations", "looks_like_claude"]


def looks_like_claude(data: Any) -> bool:
    return isinstance(data, list) and any(isinstance(c, dict) and "chat_messages" in c for c in data[:5])


def _pieces(message: dict) -> list[tuple[str, str, str]]:
    """(role, text, tool name) of each piece, consecutive texts joined."""
    sender = "user" if message.get("sender") == "human" else "assistant"
    blocks = message.get("content")
    pieces: list[tuple[str, str, str]] = []

    def add(role: str, text: str, name: str = "") -> None:
        if not text.strip():
            return
        if pieces and role in ("user", "assistant") and pieces[-1][0] == role:
            pieces[-1] = (role, pieces[-1][1] + "\n\n" + text, "")
        else:
            pieces.append((role, text, name))

    if isinstance(blocks, list) and blocks:
        for block in blocks:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                add(sender, block["text"])
            elif kind == "tool_use":
                add("tool_call", tool_input(block.get("input", {})), ident(block.get("name")) or "tool")
            elif kind == "tool_result":
                add("tool_result", block_text(block.get("content")), ident(block.get("name")) or "tool")
            elif kind == "image":
                add(sender, "[image]")
    elif isinstance(message.get("text"), str):
        add(sender, message["text"])
    extras = [f"[attached: {obj(a)['file_name']}]" for a in seq(message.get("attachments"))
              if isinstance(obj(a).get("file_name"), str)]
    extras += [f"[file: {obj(f)['file_name']}]" for f in seq(message.get("files"))
               if isinstance(obj(f).get("file_name"), str)]
    if extras:
        add(sender, " ".join(extras))
    return pieces


def _conversation(raw: dict, n: int) -> Conversation:
    messages = []
    for m, message in enumerate(seq(raw.get("chat_messages"))):
        if not isinstance(message, dict):
            continue
        base = ident(message.get("uuid")) or f"#{m}"
        date = when(message.get("created_at"))
        for k, (role, text, name) in enumerate(_pieces(message)):
            messages.append(ChatMessage(base if k == 0 else f"{base}#{k}", role, text, date, name))
    name = raw.get("name")
    title = name.strip() if isinstance(name, str) and name.strip() else "Untitled"
    date = when(raw.get("created_at")) or next((m.date for m in messages if m.date), None)
    return Conversation("claude", ident(raw.get("uuid")) or f"#{n}", title, date, tuple(messages))


def claude_conversations(raws: Iterable[Any], skipped: list[str]) -> Iterator[Conversation]:
    """Each conversation of the export's list, in order, without thinking blocks; an item
    that is not an object is left out and said in `skipped`."""
    for n, raw in enumerate(raws):
        if isinstance(raw, dict):
            yield _conversation(raw, n)
        else:
            skipped.append(f"item {n} is not a conversation (a JSON {type(raw).__name__})")


def parse_claude(data: bytes, skipped: list[str] | None = None) -> list[Conversation]:
    """Claude's `conversations.json` -> its conversations, without thinking blocks."""
    return list(claude_conversations(json_list(io.BytesIO(data), "conversations.json"), [] if skipped is None else skipped))
