"""`everchat agents`: the chat's agents and their states (R38).

When the chat runs on this computer it asks the running agents actor (found through
`run/supervisor.json`, as `everchat status` and `ops` find it), which knows the queue.
Otherwise it reads the transcripts (`agents/NAME/`) read-only (R5: no lock, no byte
written) and rebuilds the states from them, with `AgentBook.restore`, the code the
agents actor recovers with; a run the chat stopped in the middle of shows as
`interrupted` (the next start reports it failed, once).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

from everchat.frontends.cli.commands import EXIT_OK, CommandError
from everchat.frontends.cli.edge import say
from everchat.frontends.cli.safe_text import printable

__all__ = ["run_agents", "folder_agents", "live_agents"]


def folder_agents(chat: Path) -> list[dict]:
    """The rows from the transcripts alone: `{name, state, task, position}`."""
    from everchat.actors.agents.actor import AgentBook, unreadable
    from everchat.actors.folder import CorruptRecord, StoreError, Transcripts

    transcripts = Transcripts(chat, writer=False)
    book = AgentBook()
    try:
        for name in transcripts.names():
            try:
                records = transcripts.records(name)
            except CorruptRecord as error:  # P8: one line, and the other agents are listed
                say(f"everchat: warning: {unreadable(name, str(error))}")
                continue
            book.restore(name, [record.to_dict() for record in records])
    except StoreError as error:
        raise CommandError(str(error)) from None
    rows = book.rows()
    for row in rows:
        if row["state"] == "working":
            row["state"] = "interrupted"
    return rows


def live_agents(chat: Path, timeout: float = 3.0) -> list[dict] | None:
    """The running agents actor's rows, or None when no chat runs on this computer."""
    from everchat.transport import Node, TransportError, schema

    try:
        info = json.loads((chat / "run" / "supervisor.json").read_text())
    except (OSError, ValueError):
        return None
    pid, endpoint = info.get("pid"), info.get("endpoint")
    if info.get("host") != socket.gethostname() or not isinstance(pid, int) or not endpoint:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # a run file left by a chat that died
    except PermissionError:
        pass
    if info.get("transport") == "tcp":
        from everchat.actors.session.attached import NotAttachable, dial

        try:
            node = dial(chat, timeout=timeout).node
        except NotAttachable:
            return None
    else:
        where = endpoint
        if info.get("placement") == "processes":
            where = f"ipc://{chat / 'run' / 'agents.sock'}"
        node = Node(f"agents.{os.getpid()}")
        node.start()
        node.route("agents", where)
    try:
        return node.ask("agents", schema.ListAgents(), timeout=timeout).agents
    except TransportError:
        return None  # a chat without an agents actor (yet): the folder says what there is
    finally:
        node.stop()


def run_agents(args: argparse.Namespace) -> int:
    chat: Path = args.data_dir
    rows = live_agents(chat)
    if rows is None:
        rows = folder_agents(chat)
    if getattr(args, "json", False):
        print(json.dumps(rows))
        return EXIT_OK
    if not rows:
        print("no agents yet (in the terminal chat: /agent NAME TASK)")
        return EXIT_OK
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        place = f" ({row['position']} in line)" if row.get("position") else ""
        print(printable(f"{row['name'].ljust(width)}  {row['state']}{place}  {row['task']}"))
    return EXIT_OK
