"""ChatGPT's export: `conversations.json` (also inside the export's ZIP).

A list of conversations, each a tree of messages: `mapping` is node id -> `{"id",
"message", "parent", "children"}`, and `current_node` is the leaf of the branch the
person kept (the one the app shows). Only that branch is read: from `current_node` up
through `parent` to the root, then reversed. A message has `author.role` (system, user,
assistant, tool), `create_time` (seconds since the epoch, a float, sometimes null),
`content.content_type` with `parts` (text, multimodal_text) or `text` (code,
execution_output; an image part names its file in the export, `file-service://file-…` or
`sediment://file_…`, which the ZIP reader finds), `recipient` (not "all" when the assistant calls a tool), and the marks of what the app
sent but never showed as said: `metadata.is_visually_hidden_from_conversation` (hidden
context, under any role), `metadata.is_user_system_message` (the custom instructions,
as a `user` message), content types `user_editable_context` and `model_editable_context`,
and the `system` role; none of these is read.
Reasoning (`thoughts`, `reasoning_recap`) is never read (R6).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

from ._stream import json_list
from ._types import ChatMessage, Conversation, SourceError, ident, obj, seq, when

__all__ = ["parse_chatgpt", "chatgpt_conversations", "looks_like_chatgpt"]

_THINKING = frozenset({"thoughts", "reasoning_recap"})
_SKIPPED = frozenset({"user_editable_context", "model_editable_context", "system_error"})


def looks_like_chatgpt(data: Any) -> bool:
    return isinstance(data, list) and any(isinstance(c, dict) and "mapping" in c for c in data[:5])


def _parts(parts: Any, pointers: list[str]) -> str:
    """The parts' text; each image's asset pointer (its file in the export) goes to `pointers`."""
    out = []
    for part in seq(parts):
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            kind = part.get("content_type")
            if kind == "image_asset_pointer":
                out.append("[image]")
                pointer = part.get("asset_pointer")
                if isinstance(pointer, str) and "://" in pointer:
                    pointers.append(pointer.split("://", 1)[1])
            elif kind == "audio_transcription" and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif kind in ("audio_asset_pointer", "real_time_user_audio_video_asset_pointer"):
                out.append("[audio]")
    return "\n".join(p for p in out if p)


def _message(node_id: str, message: dict) -> ChatMessage | None:
    author = obj(message.get("author"))
    role = author.get("role")
    content = obj(message.get("content"))
    kind = content.get("content_type", "text")
    metadata = obj(message.get("metadata"))
    if role == "system" or kind in _THINKING or kind in _SKIPPED:
        return None
    if metadata.get("is_visually_hidden_from_conversation") or metadata.get("is_user_system_message"):
        return None  # context the app sent, never shown as said (custom instructions, memory)
    pointers: list[str] = []
    if "parts" in content:
        text = _parts(content.get("parts"), pointers)
    elif kind == "tether_browsing_display":
        text = content.get("result") or content.get("summary") or ""
    elif isinstance(content.get("text"), str):
        text = content["text"]
    else:
        text = ""
    if not isinstance(text, str) or not text.strip():
        return None
    date = when(message.get("create_time"))
    message_id = ident(message.get("id")) or node_id
    recipient = message.get("recipient") if isinstance(message.get("recipient"), str) else "all"
    if role == "user":
        return ChatMessage(message_id, "user", text, date, pointers=tuple(pointers))
    if role == "assistant":
        if recipient != "all":
            return ChatMessage(message_id, "tool_call", text, date, recipient)
        return ChatMessage(message_id, "assistant", text, date)
    if role == "tool":
        return ChatMessage(message_id, "tool_result", text, date, ident(author.get("name")) or "tool")
    return None


def _branch(mapping: dict, current: Any) -> list[tuple[str, dict]]:
    """The kept branch, root first: `current_node` and its parents (a cycle ends it)."""
    path, seen = [], set()
    node_id = current
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = obj(mapping[node_id])
        path.append((node_id, node))
        node_id = node.get("parent")
    path.reverse()
    return path


def _conversation(raw: dict, n: int) -> Conversation:
    mapping = raw.get("mapping")
    if not isinstance(mapping, dict):
        raise SourceError(f"conversation {n} has no message tree (`mapping`)")
    current = raw.get("current_node")
    if not isinstance(current, str) or current not in mapping:  # an export without it: the last leaf in the file's order
        leaves = [key for key, node in mapping.items() if not obj(node).get("children")]
        current = leaves[-1] if leaves else None
    messages = []
    for node_id, node in _branch(mapping, current):
        message = node.get("message")
        if isinstance(message, dict):
            parsed = _message(node_id, message)
            if parsed is not None:
                messages.append(parsed)
    conversation_id = ident(raw.get("conversation_id")) or ident(raw.get("id")) or f"#{n}"
    title = raw.get("title") if isinstance(raw.get("title"), str) and raw.get("title").strip() else "Untitled"
    date = when(raw.get("create_time")) or next((m.date for m in messages if m.date), None)
    return Conversation("chatgpt", conversation_id, title.strip(), date, tuple(messages))


def chatgpt_conversations(raws: Iterable[Any], skipped: list[str]) -> Iterator[Conversation]:
    """Each conversation of the export's list, in order, each only its kept branch; one
    that cannot be read (not an object, or no message tree) is left out, and `skipped`
    gets one line saying which and why (P12: it refused the whole export)."""
    for n, raw in enumerate(raws):
        if not isinstance(raw, dict):
            skipped.append(f"item {n} is not a conversation (a JSON {type(raw).__name__})")
            continue
        try:
            yield _conversation(raw, n)
        except SourceError as error:
            title = raw.get("title") if isinstance(raw.get("title"), str) else ""
            skipped.append(f"{error}{f' ({title[:60]!r})' if title else ''}")


def parse_chatgpt(data: bytes, skipped: list[str] | None = None) -> list[Conversation]:
    """ChatGPT's `conversations.json` -> its conversations, each only its kept branch
    (`current_node`'s path), without system messages, hidden context or reasoning; those
    that cannot be read are said in `skipped`."""
    return list(chatgpt_conversations(json_list(io.BytesIO(data), "conversations.json"),
                                      [] if skipped is None else skipped))
