"""`everchat web` (and `serve --web`): the chat served to a browser (docs/WEB.md).

It opens the chat like `chat` does (`open_web_session`: one process, or `--processes`),
starts the event hub and the aiohttp server on 127.0.0.1:8765 (`--port 0`: any free
port, and the link names it), prints the one link line, opens the browser when a display
is there and `--no-browser` is not given, and runs until Ctrl-C or SIGTERM, which close
the server, the actors and the chat's lock cleanly. `--new-token` replaces the token and
ends every web session.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import signal
import sys
import threading

from everchat.actors.supervisor.process import SignalStop
from everchat.frontends.cli.commands import EXIT_OK, CommandError, UsageError, load_settings

__all__ = ["add_web_arguments", "run", "open_web_session", "check_web_flags", "every_interface"]

DEFAULT_PORT = 8765


def add_web_arguments(parser: argparse.ArgumentParser) -> None:
    """The web server's flags (`web`, and `serve --web`)."""
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                        help="the address to listen on (default 127.0.0.1; every interface only with --allow-host)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="a name the browser may reach this server by (its Host header); repeatable")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser")
    parser.add_argument("--new-token", action="store_true",
                        help="replace the web token and end every web session")


def every_interface(host: str) -> bool:
    """0.0.0.0, ::, or an empty host: an address that listens on every interface."""
    try:
        return host == "" or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def check_web_flags(args: argparse.Namespace) -> None:
    """The flags, before anything starts (UsageError: nothing changed)."""
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port is 0 to 65535, not {args.port}")
    if every_interface(args.host) and not args.allow_host:
        raise UsageError(f"--host {args.host or repr('')} listens on every interface: name at least one "
                         "--allow-host NAME that browsers use to reach it")
    workers = getattr(args, "workers", None)
    if workers is not None and not 1 <= workers <= 8:
        raise UsageError(f"--workers is 1 to 8 (R31), not {workers}")
    for name in args.allow_host:
        if not name or any(c in name for c in "/ #?@"):
            raise UsageError(f"--allow-host takes a host name (example.lan, 10.0.0.5), not {name!r}")


def open_web_session(args: argparse.Namespace, settings):
    """The chat with its actors, for the web server: `--processes` and `--workers`
    honoured, or attached to a `serve` (or terminal chat) that already runs the chat
    (`start_session`, issue 10); any failure one line (CommandError). The web's own chat
    is attachable: `ask`, `note` … attach to it while it runs."""
    from everchat.actors.supervisor.actor import Placement
    from everchat.frontends.cli.ask import start_session

    workers = getattr(args, "workers", None) or settings.compaction_jobs
    mode = "processes" if getattr(args, "processes", False) else "single"
    if mode == "processes" and getattr(args, "demo", False):
        os.environ["EVERCHAT_DEMO"] = "1"  # the actors' own processes read their settings from it
    # --tcp: the actors listen on tcp with CURVE keys, so other computers can join as
    # devices (issue 11: `everchat device add NAME` works on the web page's server too)
    tcp = bool(getattr(args, "tcp", False))
    try:
        placement = Placement(mode, workers=workers, transport="tcp" if tcp else "ipc",
                              listen=getattr(args, "listen", None) or "127.0.0.1")
    except ValueError as error:
        raise UsageError(str(error)) from None
    return start_session(settings, placement, attachable=True, what=f"cannot open the chat in {settings.chat_dir}: ")


def _display() -> bool:
    """A browser can be shown: macOS, Windows, or a graphical session on Unix."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _link_host(host: str, allow: list[str]) -> str:
    if every_interface(host):
        return allow[0]
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def run(args: argparse.Namespace) -> int:
    """`everchat web`: serve the chat until interrupted; 0 after a clean stop."""
    check_web_flags(args)
    if getattr(args, "listen", None) is not None and not getattr(args, "tcp", False):
        raise UsageError("--listen goes with --tcp: without it the actors talk over ipc sockets in the chat folder")
    settings = load_settings(args)
    from everchat.frontends.web import SessionStore, WebConfig, load_token, make_app, start_in_thread

    try:
        token = load_token(settings.home, new=args.new_token)
        store = SessionStore(settings.home)
        if args.new_token:
            store.clear()
    except (OSError, ValueError) as error:
        raise CommandError(f"cannot set up the web sessions in {settings.home}: {error}") from None
    stop = threading.Event()
    # SIGINT through the relay too: a KeyboardInterrupt reaches a main thread blocked in
    # stop.wait() only when the kernel hands the signal to that thread, and under load it
    # often went to another one (CI: `web` not stopped by SIGINT within 120 s).
    on_term = SignalStop(stop, signal.SIGTERM, signal.SIGINT)
    session = open_web_session(args, settings)
    on_term.start()  # after the actors started (a fork server forks only a one-thread process)
    try:
        allow = tuple(args.allow_host)
        if not every_interface(args.host) and args.host not in ("127.0.0.1", "localhost", "::1"):
            allow += (_link_host(args.host, []),)  # the address it was told to listen on
        config = WebConfig(home=settings.home, token=token, port=args.port, allow_hosts=allow, sessions=store)
        app = make_app(session, settings, config)
        try:
            running = start_in_thread(app, args.host, args.port)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise CommandError(f"cannot listen on {args.host}:{args.port}: the port is in use "
                                   "(--port picks another)") from None
            raise CommandError(f"cannot listen on {args.host}:{args.port}: {error.strerror or error}") from None
        try:
            link = f"http://{_link_host(args.host, args.allow_host)}:{running.port}/#{token}"
            print(f"everchat: the chat is at {link}", flush=True)
            if not args.no_browser and _display():
                import webbrowser

                try:
                    webbrowser.open(link)
                except Exception as error:  # no browser to run: the link line is enough
                    print(f"everchat: warning: could not open a browser: {error}", file=sys.stderr, flush=True)
            try:
                stop.wait()
            except KeyboardInterrupt:
                pass
        finally:
            running.stop()
    finally:
        session.close()
    return EXIT_OK
