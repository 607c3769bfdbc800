"""The read-only commands: `view`, `zoom`, `date`, `status`, `check`.

Each opens the chat folder as a reader (R5): no lock, no byte written, so it works
while the chat is open in another process, and sees what that process has logged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from everchat.frontends.cli.commands import EXIT_OK, CommandError, UsageError, open_reader, parse_id
from everchat.frontends.cli.safe_text import printable

__all__ = ["run", "parse_zoom", "folder_status", "live_status"]

_LINE_NAME = re.compile(r"^(\d+)\+(\d+)$")


def parse_zoom(id_text: str, n_text: str | None, page_text: str) -> tuple[int | str, int, int]:
    """`zoom ID [N] [--page P]`: ID is a message id, a view line's name (`40+8`), or an
    agent's name (R35's zoom("Name"): it starts with a letter)."""
    if id_text[:1].isalpha():
        if n_text is not None:
            raise UsageError(f"zoom {id_text} names an agent's transcript; it takes no N")
        return id_text, 1, _whole(page_text, "--page")
    named = _LINE_NAME.match(id_text.strip())
    if named:
        if n_text is not None:
            raise UsageError(f"zoom {id_text} already names its line; drop the N")
        first, count = int(named[1]), int(named[2])
    else:
        first = parse_id(id_text)
        count = 1 if n_text is None else _whole(n_text, "N")
    page = _whole(page_text, "--page")
    if count > 1 and page != 1:
        raise UsageError(f"--page pages a whole message (N = 1); zoom {first}+{count} shows two lines "
                         "and has no pages")
    return first, count, page


def _whole(text: str, what: str) -> int:
    try:
        value = int(text, 10)
    except (TypeError, ValueError):
        raise UsageError(f"{what} is a whole number, not {text!r}") from None
    if value < 1:
        raise UsageError(f"{what} is at least 1, not {value}")
    return value


class _StoreReader:
    """`turns.MemoryReader` over the read-only store."""

    def __init__(self, store) -> None:
        self.store = store

    def count(self) -> int:
        return self.store.message_count

    def message(self, i: int):
        return self.store.message(i)

    def node(self, l: int, i: int) -> str | None:  # noqa: E741
        return self.store.node(l, i)

    def asset(self, digest: str) -> bytes:
        return self.store.asset(digest)


def _transcript(chat, agent: str, page: int) -> str:
    """R35: zoom("Name") with the model's own tool code, so the words are the same; the
    transcript (`agents/NAME/`) is read read-only (R5)."""
    from everchat.actors.agents.actor import no_agent, page_text, unreadable
    from everchat.actors.zoom import MemoryTools, ZoomError
    from everchat.actors.folder import BadInput, CorruptRecord, NoTranscript, Transcripts

    transcripts = Transcripts(chat.store.path, writer=False)

    def read(name: str, number: int) -> str:
        try:
            text, pages = transcripts.page(name, number)
        except NoTranscript:
            raise ZoomError(no_agent(name)) from None
        except BadInput as error:
            raise ZoomError(str(error)) from None
        except CorruptRecord as error:  # P8: said as the model's zoom says it
            raise ZoomError(unreadable(name, str(error))) from None
        return page_text(name, text, number, pages)

    return MemoryTools(_StoreReader(chat.store), agents=read).transcript(agent, page)


def folder_status(chat, path: Path) -> dict:
    """`status` from the folder alone: the log and the view as saved (R22). `nodes` is
    the tree's built nodes (its node records, R12: what `check` counts), `view_lines` the
    lines of the view the next turn starts from (R14); a live chat's figures under `live`
    carry the same names with the same meaning."""
    core = chat.status()
    return {
        "chat": str(path),
        "messages": core["messages"],
        "nodes": chat.store.node_count,
        "view_lines": core["view_lines"],
        "view_bytes": core["view_bytes"],
        "view_budget": {"ceiling": core["ceiling"], "floor": core["floor"]},
        "view_shrinking": core["view_shrinking"],
        "compaction_view": {"lines": core["compaction_view_lines"], "bytes": core["compaction_view_bytes"]},
        # Built when the chat next runs (or by `everchat compact`): unbuilt view lines
        # and merges whose halves are built (R31).
        "pending": core["unbuilt_lines"] + core["ready_merges"],
        "pending_lines": core["unbuilt_lines"],
        "pending_merges": core["ready_merges"],
        **_usage(path),
    }


def _usage(path: Path) -> dict:
    """`failures` (failed compaction calls, R30) and `usage` (tokens of every run: input,
    output, cache reads and writes, calls; with the turns' and compactions' shares), as
    the chat's log writer saved them in usage.json (actors/folder/usage.py)."""
    from everchat.actors.folder.usage import load_usage

    try:
        totals = load_usage(path)
    except ValueError as error:
        raise CommandError(str(error)) from None
    whole = totals.total().to_dict()
    failures = whole.pop("failures")
    usage = {**whole, **{role: totals.role(role).to_dict() for role in ("turns", "compactions")}}
    return {"failures": failures, "usage": usage}


def live_status(chat: Path, timeout: float = 3.0) -> dict:
    """What only a running chat knows: the turn runner's model, running turn and token
    usage this run (cache reads included), and the planner's figures as they stand now.

    It finds the chat through `run/supervisor.json` (as `everchat ops` does) and asks
    over the supervisor's socket, which only reads. {"running": False} when no chat is
    running here. A tcp placement is asked when it is a server's (issue 10), the way a
    client attaches to it (`attach.dial`: with the supervisor's own key pair, so no key
    is written into the chat's config folder); a one-shot command's is not asked."""
    import socket

    from everchat.transport import Node, schema

    try:
        info = json.loads((chat / "run" / "supervisor.json").read_text())
    except (OSError, ValueError):
        return {"running": False}
    pid, endpoint = info.get("pid"), info.get("endpoint")
    if info.get("host") != socket.gethostname() or not isinstance(pid, int) or not endpoint:
        return {"running": False}
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return {"running": False}  # a run file left by a chat that died
    except PermissionError:
        pass
    live: dict = {"running": True, "pid": pid, "placement": info.get("placement")}
    if info.get("transport") == "tcp":
        from everchat.actors.session.attached import NotAttachable, dial

        try:
            node = dial(chat, timeout=timeout).node  # routed to every actor through the supervisor
        except NotAttachable:
            return live
        except Exception as error:  # the server answered, then failed us: say so, with what we know
            live["supervisor_error"] = str(error)
            return live
    else:
        routes = {name: endpoint for name in ("planner", "turn_runner")}
        if info.get("placement") == "processes":  # each actor listens on its own socket beside the run file
            routes = {name: f"ipc://{chat / 'run' / (name + '.sock')}" for name in routes}
        node = Node(f"status.{os.getpid()}")
        node.start()
        for name, where in routes.items():
            node.route(name, where)
    try:
        try:
            turn = node.ask("turn_runner", schema.TurnStatus(), timeout=timeout)
            live.update(model=turn.model, turn=turn.turn, usage=turn.usage)
        except Exception as error:  # the figures that came stay; say what did not
            live["turn_runner_error"] = str(error)
        try:
            planner = node.ask("planner", schema.PlannerStatus(), timeout=timeout).status
            live.update(messages=planner["messages"], view_lines=planner["view_lines"],
                        view_bytes=planner["view_bytes"],
                        pending=planner["unbuilt_lines"] + planner["ready_merges"],
                        pending_lines=planner["unbuilt_lines"], pending_merges=planner["ready_merges"],
                        running_compactions=planner["running"])
        except Exception as error:
            live["planner_error"] = str(error)
    finally:
        node.stop()
    return live


def run(command: str, args: argparse.Namespace) -> int:
    zoom = parse_zoom(args.id, args.n, args.page) if command == "zoom" else None
    day = parse_id(args.id) if command == "date" else None
    from everchat.actors.session.local import ZoomError
    from everchat.actors.tree import PlannerError

    with open_reader(args.data_dir) as chat:
        try:
            # P20: stored text is printed with its control characters made visible.
            if command == "view":
                print(printable(chat.render_view()))
            elif command == "zoom" and isinstance(zoom[0], str):
                print(printable(_transcript(chat, zoom[0], zoom[2])))
            elif command == "zoom":
                print(printable(chat.zoom(*zoom)))
            elif command == "date":
                print(printable(chat.date(day)))
            elif command == "status":
                figures = folder_status(chat, args.data_dir)
                live = live_status(args.data_dir)
                # A running chat's turn runner adds its model and this run's usage under `live`.
                figures["model"] = live.pop("model", None)
                figures["live"] = live
                print(json.dumps(figures, indent=2))
            elif command == "check":
                report = chat.check()
                print(json.dumps({"ok": True, **report}))
        except ZoomError as error:
            raise UsageError(str(error)) from None
        except PlannerError as error:  # P9: T7, P1: merge records that do not fold (R25)
            raise CommandError(f"the merge records in {args.data_dir / 'tree'} do not fold into a view: {error}") \
                from None
    return EXIT_OK
