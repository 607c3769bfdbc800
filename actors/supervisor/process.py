"""Run one actor in this process: what the supervisor starts for `--processes`,
and what `everchat actor NAME --join …` runs on another host.

    python -m everchat.actors.supervisor.process --name planner --chat DIR --supervisor ENDPOINT --bind ENDPOINT

The process makes its node, hosts the actor, and only then registers it with the
supervisor (which answers with the directory of every actor): no request meets the
process before its actor exists. It lives until it is told to stop (SIGTERM) or its
actor dies (then it exits non-zero so the supervisor restarts it).

Its log records go to `run/<name>.log` in the chat folder (`--log`; 0600, rotated, one
line a record with tracebacks kept below it), never to the terminal it shares with the
person (P9). A joiner whose key the chat refuses fails at once (KeyRefused).

It never outlives the supervisor that started it (`--parent PID`), so no orphan keeps
the chat's lock (P16): first thing, on Linux, it asks the kernel for SIGKILL when its
parent thread ends (`prctl(PR_SET_PDEATHSIG)`), then checks that the parent is still the
one that started it (it may have died before the request). Elsewhere, and as a second
line, a thread polls `getppid()` and stops the process gently once the parent has changed.
Its parent is the supervisor's fork server (actors/supervisor/forkserver.py, issue 9: `main` runs in
a fork of it, `--parent` the server's pid), which itself dies with the launcher thread
of the supervisor; run by hand (or by `everchat actor`), its parent is whoever started it.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import json
import logging
import logging.handlers
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pykka
import zmq
from zmq.utils.monitor import recv_monitor_message

from everchat.actors.folder.log_repeats import Repeats, error_key
from everchat.transport import KeyPair, KeyStore, Node, PeerLost, parse_address, schema

__all__ = ["main", "argument_parser", "run_actor", "die_with_parent", "KeyRefused", "log_to_file", "LOG_BYTES"]

log = logging.getLogger("everchat.process")

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_REGISTER_SECONDS = 30.0

LOG_BYTES = 2 * 1024 * 1024
"""An actor's log file is rotated past this size, one older file kept (`<name>.log.1`):
at most twice this on disk per actor, however long the chat runs."""


class KeyRefused(PeerLost):
    """`everchat actor NAME --join`: the chat's supervisor refused this actor's CURVE key
    at the handshake (its public key is not in the chat's `authorized_keys`). Raised as
    soon as the refusal comes, before anything is registered; the text says which line
    to add where."""


def run_actor(name: str, chat: Path, supervisor: str, bind: str, budget_json: str | None,
              keys: Path | None = None, stop: threading.Event | None = None, summarizer: str = "configured",
              routes: dict[str, str] | None = None) -> int:
    """Host actor `name` in this process until `stop` is set (0) or the actor dies (3).

    The actor is hosted before its Register tells the supervisor where it lives, so no
    request ever meets this process without its actor: peers hear of it only from the
    directory that Register sends out, and the sessions wait for that Register. A
    restarted process binds the same ipc path as the one before it, so a peer that had
    its route may reach it at once: its actor is hosted right after the bind, before any
    round trip (about a millisecond; a request landing in it is still answered "no
    actor": only the transport could hold it). `routes` are the peers the supervisor knew when it started us (the
    planner asks the log writer in its start); a process joining from elsewhere has none
    but the supervisor's until its Register is answered, so its actor must not ask peers
    as it starts (a compactor asks later, and again until the planner answers).

    A joiner whose key the chat refuses fails at once with KeyRefused."""
    from everchat.actors.tree import Budget
    from everchat.actors.supervisor.catalog import NodeAgent, budget_from_json, build_actor

    stop = stop or threading.Event()
    keystore = KeyStore(keys) if keys else None
    if keystore is not None and supervisor.startswith("tcp://"):
        # We pinned the supervisor's key in its endpoint; let it reach us too (its
        # Directory updates and statistics requests), whether or not we share its folder.
        server_key = dict(part.partition("=")[::2] for part in supervisor.split(";")[1:]).get("key")
        if server_key:
            keystore.authorize(server_key, "supervisor")
        _await_handshake(supervisor, keystore.ensure(name), name, _REGISTER_SECONDS)
    budget = budget_from_json(budget_json) if budget_json else Budget()
    cls, args = build_actor(name, chat, budget, summarizer)
    node = Node(name, bind=bind, keys=keystore)
    node.route("supervisor", supervisor)
    _apply(node, name, routes or {})
    node.start()
    try:
        ref = node.host(name, cls, *args)  # first: a peer that had our ipc path may reach us now
        node.host(f"node.{name}", NodeAgent)
        directory = node.ask(
            "supervisor",
            schema.Register(name=name, host=socket.gethostname(), pid=os.getpid(), endpoint=node.endpoint),
            timeout=_REGISTER_SECONDS,
        )
        _apply(node, name, directory.routes)
        while not stop.wait(0.1):
            if not ref.is_alive():
                log.error("%s: actor %s stopped; exiting so the supervisor restarts it", node, name)
                return 3
        return 0
    finally:
        # The actor first, while the node runs (P10): what it handles last (a planner's
        # summaries that came before the stop) still reaches its peers, and its saves are
        # not refused as "stopped". The turn runner's stop may wait for its queued
        # after-turn commands (issue 13, actors/turns/after_turn.py); this process ends by
        # os._exit, so that wait is here.
        try:
            node.stop_actor(name, timeout=_stop_seconds(name))
        except pykka.Timeout:  # the node's stop below ends it
            log.warning("%s: actor %s did not stop within %g s", node, name, _stop_seconds(name))
        node.stop(timeout=_stop_seconds(name))


def _stop_seconds(name: str) -> float:
    """How long the node's stop waits for actor `name` to stop (the default's 5 s, or the
    turn runner's `after_turn.STOP_SECONDS`, which the supervisor waits for too)."""
    from everchat.actors.turns.after_turn import STOP_SECONDS

    return STOP_SECONDS if name == "turn_runner" else 5.0


def _apply(node: Node, name: str, routes: dict[str, str]) -> None:
    """Route every peer in `routes`; our own names stay ours."""
    for target, endpoint in routes.items():
        if target not in (name, f"node.{name}"):
            node.route(target, endpoint)


_HANDSHAKE_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH


def _await_handshake(endpoint: str, pair: KeyPair, name: str, timeout: float) -> None:
    """Dial the supervisor at `endpoint` with this actor's key and wait for the CURVE
    handshake's verdict (P9): return once it succeeds, raise KeyRefused at once when the
    supervisor refuses the key, PeerLost when no handshake is done within `timeout` (no
    one listens there)."""
    address = parse_address(endpoint)
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    monitor = dealer.get_monitor_socket(_HANDSHAKE_EVENTS)
    try:
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.curve_serverkey = address.server_key
        dealer.curve_publickey, dealer.curve_secretkey = pair.public, pair.secret
        dealer.connect(address.requests)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not monitor.poll(int(left * 1000) + 1):
                break
            event = recv_monitor_message(monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                return
            if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                raise KeyRefused(
                    f"the chat refused this actor's key; add the line '{pair.public.decode()} {name}' to "
                    "config/keys/authorized_keys in the chat's folder on its host (no restart needed), "
                    "then run this command again")
        raise PeerLost(f"{name}: no connection to {address.requests} within {timeout:g} s")
    finally:
        dealer.disable_monitor()
        monitor.close(0)
        dealer.close(0)
        context.term()


def _stop_when_orphaned(parent: int, stop: threading.Event, name: str) -> None:
    """A supervisor killed with SIGKILL cannot stop its children: each notices that its
    parent is gone (it was handed to another) and stops, instead of serving no chat forever."""
    while not stop.wait(0.5):
        if os.getppid() != parent:
            log.warning("%s: the supervisor (pid %d) is gone; stopping", name, parent)
            stop.set()


def die_with_parent() -> bool:
    """Linux: have the kernel SIGKILL this process when the thread that started it ends
    (PR_SET_PDEATHSIG through libc's prctl). False where that is not available (macOS,
    a libc without prctl): the getppid() polling is then the only watch."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


class _Lines(logging.Formatter):
    """One line a record in an actor's log file: `<time> <name>[<pid>] <LEVEL> <message>`,
    the message's own line breaks shown as `\\n`. A traceback follows it, every line indented
    by two spaces: a line that does not start with a space starts a record."""

    def __init__(self, name: str) -> None:
        super().__init__(f"%(asctime)s {name}[{os.getpid()}] %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = _one_line(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        blocks = []
        if record.exc_info:
            blocks.append(self.formatException(record.exc_info))
        if record.stack_info:
            blocks.append(self.formatStack(record.stack_info))
        for block in blocks:
            text += "".join("\n  " + line for line in block.splitlines())
        return text


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


class _LogFile(logging.handlers.RotatingFileHandler):
    """`run/<name>.log`: appended, 0600 whatever the umask (also the file a rotation
    starts), rotated past LOG_BYTES with one older file kept. A record whose error repeats
    one written before (same type and traceback) is counted, not written again: at most once
    a minute a line says how many more came (P3, actors/folder/log_repeats.py)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, maxBytes=LOG_BYTES, backupCount=1, encoding="utf-8", errors="backslashreplace")
        self.repeats = Repeats()

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            again = self.repeats.note(error_key(error))
            if again is None:
                return
            if again:
                record = logging.makeLogRecord(dict(
                    record.__dict__, exc_info=None, exc_text=None, args=None,
                    msg=f"{record.getMessage()}: {type(error).__name__}: {error} (the same error {again} more "
                        "time(s) since it was last written; its traceback was written then)"))
        super().emit(record)

    def _open(self):
        return os.fdopen(_open_private(self.baseFilename), "a", encoding="utf-8", errors="backslashreplace")


def _open_private(path: str | Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # a file made before, or under another umask
    return fd


class _Summary(logging.Handler):
    """Records as one line each on stderr, `everchat: <level>: <name>[<pid>]: <message>`,
    a traceback as its error's type and text. Only before the log file is open, and
    instead of it when it cannot be."""

    def __init__(self, name: str, level: int) -> None:
        super().__init__(level)
        self.name_pid = f"{name}[{os.getpid()}]"

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                text = f"{text.rstrip(': ')}: {type(error).__name__}: {error}"
            sys.stderr.write(f"everchat: {record.levelname.lower()}: {self.name_pid}: {_one_line(text)}\n")
            sys.stderr.flush()
        except Exception:  # logging's own rule: a broken record is reported, never raised
            self.handleError(record)


_stack_file = None  # where `kill -USR1` writes every thread's stack; open as long as the process runs


def log_to_file(path: Path, name: str, level: int = logging.WARNING) -> bool:
    """P9: this process's log records go to `path` (`run/<name>.log`), one line each,
    tracebacks kept there; nothing reaches the person's terminal (the process shares
    it, and a terminal chat draws its screen there). Uncaught exceptions, Python's
    warnings and `kill -USR1 PID` (every thread's stack, for ops) go there too. When the
    file cannot be opened (no folder, no room), errors are said on stderr instead, one
    line each, and False is returned."""
    global _stack_file
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(level)
    stack_file = None
    try:
        stack_file = os.fdopen(_open_private(path), "a")
        handler = _LogFile(path)
    except OSError as error:
        if stack_file is not None:
            stack_file.close()
        root.addHandler(_Summary(name, logging.ERROR))
        sys.stderr.write(f"everchat: warning: {name}[{os.getpid()}]: cannot write its log file {path} "
                         f"({error.strerror or error}); its errors are said here\n")
        return False
    handler.setFormatter(_Lines(name))
    root.addHandler(handler)
    _stack_file = stack_file
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    return True


def _log_uncaught(kind, error, tb) -> None:
    log.critical("uncaught %s", kind.__name__, exc_info=(kind, error, tb))


def _log_uncaught_in_thread(hook) -> None:
    if not issubclass(hook.exc_type, SystemExit):  # as Python's own hook: a thread's exit is no error
        where = hook.thread.name if hook.thread is not None else "?"
        log.critical("uncaught %s in thread %s", hook.exc_type.__name__, where,
                     exc_info=(hook.exc_type, hook.exc_value, hook.exc_traceback))


_PARSER: argparse.ArgumentParser | None = None


def argument_parser() -> argparse.ArgumentParser:
    """`main`'s parser, made once: the fork server makes it before it forks (issue 9), so
    no actor process spends its start building it."""
    global _PARSER
    if _PARSER is None:
        parser = argparse.ArgumentParser(description="Run one Everchat actor in this process.")
        parser.add_argument("--name", required=True)
        parser.add_argument("--chat", type=Path, required=True)
        parser.add_argument("--supervisor", required=True, help="the supervisor's endpoint")
        parser.add_argument("--bind", required=True, help="this process's endpoint (ipc://… or tcp://127.0.0.1:0)")
        parser.add_argument("--budget", default=None)
        parser.add_argument("--keys", type=Path, default=None,
                            help="the config folder with the CURVE keys (keys/), for tcp")
        parser.add_argument("--summarizer", default="configured", choices=["configured", "scripted"])
        parser.add_argument("--parent", type=int, default=None,
                            help="the pid of the supervisor that starts this process (default: the parent now)")
        parser.add_argument("--routes", type=json.loads, default=None,
                            help="the peers' endpoints as the supervisor knew them, as JSON {name: endpoint}")
        parser.add_argument("--log", type=Path, default=None, help="the log file (default: CHAT/run/NAME.log)")
        _PARSER = parser
    return _PARSER


class SignalStop:
    """`signums` set `event`, through a pipe and a relay thread. A handler that called
    `event.set()` itself would take the event's lock inside the signal handler, and deadlock
    for good when the signal lands while the main thread holds that lock (inside
    `event.wait()`, where a stop request under load finds it). `os.write` takes no lock.

    The handlers are installed at once; the relay thread starts with `start()`, so a process
    about to fork its fork server (issue 9: only while no other thread runs) starts it after:
    a signal before then waits in the pipe."""

    def __init__(self, event: threading.Event, *signums: int) -> None:
        self.event = event
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # a signal storm never blocks the handler
        self._relay: threading.Thread | None = None
        for signum in signums:
            signal.signal(signum, self._handler)
        # The kernel may deliver the signal to any thread. Python runs its handler in the
        # main thread only, and a main thread blocked in a lock (stop.wait()) is woken only
        # when the signal lands on it: with the device hub's and the actors' threads, a
        # SIGTERM to `serve` often did not, and the handler never ran (CI: serve not stopped
        # within 60 s). The wake-up fd is written by the C-level handler in whatever thread
        # takes the signal, so the relay wakes at once. Taken only when nobody holds it (an
        # asyncio loop does); the handler above still writes for the main thread's part.
        if threading.current_thread() is threading.main_thread():
            previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
            if previous != -1:
                signal.set_wakeup_fd(previous)

    def _handler(self, *_) -> None:
        try:
            os.write(self._write, b"s")
        except BlockingIOError:  # the pipe holds a wake-up already
            pass

    def start(self) -> SignalStop:
        if self._relay is None:
            self._relay = threading.Thread(target=self._run, name="everchat-signals", daemon=True)
            self._relay.start()
        return self

    def _run(self) -> None:
        os.read(self._read, 1)
        self.event.set()


def main(argv: list[str] | None = None) -> int:
    die_with_parent()  # before anything else: the parent may die any moment (checked below)
    args = argument_parser().parse_args(argv)
    parent = args.parent if args.parent is not None else os.getppid()
    logging.getLogger().addHandler(_Summary(args.name, logging.WARNING))  # until the file is open
    if os.getppid() != parent:  # it died before the kernel was asked to tell us
        log.warning("the supervisor (pid %d) is already gone; not starting", parent)
        return 1
    level = os.environ.get("EVERCHAT_LOG_LEVEL", "WARNING").upper()
    log_to_file(args.log or args.chat / "run" / f"{args.name}.log", args.name,
                getattr(logging, level, logging.WARNING))
    stop = threading.Event()
    SignalStop(stop, signal.SIGTERM, signal.SIGINT).start()
    threading.Thread(target=_stop_when_orphaned, args=(parent, stop, args.name), daemon=True).start()
    try:
        return run_actor(args.name, args.chat, args.supervisor, args.bind, args.budget, args.keys, stop,
                         args.summarizer, args.routes)
    except Exception:  # the supervisor restarts us; the why is in the log file
        log.exception("%s could not run", args.name)
        return 1


if __name__ == "__main__":
    sys.exit(main())
