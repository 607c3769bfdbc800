"""One thread's connection to one peer node: a DEALER and a monitor on it.

Asking threads send on their own DEALER and wait for the reply on it, so a reply never
needs a hop through the gateway thread. The DEALER has ZMQ_IMMEDIATE set: frames are only
queued on a connection whose handshake completed, so a send to a peer that is down fails at
once (EAGAIN) instead of waiting in a queue for a process that may never come back. The
monitor tells connection up (handshake succeeded) from connection lost (disconnected); an
ask whose connection drops while it waits raises PeerLost within SLICE.

The monitor is read only when something is off (a send that cannot go, a slice of waiting
without a reply), never on the fast path: its events are queued in order, so draining them
all always leaves `up` right, and a disconnect that happened before our send cannot look
like a lost peer once the reconnection's event has been read after it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

from ._errors import ActorStopped, AskTimeout, BadFrame, PeerLost, Refused, TransportError
from ._wire import FLUSH, NOBLOCK, REPLY, Address, parse_reply, readable, request_frame, tune
from .schema import BLOCK, DROP

if TYPE_CHECKING:
    from ._ports import Dialer

__all__ = ["Client", "SLICE"]

log = logging.getLogger("everchat.transport")

SLICE = 0.05    # waits wake this often to notice a stopping node or a lost peer
_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
           | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
_monotonic = time.monotonic
_send = zmq.backend.Socket.send
_recv = zmq.backend.Socket.recv
_unpackb = msgpack.unpackb


class Client:
    """A DEALER to `address` for the calling thread only (see the module docstring)."""

    def __init__(self, node: Dialer, address: Address) -> None:
        self.node = node
        self.address = address
        self.owner = threading.get_ident()
        sock = node._socket(zmq.DEALER)
        tune(sock, tcp=address.server_key is not None)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.RCVTIMEO, int(SLICE * 1000))
        if address.server_key is not None:
            pair = node._pair
            if pair is None:
                sock.close(0)
                raise TransportError(f"{node.ident}: tcp peer {address.requests} needs CURVE keys: Node(keys=...)")
            sock.curve_serverkey = address.server_key
            sock.curve_publickey = pair.public
            sock.curve_secretkey = pair.secret
        self.monitor = sock.get_monitor_socket(_EVENTS)
        node._track(self.monitor)
        sock.connect(address.requests)
        self.sock = sock
        self.up = False          # a connection with a finished handshake exists
        self.ever_up = False
        self.lost = 0            # connections dropped so far
        self.dirty = False       # tells sent since the peer last proved it read them
        self.fresh = False       # handshake seen, no frame sent since: the pipe may still be attaching
        self._timeout = SLICE

    def __repr__(self) -> str:
        return f"<Client {self.node.ident} -> {self.address.requests} {'up' if self.up else 'down'}>"

    def drain(self) -> None:
        """Apply the monitor's pending events to `up`, `ever_up` and `lost`."""
        monitor = self.monitor
        while readable(monitor):
            event = recv_monitor_message(monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.up = self.ever_up = self.fresh = True
            elif event == zmq.EVENT_DISCONNECTED:
                if self.up:
                    self.lost += 1
                self.up = False
            else:
                log.warning("%s: handshake with %s failed (%s): wrong key, or ours is not authorized there",
                            self.node.ident, self.address.requests, zmq.Event(event).name)

    # ---- sending ----

    def send(self, frame: bytes, policy: str, connect_until: float, room_until: float) -> bool:
        """Send a request frame; True when sent, False when dropped (policy DROP).

        A connection that is down is waited for until `connect_until` (then PeerLost; a DROP
        message to a peer that was up before is dropped at once). A full queue is handled by
        `policy`: DROP returns False, REFUSE raises Refused, BLOCK waits for room until
        `room_until` and then raises Refused."""
        self.dirty = True
        try:
            _send(self.sock, frame, NOBLOCK)
            self.fresh = False
            return True
        except zmq.Again:
            return self._send_slow(frame, policy, connect_until, room_until)

    def _send_slow(self, frame: bytes, policy: str, connect_until: float, room_until: float) -> bool:
        self.drain()
        if not self.up or self.fresh:
            if not self.up:
                if policy == DROP and self.ever_up:
                    return False
                self._wait_up(connect_until)
            # the pipe reaches the socket just after the handshake event: give it that moment
            if self.sock.poll(max(1, int((connect_until - _monotonic()) * 1000)), zmq.POLLOUT):
                try:
                    _send(self.sock, frame, NOBLOCK)
                    self.fresh = False
                    return True
                except zmq.Again:
                    pass
        if policy == DROP:
            return False
        if policy != BLOCK:
            raise Refused(f"{self.node.ident}: queue to {self.address.requests} is full")
        while True:
            left = room_until - _monotonic()
            if left <= 0:
                raise Refused(f"{self.node.ident}: queue to {self.address.requests} stayed full")
            if self.sock.poll(max(1, int(min(left, SLICE) * 1000)), zmq.POLLOUT):
                try:
                    _send(self.sock, frame, NOBLOCK)
                    return True
                except zmq.Again:
                    continue
            self.drain()
            if not self.up:
                self._wait_up(connect_until)
            if self.node._stopping:
                raise ActorStopped(f"{self.node.ident} stopped")

    def _wait_up(self, until: float) -> None:
        while not self.up:
            left = until - _monotonic()
            if left <= 0:
                raise PeerLost(f"{self.node.ident}: no connection to {self.address.requests}")
            if self.monitor.poll(max(1, int(min(left, SLICE) * 1000))):
                self.drain()
            if self.node._stopping:
                raise ActorStopped(f"{self.node.ident} stopped")

    def flush(self, timeout: float) -> None:
        """Wait until the peer's gateway has read every tell we sent (see _wire.FLUSH)."""
        self.drain()
        if not self.dirty or not self.up:
            return
        request_id = next(self.node._rids)
        deadline = _monotonic() + timeout
        try:
            self.send(request_frame(FLUSH, request_id, "", self.node.name, time.time() + timeout, None),
                      BLOCK, deadline, deadline)
            self.wait_reply(request_id, deadline, "(flush)", stoppable=False)
        except TransportError as exc:
            log.warning("%s: tells to %s may be lost: flush failed: %s", self.node.ident, self.address.requests, exc)

    # ---- waiting for the reply ----

    def wait_reply(self, request_id: int, deadline: float, target: str, stoppable: bool = True,
                   asker: Any = None) -> Any:
        """The message object (unchecked) of the reply to `request_id`. Raises AskTimeout at
        the deadline (PeerLost if the connection is down by then), PeerLost once the
        connection drops, ActorStopped when our node stops (or `asker`, the asking actor's
        mailbox, is asked to stop: `Node.ask(interruptible=True)`). Replies to earlier asks are
        dropped and counted as late. Each reply is one frame: a peer that sends more parts
        gets each part judged (and counted) as a frame of its own."""
        lost = self.lost
        sock = self.sock
        node = self.node
        while True:
            try:
                data = _recv(sock, 0)
            except zmq.Again:
                data = None
            if data is not None:
                try:
                    frame = _unpackb(data)
                except (ValueError, TypeError, OverflowError, msgpack.UnpackException):
                    frame = None
                if (type(frame) is list and len(frame) == 3 and frame[0] == REPLY
                        and frame[1] == request_id and type(frame[1]) is int):
                    if self._timeout != SLICE:
                        self._restore()
                    self.dirty = False
                    return frame[2]
                try:
                    answered, _ = parse_reply(data)
                except BadFrame as exc:
                    node._count_bad_reply(self.address, exc.reason)
                    continue
                node._count_late_reply(self.address, answered)
                continue
            self.drain()
            if self.lost != lost and not self.up:
                self._restore()
                raise PeerLost(f"{node.ident}: connection to {self.address.requests} (hosting {target!r}) "
                               "dropped while waiting for the reply")
            if stoppable and node._stopping:
                self._restore()
                raise ActorStopped(f"{node.ident} stopped while asking {target!r}")
            if asker is not None and not asker.alive:
                self._restore()
                raise ActorStopped(f"{asker.ident} was asked to stop while asking {target!r}")
            left = deadline - _monotonic()
            if left <= 0:
                self._restore()
                if not self.up:
                    raise PeerLost(f"{node.ident}: no connection to {self.address.requests} (hosting {target!r})")
                raise AskTimeout(f"{node.ident}: no reply from {target!r} at {self.address.requests} in time")
            if left < self._timeout:
                self._timeout = left
                sock.setsockopt(zmq.RCVTIMEO, max(1, int(left * 1000)))

    def _restore(self) -> None:
        if self._timeout != SLICE:
            self._timeout = SLICE
            self.sock.setsockopt(zmq.RCVTIMEO, int(SLICE * 1000))
