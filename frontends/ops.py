"""`everchat ops`: a live table of every actor's mailbox.

It finds the running supervisor through `<chat>/run/supervisor.json`, asks it for
statistics (`StatsRequest`), and redraws once a second; `--once --json` prints the
rows once, for scripts and tests. The agents actor's row also carries its queue (R38):
how many agents work and which wait.

It only reads (P12, R5): it binds nothing, and on a tcp placement it dials with the
supervisor's own key pair (`config/keys/supervisor.key`, read with `KeyStore.load`): a key
the chat already authorized, so no key is made and `authorized_keys` is left as it is. Only
the chat's owner can read that file (0600), as only the owner reaches the ipc sockets.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from everchat.transport import KeyStore, Node, TransportError, schema

__all__ = ["NoSupervisor", "fetch_rows", "render_table", "run_ops"]

# (row key, column label, minimum width); "dropped" sums the drop counters
COLUMNS = (
    ("name", "actor", 14),
    ("host", "host", 10),
    ("pid", "pid", 7),
    ("depth", "depth", 6),
    ("handled", "handled", 8),
    ("errors", "errors", 6),
    ("dropped", "dropped", 7),
    ("p50_ms", "p50 ms", 7),
    ("p99_ms", "p99 ms", 7),
    ("restarts", "restarts", 8),
    ("last_type", "last message", 16),
)
DROPS = ("dropped_bad", "dropped_late", "dropped_full", "refused")


class NoSupervisor(RuntimeError):
    """No Everchat is running on this chat folder."""


def fetch_rows(chat: Path, timeout: float = 5.0) -> list[dict]:
    """The supervisor's statistics rows (one per actor, one "gateway" per process).
    NoSupervisor when no Everchat runs on `chat`: no run file, a run file whose process
    is gone (left by a crash), or a supervisor that does not answer."""
    info_path = chat / "run" / "supervisor.json"
    try:
        info = json.loads(info_path.read_text())
    except FileNotFoundError:
        raise NoSupervisor(f"no Everchat is running on {chat} (no {info_path})") from None
    except ValueError:
        raise NoSupervisor(f"{info_path} is not a run file; is an Everchat running on {chat}?") from None
    pid, host = info.get("pid"), info.get("host")
    if host == socket.gethostname() and isinstance(pid, int) and not _alive(pid):
        raise NoSupervisor(f"no Everchat is running on {chat}: {info_path} names pid {pid}, "
                           "which is gone (a crash left the file)")
    pair = None
    if info.get("transport") == "tcp":
        try:
            pair = KeyStore(chat / "config").load("supervisor")
        except TransportError as error:
            raise NoSupervisor(f"the Everchat on {chat} (pid {pid} on {host}) serves over tcp, and its key "
                               f"cannot be used: {error}") from None
    node = Node("ops", pair=pair)
    node.start()
    try:
        node.route("supervisor", info["endpoint"])
        reply = node.ask("supervisor", schema.StatsRequest(), timeout=timeout)
        rows = reply.actors
        _add_agent_queue(node, chat, info, rows, timeout)
        return rows
    except TransportError as error:
        raise NoSupervisor(f"the Everchat on {chat} (pid {pid} on {host}) did not answer: {error}") from None
    finally:
        node.stop()


def _add_agent_queue(node: Node, chat: Path, info: dict, rows: list[dict], timeout: float) -> None:
    """R38: the agents actor's row gets its queue: `working` (how many) and `queued` (the
    names waiting, in order). Asked over ipc only (the agents actor's own socket when each
    actor has its process, else the supervisor's); a chat without agents keeps its rows."""
    row = next((row for row in rows if row.get("name") == "agents"), None)
    if row is None or info.get("transport") == "tcp":
        return
    where = info["endpoint"]
    if info.get("placement") == "processes":
        where = f"ipc://{chat / 'run' / 'agents.sock'}"
    try:
        node.route("agents", where)
        agents = node.ask("agents", schema.ListAgents(), timeout=timeout).agents
    except TransportError as error:
        row["queue_error"] = str(error)
        return
    row["working"] = sum(1 for agent in agents if agent.get("state") == "working")
    row["queued"] = [agent["name"] for agent in sorted(agents, key=lambda a: a.get("position", 0))
                     if agent.get("state") == "queued"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True   # someone else's process: it exists
    return True


def render_table(rows: list[dict]) -> str:
    """The table `everchat ops` draws: one line per row, sorted by actor name, columns as
    wide as their widest cell (names are never cut: eight compactors stay apart). A
    process's gateway row reads `gateway@<node>`; a row with an error gets a `!` line."""
    def cell(row: dict, key: str) -> str:
        if key == "name" and row.get("name") == "gateway":
            return f"gateway@{row.get('node', '?')}"
        if key == "dropped":
            drops = [row.get(name) for name in DROPS]
            return str(sum(drops)) if all(isinstance(n, int) for n in drops) else "-"
        value = row.get(key, "")
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value)

    ordered = sorted(rows, key=lambda row: (str(row.get("name")) == "gateway", cell(row, "name")))
    cells = [[cell(row, key) for key, _, _ in COLUMNS] for row in ordered]
    widths = [max([width, len(label)] + [len(line[n]) for line in cells])
              for n, (_, label, width) in enumerate(COLUMNS)]
    head = " ".join(label.ljust(width) for (_, label, _), width in zip(COLUMNS, widths)).rstrip()
    lines = [head, "-" * len(head)]
    for row, line in zip(ordered, cells):
        lines.append(" ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip())
        if row.get("error"):
            lines.append(f"  ! {row['error']}")
        if "queued" in row:  # the agents actor's queue (R38)
            waiting = ", ".join(row["queued"]) or "none"
            lines.append(f"  agents: {row.get('working', 0)} working; queued: {waiting}")
    return "\n".join(lines)


def run_ops(chat: Path, once: bool, as_json: bool, interval: float = 1.0) -> int:
    while True:
        rows = fetch_rows(chat)
        if as_json:
            print(json.dumps(rows), flush=True)
        else:
            if not once:
                sys.stdout.write("\x1b[H\x1b[2J")
            print(render_table(rows), flush=True)
        if once:
            return 0
        time.sleep(interval)
