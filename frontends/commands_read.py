"""The read-only commands: `view`, `zoom`, `date`, `status`, `check`.

Each opens the chat folder as a reader (R5): no lock, no byte written, so it works
while the chat is open in another process, and sees what that process has logged.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from everchat.frontends.commands import EXIT_OK, UsageError, open_reader, parse_id

__all__ = ["run", "parse_zoom", "folder_status"]

_LINE_NAME = re.compile(r"^(\d+)\+(\d+)$")


def parse_zoom(id_text: str, n_text: str | None, page_text: str) -> tuple[int, int, int]:
    """`zoom ID [N] [--page P]`: ID is a message id or a view line's name (`40+8`)."""
    named = _LINE_NAME.match(id_text.strip())
    if named:
        if n_text is not None:
            raise UsageError(f"zoom {id_text} already names its line; drop the N")
        first, count = int(named[1]), int(named[2])
    else:
        first = parse_id(id_text)
        count = 1 if n_text is None else _whole(n_text, "N")
    return first, count, _whole(page_text, "--page")


def _whole(text: str, what: str) -> int:
    try:
        value = int(text, 10)
    except (TypeError, ValueError):
        raise UsageError(f"{what} is a whole number, not {text!r}") from None
    if value < 1:
        raise UsageError(f"{what} is at least 1, not {value}")
    return value


def folder_status(chat, path: Path) -> dict:
    """`status` from the folder alone: the log and the view as saved (R22)."""
    core = chat.status()
    return {
        "chat": str(path),
        "messages": core["messages"],
        "nodes": core["view_lines"],
        "view_bytes": core["view_bytes"],
        "view_budget": {"ceiling": core["ceiling"], "floor": core["floor"]},
        "view_shrinking": core["view_shrinking"],
        "compaction_view": {"lines": core["compaction_view_lines"], "bytes": core["compaction_view_bytes"]},
        # Built when the chat next runs (or by `everchat compact`): unbuilt view lines
        # and merges whose halves are built (R31).
        "pending": core["unbuilt_lines"] + core["ready_merges"],
        "pending_lines": core["unbuilt_lines"],
        "pending_merges": core["ready_merges"],
    }


def run(command: str, args: argparse.Namespace) -> int:
    zoom = parse_zoom(args.id, args.n, args.page) if command == "zoom" else None
    day = parse_id(args.id) if command == "date" else None
    from everchat.actors.chat import ZoomError

    with open_reader(args.data_dir) as chat:
        try:
            if command == "view":
                print(chat.render_view())
            elif command == "zoom":
                print(chat.zoom(*zoom))
            elif command == "date":
                print(chat.date(day))
            elif command == "status":
                print(json.dumps(folder_status(chat, args.data_dir), indent=2))
            elif command == "check":
                report = chat.store.check()
                chat.verify_views()
                print(json.dumps({"ok": True, **report}))
        except ZoomError as error:
            raise UsageError(str(error)) from None
    return EXIT_OK
