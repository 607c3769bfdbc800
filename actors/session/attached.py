"""Attaching to the running chat: one chat, one server (issue 10, R5).

    session = ChatSession.attach(chat, settings)    # joins the chat `everchat serve` runs
    turn = session.send("Remember amber-42.")       # the same actors, the same events
    session.close()                                 # leaves; the chat goes on

The process that holds a chat's lock (R5) and made its supervisor `attachable` (`serve`,
the terminal chat, the web page) is the chat's server; it says so in its run file,
`run/supervisor.json`. Another writing command of this computer attaches to it instead
of failing on the lock: an `AttachedSession` (actors/session/session.py) is a `ChatSession` whose
node is its own (it binds nothing: it dials the server as `everchat ops` does, over the ipc sockets in
`run/`, or over tcp with the supervisor's CURVE key pair, `KeyStore.load`, which writes
no file), hosts its listener actor, subscribes to "turn" and "failed", and asks the same
actors. The server keeps its lock and its folder: an attached client never opens the
store.

Its retry policy (P4) reads `running(name)`, `incarnation(name)` and `stopping` of the
server's supervisor through `RemoteSupervisor`, which asks `SupervisorStatus` (cached for
the session's poll interval) and follows an actor's endpoint when a restart moved it.
`close()` leaves: it stops this node only, never the server's actors nor a turn that
another client started (R36: an input sent while a turn runs joins that turn, whoever
started it).

Exceptions: `NotAttachable` when no server of this computer runs the chat (no run file,
one left by a crash, a one-shot command's, or a server that does not answer or is
stopping); `ServerGone` (a `PeerLost`) when the server stops while we are attached.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from everchat.actors.supervisor.actor import GaveUp
from everchat.transport import KeyStore, Node, PeerLost, TransportError, schema

__all__ = ["RemoteSupervisor", "NotAttachable", "ServerGone", "dial", "server_info"]

_POLL_SECONDS = 0.05  # as the session's: one SupervisorStatus per poll of its retry policy
_ASK_SECONDS = 5.0
_ROUTED = ("log_writer", "planner", "turn_runner")  # whom a session asks: attaching waits until they run


class NotAttachable(RuntimeError):
    """No server of this computer runs the chat, so there is nothing to attach to: no run
    file, one left by a process that is gone, one of a one-shot command (not attachable),
    or a server that does not answer or is stopping. The text says which."""


class ServerGone(PeerLost):
    """The server we were attached to stopped (or stopped answering) while we used it."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def server_info(chat: Path) -> dict | None:
    """The run file of the server running `chat` on this host, or None: no run file, one
    that does not read, a process on another host or gone, or a supervisor that is not
    `attachable` (a one-shot command's)."""
    try:
        info = json.loads((Path(chat) / "run" / "supervisor.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("attachable") is not True:
        return None
    pid, endpoint = info.get("pid"), info.get("endpoint")
    if info.get("host") != socket.gethostname() or type(pid) is not int or not isinstance(endpoint, str):
        return None
    return info if _alive(pid) else None


class RemoteSupervisor:
    """The server's supervisor as the session's retry policy reads it (P4): `stopping`,
    `running(name)`, `incarnation(name)`, from `SupervisorStatus` asked at most once per
    poll interval. Each answer also routes our node to every actor where it now lives.
    `stop()` stops only our node. A supervisor that no longer answers raises ServerGone."""

    def __init__(self, node: Node, chat: Path, info: dict) -> None:
        self.node = node
        self.chat = Path(chat)
        self.pid: int = info["pid"]
        self.placement_mode: str = info.get("placement", "single")
        self._rows: dict[str, tuple] = {}
        self._stopping = False
        self._at = float("-inf")
        self._routes: dict[str, str] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<RemoteSupervisor {self.chat} server pid={self.pid} via {self.node.ident}>"

    def refresh(self, force: bool = False) -> None:
        """Ask the supervisor again (unless asked within the poll interval)."""
        with self._lock:
            if not force and time.monotonic() - self._at < _POLL_SECONDS:
                return
            try:
                state = self.node.ask("supervisor", schema.SupervisorStatus(), timeout=_ASK_SECONDS)
            except TransportError as error:
                raise ServerGone(f"the running chat (pid {self.pid}) is gone: {error}") from None
            self._rows = {row[0]: row for row in state.actors}
            self._stopping = state.stopping
            self._at = time.monotonic()
            for name, running, _, _, endpoint, _ in state.actors:
                if endpoint and self._routes.get(name) != endpoint:
                    self.node.route(name, endpoint)  # first sight, or a restart moved it (tcp: a new port)
                    self._routes[name] = endpoint

    @property
    def stopping(self) -> bool:
        """The server is stopping its actors (none is restarted): a loss now is final."""
        self.refresh()
        return self._stopping

    def running(self, name: str) -> bool:
        """As `Supervisor.running`: GaveUp once the server gave up on it, ValueError for a
        name that is none of the chat's actors."""
        self.refresh()
        row = self._row(name)
        if row[5]:
            raise GaveUp(f"{row[5]} (the chat cannot go on without it)")
        return row[1]

    def incarnation(self, name: str) -> tuple[int, int]:
        self.refresh()
        row = self._row(name)
        return row[2], row[3]

    def _row(self, name: str) -> tuple:
        row = self._rows.get(name)
        if row is None:
            raise ValueError(f"{self}: no actor called {name!r} belongs to this chat")
        return row

    def stop(self) -> None:
        """Leave: our node stops (our subscriptions end with it); the server runs on."""
        self.node.stop()


def dial(chat: str | Path, timeout: float = 30.0) -> RemoteSupervisor:
    """Reach the server running `chat` (NotAttachable when none does; see the module
    docstring): a node of our own, routed to the server's supervisor and, through its
    `SupervisorState`, to every actor. Returns once every actor a session asks runs."""
    chat = Path(chat)
    info = server_info(chat)
    if info is None:
        raise NotAttachable(f"no Everchat server runs the chat in {chat}")
    pair = None
    if info.get("transport") == "tcp":
        try:
            pair = KeyStore(chat / "config").load("supervisor")  # an authorized key; no file is written
        except TransportError as error:
            raise NotAttachable(f"the Everchat server on {chat} (pid {info['pid']}) serves over tcp, and its key "
                                f"cannot be used: {error}") from None
    node = Node(f"attach.{os.getpid()}", pair=pair)
    node.start()
    try:
        node.route("supervisor", info["endpoint"])
        remote = RemoteSupervisor(node, chat, info)
        _await_actors(remote, time.monotonic() + timeout)
    except ServerGone as error:
        node.stop()
        raise NotAttachable(str(error)) from None
    except BaseException:
        node.stop()
        raise
    return remote


def _await_actors(remote: RemoteSupervisor, deadline: float) -> None:
    """Until the server runs every actor the session asks (a server still starting, or
    restarting one), or NotAttachable: it is stopping, or they did not run in time."""
    while True:
        remote.refresh(force=True)
        if remote._stopping:
            raise NotAttachable(f"the Everchat server on {remote.chat} (pid {remote.pid}) is stopping")
        if all(remote.running(name) for name in _ROUTED):
            return
        if time.monotonic() >= deadline:
            raise NotAttachable(f"the Everchat server on {remote.chat} (pid {remote.pid}) did not run "
                                f"{', '.join(name for name in _ROUTED if not remote.running(name))} in time")
        time.sleep(_POLL_SECONDS)  # polling the server's supervisor while its actors start
