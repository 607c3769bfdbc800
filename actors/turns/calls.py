"""What the actors that run model calls share (the turn runner and the agents): the
session's settings handed to a process of their own, the log read by asks, and the
computers joined now for a call's header (R36).

A leaf among the actors (the transport and the config only), so the turn runner and the
agents import it, and each other not at all (tests/test_boundaries.py).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable, Iterator

from everchat.transport import TransportError, schema

__all__ = ["AskReader", "SETTINGS_ENV", "computers_joined", "configured_settings", "interruptible", "settings_flags"]

log = logging.getLogger("everchat.actors")

_ASK_SECONDS = 30.0
_LIST_SECONDS = 5.0

SETTINGS_ENV = "EVERCHAT_TURN_SETTINGS"
"""A turn runner started in its own process reads the session's settings (as flags, no
keys: those come from the environment) from this variable."""


def settings_flags(settings) -> dict:
    """The settings as `config.load` flags, so another process resolves the same ones
    (keys stay in the environment)."""
    flags: dict = {}
    subscription = getattr(settings.reply, "connection", "api") == "subscription"
    for role in ("reply", "compaction"):
        model = getattr(settings, role)
        # Under a subscription the provider is the CLI's name, and a model may be unset ("").
        keys = ("model", "effort") if subscription else ("provider", "model", "base_url", "effort", "dummy_key")
        for key in keys:
            value = getattr(model, key)
            if value is not None and value != "":
                flags[f"{role}.{key}"] = value
    # Always said, so that a process of its own never picks up another connection from the
    # file (the demo's "api" included).
    flags["connection"] = "subscription" if subscription else "api"
    reply = settings.reply
    for key in ("cli", "cli_executable", "cli_timeout", "cli_concurrency"):
        if getattr(reply, key, None) is not None:
            flags[key] = getattr(reply, key)
    flags["settle_timeout"] = settings.settle_timeout
    flags["tool_rounds"] = settings.tool_rounds
    flags["compaction_jobs"] = settings.compaction_jobs
    flags["agent_jobs"] = settings.agent_jobs
    flags["tools"] = settings.tools
    flags["search"] = settings.search
    flags["allow_local_fetch"] = settings.allow_local_fetch
    if getattr(settings, "after_turn", ""):
        flags["after_turn"] = settings.after_turn
    if getattr(settings, "data_dir", None) is not None:
        flags["data_dir"] = str(settings.data_dir)
    if settings.instructions_file is not None and settings.sources.get("instructions", "default") != "default":
        flags["instructions"] = str(settings.instructions_file)
    flags["home"] = str(settings.home)
    return flags


def configured_settings():
    """The settings of a turn runner in a process of its own: the session's (from
    `SETTINGS_ENV`), else the usual flag-less load."""
    from everchat.actors.settings import load

    given = os.environ.get(SETTINGS_ENV)
    if not given:
        return load()
    flags = json.loads(given)
    home = flags.pop("home", None)
    return load(flags, home=home)


class AskReader:
    """`turns.MemoryReader` over asks to the log writer (the turn runner's and a session's)."""

    def __init__(self, node, log_writer: str = "log_writer") -> None:
        self._node = node
        self.log_writer = log_writer

    def _ask(self, msg: schema.Message) -> schema.Message:
        return self._node.ask(self.log_writer, msg, timeout=_ASK_SECONDS)

    def count(self) -> int:
        return self._ask(schema.CountMessages()).messages

    def message(self, i: int) -> schema.MessageRecord:
        return self._ask(schema.ReadMessage(i=i))

    def node(self, l: int, i: int) -> str | None:  # noqa: E741
        return self._ask(schema.ReadNodes(nodes=[(l, i)])).texts[0]

    def asset(self, digest: str) -> bytes:
        return self._ask(schema.ReadAsset(digest=digest)).data


def computers_joined(node, devices: str = "devices") -> list[str]:
    """R36: the header's computers joined now, from the devices' hub: this computer first
    (the default device), then every device online. A hub that does not answer leaves this
    computer alone listed, and the log says why."""
    try:
        rows = node.ask(devices, schema.ListDevices(), timeout=_LIST_SECONDS).devices
    except TransportError as error:
        log.warning("no device list for a call's header: %s", error)
        return [f"{socket.gethostname()} (this computer, the default)"]
    names = [f"{row['name']} (this computer, the default)" for row in rows if row.get("local")]
    names += [row["name"] for row in rows if not row.get("local") and row.get("online")]
    return names


_DONE = object()
_POLL_SECONDS = 0.05


def interruptible(open_stream: Callable[[], Iterator], *stops: threading.Event, name: str = "model-stream") -> Iterator:
    """The model's events, read in a thread of their own so that any of `stops` ends the
    iteration at once even while the stream waits for its next chunk (R37). The reader
    closes the HTTP stream when it sees a stop."""
    events: queue.Queue = queue.Queue()

    def stopped() -> bool:
        return any(stop.is_set() for stop in stops)

    def read() -> None:
        try:
            stream = open_stream()
            try:
                for event in stream:
                    events.put(event)
                    if stopped():
                        break
            finally:
                stream.close()
        except BaseException as error:  # handed to the call, which reports it
            events.put(error)
        events.put(_DONE)

    threading.Thread(target=read, name=name, daemon=True).start()
    while True:
        try:
            item = events.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            if stopped():
                return
            continue
        if item is _DONE:
            return
        if isinstance(item, BaseException):
            raise item
        yield item
