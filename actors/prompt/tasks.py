"""The texts a model call wraps its input in: a compaction's task (R28) and a turn's last
block (R36), written here and read back here.

A leaf: it imports nothing of Everchat but `actors.tree`. The writers (`compaction`,
`prompt`) and the reader (the offline demo model, `actors.demo`) both import it;
the demo model once imported `compaction` for `read_task`, and `compaction` imports
`models`, a circle (tests/test_boundaries.py checks there is none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from everchat.actors.tree import LINE_LIMIT

__all__ = [
    "RULER",
    "TASK_HEAD",
    "TURN_OPENING",
    "TaskInfo",
    "agent_command",
    "agent_request",
    "leaf_task",
    "merge_task",
    "read_agent_request",
    "read_task",
    "split_turn",
    "turn_text",
]

RULER = "-" * LINE_LIMIT
"""R28: exactly 512 `-` characters, the length a line may have."""

TASK_HEAD = "Compaction: "
"""How every task text begins (R28: the call says it is a compaction)."""

TURN_OPENING = "[turn]"
"""How every turn header begins (R36: the call says it is a turn)."""


# --- the task texts (R28) -----------------------------------------------------------


def leaf_task(first: int, text: str) -> str:
    """R28, a leaf: names the message, asks for one line within 512 bytes, shows the ruler,
    then the message's `kind: text` whole in `<input>`."""
    return (
        f"{TASK_HEAD}write the line for message {first} ({first}+1).\n"
        f"Compress the message in <input> into one line of at most {LINE_LIMIT} bytes of UTF-8. "
        f"The ruler below is exactly {LINE_LIMIT} bytes; your line must not be longer:\n"
        f"{RULER}\n<input>\n{text}\n</input>"
    )


def merge_task(first: int, count: int, left: str, right: str) -> str:
    """R28, a merge: names both halves, says the context may hold their messages in more
    detail, shows the ruler, then the two lines in `<input>`."""
    half = count // 2
    return (
        f"{TASK_HEAD}merge the lines {first}+{half} and {first + half}+{half} into one line for "
        f"{first}+{count}.\n"
        f"The <chat> above may hold their messages ({first} to {first + count - 1}) in more detail: use it to "
        f"judge what matters, but compress only the two lines in <input>. "
        f"Write one line of at most {LINE_LIMIT} bytes of UTF-8. "
        f"The ruler below is exactly {LINE_LIMIT} bytes; your line must not be longer:\n"
        f"{RULER}\n<input>\n{left}\n{right}\n</input>"
    )


@dataclass(frozen=True)
class TaskInfo:
    """What a task text asks: "leaf" or "merge", the node's name, the input lines."""

    kind: str
    name: str
    input: tuple[str, ...]


_TASK_NODE = re.compile(r"\((\d+)\+1\)\.\n|one line for (\d+\+\d+)\.\n")


def read_task(text: str) -> TaskInfo | None:
    """The task in `text` (a `leaf_task` or `merge_task`), or None. The demo model reads
    its compactions with this."""
    if not text.startswith(TASK_HEAD) or not text.endswith("\n</input>"):
        return None
    begin = text.find(f"{RULER}\n<input>\n")
    node = _TASK_NODE.search(text, 0, begin if begin >= 0 else len(text))
    if begin < 0 or node is None:
        return None
    body = text[begin + len(RULER) + len("\n<input>\n"):-len("\n</input>")]
    if node.group(1) is not None:
        return TaskInfo("leaf", f"{node.group(1)}+1", (body,))
    return TaskInfo("merge", node.group(2), tuple(body.split("\n", 1)))


# --- the turn's last block (R36) ----------------------------------------------------


def turn_text(header: str, message: str) -> str:
    """The last block of a turn's first request: the header, a blank line, the message."""
    return f"{header}\n\n{message}"


def split_turn(text: str) -> tuple[str, str] | None:
    """(header, message) of a `turn_text`, or None when `text` is not one."""
    if not text.startswith(TURN_OPENING):
        return None
    header, _, message = text.partition("\n\n")
    return header, message


# --- asking for an agent (R38) ------------------------------------------------------


_AGENT_REQUEST = re.compile(r"Start an agent named ([A-Za-z][A-Za-z0-9_-]*) with this task: (.+)", re.S)
"""R38: a name starts with a letter (`actors/hands/__init__.py` checks the rest: its length)."""


def agent_request(name: str, task: str) -> str:
    """The message the terminal's `/agent NAME TASK` sends: the person asking for an agent
    (R38: agents start only when the user asks)."""
    return f"Start an agent named {name} with this task: {task}"


def agent_command(name: str, task: str) -> str:
    """`/agent NAME TASK` as the chat logs it once the agent is started (P15): the person's
    own words, which no model reads as a request (the agent exists already)."""
    return f"/agent {name} {task.strip()}"


def read_agent_request(text: str) -> tuple[str, str] | None:
    """(name, task) of an `agent_request`, or None when `text` is not one. The demo model
    reads the person's message with this."""
    match = _AGENT_REQUEST.fullmatch(text.strip())
    if match is None or not match.group(2).strip():
        return None
    return match.group(1), match.group(2).strip()
