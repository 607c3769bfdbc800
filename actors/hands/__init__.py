"""The model's hands (R38, R39; docs/HANDS.md §2): the agent and device tools, and the
client that runs them by asking the `agents` and `devices` actors.

Every call of a chat offers the same tools in the same order (R26, R34, R45): turns,
agents and compactions share one cache entry. So an agent is offered `spawn` too, and its
call is refused in words the model reads. `--tools off` drops the device tools for a whole
run, never within one (R34).

`HandTools` is what a turn runner or an agent hands its `TurnIO.tool`: memory tools go to
`MemoryTools`; `search`/`fetch` run right here (read-only, network only: actors/hands/web.py);
`spawn`/`tell` become `SpawnAgent`/`TellAgent` asks; `shell`, `read`,
`write`, `edit` become a `RunJob` whose id is the tool result's own idempotency key, so
a job asked again is never run twice (R39).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from everchat.actors.zoom import ToolOutcome
from everchat.actors.models import ToolSpec
from everchat.actors.hands.web import WEB_TOOL_NAMES, WEB_TOOLS, WebTools

__all__ = [
    "AGENT_TOOLS",
    "DEVICE_TOOLS",
    "HAND_TOOL_NAMES",
    "MAIN",
    "NAME_PATTERN",
    "HandTools",
    "check_agent_name",
    "hand_tools",
    "web_for",
]

MAIN = "main"
"""The caller name of the chat's own turns (an agent's is its name)."""

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
"""R38: an agent's name starts with a letter; short, and safe as a folder name."""

JOB_SECONDS = 600.0
"""R39 (issue 11): a shell job's default timeout, and the longest a job may take."""

_ASK_MARGIN = 30.0


def check_agent_name(name: Any) -> str:
    """R38: the name, or ValueError saying what a name must be."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"an agent's name starts with a letter and has at most 40 letters, digits, '-' or '_': "
                         f"{name!r} is not one")
    return name


_DEVICE = {"type": "string", "description": "The computer to run on, as the turn header lists it "
                                            "(default: the one running Everchat)."}

SPAWN_TOOL = ToolSpec(
    name="spawn",
    description=(
        "Start a subagent: a fresh call that gets the view and then `task`, works in the background with "
        "your tools, and reports once, as a `work` message `[name] …`. Only when the person asks for agents. "
        "Names are permanent and start with a letter."
    ),
    schema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "A new name: a letter, then letters, digits, - or _."},
            "task": {"type": "string", "description": "What the agent should do and report."},
        },
        "required": ["name", "task"],
        "additionalProperties": False,
    },
)

TELL_TOOL = ToolSpec(
    name="tell",
    description=(
        "Send text to an agent: a working one reads it between its tool calls; a finished one goes on "
        "from its transcript and reports again."
    ),
    schema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The agent's name."},
            "text": {"type": "string", "description": "What to tell it."},
        },
        "required": ["name", "text"],
        "additionalProperties": False,
    },
)

SHELL_TOOL = ToolSpec(
    name="shell",
    description=(
        "Run a shell command (/bin/sh -c) on a computer, in its work folder, and return its output and exit "
        "status. Long output keeps its start and end."
    ),
    schema={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line."},
            "device": _DEVICE,
            "timeout": {"type": "number", "minimum": 1, "maximum": JOB_SECONDS,
                        "description": "Seconds before the command and everything it started are killed "
                                       "(default 600)."},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)

READ_TOOL = ToolSpec(
    name="read",
    description="Read a text file on a computer; a relative path is in the work folder. Long files come in parts.",
    schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file's path."},
            "device": _DEVICE,
            "offset": {"type": "integer", "minimum": 0, "description": "The first line to read (0 = the first)."},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines at most."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
)

WRITE_TOOL = ToolSpec(
    name="write",
    description="Write a whole file on a computer (made with its folders if missing); answers with the diff.",
    schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file's path."},
            "content": {"type": "string", "description": "The file's new content, whole."},
            "device": _DEVICE,
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
)

EDIT_TOOL = ToolSpec(
    name="edit",
    description="Replace text in a file on a computer: `old` must occur exactly once. Answers with the diff.",
    schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file's path."},
            "old": {"type": "string", "description": "The text to replace: it must occur exactly once."},
            "new": {"type": "string", "description": "The text to put in its place."},
            "device": _DEVICE,
        },
        "required": ["path", "old", "new"],
        "additionalProperties": False,
    },
)

AGENT_TOOLS = (SPAWN_TOOL, TELL_TOOL)
DEVICE_TOOLS = (SHELL_TOOL, READ_TOOL, WRITE_TOOL, EDIT_TOOL)
HAND_TOOL_NAMES = frozenset(spec.name for spec in AGENT_TOOLS + DEVICE_TOOLS)


def hand_tools(devices: bool = True, web: bool = True) -> tuple[ToolSpec, ...]:
    """The tools after the memory tools, in the order every call sends them: the web tools
    (unless the run has search off; with tools off too), the agent tools, then (unless the
    run has tools off) the device tools."""
    return (WEB_TOOLS if web else ()) + AGENT_TOOLS + (DEVICE_TOOLS if devices else ())


def web_for(settings) -> WebTools | None:
    """The run's `search` and `fetch` (None when the run has search off)."""
    if not settings.web:
        return None
    return WebTools.from_environment(allow_local=settings.allow_local_fetch == "on")


class HandTools:
    """Runs a call's tools for `caller` ("main", or an agent's name).

    `ask(target, msg, timeout)` sends an ask (a node's, or a session's retrying one);
    `memory(name, arguments)` answers zoom and date. `devices`: whether this run offers the
    device tools. `extra`: handlers of other tools by name (the single placement's Python
    callables). `web`: the run's `WebTools` (None: search is off)."""

    def __init__(self, ask: Callable, memory: Callable[[str, dict], ToolOutcome], caller: str = MAIN, *,
                 devices: bool = True, extra: dict | None = None, web: WebTools | None = None) -> None:
        self._ask = ask
        self._memory = memory
        self.caller = caller
        self.devices = devices
        self.extra = dict(extra or {})
        self.web = web

    def call(self, name: str, arguments: dict, key: str) -> ToolOutcome:
        """The tool's outcome; a refusal or a failure is an error outcome the model reads."""
        from everchat.transport import TransportError, schema

        try:
            if name in self.extra:
                result = self.extra[name](arguments)
                return result if isinstance(result, ToolOutcome) else ToolOutcome(str(result))
            if name in WEB_TOOL_NAMES:
                if self.web is None:
                    return ToolOutcome(f"{name} is not available: this chat runs with search off.", is_error=True)
                return self.web.call(name, arguments)
            if name in ("spawn", "tell"):
                return self._agents(name, arguments, key, schema)
            if name in ("shell", "read", "write", "edit"):
                if not self.devices:
                    return ToolOutcome(f"{name} is not available: this chat runs with its tools off.", is_error=True)
                return self._job(name, arguments, key, schema)
        except TransportError as error:
            return ToolOutcome(f"{name} failed: {_reason(error)}", is_error=True)
        except (ValueError, TypeError) as error:
            return ToolOutcome(f"{name}: {error}", is_error=True)
        return self._memory(name, arguments)

    def _agents(self, name: str, arguments: dict, key: str, schema) -> ToolOutcome:
        if name == "spawn" and self.caller != MAIN:
            return ToolOutcome("spawn is refused: agents cannot start agents (R38). Do the work yourself, "
                               "or say in your report what should be started.", is_error=True)
        _only(arguments, name, ("name", "task") if name == "spawn" else ("name", "text"))
        agent = check_agent_name(arguments.get("name"))
        if name == "spawn":
            msg = schema.SpawnAgent(name=agent, task=_text(arguments, "task"), key=key)
        else:
            if agent == self.caller:
                return ToolOutcome("tell is refused: an agent cannot tell itself.", is_error=True)
            msg = schema.TellAgent(name=agent, text=_text(arguments, "text"), key=key)
        answer = self._ask("agents", msg, _ASK_MARGIN)
        detail = f" {answer.detail}" if answer.detail else ""
        return ToolOutcome(f"{answer.name}: {answer.state}.{detail}")

    def _job(self, name: str, arguments: dict, key: str, schema) -> ToolOutcome:
        device = arguments.get("device", "")
        if not isinstance(device, str):
            raise ValueError("device is a computer's name (a string)")
        rest = {k: v for k, v in arguments.items() if k != "device"}
        timeout = rest.get("timeout", JOB_SECONDS) if name == "shell" else JOB_SECONDS
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 1 <= timeout <= JOB_SECONDS:
            raise ValueError(f"timeout is a number of seconds from 1 to {JOB_SECONDS:g}")
        msg = schema.RunJob(job=key, device=device, tool=name, arguments=rest, caller=self.caller,
                            timeout=float(timeout))
        answer = self._ask("devices", msg, float(timeout) + _ASK_MARGIN)
        return ToolOutcome(answer.text, is_error=answer.is_error)


def _only(arguments: dict, tool: str, names: tuple[str, ...]) -> None:
    extra = sorted(set(arguments) - set(names))
    if extra:
        raise ValueError(f"{tool} takes {', '.join(names)}; not {', '.join(extra)}")


def _text(arguments: dict, field: str) -> str:
    value = arguments.get(field)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} is a text that is not empty")
    return value


def _reason(error: Exception) -> str:
    """A refusal from the actor reads as its own words; anything else names its type."""
    from everchat.transport import RemoteError

    if isinstance(error, RemoteError):
        return error.text
    return f"{type(error).__name__}: {error}"
