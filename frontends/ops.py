"""`everchat ops`: a live table of every actor's mailbox.

It finds the running supervisor through `<chat>/run/supervisor.json`, asks it for
statistics (`StatsRequest`), and redraws once a second; `--once --json` prints the
rows once, for scripts and tests.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from everchat.transport import KeyStore, Node, schema

__all__ = ["fetch_rows", "render_table", "run_ops"]

COLUMNS = (
    ("name", "actor", 14),
    ("host", "host", 10),
    ("pid", "pid", 7),
    ("depth", "depth", 6),
    ("handled", "handled", 8),
    ("errors", "errors", 6),
    ("p50_ms", "p50 ms", 7),
    ("p99_ms", "p99 ms", 7),
    ("restarts", "restarts", 8),
    ("last_type", "last message", 16),
)


class NoSupervisor(RuntimeError):
    """No Everchat is running on this chat folder."""


def fetch_rows(chat: Path, timeout: float = 5.0) -> list[dict]:
    info_path = chat / "run" / "supervisor.json"
    try:
        info = json.loads(info_path.read_text())
    except FileNotFoundError:
        raise NoSupervisor(f"no Everchat is running on {chat} (no {info_path})") from None
    keys = KeyStore(chat / "config") if info.get("transport") == "tcp" else None
    node = Node("ops", keys=keys)
    node.start()
    try:
        node.route("supervisor", info["endpoint"])
        reply = node.ask("supervisor", schema.StatsRequest(), timeout=timeout)
        return reply.actors
    finally:
        node.stop()


def render_table(rows: list[dict]) -> str:
    def cell(row: dict, key: str) -> str:
        value = row.get(key, "")
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value)

    head = " ".join(label.ljust(width) for _, label, width in COLUMNS)
    lines = [head, "-" * len(head)]
    for row in sorted(rows, key=lambda row: str(row.get("name"))):
        lines.append(" ".join(cell(row, key)[:width].ljust(width) for key, _, width in COLUMNS))
        if row.get("error"):
            lines.append(f"  ! {row['error']}")
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
