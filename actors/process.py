"""Run one actor in this process: what the supervisor starts for `--processes`,
and what `everchat actor NAME --join …` runs on another host.

    python -m everchat.actors.process --name planner --chat DIR --supervisor ENDPOINT --bind ENDPOINT

The process makes its node, registers the actor with the supervisor (which
answers with the directory of every actor), hosts it, and lives until it is told
to stop (SIGTERM) or its actor dies (then it exits non-zero so the supervisor
restarts it).

It never outlives the supervisor that started it (`--parent PID`), so no orphan keeps
the chat's lock (P16): first thing, on Linux, it asks the kernel for SIGKILL when its
parent thread ends (`prctl(PR_SET_PDEATHSIG)`; the supervisor starts its children from
one thread that lives as long as it does), then checks that the parent is still the one
that started it (it may have died before the request). Elsewhere, and as a second line,
a thread polls `getppid()` and stops the process gently once the parent has changed.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from everchat.transport import KeyStore, Node, schema

__all__ = ["main", "run_actor", "die_with_parent"]

log = logging.getLogger("everchat.process")

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def run_actor(name: str, chat: Path, supervisor: str, bind: str, budget_json: str | None,
              keys: Path | None = None, stop: threading.Event | None = None, summarizer: str = "configured") -> int:
    from everchat.actors.supervisor import NodeAgent, budget_from_json, build_actor
    from everchat.actors.memory import Budget

    stop = stop or threading.Event()
    keystore = KeyStore(keys) if keys else None
    if keystore is not None and supervisor.startswith("tcp://"):
        # We pinned the supervisor's key in its endpoint; let it reach us too (its
        # Directory updates and statistics requests), whether or not we share its folder.
        server_key = dict(part.partition("=")[::2] for part in supervisor.split(";")[1:]).get("key")
        if server_key:
            keystore.authorize(server_key, "supervisor")
    node = Node(name, bind=bind, keys=keystore)
    node.start()
    try:
        node.route("supervisor", supervisor)
        node.host(f"node.{name}", NodeAgent)
        directory = node.ask(
            "supervisor",
            schema.Register(name=name, host=socket.gethostname(), pid=os.getpid(), endpoint=node.endpoint),
            timeout=30.0,
        )
        for target, endpoint in directory.routes.items():
            if target != name and target != f"node.{name}":
                node.route(target, endpoint)
        budget = budget_from_json(budget_json) if budget_json else Budget()
        cls, args = build_actor(name, chat, budget, summarizer)
        ref = node.host(name, cls, *args)
        while not stop.wait(0.1):
            if not ref.is_alive():
                log.error("%s: actor %s stopped; exiting so the supervisor restarts it", node, name)
                return 3
        return 0
    finally:
        node.stop()


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


def main(argv: list[str] | None = None) -> int:
    die_with_parent()  # before anything else: the parent may die any moment (checked below)
    parser = argparse.ArgumentParser(description="Run one Everchat actor in this process.")
    parser.add_argument("--name", required=True)
    parser.add_argument("--chat", type=Path, required=True)
    parser.add_argument("--supervisor", required=True, help="the supervisor's endpoint")
    parser.add_argument("--bind", required=True, help="this process's endpoint (ipc://… or tcp://127.0.0.1:0)")
    parser.add_argument("--budget", default=None)
    parser.add_argument("--keys", type=Path, default=None, help="the config folder with the CURVE keys (keys/), for tcp")
    parser.add_argument("--summarizer", default="configured", choices=["configured", "scripted"])
    parser.add_argument("--parent", type=int, default=None,
                        help="the pid of the supervisor that starts this process (default: the parent now)")
    args = parser.parse_args(argv)
    parent = args.parent if args.parent is not None else os.getppid()
    # Warnings and errors by default: the actors' processes share the person's terminal.
    level = os.environ.get("EVERCHAT_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(level=getattr(logging, level, logging.WARNING),
                        format=f"%(asctime)s {args.name}[{os.getpid()}] %(levelname)s %(message)s")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: every thread's stack, for ops
    if os.getppid() != parent:  # it died before the kernel was asked to tell us
        log.warning("%s: the supervisor (pid %d) is already gone; not starting", args.name, parent)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=_stop_when_orphaned, args=(parent, stop, args.name), daemon=True).start()
    return run_actor(args.name, args.chat, args.supervisor, args.bind, args.budget, args.keys, stop, args.summarizer)


if __name__ == "__main__":
    sys.exit(main())
