"""`everchat device add|join|remove` and `everchat devices` (docs/HANDS.md §5, R39).

    everchat device add laptop         # on the chat's computer, while `everchat serve --tcp` runs
    everchat device join 'tcp://10.0.0.2:41234;key=…;secret=…' --name laptop    # on the laptop
    everchat devices                   # the computers, online or not
    everchat device remove laptop      # revoke it; a connected laptop is cut off

`add`, `remove` and `devices` reach the device hub of the running server through its run
file (`run/supervisor.json`, as `everchat ops` does): first at the supervisor's own node
(the single placement), else where the supervisor says the `devices` actor runs. `remove`
and `devices` also work with no server running: they read (and `remove` edits)
`config/devices.json` and the keys themselves.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from everchat.frontends.cli.commands import EXIT_OK, CommandError, UsageError

__all__ = ["add_device_arguments", "run_device_command", "run_devices", "everchat_home"]

log = logging.getLogger("everchat.devices")


def everchat_home() -> Path:
    """Everchat's home on this computer: `$EVERCHAT_HOME`, else `~/.everchat`."""
    home = os.environ.get("EVERCHAT_HOME")
    return Path(home) if home else Path.home() / ".everchat"


def add_device_arguments(device: argparse.ArgumentParser, devices: argparse.ArgumentParser) -> None:
    """The parsers of `device` (add, join, remove) and `devices`."""
    device.add_argument("action", choices=["add", "join", "remove"],
                        help="add NAME: print the command that joins a computer; join LINK --name NAME: join this "
                             "computer and serve jobs until stopped; remove NAME: revoke a computer")
    device.add_argument("target", metavar="NAME|LINK", help="the device's name (add, remove) or the link (join)")
    device.add_argument("--name", default=None, help="join: this computer's name in the chat")
    device.add_argument("--ttl", type=float, default=3600.0, help="add: the join secret's life in seconds (1 hour)")
    devices.add_argument("--json", action="store_true", help="one JSON object per device")


def _hub(chat: Path):
    """(node, how) to ask the running server's device hub, or None when no server runs."""
    from everchat.actors.session.attached import server_info
    from everchat.transport import KeyStore, Node, TransportError

    info = server_info(chat)
    if info is None:
        return None
    pair = None
    if info.get("transport") == "tcp":
        try:
            pair = KeyStore(chat / "config").load("supervisor")
        except TransportError as error:
            raise CommandError(f"the server of {chat} listens on tcp and its key cannot be used: {error}") from None
    node = Node(f"devices-cli.{os.getpid()}", pair=pair)
    node.start()
    node.route("devices", info["endpoint"])
    node.route("supervisor", info["endpoint"])
    return node


def _ask(node, chat: Path, msg, timeout: float = 10.0):
    """Ask the hub; where the supervisor's node does not host it, ask the supervisor where
    it runs. CommandError in words for the person."""
    from everchat.transport import ActorStopped, RemoteError, TransportError, schema

    try:
        try:
            return node.ask("devices", msg, timeout=timeout)
        except ActorStopped:
            state = node.ask("supervisor", schema.SupervisorStatus(), timeout=timeout)
            rows = {row[0]: row for row in state.actors}
            if "devices" not in rows or not rows["devices"][4]:
                raise CommandError(f"the server of {chat} runs no device hub (the `devices` actor)") from None
            node.route("devices", rows["devices"][4])
            return node.ask("devices", msg, timeout=timeout)
    except RemoteError as error:
        raise CommandError(error.text) from None
    except TransportError as error:
        raise CommandError(f"the device hub of {chat} did not answer: {error}") from None


def run_device_command(args: argparse.Namespace) -> int:
    if args.action == "join":
        return _join(args)
    chat = args.data_dir
    from everchat.actors.enrollment.actor import check_device_name

    try:
        check_device_name(args.target)
    except ValueError as error:
        raise UsageError(str(error)) from None
    from everchat.transport import schema

    if args.action == "add" and not (math.isfinite(args.ttl) and args.ttl > 0):
        raise UsageError(f"--ttl is the join link's life in seconds, more than 0 (default 3600), not {args.ttl:g}")
    node = _hub(chat)
    if args.action == "add":
        if node is None:
            raise CommandError(f"no Everchat server runs the chat in {chat}: start `everchat serve --tcp --listen "
                               "ADDRESS` (an address the other computer can dial), then run this again")
        try:
            link = _ask(node, chat, schema.AddDevice(args.target, args.ttl))
        finally:
            node.stop()
        expires = time.strftime("%H:%M UTC", time.gmtime(link.expires))
        print(f"everchat device join '{link.link}' --name {args.target}", flush=True)
        print(f"everchat: run it on the other computer; it works once, until {expires}", file=sys.stderr, flush=True)
        return EXIT_OK
    if node is not None:
        try:
            _ask(node, chat, schema.RemoveDevice(args.target))
        finally:
            node.stop()
    else:
        from everchat.actors.enrollment.actor import remove_device

        if not remove_device(chat, args.target):
            raise CommandError(f"no device called {args.target!r} is enrolled in {chat}")
    print(f"everchat: {args.target} removed; its key is revoked and no link made for it joins any more", flush=True)
    return EXIT_OK


def _join(args: argparse.Namespace) -> int:
    from everchat.actors.devices.journal import JournalError
    from everchat.actors.enrollment.actor import JoinRefused
    from everchat.actors.joined.actor import run_device
    from everchat.actors.enrollment.actor import check_device_name, parse_link
    from everchat.actors.supervisor.process import SignalStop

    if not args.name:
        raise UsageError("device join needs --name NAME: this computer's name in the chat")
    try:
        check_device_name(args.name)
        parse_link(args.target)       # an empty or broken link is refused before anything starts
    except ValueError as error:
        raise UsageError(str(error)) from None
    stop = threading.Event()
    SignalStop(stop, signal.SIGTERM, signal.SIGINT).start()
    print(f"everchat: joining as {args.name}; Ctrl-C stops", flush=True)
    try:
        return run_device(everchat_home(), args.target, args.name, stop)
    except (JoinRefused, JournalError, ValueError) as error:   # P13: a journal that cannot be mended, in words
        raise CommandError(str(error)) from None


def run_devices(args: argparse.Namespace) -> int:
    """`everchat devices`: every enrolled device (devices.json), online or not; who is
    online comes from the running server's hub when one runs."""
    from everchat.actors.enrollment.actor import DeviceBook
    from everchat.transport import schema

    chat = args.data_dir
    try:
        enrolled = DeviceBook(chat).load()["devices"]
    except (OSError, ValueError) as error:
        raise CommandError(f"cannot read the devices of {chat}: {error}") from None
    rows = {name: {"name": name, "online": False, "last_seen": None, "running": 0, "local": False}
            for name in sorted(enrolled)}
    node = _hub(chat)
    if node is not None:
        try:
            for row in _ask(node, chat, schema.ListDevices()).devices:
                rows[row["name"]] = row
        except CommandError as error:  # the list from the file still stands
            print(f"everchat: warning: who is online is unknown: {error}", file=sys.stderr, flush=True)
        finally:
            node.stop()
    for row in rows.values():
        if args.json:
            print(json.dumps(row, sort_keys=True))
            continue
        seen = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["last_seen"])) if row["last_seen"] else "never"
        state = "this computer" if row.get("local") else "online" if row["online"] else "offline"
        print(f"{row['name']:<24} {state:<14} last seen {seen}  running {row['running']}")
    if not rows:
        print("no devices: `everchat device add NAME` joins one")
    return EXIT_OK
