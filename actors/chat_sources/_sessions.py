"""Coding agents' session logs: Claude Code and Codex, one JSON object a line.

Claude Code (`~/.claude/projects/<folder>/<session>.jsonl`): lines of `type` `user`,
`assistant`, `system` or `summary`. A message line has `uuid`, `parentUuid`,
`sessionId`, `timestamp` (ISO, `Z`), `cwd`, `isSidechain` (a sub-agent's side thread:
not read), `isMeta` (the app's own context: not read) and `message` with `content`, a
string or blocks: `text`, `thinking` (never read, R6), `tool_use` (`id`, `name`,
`input`), `tool_result` (`tool_use_id`, `content`), `image`. A rewound session
branches, so only the kept branch is read: from the last message up through
`parentUuid` (and across a compaction's `logicalParentUuid`). `summary` lines
(`summary`, `leafUuid`) give the session its title.

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
from collections.abc import Iterator
from typing import Any

from ._types import ChatMessage, Conversation, block_text, tool_input, when

__all__ = ["parse_claude_code", "parse_codex", "looks_like_claude_code", "looks_like_codex"]

_TITLE_CHARS = 60
_NOT_SAID = ("<local-command-", "<command-name>", "<command-message>", "<command-args>", "[Request interrupted",
             "Caveat: The messages below were generated")
_CODEX_CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>")


def _lines(data: bytes) -> Iterator[tuple[int, dict]]:
    for n, line in enumerate(data.splitlines(), 1):
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(obj, dict):
            yield n, obj


def _first(data: bytes) -> dict | None:
    return next((obj for _, obj in _lines(data[:1 << 20])), None)


def looks_like_claude_code(data: bytes) -> bool:
    for _, obj in _lines(data[:1 << 20]):
        if "payload" in obj:
            return False
        if "sessionId" in obj or obj.get("type") == "summary":
            return True
    return False


def looks_like_codex(data: bytes) -> bool:
    first = _first(data)
    return bool(first) and ("payload" in first or ("instructions" in first and "id" in first))


def _title(messages: list[ChatMessage]) -> str:
    said = next((m.text for m in messages if m.role == "user"), "")
    line = " ".join(said.split())
    return line if len(line) <= _TITLE_CHARS else line[:_TITLE_CHARS - 1].rstrip() + "…"


# -- Claude Code ---------------------------------------------------------------------------

def _kept_branch(entries: list[dict]) -> list[dict]:
    """The messages of the branch the session ended on, oldest first."""
    by_uuid = {e["uuid"]: e for e in entries if isinstance(e.get("uuid"), str)}
    said = [e for e in entries if e.get("type") in ("user", "assistant") and not e.get("isSidechain")]
    if not said:
        return []
    path, seen = [], set()
    entry: dict | None = said[-1]
    while entry is not None and entry.get("uuid") not in seen:
        seen.add(entry.get("uuid"))
        path.append(entry)
        parent = entry.get("parentUuid") or entry.get("logicalParentUuid")
        entry = by_uuid.get(parent) if isinstance(parent, str) else None
    path.reverse()
    return [e for e in path if e.get("type") in ("user", "assistant") and not e.get("isSidechain")]


def _claude_code_messages(entry: dict, tools: dict[str, str]) -> list[ChatMessage]:
    message = entry.get("message") or {}
    base = str(entry.get("uuid"))
    date = when(entry.get("timestamp"))
    role = "user" if entry.get("type") == "user" else "assistant"
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    out: list[ChatMessage] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        piece: tuple[str, str, str] | None = None
        if kind == "text" and isinstance(block.get("text"), str):
            text = block["text"]
            if role == "user" and text.lstrip().startswith(_NOT_SAID):
                continue
            piece = (role, text, "")
        elif kind == "image":
            piece = (role, "[image]", "")
        elif kind == "tool_use":
            name = str(block.get("name") or "tool")
            tools[str(block.get("id"))] = name
            piece = ("tool_call", tool_input(block.get("input", {})), name)
        elif kind == "tool_result":
            piece = ("tool_result", block_text(block.get("content")), tools.get(str(block.get("tool_use_id")), "tool"))
        if piece is None or not piece[1].strip():
            continue
        if out and piece[0] in ("user", "assistant") and out[-1].role == piece[0]:
            out[-1] = ChatMessage(out[-1].id, piece[0], out[-1].text + "\n" + piece[1], date)
            continue
        k = len(out)
        out.append(ChatMessage(base if k == 0 else f"{base}#{k}", piece[0], piece[1], date, piece[2]))
    return out


def parse_claude_code(data: bytes, name: str = "") -> list[Conversation]:
    """One Claude Code session log -> one conversation (none when it holds no message)."""
    entries = [obj for _, obj in _lines(data)]
    summaries = {e.get("leafUuid"): e.get("summary") for e in entries if e.get("type") == "summary"}
    branch = [e for e in _kept_branch(entries) if not e.get("isMeta")]
    tools: dict[str, str] = {}
    messages = [m for e in branch for m in _claude_code_messages(e, tools)]
    if not messages:
        return []
    first = branch[0]
    ids = {e.get("uuid") for e in branch}
    title = next((s for leaf, s in reversed(summaries.items()) if leaf in ids and isinstance(s, str)), None)
    session = str(first.get("sessionId") or name or "session")
    return [Conversation("claude-code", session, title or _title(messages), when(first.get("timestamp")),
                         tuple(messages), str(first.get("cwd") or ""))]


# -- Codex ---------------------------------------------------------------------------------

def _codex_text(content: Any) -> str:
    out = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict):
            if block.get("type") in ("input_text", "output_text", "text") and isinstance(block.get("text"), str):
                out.append(block["text"])
            elif block.get("type") == "input_image":
                out.append("[image]")
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
    meta: dict = {}
    calls: dict[str, str] = {}
    messages: list[ChatMessage] = []
    for n, line in _lines(data):
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
        if item == "message":
            text = _codex_text(payload.get("content"))
            role = payload.get("role")
            if role == "user" and not text.lstrip().startswith(_CODEX_CONTEXT):
                piece = ("user", text, "")
            elif role == "assistant":
                piece = ("assistant", text, "")
        elif item in ("function_call", "custom_tool_call", "local_shell_call"):
            tool = str(payload.get("name") or ("shell" if item == "local_shell_call" else "tool"))
            calls[str(payload.get("call_id"))] = tool
            args = payload.get("arguments", payload.get("input", payload.get("action", {})))
            piece = ("tool_call", tool_input(args), tool)
        elif item in ("function_call_output", "custom_tool_call_output"):
            piece = ("tool_result", _codex_output(payload.get("output")), calls.get(str(payload.get("call_id")), "tool"))
        if piece is not None and piece[1].strip():
            messages.append(ChatMessage(f"line-{n}", piece[0], piece[1], date, piece[2]))
    if not messages:
        return []
    session = str(meta.get("id") or name or "session")
    start = when(meta.get("timestamp")) or next((m.date for m in messages if m.date), None)
    return [Conversation("codex", session, _title(messages), start, tuple(messages), str(meta.get("cwd") or ""))]
