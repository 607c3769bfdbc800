"""Node: one per process; hosts actors by name and moves messages to any named actor.

    node = Node("proc-a", bind="ipc:///run/everchat/proc-a").start()
    node.host("echo", Echo)
    node.route("planner", "ipc:///run/everchat/proc-b")    # from the supervisor's Directory
    node.ask("planner", SettleView(40, 5.0), timeout=6.0)
    node.stop()

A target hosted in this process gets the message object straight in its pykka inbox (no
sockets, no encoding). Any other target is reached through its node's address: the calling
thread's own DEALER sends the request and waits for the reply on it; the node's gateway
thread (`_gateway.py`) receives requests for local actors, sends their replies, and carries
events. Naming: `tell` never waits for the handler, `ask` returns its reply, `publish`
sends an event to every subscriber, `wait_*` waits for a condition, `statistics()` reads.

Full mailboxes follow the message type's policy (`schema.BLOCK` / `REFUSE` / `DROP`; `Mailbox.full`):
- a tell of a BLOCK type waits for room up to `block_timeout` (then Refused); an actor
  telling itself never waits (its own mailbox may go past the bound);
- a REFUSE type raises Refused at once (an ask of a DROP type is refused too: a request is
  never dropped silently);
- a tell or event of a DROP type is dropped and counted, and the receiver's
  `on_events_missed` hears of it.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from typing import Any

import pykka
import zmq

from ._actor import K_BAD_REPLY, K_STOPPED, Actor, hosting, unwrap
from ._client import SLICE, Client
from ._errors import ActorStopped, AskTimeout, BadFrame, TransportError
from ._gateway import OP_CONNECT, OP_PUBLISH, OP_QUIT, OP_SUBSCRIBE, OP_WAKE, Gateway
from ._keys import KeyPair, KeyStore
from ._mailbox import QUEUED, Delivery, Mailbox, Slot
from ._stats import MailboxStats, Recorder
from ._wire import (ASK, NOBLOCK, TELL, Address, check_ipc_bind, parse_address, readable, reply_frame, request_frame,
                    send_frames, topic_frame)
from .schema import DROP, REFUSE, ErrorReply, Message, encode, from_obj

__all__ = ["Node"]

log = logging.getLogger("everchat.transport")
_monotonic = time.monotonic


class _ThreadState(threading.local):
    """What a node keeps per thread; class defaults make a missing value a cheap None."""
    mailbox: Mailbox | None = None             # the actor whose thread this is
    clients: dict[str, Client] | None = None   # this thread's DEALERs, by peer address
    push: zmq.Socket | None = None             # this thread's PUSH to the gateway
    sockets: list[zmq.Socket] | None = None    # every socket this thread made


class Node:
    """One process's place in the actor system (see the module docstring).

    name: this process's name in logs and as the sender of messages from non-actor threads.
    bind: None (in-process only), "ipc://PATH", or "tcp://HOST:PORT" (port 0 picks one; a
    missing host means 127.0.0.1). tcp always uses CURVE and needs `keys`.
    keys: a KeyStore; the node's pair is `keys.ensure(name)`. Needed to bind or reach tcp.
    pair: instead of `keys`, for a node that only dials tcp: the KeyPair it presents (one the
    chat already has, `keys.load(...)`), so making the node writes no file (a read-only
    console, P12). A server still authorizes it by its own `authorized_keys`.
    context: a zmq.Context to share (default: the node makes and ends its own). Two nodes
    that bind cannot share one (each runs the context's ZAP handler: tcp keys, ipc uid).
    block_timeout: how long a BLOCK-type message waits for room before Refused.
    connect_timeout: how long a tell waits for a connection to its peer before PeerLost.
    """

    def __init__(self, name: str, bind: str | None = None, keys: KeyStore | None = None,
                 context: zmq.Context | None = None, *, pair: KeyPair | None = None, block_timeout: float = 30.0,
                 connect_timeout: float = 5.0) -> None:
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise TransportError(f"a node name is a non-empty str without spaces, not {name!r}")
        self.name = name
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.ident = f"{name} (pid {self.pid} on {self.hostname})"
        self._bind = self._check_bind(bind, keys)
        if pair is not None and keys is not None:
            raise TransportError(f"{name}: give keys (a KeyStore) or pair (an existing KeyPair), not both")
        if pair is not None and self._bind is not None:
            raise TransportError(f"{name}: a node given only a pair dials out; binding needs keys")
        self._keys = keys
        self._pair = pair if pair is not None else keys.ensure(name) if keys is not None else None
        self._context = context if context is not None else zmq.Context()
        self._own_context = context is None
        self.block_timeout = block_timeout
        self.connect_timeout = connect_timeout
        self.endpoint: str | None = None
        self._own_requests: str | None = None
        self._mailboxes: dict[str, Mailbox] = {}
        self._routes: dict[str, Address] = {}
        self._event_sources: dict[str, bytes | None] = {}
        self._subscribers: dict[str, tuple[Mailbox, ...]] = {}
        self._remote_subs: dict[str, int] = {}
        self._subs_changed = threading.Condition()
        self._rids = itertools.count(1)
        self._tls = _ThreadState()
        self._lock = threading.RLock()
        self._sockets: dict[zmq.Socket, int] = {}     # every thread's socket -> its thread
        self._clients: set[Client] = set()
        self._busy: set[int] = set()    # threads inside a remote tell or ask
        self._gateway_recorder = Recorder()
        self._pull_endpoint = f"inproc://everchat-gateway-{id(self):x}"
        self._gateway: Gateway | None = None
        self._router: zmq.Socket | None = None     # the gateway's; see _send_routed
        self._router_lock = threading.Lock()
        self._started = False
        self._stopping = False
        self.dropped_stopped = 0  # events not published because the node was stopping (P10)

    @staticmethod
    def _check_bind(bind: str | None, keys: KeyStore | None) -> str | None:
        if bind is None:
            return bind
        if bind.startswith("ipc://") and len(bind) > 6:
            check_ipc_bind(bind)
            return bind
        if bind.startswith("tcp://"):
            if keys is None:
                raise TransportError(f"binding {bind} needs CURVE keys: Node(..., keys=KeyStore(config_dir))")
            host, _, port = bind[6:].rpartition(":")
            if not port.isdigit():
                raise TransportError(f"bad tcp bind {bind!r}: expected tcp://HOST:PORT (PORT may be 0)")
            return f"tcp://{host or '127.0.0.1'}:{port}"
        raise TransportError(f"bad bind {bind!r}: None, ipc://PATH or tcp://HOST:PORT")

    def __repr__(self) -> str:
        return f"<Node {self.ident} {self.endpoint or 'in-process only'}>"

    def __enter__(self) -> Node:
        return self if self._started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- lifecycle ----

    def start(self) -> Node:
        """Bind the sockets and start the gateway thread; returns the node."""
        if self._started:
            raise TransportError(f"{self.ident} is already started")
        self._gateway = Gateway(self)
        if self.endpoint is not None:
            self._own_requests = parse_address(self.endpoint).requests
        self._started = True
        self._gateway.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every hosted actor (each handles what was queued before the stop; asks it
        leaves unanswered get ActorStopped), then the gateway; asks still waiting in other
        threads raise ActorStopped; then close every socket. Call it from outside the
        node's actors. Idempotent."""
        if not self._started or self._stopping:
            return
        self._stopping = True
        end = _monotonic() + timeout
        stopping = []
        for mailbox in list(self._mailboxes.values()):
            if mailbox.alive and mailbox.actor is not None:
                mailbox.alive = False
                mailbox.actor._stop_requested()
                stopping.append((mailbox, mailbox.actor.actor_ref.stop(block=False)))
        for mailbox, future in stopping:
            try:
                future.get(timeout=max(0.0, end - _monotonic()))
            except pykka.Timeout:
                log.warning("%s did not stop within %.1f s", mailbox.ident, timeout)
        for mailbox in list(self._mailboxes.values()):  # let each finish its teardown: its sockets
            # (also one stopped before by stop_actor(wait=False), or whose teardown still runs)
            if mailbox.thread_object is not None and mailbox.thread_object is not threading.current_thread():
                mailbox.thread_object.join(max(0.0, end - _monotonic()))
        self._push([OP_QUIT])
        self._gateway.thread.join(timeout)
        until = _monotonic() + SLICE * 4
        while self._busy and _monotonic() < until:    # askers notice _stopping within SLICE
            time.sleep(0.005)
        with self._lock:                              # claim the clients of idle threads
            claimed = [client for client in self._clients if client.owner not in self._busy]
            self._clients.difference_update(claimed)
        for client in claimed:
            client.flush(1.0)
        with self._lock:
            stuck = set(self._busy)
            for sock, owner in list(self._sockets.items()):
                if owner not in stuck and not sock.closed:
                    sock.close()       # tells still queued get LINGER_MS to leave
                    del self._sockets[sock]
        if stuck:
            log.warning("%s: %d threads still inside a send at stop; their sockets stay open",
                        self.ident, len(stuck))
        elif self._own_context:
            self._context.destroy()

    # ---- hosting ----

    def host(self, name: str, actor_class: type[Actor], *args: Any, **kwargs: Any) -> pykka.ActorRef:
        """Start `actor_class(*args, **kwargs)` in this process under `name`. A name hosted
        before (and stopped) keeps its statistics; its restarts count goes up by one."""
        if not (isinstance(actor_class, type) and issubclass(actor_class, Actor)):
            raise TypeError(f"{actor_class!r} is not an everchat.transport.Actor subclass")
        self._check_running()
        with self._lock:
            mailbox = self._mailboxes.get(name)
            if mailbox is not None and mailbox.alive:
                raise TransportError(f"{mailbox.ident} is already hosted")
            if mailbox is None:
                mailbox = Mailbox(name, self)
            else:
                mailbox.recorder.restarts += 1
            hosting.spot = (self, mailbox)
            try:
                actor = actor_class(*args, **kwargs)
            finally:
                hosting.spot = None
            mailbox.actor, mailbox.inbox, mailbox.thread, mailbox.thread_object = actor, actor.actor_inbox, None, None
            mailbox.alive = True
            self._mailboxes[name] = mailbox
            pykka.ActorRegistry.register(actor.actor_ref)
            actor._start_actor_loop()
        return actor.actor_ref

    def stop_actor(self, name: str, timeout: float = 5.0, *, wait: bool = True) -> bool:
        """Stop the actor hosted as `name` after it handles what is already queued; new
        messages to it raise ActorStopped. Its `on_stop_requested` runs first, here. False
        when it was not running. `wait`: block until it stopped and its thread closed its
        sockets (pykka.Timeout after `timeout`); False returns at once (`wait_stopped`
        waits later)."""
        mailbox = self._mailboxes.get(name)
        if mailbox is None or not mailbox.alive:
            return False
        mailbox.alive = False
        mailbox.actor._stop_requested()
        if not wait:
            mailbox.actor.actor_ref.stop(block=False)
            return True
        end = _monotonic() + timeout
        stopped = bool(mailbox.actor.actor_ref.stop(block=True, timeout=timeout))
        if not self.wait_stopped(name, max(0.0, end - _monotonic())):
            raise pykka.Timeout(f"{mailbox.ident} stopped but its thread did not end within {timeout} s")
        return stopped

    def wait_stopped(self, name: str, timeout: float) -> bool:
        """Wait until the actor hosted as `name` has stopped and left its thread; False on
        timeout (True when it never ran)."""
        mailbox = self._mailboxes.get(name)
        thread = mailbox.thread_object if mailbox is not None else None
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _enter_actor_thread(self, mailbox: Mailbox) -> None:
        self._tls.mailbox = mailbox
        mailbox.thread = threading.get_ident()
        mailbox.thread_object = threading.current_thread()

    def _leave_actor_thread(self, mailbox: Mailbox, actor: Actor) -> None:
        if mailbox.actor is actor:
            mailbox.alive = False
        for delivery in list(mailbox.unanswered):
            delivery.fail(K_STOPPED, f"{mailbox.ident} stopped before answering")
        self._close_thread_sockets()

    # ---- routing ----

    def route(self, name: str, endpoint: str) -> None:
        """Send messages for `name` (when it is not hosted here) to the node at `endpoint`,
        and take that node's events for this node's subscriptions. A node that subscribes
        to nothing (yet) connects to no event socket: each connection costs both sides a
        handshake, and a chat of a dozen processes would make them all with all."""
        address = parse_address(endpoint)
        if address.server_key is not None and self._pair is None:
            raise TransportError(f"{self.ident}: {name!r} is at a tcp endpoint; tcp needs keys")
        self._routes[name] = address
        if address.requests == self._own_requests:
            return
        with self._lock:
            new = address.events not in self._event_sources
            self._event_sources[address.events] = address.server_key
            listening = bool(self._subscribers)
        if new and listening and self._started and not self._stopping:
            self._push([OP_CONNECT, address.events.encode(), address.server_key or b""])

    def _address(self, target: str, mailbox: Mailbox | None) -> Address:
        address = self._routes.get(target)
        if address is None:
            state = "stopped" if mailbox is not None else "not hosted here"
            raise ActorStopped(f"{target!r} is {state} and not routed elsewhere ({self.ident})")
        return address

    # ---- sending ----

    def tell(self, target: str, msg: Message) -> None:
        """Deliver `msg` to `target` without waiting for it to be handled. A full mailbox
        follows the type's policy (module docstring): may wait for room (BLOCK), raise
        Refused (REFUSE), or drop and count (DROP). PeerLost when the target's process
        cannot be reached within `connect_timeout`."""
        self._check_message(msg)
        mailbox = self._mailboxes.get(target)
        if mailbox is not None and mailbox.alive:
            delivery = Delivery(msg, self._sender(), None, None, None, mailbox)
            if mailbox.offer(delivery) is not QUEUED:
                mailbox.full(delivery, None, self.block_timeout)
            return
        address = self._address(target, mailbox)
        frame = request_frame(TELL, 0, target, self._sender(), None, msg)
        now = _monotonic()
        busy = self._enter_busy()
        try:
            sent = self._client(address).send(frame, msg.policy, now + self.connect_timeout,
                                              now + self.block_timeout)
        finally:
            self._busy.discard(busy)
        if not sent:
            recorder = self._gateway_recorder
            recorder.dropped_full += 1
            if recorder.dropped_full % 1000 == 1:
                log.warning("%s: queue to %s full, dropping %s (%d so far)", self.ident, target,
                            msg.type_name, recorder.dropped_full)

    def ask(self, target: str, msg: Message, timeout: float, *, interruptible: bool = False) -> Message:
        """Send `msg` to `target` and return its reply. Raises AskTimeout, PeerLost,
        ActorStopped, RemoteError(kind, text), Refused, or BadFrame (see each docstring).
        `interruptible`: asked from an actor's thread, the wait also ends (ActorStopped)
        as soon as that actor's stop is asked: for a wait for work, which a stop must not
        wait out (a compactor's NextJob, P10). Other asks of a stopping actor still get
        their reply: it may be saving what it handles last."""
        self._check_message(msg)
        deadline = _monotonic() + timeout
        asker = self._tls.mailbox if interruptible else None
        mailbox = self._mailboxes.get(target)
        if mailbox is not None and mailbox.alive:
            return self._ask_local(mailbox, msg, deadline, asker)
        address = self._address(target, mailbox)
        request_id = next(self._rids)
        frame = request_frame(ASK, request_id, target, self._sender(), time.time() + timeout, msg)
        busy = self._enter_busy()
        try:
            client = self._client(address)
            client.send(frame, REFUSE if msg.policy == DROP else msg.policy, deadline, deadline)
            body = client.wait_reply(request_id, deadline, target, asker=asker)
        finally:
            self._busy.discard(busy)
        return unwrap(from_obj(body))

    def _ask_local(self, mailbox: Mailbox, msg: Message, deadline: float, asker: Mailbox | None = None) -> Message:
        if mailbox.thread == threading.get_ident():
            raise TransportError(f"{mailbox.ident} asked itself: it would wait for itself")
        slot = Slot()
        delivery = Delivery(msg, self._sender(), deadline, next(self._rids), slot, mailbox)
        if mailbox.offer(delivery) is not QUEUED:
            mailbox.full(delivery, deadline, self.block_timeout)
        while not slot.wait(min(max(deadline - _monotonic(), 0.0), SLICE)):
            if _monotonic() >= deadline:
                raise AskTimeout(f"{self.ident}: no reply from {mailbox.ident} in time")
            if self._stopping:
                raise ActorStopped(f"{self.ident} stopped while asking {mailbox.ident}")
            if asker is not None and not asker.alive:
                raise ActorStopped(f"{asker.ident} was asked to stop while asking {mailbox.ident}")
        return unwrap(slot.value)

    def _send_reply(self, identity: bytes, request_id: int, msg: Message) -> bool:
        try:
            frame = reply_frame(request_id, msg)
        except BadFrame as exc:
            log.error("%s: reply %s cannot be encoded: %s", self.ident, msg.type_name, exc.reason)
            frame = reply_frame(request_id, ErrorReply(K_BAD_REPLY, f"the reply could not be encoded: {exc.reason}"))
        return self._send_routed([identity, frame])

    def _send_routed(self, frames: list[bytes]) -> bool:
        """Send a reply on the gateway's ROUTER from any thread (see _gateway.py); False
        when it could not leave (the asker's connection is gone, or the node stopped)."""
        sent = False
        with self._router_lock:
            router = self._router
            if router is None:
                log.info("%s: reply not sent: the node is stopped", self.ident)
                return False
            try:
                send_frames(router, frames, NOBLOCK)
                sent = True
            except zmq.ZMQError as exc:   # EHOSTUNREACH: the asker is gone; EAGAIN: it stopped reading
                self._gateway_recorder.errors += 1
                log.info("%s: reply not delivered: %s", self.ident, exc)
            waiting = readable(router)
        if waiting:                       # our send may have eaten the gateway's wake-up
            self._push([OP_WAKE])
        return sent

    # ---- events ----

    def publish(self, topic: str, msg: Message) -> None:
        """Deliver event `msg` to every subscriber of `topic`: local ones directly, each
        other process once (if it subscribed). Full mailboxes follow the type's policy.
        On a node that is stopping it is a no-op, counted in `dropped_stopped` (P10): no
        subscriber can get the event any more, and the publisher's handler goes on (an
        actor handling what was queued before its stop must finish its bookkeeping)."""
        if self._stopping and isinstance(msg, Message):
            self.dropped_stopped += 1
            log.info("%s: %s on %r not published: the node is stopping", self.ident, msg.type_name, topic)
            return
        self._check_message(msg)
        sender = self._sender()
        for mailbox in self._subscribers.get(topic, ()):
            if mailbox.alive:
                delivery = Delivery(msg, sender, None, None, None, mailbox, topic)
                if mailbox.offer(delivery) is not QUEUED:
                    mailbox.full(delivery, None, self.block_timeout)
        if self._remote_subs.get(topic, 0) > 0:
            self._push([OP_PUBLISH, topic_frame(topic), encode(msg), sender.encode()])

    def subscribe(self, topic: str, actor_name: str) -> None:
        """Deliver events of `topic`, from this process and from every routed one, to the
        actor hosted here as `actor_name` (also after it restarts). Idempotent."""
        mailbox = self._mailboxes.get(actor_name)
        if mailbox is None:
            raise TransportError(f"{actor_name!r} is not hosted at {self.ident}: host it first")
        with self._lock:
            subscribers = self._subscribers.get(topic, ())
            if mailbox in subscribers:
                return
            sources = [] if self._subscribers else list(self._event_sources.items())  # the first: connect (route)
            self._subscribers[topic] = subscribers + (mailbox,)
        if not subscribers and self._started and not self._stopping:
            self._push([OP_SUBSCRIBE, topic_frame(topic)])
            for events, server_key in sources:
                self._push([OP_CONNECT, events.encode(), server_key or b""])

    def wait_subscribed(self, topic: str, count: int = 1, timeout: float = 5.0) -> bool:
        """Wait until `count` subscriptions to `topic` from other processes reached this
        node's event socket; False on timeout. Events published before are not seen there."""
        with self._subs_changed:
            return self._subs_changed.wait_for(lambda: self._remote_subs.get(topic, 0) >= count, timeout)

    def _remote_subscription(self, topic: str, delta: int) -> None:   # the gateway calls this
        with self._subs_changed:
            self._remote_subs[topic] = self._remote_subs.get(topic, 0) + delta
            self._subs_changed.notify_all()

    # ---- statistics ----

    def statistics(self) -> list[MailboxStats]:
        """One MailboxStats per actor running here."""
        return [mailbox.recorder.snapshot(mailbox.name, self.name, self.hostname, self.pid, mailbox.inbox.qsize())
                for mailbox in list(self._mailboxes.values()) if mailbox.alive]

    def gateway_statistics(self) -> MailboxStats:
        """The node's own counters, named "gateway": frames that named no actor here or did
        not parse as far as a target (dropped_bad), late replies to non-actor threads
        (dropped_late), tells dropped because a peer's queue was full (dropped_full), tcp
        peers refused by key (refused), replies that could not be delivered (errors)."""
        depth = len(self._gateway.parked) if self._gateway is not None else 0
        return self._gateway_recorder.snapshot("gateway", self.name, self.hostname, self.pid, depth)

    def _count_late_reply(self, address: Address, request_id: int) -> None:
        mailbox = self._tls.mailbox
        (mailbox.recorder if mailbox is not None else self._gateway_recorder).dropped_late += 1
        log.info("%s: late reply to request %d from %s dropped", mailbox.ident if mailbox else self.ident,
                 request_id, address.requests)

    def _count_bad_reply(self, address: Address, reason: str) -> None:
        self._gateway_recorder.dropped_bad += 1
        log.warning("%s: bad reply frame from %s dropped: %s", self.ident, address.requests, reason)

    # ---- threads and sockets ----

    def _check_running(self) -> None:
        if not self._started or self._stopping:
            raise ActorStopped(f"{self.ident} is {'stopped' if self._stopping else 'not started'}")

    def _check_message(self, msg: Message) -> None:
        if not isinstance(msg, Message):
            raise TypeError(f"{type(msg).__name__} is not a schema.Message")
        if not self._started or self._stopping:
            self._check_running()

    def _sender(self) -> str:
        mailbox = self._tls.mailbox
        return mailbox.name if mailbox is not None else self.name

    def _enter_busy(self) -> int:
        """Mark this thread as inside a socket call (stop() waits for it); returns the mark
        to discard from `_busy` afterwards."""
        busy = threading.get_ident()
        self._busy.add(busy)
        if self._stopping:
            self._busy.discard(busy)
            raise ActorStopped(f"{self.ident} is stopped")
        return busy

    def _socket(self, kind: int) -> zmq.Socket:
        """A socket for the calling thread only; closed when the thread's actor stops, or
        by `stop()`."""
        sock = self._context.socket(kind)
        self._track(sock)
        return sock

    def _track(self, sock: zmq.Socket) -> None:
        tls = self._tls
        if tls.sockets is None:
            tls.sockets = []
        tls.sockets.append(sock)
        with self._lock:
            self._sockets[sock] = threading.get_ident()

    def _client(self, address: Address) -> Client:
        clients = self._tls.clients
        if clients is None:
            clients = self._tls.clients = {}
        client = clients.get(address.text)
        if client is None:
            client = clients[address.text] = Client(self, address)
            with self._lock:
                self._clients.add(client)
        return client

    def _push(self, frames: list[bytes]) -> None:
        """Hand frames to the gateway thread (through this thread's inproc PUSH)."""
        tls = self._tls
        sock = tls.push
        if sock is None:
            sock = tls.push = self._socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDTIMEO, 5000)
            sock.connect(self._pull_endpoint)
        try:
            send_frames(sock, frames)
        except zmq.Again:
            self._gateway_recorder.errors += 1
            log.error("%s: the gateway took nothing for 5 s; %r dropped", self.ident, frames[0])

    def _close_thread_sockets(self) -> None:
        tls = self._tls
        for client in (tls.clients or {}).values():
            with self._lock:
                mine = client in self._clients
                self._clients.discard(client)
            if mine:
                client.flush(1.0)
            client.sock.disable_monitor()
        with self._lock:
            for sock in tls.sockets or ():
                sock.close()
                self._sockets.pop(sock, None)
        tls.__dict__.clear()
