"""The terminal chat's slash commands: parsing with usage errors, /help, completion.

`parse` turns a typed line into a `Send`, a `Command` or a `UsageError`: a wrong
command prints its usage and sends nothing, `//text` sends text that starts with a
slash. Pure: no terminal, no session.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Callable

from prompt_toolkit.completion import Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

from everchat.actors.hands import NAME_PATTERN

__all__ = ["COMMANDS", "Command", "CommandCompleter", "Send", "Spec", "UsageError", "agent_line", "help_lines",
           "parse"]


@dataclass(frozen=True)
class Send:
    """Text for the chat (R36): a new turn, or input joining the running one."""

    text: str


@dataclass(frozen=True)
class Command:
    """A slash command with its parsed arguments."""

    name: str
    args: tuple = ()


@dataclass(frozen=True)
class UsageError:
    """A command typed wrong: `text` says what and shows the usage. Nothing is sent."""

    text: str


@dataclass(frozen=True)
class Spec:
    name: str
    usage: str
    help: str
    read: Callable[[str], tuple] = field(repr=False)


class _Bad(ValueError):
    pass


def _none(rest: str) -> tuple:
    if rest:
        raise _Bad("takes no arguments")
    return ()


def _text(what: str) -> Callable[[str], tuple]:
    def read(rest: str) -> tuple:
        if not rest:
            raise _Bad(f"needs {what}")
        return (rest,)

    return read


def _whole(word: str, what: str, low: int) -> int:
    try:
        number = int(word, 10)
    except ValueError:
        raise _Bad(f"{what} is a whole number, not {word!r}") from None
    if number < low:
        raise _Bad(f"{what} is at least {low}, not {number}")
    return number


def _zoom(rest: str) -> tuple:
    words = rest.split()
    if not 1 <= len(words) <= 3:
        raise _Bad("needs an id, then optionally n and a page")
    first: int | str
    if words[0][:1].isalpha():
        if len(words) > 2:
            raise _Bad("an agent's name takes only a page")
        first = words[0]  # R35: zoom("Name"), an agent's transcript
        page = _whole(words[1], "the page", 1) if len(words) > 1 else 1
        return (first, 1, page)
    first = _whole(words[0], "the id", 0)
    n = _whole(words[1], "n", 1) if len(words) > 1 else 1
    page = _whole(words[2], "the page", 1) if len(words) > 2 else 1
    return (first, n, page)


def _agent(rest: str) -> tuple:
    name, _, task = rest.partition(" ")
    if not name or not task.strip():
        raise _Bad("needs a name and a task")
    if not NAME_PATTERN.fullmatch(name):
        raise _Bad(f"an agent's name starts with a letter, then letters, digits, - or _ (R38), not {name!r}")
    return (name, task.strip())


def _stop(rest: str) -> tuple:
    words = rest.split()
    if len(words) > 1:
        raise _Bad("takes at most an agent's name")
    return tuple(words)


def _goal(rest: str) -> tuple:
    return (rest,) if rest else ()


def _date(rest: str) -> tuple:
    words = rest.split()
    if len(words) != 1:
        raise _Bad("needs one message id")
    return (_whole(words[0], "the id", 0),)


def _help(rest: str) -> tuple:
    words = rest.split()
    if len(words) > 1:
        raise _Bad("takes at most one command name")
    return tuple(word.lstrip("/") for word in words)


COMMANDS: dict[str, Spec] = {
    spec.name: spec
    for spec in (
        Spec("help", "/help [COMMAND]", "these commands", _help),
        Spec("memory", "/memory", "the memory's status and the view the next turn starts from", _none),
        Spec("zoom", "/zoom ID [N] [PAGE]", "a line's two halves (N ≥ 2), or message ID whole (N = 1); /zoom NAME "
                                             "[PAGE]: agent NAME's transcript (R38)", _zoom),
        Spec("date", "/date ID", "the date and time of message ID", _date),
        Spec("note", "/note TEXT", "log TEXT as a note (a memory from before the chat)", _text("the note's text")),
        Spec("attach", "/attach PATH", "attach an image (PNG, JPEG, GIF, WebP) to your next message",
             _text("an image's path")),
        Spec("compact", "/compact", "wait until every pending summary is built", _none),
        Spec("stop", "/stop [NAME]", "end the running reply (kept, marked incomplete); also Ctrl-C. /stop NAME: "
                                     "end agent NAME's work (it reports that it was stopped)", _stop),
        Spec("agent", "/agent NAME TASK", "start an agent named NAME on TASK in the background, at once "
                                          "(also while a reply runs); it reports into the chat as [NAME] … (R38)",
             _agent),
        Spec("agents", "/agents", "the chat's agents and their states", _none),
        Spec("goal", "/goal [TEXT]", "send TEXT and keep working, turn after turn, until a check finds the goal "
                                     "met (at most 30 turns in a row); /goal alone shows the goal", _goal),
        Spec("halt", "/halt", "drop the goal (the running reply finishes; /stop stops it)", _none),
        Spec("status", "/status", "messages, memory, summaries, model and cache", _none),
        Spec("quit", "/quit", "leave (also Ctrl-D on an empty line, or Ctrl-C twice)", _none),
    )
}


def parse(line: str) -> Send | Command | UsageError | None:
    """What a typed line asks for. None for a blank line.

    `/name args` is a command; `//text` sends `/text`; anything else is sent as typed.
    """
    if not line.strip():
        return None
    if line.startswith("//"):
        return Send(line[1:])
    if not line.startswith("/"):
        return Send(line)
    head, _, rest = line[1:].partition(" ")
    spec = COMMANDS.get(head.strip())
    if spec is None:
        return UsageError(f"unknown command /{head.strip()} — /help lists the commands; "
                          f"//text sends text that starts with a slash")
    try:
        return Command(spec.name, spec.read(rest.strip()))
    except _Bad as error:
        return UsageError(f"/{spec.name} {error}. usage: {spec.usage}")


def agent_line(accepted) -> str:
    """What `/agent NAME TASK` answers the person once the agent exists (P15): started, or
    queued behind the agents already working (`agent_jobs`, R38)."""
    name = accepted.name
    if accepted.state == "queued":
        return (f"agent {name} is queued: as many agents as --agent-jobs allows work already; "
                f"it starts when one ends and reports into the chat as [{name}] …")
    if accepted.state == "accepted":  # a server's answer (`connect`): started, or queued
        return f"agent {name} is on its way (started, or queued behind others); it reports into the chat as [{name}] …"
    return f"agent {name} started; it reports into the chat as [{name}] …"


def help_lines(name: str | None = None) -> list[str]:
    """/help: every command with its usage, or one command's."""
    if name is not None:
        spec = COMMANDS.get(name)
        if spec is None:
            return [f"no command /{name}"]
        return [f"{spec.usage}  {spec.help}"]
    width = max(len(spec.usage) for spec in COMMANDS.values())
    lines = [f"{spec.usage.ljust(width)}  {spec.help}" for spec in COMMANDS.values()]
    lines.append("//TEXT".ljust(width) + "  send TEXT starting with a slash")
    lines.append("Enter sends; Esc Enter adds a line. What you type while a reply runs joins that turn.")
    return lines


class CommandCompleter(Completer):
    """Completes command names after `/`, command names after `/help`, paths after `/attach`."""

    def __init__(self) -> None:
        self._paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document, complete_event) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or text.startswith("//"):
            return
        if " " not in text:
            for name, spec in COMMANDS.items():
                if name.startswith(text[1:]):
                    yield Completion("/" + name, start_position=-len(text), display_meta=spec.help)
            return
        head, _, rest = text.partition(" ")
        if head == "/attach":
            yield from self._paths.get_completions(Document(rest, len(rest)), complete_event)
        elif head == "/help" and " " not in rest:
            for name in COMMANDS:
                if name.startswith(rest):
                    yield Completion(name, start_position=-len(rest))
