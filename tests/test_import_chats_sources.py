"""What each source's format marks, read as the README's "Past chats" says: a Claude Code
session followed across its compaction, ChatGPT's hidden messages left out, a time
without a zone read as UTC (under another `TZ` too), and `--since` keeping undated
messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from everchat.actors.upkeep.importing import conversation_items, parse_chatgpt, parse_claude_code
from everchat.actors.folder import ChatStore

SESSION = "aaaa0000-1111-4222-8333-444455556666"


def line(uuid: str, parent: str | None, kind: str, content, time: str = "2025-08-04T14:00:00.000Z", **more) -> str:
    entry = {"parentUuid": parent, "isSidechain": False, "cwd": "/home/ana/src/tilemap", "sessionId": SESSION,
             "type": kind, "uuid": uuid, "timestamp": time,
             "message": {"role": "user" if kind == "user" else "assistant", "content": content}, **more}
    return json.dumps(entry)


def compacted_session() -> bytes:
    """Two turns, Claude Code's compaction (its boundary has no parentUuid, only the
    logicalParentUuid of the last message before it, and a summary as a user line),
    then one more turn."""
    return "\n".join([
        line("u1", None, "user", "Why does the tile cache evict the newest tile?"),
        line("a1", "u1", "assistant", [{"type": "text", "text": "`evict` pops from the end."}]),
        line("u2", "a1", "user", "Use a deque then."),
        line("a2", "u2", "assistant", [{"type": "text", "text": "Done with popleft()."}]),
        json.dumps({"parentUuid": None, "logicalParentUuid": "a2", "isSidechain": False, "type": "system",
                    "subtype": "compact_boundary", "content": "Conversation compacted", "sessionId": SESSION,
                    "uuid": "b1", "timestamp": "2025-08-04T15:00:00.000Z", "compactMetadata": {"trigger": "auto"}}),
        line("s1", "b1", "user", "This session is being continued from a previous conversation that ran out of "
                                 "context. The conversation is summarized below: the cache now uses a deque.",
             "2025-08-04T15:00:01.000Z", isCompactSummary=True, isVisibleInTranscriptOnly=True),
        line("u3", "s1", "user", "Now add a test for it.", "2025-08-04T15:01:00.000Z"),
        line("a3", "u3", "assistant", [{"type": "text", "text": "Added test_evicts_the_oldest_tile."}],
             "2025-08-04T15:01:30.000Z"),
    ]).encode()


def test_a_claude_code_import_follows_logical_parent_uuid_across_a_compaction_and_keeps_what_came_before():
    (session,) = parse_claude_code(compacted_session())
    said = [(m.role, m.text) for m in session.messages]
    assert said == [("user", "Why does the tile cache evict the newest tile?"),
                    ("assistant", "`evict` pops from the end."), ("user", "Use a deque then."),
                    ("assistant", "Done with popleft()."), ("user", "Now add a test for it."),
                    ("assistant", "Added test_evicts_the_oldest_tile.")]  # the app's summary is not the person's


def chatgpt_node(node_id: str, parent: str | None, role: str, text: str, **message) -> dict:
    content = message.pop("content", {"content_type": "text", "parts": [text]})
    return {"id": node_id, "parent": parent, "children": [], "message": {
        "id": node_id, "author": {"role": role}, "create_time": 1_740_906_930.0, "recipient": "all",
        "content": content, "metadata": message.pop("metadata", {}), **message}}


def test_chatgpts_hidden_messages_are_not_imported():
    """What the export marks as never shown as said: the system prompt, hidden context
    (`is_visually_hidden_from_conversation`, under any role), the custom instructions
    (`is_user_system_message`, a `user` message), the editable-context content types."""
    nodes = [
        chatgpt_node("sys", None, "system", "You are ChatGPT.", metadata={"is_visually_hidden_from_conversation": True}),
        chatgpt_node("ctx", "sys", "user", "HIDDEN custom instructions: answer tersely.",
                     metadata={"is_user_system_message": True}),
        chatgpt_node("mem", "ctx", "user", "", content={"content_type": "user_editable_context",
                                                       "user_profile": "HIDDEN profile", "user_instructions": "x"}),
        chatgpt_node("tool", "mem", "tool", "HIDDEN memory recall", metadata={"is_visually_hidden_from_conversation": True}),
        chatgpt_node("u1", "tool", "user", "What is 230 yen in euros?"),
        chatgpt_node("ctx2", "u1", "assistant", "HIDDEN model context",
                     content={"content_type": "model_editable_context", "model_set_context": "HIDDEN"}),
        chatgpt_node("a1", "ctx2", "assistant", "About 1.40 euros."),
    ]
    export = [{"title": "Yen", "conversation_id": "c1", "create_time": 1_740_906_930.0, "current_node": "a1",
               "mapping": {node["id"]: node for node in nodes}}]
    (conv,) = parse_chatgpt(json.dumps(export).encode())
    assert [(m.role, m.text) for m in conv.messages] == [("user", "What is 230 yen in euros?"),
                                                        ("assistant", "About 1.40 euros.")]
    assert not any("HIDDEN" in item.text for item in conversation_items(conv, set(), with_tools=True))


def naive_session() -> bytes:
    """Claude Code writes `Z`; a time without a zone (an older or edited log) is read as UTC."""
    return "\n".join([
        line("n1", None, "user", "Late question, naive time.", "2025-08-04T23:30:00"),
        line("n2", "n1", "assistant", [{"type": "text", "text": "Late answer."}], "2025-08-04T23:31:00"),
        line("n3", "n2", "user", "No time at all.", None),
    ]).encode()


def import_in_tz(tmp_path: Path, tz: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    env.update(TZ=tz, EVERCHAT_HOME=str(tmp_path / "home"), HOME=str(tmp_path / "user"))
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "import-chats", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_naive_timestamp_is_read_as_utc_under_another_tz(tmp_path):
    """Under TZ=Asia/Tokyo (+09:00) 23:30 without a zone stays 23:30 UTC of 2025-08-04 (as
    local time it would be 14:30 UTC); the day in the prefix is that UTC day."""
    log = tmp_path / "session.jsonl"
    log.write_bytes(naive_session())
    chat = tmp_path / "chat"
    done = import_in_tz(tmp_path, "Asia/Tokyo", str(log), "--yes", "--log-only", "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    with ChatStore.open(chat, writer=False) as store:
        logged = [store.message(i) for i in range(store.message_count)]
    assert [(r.text[:38], r.date) for r in logged[1:3]] == [
        ("[Claude Code, 2025-08-04] Late questio", "2025-08-04T23:30:00+00:00"),
        ("[Claude Code replied] Late answer.", "2025-08-04T23:31:00+00:00")]


def test_since_is_utc_and_keeps_messages_without_a_date(tmp_path):
    """`--since` without a zone is UTC (under TZ=America/Los_Angeles too). A message with
    no time takes its conversation's (README); in a conversation with no time at all,
    nothing says it is older, so `--since` keeps it."""
    log = tmp_path / "session.jsonl"
    log.write_bytes(naive_session())
    chat = str(tmp_path / "chat")
    done = import_in_tz(tmp_path, "America/Los_Angeles", str(log), "--since", "2025-08-05", "--dry-run", "--data-dir", chat)
    assert done.returncode == 0, done.stderr
    assert "nothing new to import" in done.stdout  # 23:30 and 23:31 UTC of the 4th, and the undated one with them
    done = import_in_tz(tmp_path, "America/Los_Angeles", str(log), "--since", "2025-08-04T23:30:30", "--dry-run",
                        "--data-dir", chat)
    assert "  Claude Code: 1 conversation, 2 messages\n" in done.stdout  # the answer at 23:31 UTC, and its note
    undated = tmp_path / "undated.jsonl"
    undated.write_bytes("\n".join(line(f"d{n}", f"d{n - 1}" if n else None, "user", f"Undated {n}.", None)
                                  for n in range(2)).encode())
    done = import_in_tz(tmp_path, "America/Los_Angeles", str(undated), "--since", "2030-01-01", "--dry-run",
                        "--data-dir", chat)
    assert "  Claude Code: 1 conversation, 3 messages\n" in done.stdout  # both, and their naming note
