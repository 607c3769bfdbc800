"""The `everchat` command: one-shot commands on a chat folder.

Read-only commands (`view`, `status`, `zoom`, `date`, `check`) never take the
folder's lock and never write (R5), so they work while the chat is open
elsewhere. Errors become one line on stderr and exit status 1 (2 for usage).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

__all__ = ["main", "default_data_dir"]


def default_data_dir() -> Path:
    """`EVERCHAT_HOME` if set, else `~/.everchat/chat`."""
    home = os.environ.get("EVERCHAT_HOME")
    return Path(home) if home else Path.home() / ".everchat" / "chat"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS, help="the chat folder")
    parser = argparse.ArgumentParser(
        prog="everchat", description="One chat that never ends.", parents=[common]
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("view", parents=[common], help="print the view the next turn starts from")
    commands.add_parser("status", parents=[common], help="messages, view size and pending summaries as JSON")
    commands.add_parser("check", parents=[common], help="verify every record of the chat in one pass")
    zoom = commands.add_parser("zoom", parents=[common], help="a line's two halves, or a message whole")
    zoom.add_argument("id", type=int)
    zoom.add_argument("n", type=int, nargs="?", default=1)
    zoom.add_argument("--page", type=int, default=1)
    date = commands.add_parser("date", parents=[common], help="the date and time of a message")
    date.add_argument("id", type=int)
    note = commands.add_parser("note", parents=[common], help="log a note (a memory from before the chat)")
    note.add_argument("text")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    data_dir = getattr(args, "data_dir", None) or default_data_dir()
    if args.command is None:
        _parser().print_help()
        return 0
    from everchat.actors.chat import Chat, ZoomError
    from everchat.actors.store import BadInput, StoreError

    try:
        if args.command == "note":
            with Chat.open(data_dir, create=True) as chat:
                ids, _ = chat.add("note", args.text)
            print(f"logged message {ids[0]}" if len(ids) == 1 else f"logged messages {ids[0]}-{ids[-1]}")
            return 0
        with Chat.open(data_dir, writer=False) as chat:
            if args.command == "view":
                print(chat.render_view())
            elif args.command == "status":
                print(json.dumps(chat.status(), indent=2))
            elif args.command == "check":
                report = chat.store.check()
                chat.verify_views()
                print(json.dumps({"ok": True, **report}))
            elif args.command == "zoom":
                print(chat.zoom(args.id, args.n, args.page))
            elif args.command == "date":
                print(chat.date(args.id))
        return 0
    except (StoreError, ZoomError, BadInput) as error:
        print(f"everchat: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
