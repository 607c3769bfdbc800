"""Claude Code's session logs, one JSON object a line.

Claude Code (`~/.claude/projects/<folder>/<session>.jsonl`): lines of `type` `user`,
`assistant`, `system` or `summary`. A message line has `uuid`, `parentUuid`,
`sessionId`, `timestamp` (ISO, `Z`), `cwd`, `isSidechain` (a sub-agent's side thread:
not read), `isMeta` (the app's own context: not read) and `message` with `content`, a
string or blocks: `text`, `thinking` (never read, R6), `tool_use` (`id`, `name`,
`input`), `tool_result` (`tool_use_id`, `content`), `image`. A rewound session
branches, so only the kept branch is read: from the last message up through
`parentUuid`, and across a compaction: its `system` line (`subtype` `compact_boundary`)
has no `parentUuid` but a `logicalParentUuid`, the last message before it, so what came
before the compaction is kept. The summary Claude Code writes after it, a `user` line
with `isCompactSummary`, is the app's, not the person's words: not read. `summary` lines
(`summary`, `leafUuid`) give the session its title.

A torn last line (a session being written) and other unreadable lines are skipped.
"""

from __future__ import annotations

from ._jsonl import json_lines, title_of
from ._types import ChatMessage, Conversation, base64_image, block_text, ident, obj, seq, tool_input, when

__all__ = ["parse_claude_code", "claude_code_conversations", "looks_like_claude_code"]

_NOT_SAID = ("<local-command-", "<command-name>", "<command-message>", "<command-args>", "[Request interrupted",
             "Caveat: The messages below were generated")


def looks_like_claude_code(objects: list[dict]) -> bool:
    """Whether a session log's objects (in order) are Claude Code's."""
    for obj in objects:
        if "payload" in obj:
            return False
        if "sessionId" in obj or obj.get("type") == "summary":
            return True
    return False


def _kept_branch(entries: list[dict]) -> list[dict]:
    """The messages of the branch the session ended on, oldest first."""
    by_uuid = {e["uuid"]: e for e in entries if isinstance(e.get("uuid"), str)}
    said = [e for e in entries if e.get("type") in ("user", "assistant") and not e.get("isSidechain")]
    if not said:
        return []
    path, seen = [], set()
    entry: dict | None = said[-1]
    while entry is not None and ident(entry.get("uuid")) not in seen:
        seen.add(ident(entry.get("uuid")))
        path.append(entry)
        parent = entry.get("parentUuid") or entry.get("logicalParentUuid")
        entry = by_uuid.get(parent) if isinstance(parent, str) else None
    path.reverse()
    return [e for e in path if e.get("type") in ("user", "assistant") and not e.get("isSidechain")]


def _claude_code_messages(entry: dict, tools: dict[str, str]) -> list[ChatMessage]:
    message = obj(entry.get("message"))
    base = ident(entry.get("uuid")) or "message"
    date = when(entry.get("timestamp"))
    role = "user" if entry.get("type") == "user" else "assistant"
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    out: list[ChatMessage] = []
    for block in seq(content):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        piece: tuple[str, str, str] | None = None
        image = None
        if kind == "text" and isinstance(block.get("text"), str):
            text = block["text"]
            if role == "user" and text.lstrip().startswith(_NOT_SAID):
                continue
            piece = (role, text, "")
        elif kind == "image":
            piece = (role, "[image]", "")
            image = base64_image(obj(block.get("source")).get("data"))
        elif kind == "tool_use":
            name = ident(block.get("name")) or "tool"
            tools[ident(block.get("id")) or ""] = name
            piece = ("tool_call", tool_input(block.get("input", {})), name)
        elif kind == "tool_result":
            piece = ("tool_result", block_text(block.get("content")), tools.get(ident(block.get("tool_use_id")) or "", "tool"))
        if piece is None or not piece[1].strip():
            continue
        images = (image,) if image else ()
        if out and piece[0] in ("user", "assistant") and out[-1].role == piece[0]:
            out[-1] = ChatMessage(out[-1].id, piece[0], out[-1].text + "\n" + piece[1], date,
                                  images=out[-1].images + images)
            continue
        k = len(out)
        out.append(ChatMessage(base if k == 0 else f"{base}#{k}", piece[0], piece[1], date, piece[2], images))
    return out


def parse_claude_code(data: bytes, name: str = "") -> list[Conversation]:
    """One Claude Code session log -> one conversation (none when it holds no message)."""
    return claude_code_conversations([obj for _, obj in json_lines(data)], name)


def claude_code_conversations(entries: list[dict], name: str = "") -> list[Conversation]:
    """A Claude Code session log's objects, in order -> its conversation (or none)."""
    summaries = {ident(e.get("leafUuid")): e.get("summary") for e in entries if e.get("type") == "summary"}
    branch = [e for e in _kept_branch(entries) if not e.get("isMeta") and not e.get("isCompactSummary")]
    tools: dict[str, str] = {}
    messages = [m for e in branch for m in _claude_code_messages(e, tools)]
    if not messages:
        return []
    first = branch[0]
    ids = {ident(e.get("uuid")) for e in branch}
    title = next((s for leaf, s in reversed(summaries.items()) if leaf in ids and isinstance(s, str)), None)
    session = ident(first.get("sessionId")) or name or "session"
    return [Conversation("claude-code", session, title or title_of(messages), when(first.get("timestamp")),
                         tuple(messages), first.get("cwd") if isinstance(first.get("cwd"), str) else "")]
