"""Codex's session logs (rollouts), one JSON object a line.

Codex (`~/.codex/sessions/YYYY/MM/DD/rollout-….jsonl`): lines `{"timestamp", "type",
"payload"}`. `session_meta` holds the session's `id`, `timestamp` and `cwd`;
`response_item`s are `message` (`role` user/assistant/developer, `content` blocks
`input_text`/`output_text`/`input_image`), `reasoning` (never read, R6),
`function_call` (`name`, `arguments`, `call_id`), `function_call_output` (`call_id`,
`output`), `custom_tool_call`/`custom_tool_call_output` and `local_shell_call`;
`event_msg` and `turn_context` lines repeat or describe what the items say and are
skipped. The instructions and environment Codex sends as user messages
(`<environment_context>`, `<user_instructions>`, AGENTS.md) are not the person's words.
A line without a `payload` (the older rollout format) is read as its own payload.

A torn last line (a session being written) and other unreadable lines are skipped.
"""

from __future__ import annotations

import json
from typing import Any

from ._jsonl import json_lines, title_of
from ._types import ChatMessage, Conversation, base64_image, block_text, ident, obj, seq, tool_input, when

__all__ = ["parse_codex", "codex_conversations", "looks_like_codex"]

_CODEX_CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>")


def looks_like_codex(first: dict | None) -> bool:
    """Whether a session log whose first object is `first` is a Codex rollout."""
    return bool(first) and ("payload" in first or ("instructions" in first and "id" in first))


def _codex_text(content: Any, images: list[bytes]) -> str:
    """The blocks' text; an image's bytes (a `data:` URL) go to `images`."""
    out = []
    for block in seq(content):
        if isinstance(block, dict):
            if block.get("type") in ("input_text", "output_text", "text") and isinstance(block.get("text"), str):
                out.append(block["text"])
            elif block.get("type") == "input_image":
                out.append("[image]")
                data = base64_image(block.get("image_url"))
                if data:
                    images.append(data)
    return "\n".join(out)


def _codex_output(output: Any) -> str:
    """A function call's output: Codex wraps shell output as JSON `{"output", "metadata"}`."""
    if isinstance(output, str):
        try:
            wrapped = json.loads(output)
        except ValueError:
            return output
        if isinstance(wrapped, dict) and isinstance(wrapped.get("output"), str):
            return wrapped["output"]
        return output
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return output["content"]
    return block_text(output)


def parse_codex(data: bytes, name: str = "") -> list[Conversation]:
    """One Codex rollout -> one conversation (none when it holds no message)."""
    return codex_conversations(list(json_lines(data)), name)


def codex_conversations(numbered: list[tuple[int, dict]], name: str = "") -> list[Conversation]:
    """A Codex rollout's objects with their line numbers -> its conversation (or none)."""
    meta: dict = {}
    calls: dict[str, str] = {}
    messages: list[ChatMessage] = []
    for n, line in numbered:
        payload = line.get("payload") if "payload" in line else line
        if not isinstance(payload, dict):
            continue
        kind = line.get("type") if "payload" in line else payload.get("type")
        if kind == "session_meta" or ("payload" not in line and "instructions" in line and "id" in line):
            meta = meta or payload
            continue
        if "payload" in line and kind != "response_item":
            continue
        item = payload.get("type")
        date = when(line.get("timestamp") or payload.get("timestamp"))
        piece: tuple[str, str, str] | None = None
        images: list[bytes] = []
        if item == "message":
            text = _codex_text(payload.get("content"), images)
            role = payload.get("role")
            if role == "user" and not text.lstrip().startswith(_CODEX_CONTEXT):
                piece = ("user", text, "")
            elif role == "assistant":
                piece = ("assistant", text, "")
        elif item in ("function_call", "custom_tool_call", "local_shell_call"):
            tool = ident(payload.get("name")) or ("shell" if item == "local_shell_call" else "tool")
            calls[ident(payload.get("call_id")) or ""] = tool
            args = payload.get("arguments", payload.get("input", payload.get("action", {})))
            piece = ("tool_call", tool_input(args), tool)
        elif item in ("function_call_output", "custom_tool_call_output"):
            piece = ("tool_result", _codex_output(payload.get("output")), calls.get(ident(payload.get("call_id")) or "", "tool"))
        if piece is not None and piece[1].strip():
            messages.append(ChatMessage(f"line-{n}", piece[0], piece[1], date, piece[2], tuple(images)))
    if not messages:
        return []
    session = ident(meta.get("id")) or name or "session"
    start = when(meta.get("timestamp")) or next((m.date for m in messages if m.date), None)
    return [Conversation("codex", session, title_of(messages), start, tuple(messages),
                         meta.get("cwd") if isinstance(meta.get("cwd"), str) else "")]
