"""Issue 20, review P6, end to end: `import-chats` logs no secret from any field of a past
chat: not from a title, a Claude Code session's folder (`cwd`, also the name of the folder
its log lives in, which the command prints when it skips a file there), a tool call's
arguments, a session's summary, nor from a conversation or message id (they become the
record's key and meta).

The secrets are planted in a ChatGPT export and a Claude Code session log; the real
command runs (`everchat --demo import-chats … --yes --with-tools`), then its stdout and
stderr and every byte under the test's folder but the planted inputs are searched. The fake
keys are built from pieces so no scanner mistakes this file for a leak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_world import clean_home

from everchat.actors.folder import ChatStore
from everchat.frontends.cli.main import main

TITLE_KEY = "sk-" + "proj-" + "Zr3T8yQw1Lk5Nv2Bx7Mc9Pd4Hf6Gj0Sa"
CONVERSATION_TOKEN = "ghp_" + "1aB2cD3eF4gH5iJ6kL7mN8oP9qR0sT1uV2wX3"
MESSAGE_TOKEN = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOp"
JWT = "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
FOLDER_KEY = "AKIA" + "IOSFODNN7EXAMPLE"
TOOL_PASSWORD = "S3cret" + "Pass9x"
SUMMARY_TOKEN = "npm_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
SECRETS = [TITLE_KEY, CONVERSATION_TOKEN, MESSAGE_TOKEN, JWT, FOLDER_KEY, TOOL_PASSWORD, SUMMARY_TOKEN]


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    clean_home(tmp_path, monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))


def _chatgpt(path: Path) -> Path:
    """One conversation: a key in its title, a token as its id and as a message's id."""
    mapping = {"root": {"id": "root", "message": None, "parent": None, "children": ["a"]}}
    for node, parent, role, text in (("a", "root", "user", f"my session cookie is {JWT}, is that bad?"),
                                     (f"msg-{MESSAGE_TOKEN}", "a", "assistant", "Yes: rotate it now.")):
        mapping[node] = {"id": node, "parent": parent, "children": [], "message": {
            "id": node, "author": {"role": role}, "create_time": 1_741_000_000.0 + len(mapping),
            "content": {"content_type": "text", "parts": [text]}, "recipient": "all", "metadata": {}}}
    mapping["a"]["children"] = [f"msg-{MESSAGE_TOKEN}"]
    conversation = {"title": f"Deploy notes for key-{TITLE_KEY}.txt", "create_time": 1_741_000_000.0,
                    "mapping": mapping, "current_node": f"msg-{MESSAGE_TOKEN}",
                    "conversation_id": f"conv-{CONVERSATION_TOKEN}"}
    path.mkdir(parents=True)
    (path / "conversations.json").write_text(json.dumps([conversation]), encoding="utf-8")
    return path / "conversations.json"


def _claude_code(projects: Path) -> Path:
    """One session run in a folder named with a key; a tool call with a password in its
    arguments; a summary (the session's title) with a token."""
    cwd = f"/home/u/proj-{FOLDER_KEY}"
    folder = projects / cwd.replace("/", "-")
    folder.mkdir(parents=True)
    base = {"isSidechain": False, "userType": "external", "cwd": cwd, "version": "1.0.71", "gitBranch": "main",
            "sessionId": "5e7a9c1b-0000-4a6b-8c0d-1e2f3a4b5c6d"}
    lines = [
        {"type": "summary", "summary": f"Rotate {SUMMARY_TOKEN} and reload", "leafUuid": "u3"},
        {**base, "parentUuid": None, "type": "user", "uuid": "u1", "timestamp": "2025-08-04T14:02:30.000Z",
         "message": {"role": "user", "content": "Load the dump into prod."}},
        {**base, "parentUuid": "u1", "type": "assistant", "uuid": "u2", "timestamp": "2025-08-04T14:02:35.000Z",
         "message": {"role": "assistant", "content": [
             {"type": "text", "text": "Loading it."},
             {"type": "tool_use", "id": "toolu_1", "name": "Bash",
              "input": {"command": f"mysql -u root -p{TOOL_PASSWORD} prod < dump.sql"}}]}},
        {**base, "parentUuid": "u2", "type": "user", "uuid": "u3", "timestamp": "2025-08-04T14:02:40.000Z",
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                  "content": "done"}]}},
    ]
    (folder / "5e7a9c1b-0000-4a6b-8c0d-1e2f3a4b5c6d.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    (folder / "notes.jsonl").write_text('{"not": "a session"}\n', encoding="utf-8")  # skipped, and said so
    return projects


def _leaks(root: Path, inputs: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and inputs not in path.parents:
            data = path.read_bytes()
            found += [f"{secret[:8]}… in {path.relative_to(root)}" for secret in SECRETS if secret.encode() in data]
    return found


def test_p6_no_secret_of_any_field_reaches_the_log_the_tree_or_the_terminal(tmp_path, capsys):
    inputs = tmp_path / "inputs"
    export, projects = _chatgpt(inputs / "chatgpt"), _claude_code(inputs / "projects")
    chat = tmp_path / "chat"
    assert main(["--demo", "import-chats", str(export), str(projects), "--yes", "--with-tools",
                 "--data-dir", str(chat)]) == 0
    said = capsys.readouterr()
    printed = said.out + said.err
    assert [secret[:8] for secret in SECRETS if secret in printed] == [], printed
    assert "key-[redacted].txt" in printed  # the preview, redacted
    assert "skipped " in printed and "-home-u-proj-[redacted]/notes.jsonl" in printed  # a file's folder, redacted

    with ChatStore.open(chat, writer=False) as store:
        logged = [store.message(i) for i in range(store.message_count)]
    texts = "\n".join(record.text for record in logged)
    assert 'ChatGPT conversation "Deploy notes for key-[redacted].txt"' in texts  # the title, redacted
    assert "in /home/u/proj-[redacted]" in texts  # the session's folder
    assert "mysql -u root -p[redacted] prod" in texts  # the tool call's arguments
    assert 'Claude Code session "Rotate [redacted] and reload"' in texts  # its summary
    assert all(CONVERSATION_TOKEN not in record.key and MESSAGE_TOKEN not in record.key for record in logged)
    assert all(CONVERSATION_TOKEN not in json.dumps(record.meta) for record in logged)
    assert _leaks(tmp_path, inputs) == []  # the log, the tree's summaries, the index, the home


def test_an_id_that_holds_a_secret_is_keyed_by_its_digest_and_an_import_again_adds_nothing(tmp_path, capsys):
    inputs = tmp_path / "inputs"
    export = _chatgpt(inputs / "chatgpt")
    chat = tmp_path / "chat"
    assert main(["--demo", "import-chats", str(export), "--yes", "--data-dir", str(chat)]) == 0
    assert main(["--demo", "import-chats", str(export), "--yes", "--data-dir", str(chat)]) == 0
    assert "nothing new to import (3 messages imported before)" in capsys.readouterr().out
    with ChatStore.open(chat, writer=False) as store:
        keys = [store.message(i).key for i in range(store.message_count)]
    assert len(keys) == 3 and all(key.startswith("chat:chatgpt:sha256-") for key in keys)
