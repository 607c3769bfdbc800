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
    """The chat folder: `chat/` in Everchat's home (`$EVERCHAT_HOME`, else `~/.everchat`),
    beside its `config.toml`."""
    home = os.environ.get("EVERCHAT_HOME")
    return (Path(home) if home else Path.home() / ".everchat") / "chat"


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
    serve = commands.add_parser("serve", parents=[common], help="run the chat's actors until interrupted")
    serve.add_argument("--processes", action="store_true", help="every actor in its own process")
    serve.add_argument("--tcp", action="store_true", help="with --processes: tcp with CURVE keys instead of ipc")
    serve.add_argument("--workers", type=int, default=2, help="compactor workers, 1 to 8 (R31)")
    serve.add_argument("--remote", action="append", default=[], metavar="NAME",
                       help="an actor that joins from another host instead of being started here")
    actor = commands.add_parser("actor", parents=[common], help="run one actor that joins a running chat")
    actor.add_argument("name", help="e.g. compactor.3")
    actor.add_argument("--join", required=True, metavar="ENDPOINT", help="the supervisor's endpoint (tcp://HOST:PORT)")
    actor.add_argument("--bind", default="tcp://127.0.0.1:0", help="this actor's own endpoint")
    actor.add_argument("--keys", type=Path, default=None, help="the config folder holding this actor's CURVE key (keys/NAME.key)")
    actor.add_argument("--summarizer", default="configured", choices=["configured", "scripted"],
                       help="a compactor's summarizer: the configured model, or the scripted stand-in")
    ops = commands.add_parser("ops", parents=[common], help="a live table of every actor's mailbox")
    ops.add_argument("--once", action="store_true")
    ops.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    data_dir = getattr(args, "data_dir", None) or default_data_dir()
    if args.command is None:
        _parser().print_help()
        return 0
    from everchat.actors.chat import Chat, ZoomError
    from everchat.actors.store import BadInput, StoreError

    if args.command in ("serve", "actor", "ops"):
        return _run_actors(args, data_dir)
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


def _run_actors(args, data_dir: Path) -> int:
    import signal
    import threading

    stop = threading.Event()
    if args.command == "ops":
        from everchat.frontends.ops import NoSupervisor, run_ops

        try:
            return run_ops(data_dir, once=args.once, as_json=args.json)
        except NoSupervisor as error:
            print(f"everchat: {error}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.command == "actor":
        from everchat.actors.process import run_actor

        keys = args.keys or data_dir / "config"
        try:
            return run_actor(args.name, data_dir, args.join, args.bind, None, keys, stop, args.summarizer)
        except KeyboardInterrupt:
            return 0
    from everchat.actors.supervisor import Placement, Supervisor

    placement = Placement(
        mode="processes" if args.processes else "single",
        transport="tcp" if args.tcp else "ipc",
        workers=args.workers,
        remote=tuple(args.remote),
    )
    supervisor = Supervisor(data_dir, placement).start()
    print(f"everchat: serving {data_dir} ({placement.mode}, {placement.workers} workers) at {supervisor.node.endpoint}",
          flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        supervisor.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
