"""What every chat parser returns: conversations of messages, each with its own date."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

__all__ = ["ChatMessage", "Conversation", "SourceError", "APPS", "ROLES", "when", "tool_input", "block_text",
           "base64_image", "obj", "seq", "ident"]

#: source -> the app's name as the person knows it (what the log's prefixes say)
APPS = {"chatgpt": "ChatGPT", "claude": "Claude", "claude-code": "Claude Code", "codex": "Codex"}

#: what a parsed message is: the person's words, the app's reply, or (kept only with
#: --with-tools) a tool call the app made and its result. Thinking is never parsed (R6).
ROLES = ("user", "assistant", "tool_call", "tool_result")


class SourceError(ValueError):
    """A file that cannot be imported as it is (too big, not the format it claims, a ZIP
    whose sizes lie): the message names the file and why; nothing of it is logged."""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a past conversation, as the app stored it."""
    id: str  # the app's id for it (stable across exports), unique within its conversation
    role: str  # one of ROLES
    text: str
    date: datetime | None  # aware; None when the app kept no time for it
    name: str = ""  # the tool's name, for tool_call and tool_result
    images: tuple[bytes, ...] = ()  # images the message held (R9 checks them before they are logged)
    pointers: tuple[str, ...] = ()  # images it names that live beside it (ChatGPT's export: ZIP members)


@dataclass(frozen=True, slots=True)
class Conversation:
    """A past conversation: only the branch the person kept, oldest message first."""
    source: str  # a key of APPS
    id: str
    title: str
    date: datetime | None  # when it started
    messages: tuple[ChatMessage, ...]
    where: str = ""  # the folder a coding session ran in (Claude Code, Codex)

    @property
    def app(self) -> str:
        return APPS[self.source]


def obj(value: Any) -> dict:
    """`value` when it is a JSON object, else an empty one: the exports are read leniently,
    a field of an unexpected shape counts as missing."""
    return value if isinstance(value, dict) else {}


def seq(value: Any) -> list:
    """`value` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def ident(value: Any) -> str | None:
    """An id (a string, or a number written as one); None for anything else."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def when(value: Any) -> datetime | None:
    """A source's timestamp (seconds since the epoch, or ISO 8601 with `Z` or an offset)
    as an aware datetime; None when there is none or it cannot be read. A naive ISO time
    is taken as UTC (the exports write UTC)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(value, timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError:
            return None
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
    return None


def base64_image(data: Any) -> bytes | None:
    """The bytes of a base64 image (or a `data:` URL holding one); None when it is not."""
    if not isinstance(data, str) or not data:
        return None
    if data.startswith("data:"):
        head, _, data = data.partition(",")
        if ";base64" not in head:
            return None
    try:
        return base64.b64decode(data, validate=True)
    except (ValueError, binascii.Error):
        return None


def tool_input(value: Any) -> str:
    """A tool call's input as compact JSON (a string that already holds JSON stays as is)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def block_text(content: Any) -> str:
    """The text of a tool result's content: a string, or a list of blocks whose text blocks
    are joined (an image block becomes `[image]`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for block in content:
            if isinstance(block, str):
                out.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    out.append(block["text"])
                elif block.get("type") in ("image", "input_image"):
                    out.append("[image]")
        return "\n".join(out)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return "" if content is None else tool_input(content)
