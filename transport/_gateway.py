"""The gateway: the one thread per node that owns its bound sockets and feeds the inboxes.

Sockets (all created in `Node.start()`, used by this thread afterwards):
- ROUTER at the node's endpoint: requests from other processes. Each is decoded here and
  put in the target's pykka inbox; a frame that does not decode is dropped, logged and
  counted, and the loop goes on. The one exception to "only the gateway touches it":
  an actor thread sends its reply on the ROUTER itself, under `node._router_lock` (the
  gateway reads under the same lock and waits on the socket's file descriptor, never inside
  ZeroMQ, so the socket is never used by two threads at once). That saves a thread hop per
  request: measured, the hop cost more than the rest of the handling.
- PULL (inproc): frames other threads hand over: events to publish, subscriptions to make,
  wake-ups (OP_WAKE), the stop signal.
- XPUB next to the ROUTER: events out, once per subscribed process; it also reports the
  subscriptions of the processes connected to it.
- one SUB per peer node: events in, fanned out to the local subscribers of their topic.
- the ZAP handler: who may connect to the ROUTER and the XPUB. tcp: CURVE clients with an
  authorized key; ipc: processes of the node's own user (P5; `_keys.py` says how). The ipc
  socket files are also made 0600 right after the bind, whatever the umask.

Over tcp each request's Delivery carries `peer`, the CURVE public key its connection was
made with (the ZAP User-Id libzmq attaches to every message of the connection), so an
actor can check who asks (the device hub does, docs/HANDS.md §5). A key authorized as a
joined computer's (`device.NAME` in authorized_keys) reaches the device hub only: a request
of it to any other actor is refused here, its connection to the events socket is refused
at the handshake (it would read every topic), and once such a key is revoked
(`KeyStore.revoke`) it gets nothing through, on a connection made before too. Both refusals
answer an ask with RemoteError("PermissionError", why). (Other keys cost a set lookup per
request: a revoked actor key still needs its connection closed, as before.)

When a mailbox is full and the message may not be dropped (policy "block", or a tell of a
"refuse" type whose sender could not hear a refusal), the gateway parks it and stops reading
the ROUTER and the SUBs until the actor makes room: the backpressure reaches the senders
through ZeroMQ's high-water marks. Replies, events out and ZAP go on meanwhile.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

import zmq
from zmq.backend import zmq_poll

from ._actor import K_BAD, K_REFUSED, K_STOPPED
from ._errors import BadFrame
from ._keys import DEVICE_HUB, ZAP_DOMAIN, ZAP_ENDPOINT, ZAP_EVENTS_DOMAIN, ZapHandler, own_uid
from ._mailbox import QUEUED, Delivery, Mailbox
from ._wire import (ASK, FLUSH, NOBLOCK, POLLIN, RCVMORE, event_frame, parse_event, parse_request, readable,
                    recv_frames, reply_frame, send_frames, tcp_address, topic_frame, tune)
from .schema import BLOCK, DROP, Ack, ErrorReply, from_obj

if TYPE_CHECKING:
    from ._ports import GatewayHost

__all__ = ["Gateway", "OP_WAKE", "OP_PUBLISH", "OP_CONNECT", "OP_SUBSCRIBE", "OP_QUIT"]

log = logging.getLogger("everchat.transport")

OP_WAKE, OP_PUBLISH, OP_CONNECT, OP_SUBSCRIBE, OP_QUIT = b"W", b"P", b"C", b"S", b"Q"
K_DENIED = "PermissionError"   # a request refused for who sent it: `ask` raises RemoteError of this kind
BATCH = 64      # frames read from one socket before looking at the others


class Gateway:
    """The gateway of one node (see the module docstring)."""

    def __init__(self, node: GatewayHost) -> None:
        self.node = node
        self.recorder = node._gateway_recorder
        ctx = node._context
        self.pull = ctx.socket(zmq.PULL)
        self.pull.bind(node._pull_endpoint)
        self.router = self.xpub = self.zap = None
        self.zap_handler: ZapHandler | None = None
        self.subs: dict[str, zmq.Socket] = {}
        self.parked: deque[tuple[Mailbox, Delivery, bytes | None]] = deque()
        self.incarnation = random.getrandbits(62)
        self.seqs: dict[bytes, int] = {}
        self.seen: dict[tuple[int, bytes], int] = {}
        self.quit = False
        self.router_more = False
        self.tcp = False
        if node._bind is not None:
            self._bind(node._bind)
        self.thread = threading.Thread(target=self.run, name=f"everchat-gateway-{node.name}", daemon=True)

    def _bind(self, bind: str) -> None:
        node, ctx = self.node, self.node._context
        tcp = self.tcp = bind.startswith("tcp://")
        self.zap = ctx.socket(zmq.ROUTER)
        self.zap.bind(ZAP_ENDPOINT)
        if tcp:
            self.zap_handler = ZapHandler(node._keys, node._pair, node.ident)
        else:
            self.zap_handler = ZapHandler(None, None, node.ident, uid=own_uid())
        self.router = ctx.socket(zmq.ROUTER)
        self.xpub = ctx.socket(zmq.XPUB)
        for sock in (self.router, self.xpub):
            tune(sock, tcp=tcp)
            sock.zap_domain = ZAP_DOMAIN      # ipc too: with the NULL mechanism ZAP still asks us
            if tcp and sock is self.xpub:
                sock.zap_domain = ZAP_EVENTS_DOMAIN   # joined computers get no events (_keys.py)
            if tcp:
                sock.curve_server = True
                sock.curve_secretkey = node._pair.secret
                sock.curve_publickey = node._pair.public
        self.xpub.setsockopt(zmq.LINGER, 0)      # events are droppable; replies get the linger
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        node._router = self.router
        self.xpub.setsockopt(zmq.XPUB_VERBOSER, 1)
        self.router.bind(bind)
        requests = self.router.getsockopt(zmq.LAST_ENDPOINT).decode()
        if tcp:
            self.xpub.bind(requests.rpartition(":")[0] + ":0")
            port = int(self.xpub.getsockopt(zmq.LAST_ENDPOINT).decode().rpartition(":")[2])
            node.endpoint = tcp_address(requests, port, node._pair.public)
        else:
            self.xpub.bind(requests + ".events")
            node.endpoint = requests
            for path in (requests[len("ipc://"):], requests[len("ipc://"):] + ".events"):
                _owner_only(path)

    # ---- the loop ----

    def run(self) -> None:
        calm = [(sock, POLLIN) for sock in (self.pull, self.xpub, self.zap) if sock is not None]
        router_fd = self.router.getsockopt(zmq.FD) if self.router is not None else None
        full = self.full = calm + ([(router_fd, POLLIN)] if router_fd is not None else [])
        handlers = self.handlers = {self.pull: self._on_pull, self.xpub: self._on_xpub, self.zap: self._on_zap}
        if self.node._subscribers:  # else the first subscription connects them (Node.route)
            for events in list(self.node._event_sources.items()):
                self._connect(*events)
        while not self.quit:
            try:
                if self.parked:
                    ready = zmq_poll(calm, 1)
                else:
                    ready = zmq_poll(full, 0 if self.router_more else -1)
                for sock, _ in ready:
                    if sock == router_fd:
                        self.router_more = True
                    else:
                        handlers[sock](sock)
                if self.parked:
                    self._unpark()
                elif self.router_more:
                    self._on_router()
            except Exception:   # a bug here must not take the node's transport down
                self.recorder.errors += 1
                log.exception("%s: gateway error (the gateway goes on)", self.node.ident)
        self._close()

    def _close(self) -> None:
        while self.parked:
            mailbox, delivery, identity = self.parked.popleft()
            if identity is not None:
                self._error(identity, delivery.request_id, K_STOPPED, f"{self.node.ident} stopped")
        with self.node._router_lock:
            self.node._router = None
            for sock in (self.router, self.xpub, self.zap, self.pull, *self.subs.values()):
                if sock is not None:
                    sock.close()

    def _drain(self, sock: zmq.Socket, handle) -> None:
        for _ in range(BATCH):
            if not readable(sock):
                return
            handle(recv_frames(sock, NOBLOCK))
            if self.parked:
                return

    # ---- requests in ----

    def _on_router(self) -> None:
        """Read what the ROUTER holds (under the lock actor threads send replies with) and
        handle it. The ROUTER is waited on through its ZMQ_FD, which only says "look": a
        send by another thread may consume that signal, so that thread checks for input
        after sending and wakes us (OP_WAKE); `router_more` says "look again"."""
        router = self.router
        receive = _recv_with_peer if self.tcp else _recv_without_peer
        with self.node._router_lock:
            try:       # the descriptor fired: there is nearly always a request, so just read it
                batch = [receive(router)]
            except zmq.Again:
                batch = []
            while batch and len(batch) < BATCH and readable(router):
                batch.append(receive(router))
        self.router_more = len(batch) == BATCH
        for frames, peer in batch:
            self._request(frames, peer)

    def _request(self, frames: list[bytes], peer: str | None = None) -> None:
        if len(frames) != 2:
            return self._bad(None, f"request of {len(frames) - 1} frames, expected 1")
        identity, data = frames
        try:
            kind, request_id, target, sender, deadline, body = parse_request(data)
        except BadFrame as exc:
            return self._bad(None, exc.reason)
        if kind == FLUSH:
            return self.node._send_routed([identity, reply_frame(request_id, Ack())])
        ask = kind == ASK
        if peer is not None and self.zap_handler.limited_to_hub(peer):   # a set lookup for other keys
            if not self.zap_handler.admits(peer):
                why = f"the key {peer} is no longer authorized here (revoked)"
            elif target != DEVICE_HUB:
                why = f"the key {peer} is a joined computer's, which reaches only {DEVICE_HUB!r}, not {target!r}"
            else:
                why = None
            if why is not None:
                self.recorder.refused += 1
                log.warning("%s: %s for %r from %s refused: %s", self.node.ident, "ask" if ask else "tell",
                            target, sender, why)
                if ask:
                    self._error(identity, request_id, K_DENIED, f"{self.node.ident}: {why}")
                return
        mailbox = self.node._mailboxes.get(target)
        if mailbox is None or not mailbox.alive:
            if ask:
                return self._error(identity, request_id, K_STOPPED, f"no actor {target!r} at {self.node.ident}")
            self.recorder.errors += 1
            if self.recorder.errors <= 100 or self.recorder.errors % 1000 == 0:
                log.warning("%s: tell for %r from %s dropped: no such actor here (%d so far)",
                            self.node.ident, target, sender, self.recorder.errors)
            return
        try:
            msg = from_obj(body)
        except BadFrame as exc:
            self._bad(mailbox, f"{exc.reason} (from {sender})")
            if ask:
                self._error(identity, request_id, K_BAD, f"{mailbox.ident} could not decode the request: {exc.reason}")
            return
        if ask:
            now = time.monotonic()
            local_deadline = now + (deadline - time.time())
            if local_deadline <= now:
                mailbox.recorder.dropped_late += 1
                log.info("%s: %s from %s not run: its deadline passed on the way", mailbox.ident,
                         msg.type_name, sender)
                return
            self._deliver(mailbox, Delivery(msg, sender, local_deadline, request_id, identity, mailbox, None, peer),
                          identity)
        else:
            self._deliver(mailbox, Delivery(msg, sender, None, None, None, mailbox, None, peer), None)

    def _deliver(self, mailbox: Mailbox, delivery: Delivery, identity: bytes | None) -> None:
        if self.parked:
            self.parked.append((mailbox, delivery, identity))
            return
        if mailbox.offer(delivery) is QUEUED:
            return
        policy = delivery.msg.policy
        if identity is None and policy == DROP:
            mailbox.recorder.dropped_full += 1
            if delivery.topic is not None:
                mailbox.note_missed(delivery.topic, 1)
            if mailbox.recorder.dropped_full % 1000 == 1:
                log.warning("%s: mailbox full, dropping %s (%d dropped so far)", mailbox.ident,
                            delivery.msg.type_name, mailbox.recorder.dropped_full)
        elif identity is not None and policy != BLOCK:
            mailbox.recorder.refused += 1
            self._error(identity, delivery.request_id, K_REFUSED,
                        f"{mailbox.ident}: mailbox full ({mailbox.inbox.bound}), {delivery.msg.type_name} refused")
        else:
            log.info("%s: mailbox full; the gateway stops reading until it has room", mailbox.ident)
            self.parked.append((mailbox, delivery, identity))

    def _unpark(self) -> None:
        while self.parked:
            mailbox, delivery, identity = self.parked[0]
            if not mailbox.alive:
                if identity is not None:
                    self._error(identity, delivery.request_id, K_STOPPED, f"{mailbox.ident} stopped")
            elif mailbox.offer(delivery) is not QUEUED:
                return
            self.parked.popleft()
        self.router_more = True     # requests may have waited while we were parked

    def _bad(self, mailbox: Mailbox | None, reason: str) -> None:
        (mailbox.recorder if mailbox is not None else self.recorder).dropped_bad += 1
        log.warning("%s: bad frame dropped: %s", mailbox.ident if mailbox is not None else self.node.ident, reason)

    def _error(self, identity: bytes, request_id: int, kind: str, text: str) -> None:
        self.node._send_routed([identity, reply_frame(request_id, ErrorReply(kind, text))])

    # ---- from other threads ----

    def _on_pull(self, sock: zmq.Socket) -> None:
        self._drain(sock, self._command)

    def _command(self, frames: list[bytes]) -> None:
        op = frames[0]
        if op == OP_WAKE:
            self.router_more = True
        elif op == OP_PUBLISH:
            topic, body, sender = frames[1:]
            seq = self.seqs[topic] = self.seqs.get(topic, 0) + 1
            send_frames(self.xpub, [topic, event_frame(self.incarnation, seq, sender.decode(), body)], NOBLOCK)
        elif op == OP_SUBSCRIBE:
            for sub in self.subs.values():
                sub.setsockopt(zmq.SUBSCRIBE, frames[1])
        elif op == OP_CONNECT:
            self._connect(frames[1].decode(), frames[2] or None)
        elif op == OP_QUIT:
            self.quit = True

    # ---- events ----

    def _on_xpub(self, sock: zmq.Socket) -> None:
        for _ in range(BATCH):
            if not readable(sock):
                return
            frame = sock.recv(NOBLOCK)
            if frame[:1] in (b"\x00", b"\x01") and frame.endswith(b"\0"):
                self.node._remote_subscription(frame[1:-1].decode(errors="replace"), 1 if frame[0] else -1)

    def _connect(self, events: str, server_key: bytes | None) -> None:
        node = self.node
        if events in self.subs:
            return
        sub = node._context.socket(zmq.SUB)
        tune(sub, tcp=server_key is not None)
        sub.setsockopt(zmq.LINGER, 0)            # nothing worth waiting for: subscriptions
        if server_key is not None:
            sub.curve_serverkey = server_key
            sub.curve_publickey = node._pair.public
            sub.curve_secretkey = node._pair.secret
        for topic in list(node._subscribers):
            sub.setsockopt(zmq.SUBSCRIBE, topic_frame(topic))
        sub.connect(events)
        self.subs[events] = sub
        self.full.append((sub, POLLIN))
        self.handlers[sub] = self._on_sub

    def _on_sub(self, sock: zmq.Socket) -> None:
        self._drain(sock, self._event)

    def _event(self, frames: list[bytes]) -> None:
        if len(frames) != 2 or not frames[0].endswith(b"\0"):
            return self._bad(None, f"event of {len(frames)} frames")
        topic_bytes, data = frames
        try:
            incarnation, seq, sender, body = parse_event(data)
            msg = from_obj(body)
        except BadFrame as exc:
            return self._bad(None, f"event: {exc.reason}")
        key = (incarnation, topic_bytes)
        last = self.seen.get(key)
        self.seen[key] = seq
        gap = seq - last - 1 if last is not None and seq > last + 1 else 0
        topic = topic_bytes[:-1].decode(errors="replace")
        for mailbox in self.node._subscribers.get(topic, ()):
            if not mailbox.alive:
                continue
            if gap:
                mailbox.recorder.dropped_full += gap
                mailbox.note_missed(topic, gap)
            self._deliver(mailbox, Delivery(msg, sender, None, None, None, mailbox, topic), None)

    # ---- ZAP ----

    def _on_zap(self, sock: zmq.Socket) -> None:
        while readable(sock):
            reply = self.zap_handler.reply(recv_frames(sock, NOBLOCK))
            if reply is not None:
                if reply[4] != b"200":
                    self.recorder.refused += 1
                send_frames(sock, reply)


def _recv_without_peer(sock: zmq.Socket) -> tuple[list[bytes], None]:
    return recv_frames(sock, NOBLOCK), None


def _recv_with_peer(sock: zmq.Socket) -> tuple[list[bytes], str | None]:
    """A tcp request's frames and the CURVE key its connection was made with (the User-Id
    our ZAP handler gave it). Its first frame is read as a zmq.Frame for that, the rest
    as bytes (zmq.Again when nothing waits)."""
    first = sock.recv(NOBLOCK, copy=False)
    try:
        peer = first.get("User-Id")
    except zmq.ZMQError:    # no such property: a connection ZAP did not see
        peer = None
    frames = [first.bytes]
    while sock.getsockopt(RCVMORE):
        frames.append(sock.recv(NOBLOCK))
    return frames, peer


def _owner_only(path: str) -> None:
    """Make an ipc socket file 0600 whatever the umask left (P5). A Linux abstract socket
    (`ipc://@name`) has no file: the ZAP uid check is its only guard."""
    if path.startswith("@"):
        return
    os.chmod(path, 0o600)
