"""The `everchat` command: the terminal chat, one-shot commands, and the actors' hosts.

    everchat [OPTIONS] [COMMAND] [ARGS] [OPTIONS]

Options go before or after the command. `--data-dir` picks the chat folder (default
`chat/` in `$EVERCHAT_HOME`, else `~/.everchat/chat`); `--demo` forces the offline
models; the model flags (`--reply-model` …) override the environment and config.toml;
`--connection subscription --cli claudecode|codex` sends every call through that CLI's own
login instead of an API key (issue 13).

`everchat` alone, or `everchat chat`, opens the terminal chat. `view`, `zoom`, `date`,
`status` and `check` are read-only: they never take the folder's lock and never write
(R5), so they work while the chat is open elsewhere. Exit status: 0 done, 1 failed
(no chat here, the chat is locked, a model failed), 2 wrong arguments (nothing changed),
130 interrupted. Errors are one line on stderr, `everchat: …`; warnings read
`everchat: warning: …`. An error nobody foresaw is `everchat: internal error: …`, its
traceback appended to `logs/errors.log` in Everchat's home (frontends/cli/edge.py). Stored
text is printed with its control characters made visible (frontends/cli/safe_text.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from everchat.frontends.cli.commands import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CommandError, UsageError
from everchat.frontends.cli.edge import person_logging, say, write_details

__all__ = ["main", "default_data_dir"]

# command name -> its one line of help
_COMMANDS = {
    "chat": "the terminal chat (the default when no command is given)",
    "ask": "send one message, print the reply, wait for its summaries, exit",
    "note": "log a note (a memory from before the chat)",
    "import": "log a UTF-8 text file as consecutive notes and summarize them as it goes (resumable)",
    "import-chats": "import past chats from ChatGPT, Claude, Claude Code and Codex (secrets redacted, resumable)",
    "view": "print the view the next turn starts from (read-only)",
    "zoom": "a line's two halves, a message whole, or an agent's transcript (read-only, R35)",
    "agents": "the chat's agents and their states (read-only, R38)",
    "date": "the date and time of a message (read-only)",
    "status": "messages, view size, pending summaries, failed compactions, token usage, as JSON (read-only)",
    "check": "verify every record of the chat in one pass (read-only)",
    "compact": "build every pending summary, then exit",
    "backup": "a consistent snapshot of the chat into a ZIP, while it runs or not (read-only; keys only with --with-keys)",
    "restore": "a backup ZIP into a new or empty --data-dir, every sum and the check passed first",
    "repair": "rebuild what is derived from the log (index, views), set unreadable files aside; never edits the log",
    "setup": "choose the connection and models, check them, save config.toml (keys stay in the environment)",
    "serve": "run the chat's actors until interrupted",
    "web": "serve the chat to a browser on this computer (docs/WEB.md)",
    "actor": "run one actor that joins a running chat",
    "ops": "a live table of every actor's mailbox",
    "device": "add, join or remove another computer the chat's tools can use (docs/HANDS.md §5)",
    "devices": "the computers joined to the chat, online or not",
}


_EPILOG = """\
examples:
  everchat --demo ask 'Remember amber-42.'      one turn with the offline models
  everchat --connection subscription --cli claudecode ask 'hi'
                                                through Claude Code, logged in (no API key)
  everchat import notes.txt                     run it again after an interruption
  everchat zoom 40+8                            the two halves of the view line 40+8
  everchat status --data-dir ~/other-chat       options go before or after the command

exit status: 0 done, 1 failed, 2 wrong arguments (nothing changed), 130 interrupted
"""


def default_data_dir() -> Path:
    """The chat folder: `chat/` in Everchat's home (`$EVERCHAT_HOME`, else `~/.everchat`),
    beside its `config.toml`."""
    home = os.environ.get("EVERCHAT_HOME")
    return (Path(home) if home else Path.home() / ".everchat") / "chat"


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so `main` returns its status."""

    def error(self, message: str):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _common() -> argparse.ArgumentParser:
    from everchat.actors.settings import add_arguments

    common = _Parser(add_help=False)
    # SUPPRESS: a subcommand's default must not erase a flag given before the command.
    common.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS,
                        help="the chat folder (default $EVERCHAT_HOME/chat, else ~/.everchat/chat)")
    common.add_argument("--processes", action="store_true", default=argparse.SUPPRESS,
                        help="every actor in its own OS process (chat, ask, compact, serve)")
    add_arguments(common, suppress=True)
    return common


def _parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _Parser(prog="everchat", description="One chat that never ends.", parents=[common],
                     epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[common], help=_COMMANDS[name], description=_COMMANDS[name])

    command("chat")
    ask = command("ask")
    ask.add_argument("message")
    ask.add_argument("--image", action="append", default=[], type=Path, metavar="PATH",
                     help="attach an image (PNG, JPEG, GIF, WebP; at most 5 MB, R9); repeatable")
    ask.add_argument("--no-wait", action="store_true",
                     help="exit after the reply without waiting for its summaries")
    ask.add_argument("--goal", action="store_true",
                     help="make MESSAGE the chat's goal: keep working, turn after turn, until a check finds it met "
                          "or 30 turns in a row (docs/GOALS.md); exit 0 when met")
    note = command("note")
    note.add_argument("text", help="the note; - reads it from stdin")
    imp = command("import")
    imp.add_argument("file", type=Path)
    imp.add_argument("--log-only", action="store_true",
                     help="log the notes without the model (fast, offline); their summaries are built when the "
                          "chat next runs or by `everchat compact`, and a big import summarized later leaves "
                          "the view over its budget until the next messages fit it")
    from everchat.frontends.cli.import_chats import add_arguments as add_import_chats_arguments

    add_import_chats_arguments(command("import-chats"))
    command("view")
    zoom = command("zoom")
    zoom.add_argument("id", help="a message id, a view line's name such as 40+8, or an agent's NAME (its "
                                 "transcript, R38)")
    zoom.add_argument("n", nargs="?", default=None, help="how many messages the line covers (a power of two)")
    zoom.add_argument("--page", default="1", help="the page of a long message (R35)")
    date = command("date")
    date.add_argument("id")
    command("status")
    agents = command("agents")
    agents.add_argument("--json", action="store_true", help="one JSON list of {name, state, task, position}")
    command("check")
    compact = command("compact")
    compact.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    command("repair")
    from everchat.frontends.cli.backup import add_arguments as add_backup_arguments

    add_backup_arguments(command("backup"), command("restore"))
    command("setup")
    serve = command("serve")
    serve.add_argument("--tcp", action="store_true",
                       help="listen on tcp with CURVE keys instead of ipc: every actor's process with --processes, "
                            "else the chat's one process (for actors that join with `everchat actor … --join`)")
    serve.add_argument("--listen", default=None, metavar="ADDRESS",
                       help="with --tcp: the address other hosts dial to reach the actors (default 127.0.0.1)")
    serve.add_argument("--workers", type=int, default=None,
                       help="compactor workers, 1 to 8 (R31; default compaction_jobs, as every command)")
    serve.add_argument("--remote", action="append", default=[], metavar="NAME",
                       help="an actor that joins from another host instead of being started here")
    serve.add_argument("--web", action="store_true", help="serve the chat to a browser too, as `everchat web`")
    from everchat.frontends.cli.web import add_web_arguments

    add_web_arguments(serve)
    web = command("web")
    web.add_argument("--workers", type=int, default=None,
                     help="compactor workers, 1 to 8 (R31; default compaction_jobs, as every command)")
    web.add_argument("--tcp", action="store_true",
                     help="the actors listen on tcp with CURVE keys, so other computers can join as devices "
                          "(`everchat device add NAME`)")
    web.add_argument("--listen", default=None, metavar="ADDRESS",
                     help="with --tcp: the address other computers dial (default 127.0.0.1)")
    add_web_arguments(web)
    actor = command("actor")
    actor.add_argument("name", help="e.g. compactor.3")
    actor.add_argument("--join", required=True, metavar="ENDPOINT", help="the supervisor's endpoint (tcp://HOST:PORT)")
    actor.add_argument("--bind", default="tcp://127.0.0.1:0", help="this actor's own endpoint")
    actor.add_argument("--keys", type=Path, default=None,
                       help="the config folder holding this actor's CURVE key (keys/NAME.key)")
    actor.add_argument("--summarizer", default="configured", choices=["configured", "scripted"],
                       help="a compactor's summarizer: the configured model, or the scripted stand-in")
    ops = command("ops")
    ops.add_argument("--once", action="store_true")
    ops.add_argument("--json", action="store_true")
    from everchat.frontends.cli.devices import add_device_arguments

    add_device_arguments(command("device"), command("devices"))
    connect = commands.add_parser("connect", help="the terminal chat on a chat `everchat web` serves (docs/WEB.md)",
                                  description="The terminal chat on a chat `everchat web` serves, over its HTTP API "
                                              "and live events: no chat folder or keys of its own.")
    connect.add_argument("link", metavar="'URL#TOKEN'", nargs="?", default=None,
                         help="the link `everchat web` printed, quoted; left out, it is read from EVERCHAT_LINK or "
                              "asked for without echo (a link in the command line is visible to `ps` while it runs)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one `everchat` command line; returns the exit status. Every failure is one
    line on stderr (P9): a traceback goes to a log file, never to the terminal."""
    try:
        args = _parser().parse_args(argv)
    except UsageError as error:
        say(f"everchat: {error}")
        return EXIT_USAGE
    except SystemExit as done:  # --help
        return int(done.code or 0)
    if getattr(args, "data_dir", None) is None:
        args.data_dir = default_data_dir()
    args.data_dir = args.data_dir.expanduser()
    command = f"everchat {args.command or 'chat'}"
    with person_logging(command):
        try:
            status = _dispatch(args)
            sys.stdout.flush()  # a reader that left is seen here, not in the interpreter's last flush
            return status
        except CommandError as error:
            say(f"everchat: {error}")
            return error.status
        except KeyboardInterrupt:
            say("everchat: interrupted")
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            # The reader left (`everchat status | head -c 10`): the command ends quietly, as
            # other Unix tools do; keep the interpreter from complaining again when it
            # flushes stdout at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
        except Exception as error:  # the safety net: a bug is one line; its traceback goes to a file
            say(f"everchat: internal error: {type(error).__name__}: {error} ({write_details(error, command)})")
            return EXIT_FAILED


def _dispatch(args: argparse.Namespace) -> int:
    command = args.command or "chat"
    if command in ("view", "zoom", "date", "status", "check"):
        from everchat.frontends.cli import read as commands_read

        return commands_read.run(command, args)
    if command == "agents":
        from everchat.frontends.cli.agents import run_agents

        return run_agents(args)
    if command == "note":
        from everchat.frontends.cli.note import note

        return note(args)
    if command == "repair":
        from everchat.frontends.cli.note import repair

        return repair(args)
    if command in ("backup", "restore"):
        from everchat.frontends.cli import backup as commands_backup

        return commands_backup.run_backup(args) if command == "backup" else commands_backup.run_restore(args)
    if command == "import":
        from everchat.frontends.cli.import_file import run_import

        return run_import(args)
    if command == "import-chats":
        from everchat.frontends.cli.import_chats import run_import_chats

        return run_import_chats(args)
    if command == "setup":
        from everchat.frontends.cli.setup import run_setup

        return run_setup(args)
    if command in ("ask", "compact"):
        from everchat.frontends.cli import ask as commands_turn

        return commands_turn.run(command, args)
    if command == "connect":
        from everchat.frontends.cli.connect import run_connect

        return run_connect(args)
    if command in ("device", "devices"):
        from everchat.frontends.cli import devices as commands_devices

        return commands_devices.run_devices(args) if command == "devices" else commands_devices.run_device_command(args)
    if command == "chat":
        return _terminal(args)
    if command == "web" or (command == "serve" and args.web):
        from everchat.frontends.cli import web as commands_web

        return commands_web.run(args)
    return _host_actors(args)


def _check_serve(args: argparse.Namespace) -> None:
    """`serve`'s flags and folder, before anything starts (P9, P17)."""
    if args.listen is not None and not args.tcp:
        raise UsageError("--listen goes with --tcp: without it the actors talk over ipc sockets in the chat folder, "
                         "which listen on no address")
    if args.listen is None:
        args.listen = "127.0.0.1"
    if args.data_dir.exists() and not args.data_dir.is_dir():
        raise CommandError(f"cannot serve the chat in {args.data_dir}: it is a file, not a folder")


class _RefusedKey(logging.Filter):
    """`actor --join`: notices the supervisor refusing this actor's CURVE key (the
    transport's handshake warning), which the command's last line then says instead."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(str(arg) == "HANDSHAKE_FAILED_AUTH" for arg in record.args):
            self.seen = True
            return False
        return True


def _host_actors(args: argparse.Namespace) -> int:
    """`serve`, `actor`, `ops`: their failures in words (P9): a folder that is a file, an
    address of another host, a key the chat refused, actors that did not start."""
    import zmq

    from everchat.frontends.cli.commands import os_error_words
    from everchat.transport import PeerLost, TransportError

    if args.command == "serve":
        _check_serve(args)
    refused = _RefusedKey()
    transport_log = logging.getLogger("everchat.transport")
    transport_log.addFilter(refused)
    try:
        return _run_actors(args, args.data_dir)
    except zmq.ZMQError as error:
        address = args.bind if args.command == "actor" else getattr(args, "listen", None)
        if error.errno in (zmq.EADDRNOTAVAIL, zmq.EADDRINUSE) and args.command == "serve":
            raise CommandError(f"cannot listen on {address}: {zmq.strerror(error.errno)}; --listen names an address of "
                               "this host, which other hosts dial") from None
        raise CommandError(f"the chat's sockets failed at {address}: {zmq.strerror(error.errno)}") from None
    except (TimeoutError, TransportError) as error:
        if args.command == "actor" and isinstance(error, PeerLost):
            raise CommandError(_join_failed(args, error, refused.seen)) from None
        raise CommandError(f"the chat in {args.data_dir} did not start: {error}") from None
    except BrokenPipeError:  # the reader of our output left (`ops --once | head`): main ends quietly
        raise
    except OSError as error:
        raise CommandError(f"cannot {args.command} the chat in {args.data_dir}: {os_error_words(error)}") from None
    finally:
        transport_log.removeFilter(refused)


def _join_failed(args: argparse.Namespace, error: Exception, refused: bool) -> str:
    endpoint = args.join.split(";")[0]
    if not refused:
        return f"{args.name} could not join the chat at {endpoint}: {error}"
    from everchat.transport import KeyStore, TransportError

    keys = args.keys or args.data_dir / "config"
    try:
        public = KeyStore(keys).load(args.name).public.decode()
    except TransportError as error:  # the node made it at its start; unreadable now
        return f"{args.name} could not join the chat at {endpoint}: the chat refused this actor's key ({error})"
    return (f"{args.name} could not join the chat at {endpoint}: the chat refused this actor's key; add the line "
            f"'{public} {args.name}' to config/keys/authorized_keys in the chat's folder on its host "
            "(no restart needed), then run this command again")


def _terminal(args: argparse.Namespace) -> int:
    """`everchat` / `everchat chat`: engineer E's prompt_toolkit front end."""
    from everchat.actors.session.attached import server_info
    from everchat.frontends.cli.commands import check_compaction_model, load_settings

    settings = load_settings(args)
    if server_info(settings.chat_dir) is None:  # a running server summarizes with its own models (issue 10)
        check_compaction_model(settings)
    try:
        from everchat.frontends.terminal.app import run
    except ImportError as error:
        if error.name != "everchat.frontends.terminal.app":
            raise
        raise CommandError("the terminal chat is not installed in this build; "
                           "use `everchat ask MESSAGE`") from None
    from everchat.frontends.cli.commands import placement_of

    return run(settings, placement=placement_of(args, settings))


def _run_actors(args, data_dir: Path) -> int:
    import signal
    import threading

    stop = threading.Event()
    if args.command == "ops":
        from everchat.frontends.ops import NoSupervisor, run_ops

        try:
            return run_ops(data_dir, once=args.once, as_json=args.json)
        except NoSupervisor as error:
            raise CommandError(str(error)) from None
        except KeyboardInterrupt:
            return 0
    from everchat.actors.supervisor.process import SignalStop

    # SIGINT as well: see commands_web.run (a main thread in stop.wait() may never see it).
    on_term = SignalStop(stop, signal.SIGTERM, signal.SIGINT)  # its relay starts once the actors run
    if args.command == "actor":
        on_term.start()
        from everchat.actors.supervisor.process import run_actor

        keys = args.keys or data_dir / "config"
        try:
            return run_actor(args.name, data_dir, args.join, args.bind, None, keys, stop, args.summarizer)
        except KeyboardInterrupt:
            return 0
    from everchat.actors.supervisor.actor import Placement, Supervisor

    if args.workers is not None and not 1 <= args.workers <= 8:
        raise UsageError(f"--workers is 1 to 8 (R31), not {args.workers}")
    from everchat.frontends.cli.commands import check_compaction_model, load_settings

    settings = load_settings(args)
    try:
        placement = Placement(
            mode="processes" if getattr(args, "processes", False) else "single",
            transport="tcp" if args.tcp else "ipc",
            # R31: as many workers as every other command runs (compaction_jobs: the
            # flag, the environment or config.toml); --workers overrides it for serve.
            workers=settings.compaction_jobs if args.workers is None else args.workers,
            remote=tuple(args.remote),
            listen=args.listen,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    if getattr(args, "demo", False):
        os.environ["EVERCHAT_DEMO"] = "1"  # the actors' own processes read their settings from it
    check_compaction_model(settings)
    from everchat.actors.folder import ChatLocked, StoreError

    try:  # P6: the supervisor takes the chat before it touches it, or fails here in one line
        # Attachable: the other commands of this computer attach to it (issue 10).
        supervisor = Supervisor(data_dir, placement, attachable=True).start()
    except ChatLocked as error:
        raise CommandError(f"{error}; close that chat first (read-only commands such as `view` "
                           "and `status` work meanwhile)") from None
    except StoreError as error:
        raise CommandError(str(error)) from None
    on_term.start()  # after the start: the fork server forks a process that runs no other thread
    try:  # from here on a Ctrl-C, however early, stops the actors
        print(f"everchat: serving {data_dir} ({placement.mode}, {placement.workers} workers) at "
              f"{supervisor.node.endpoint}", flush=True)
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        _wind_down(supervisor)
        supervisor.stop()
    return 0


def _wind_down(supervisor) -> None:
    """`serve` stopping: as a session's close, a running turn (an attached client's) is
    stopped with its streamed part logged (R37), and the planner has planned what was
    logged, before the actors stop (issue 10)."""
    from everchat.actors.session.session import settle_down
    from everchat.transport import TransportError

    try:
        settle_down(supervisor.node)
    except TransportError as error:  # an actor already gone: stopping is all that is left
        logging.getLogger("everchat.serve").info("%s: stopping without settling down: %s", supervisor, error)


if __name__ == "__main__":
    sys.exit(main())
