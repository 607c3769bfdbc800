"""Bounded mailboxes: the pykka inbox with a depth limit, what a node keeps per name, and
the Delivery (one message as a handler receives it) that goes through them.

Delivery lives here, beside the Mailbox it answers through, so that this module needs
nothing from `_actor` or `_node` (the node is only called back, through `_ports.Host`).

pykka's own messages (stop, proxy calls) go in unbounded through `put`, so stopping a full
actor never waits. Transport deliveries go in through `Inbox.offer`, which honours the
bound: the caller decides what a full mailbox means from the message type's policy (see
`Node`). The bound is soft by at most the number of producers racing for the last slot.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from ._errors import ActorStopped, AskTimeout, Refused
from ._stats import Recorder
from .schema import BLOCK, DROP, ErrorReply, Message

if TYPE_CHECKING:
    import pykka

    from ._ports import Host

__all__ = ["Delivery", "Inbox", "Mailbox", "MISSED", "QUEUED", "FULL", "Slot"]

log = logging.getLogger("everchat.transport")

QUEUED, FULL = True, False
_monotonic = time.monotonic


class _Missed:
    """Inbox marker: events were dropped on their way; the actor calls on_events_missed.
    Like a Delivery, it is its own pykka envelope (`message`, `reply_to`)."""
    __slots__ = ()
    reply_to = None

    @property
    def message(self) -> _Missed:
        return self


MISSED = _Missed()


class Inbox:
    """A pykka inbox (put / get / empty) on a queue.SimpleQueue, with a bounded `offer`.

    SimpleQueue hands an item to a waiting thread in C, a few microseconds cheaper per
    message than queue.Queue's Python condition variables. Producers that wait for room
    (policy BLOCK) sleep on `_room`, which `get` signals only when someone waits; a missed
    signal costs a waiter at most 10 ms."""

    __slots__ = ("bound", "_queue", "_room", "_waiting", "put", "qsize", "empty")

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._queue = queue.SimpleQueue()
        self.put = self._queue.put          # pykka's own messages: never refused
        self.qsize = self._queue.qsize
        self.empty = self._queue.empty
        self._room = threading.Condition()
        self._waiting = 0

    def get(self) -> Any:
        item = self._queue.get()
        if self._waiting:
            with self._room:
                self._room.notify()
        return item

    def offer(self, item: Any, wait: float = 0.0) -> bool:
        """Queue `item` if there is room, waiting up to `wait` seconds for it; QUEUED or FULL."""
        q = self._queue
        if q.qsize() < self.bound:
            q.put(item)
            return QUEUED
        if wait <= 0:
            return FULL
        end = time.monotonic() + wait
        with self._room:
            self._waiting += 1
            try:
                while q.qsize() >= self.bound:
                    left = end - time.monotonic()
                    if left <= 0:
                        return FULL
                    self._room.wait(min(left, 0.01))
                q.put(item)
                return QUEUED
            finally:
                self._waiting -= 1


class Slot:
    """Where a same-process ask waits for its reply: a lock the replier releases."""

    __slots__ = ("_lock", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.value: Message | None = None

    def set(self, value: Message) -> None:
        self.value = value
        self._lock.release()

    def wait(self, timeout: float) -> bool:
        return self._lock.acquire(True, timeout)


class Delivery:
    """One message as a handler receives it.

    msg: the message; sender: the sending actor's name (a node's name when the sender was
    no actor); deadline: for an ask, the time.monotonic() after which the asker no longer
    waits (None for tells and events); request_id: the ask's id (None otherwise); topic: the
    event's topic (None unless it came through publish); peer: who the transport says sent
    it, for a request that came over tcp: the z85 CURVE public key its connection was
    made with (the ZAP User-Id), checked at the handshake and unforgeable by the sender;
    None for requests from this process or over ipc (a process of the node's own user).
    """

    __slots__ = ("msg", "sender", "deadline", "request_id", "topic", "peer", "_route", "_mailbox")
    reply_to = None      # a Delivery is its own pykka envelope: no Envelope per message

    @property
    def message(self) -> Delivery:
        return self

    def __init__(self, msg: Message, sender: str, deadline: float | None, request_id: int | None,
                 route: Any, mailbox: Mailbox, topic: str | None = None, peer: str | None = None) -> None:
        self.msg = msg
        self.peer = peer
        self.sender = sender
        self.deadline = deadline
        self.request_id = request_id
        self.topic = topic
        self._route = route        # None (tell), a Slot (same process) or a routing id (bytes)
        self._mailbox = mailbox

    def __repr__(self) -> str:
        kind = "ask" if self._route is not None else "event" if self.topic else "tell"
        return (f"<Delivery {kind} {self.msg.type_name} from {self.sender} to "
                f"{self._mailbox.ident} id={self.request_id}>")

    @property
    def is_ask(self) -> bool:
        return self._route is not None

    def reply(self, msg: Message) -> bool:
        """Answer the ask, once, from any thread. Returns False (and sends nothing) for a
        tell, a second answer, or an answer after the deadline (counted as dropped_late);
        also when the asker's process is known to be gone (its connection dropped: the
        reply could not leave, counted as an error of the gateway). True does not promise
        arrival: a process may die while the reply travels. A handler that hands out
        something to whoever asked (a job) puts it back when this returns False."""
        mailbox = self._mailbox
        try:
            mailbox.unanswered.remove(self)
        except KeyError:
            return False
        if self.deadline is not None and _monotonic() > self.deadline:
            mailbox.recorder.dropped_late += 1
            log.info("%s: reply %s to %s dropped: the asker stopped waiting %.1f ms ago",
                     mailbox.ident, msg.type_name, self.sender, (_monotonic() - self.deadline) * 1000)
            return False
        route = self._route
        if route.__class__ is Slot:
            route.set(msg)
            return True
        return mailbox.node._send_reply(route, self.request_id, msg)

    def fail(self, kind: str, text: str) -> bool:
        """Answer the ask with an error: the asker's `ask` raises RemoteError(kind, text)."""
        return self.reply(ErrorReply(kind, text))

    def _abandon(self) -> None:
        self._mailbox.unanswered.discard(self)


class Mailbox:
    """Everything a node keeps for one hosted name; outlives restarts of the actor.

    `unanswered` holds every ask delivered and not yet answered: `Delivery.reply` claims its
    entry (so an ask is answered once), and whatever is left when the actor stops is failed
    with ActorStopped. `missed` counts events dropped before reaching the actor, per topic,
    until the actor's `on_events_missed` hears of them.
    """

    def __init__(self, name: str, node: Host) -> None:
        self.name = name
        self.node = node
        self.ident = f"{name}@{node.ident}"
        self.recorder = Recorder()
        self.inbox: Inbox | None = None
        self.actor: pykka.Actor | None = None   # an everchat.transport.Actor
        self.alive = False
        self.thread: int | None = None
        self.thread_object: threading.Thread | None = None
        self.unanswered: set[Delivery] = set()
        self.missed: dict[str, int] = {}
        self._missed_lock = threading.Lock()
        self._missed_marked = False

    def __repr__(self) -> str:
        return f"<Mailbox {self.ident} {'alive' if self.alive else 'stopped'}>"

    def offer(self, delivery: Delivery, wait: float = 0.0) -> bool:
        """Queue `delivery` (registering an ask as unanswered first); QUEUED or FULL."""
        if delivery._route is not None:
            self.unanswered.add(delivery)
        inbox = self.inbox
        if inbox is not None and inbox.offer(delivery, wait):
            return QUEUED
        self.unanswered.discard(delivery)
        return FULL

    def full(self, delivery: Delivery, deadline: float | None, block_timeout: float) -> None:
        """`delivery` found this mailbox full, in the sending thread: apply its type's policy.
        DROP (not an ask): drop and count. BLOCK: wait for room up to `block_timeout` (or the
        ask's deadline), never when the actor sends to itself. Otherwise raise Refused."""
        policy = delivery.msg.policy
        recorder = self.recorder
        if policy == DROP and delivery._route is None:
            recorder.dropped_full += 1
            if delivery.topic is not None:
                self.note_missed(delivery.topic, 1)
            if recorder.dropped_full % 1000 == 1:
                log.warning("%s: mailbox full, dropping %s (%d dropped so far)", self.ident,
                            delivery.msg.type_name, recorder.dropped_full)
            return
        if policy == BLOCK:
            if self.thread == threading.get_ident():
                self.force(delivery)
                return
            wait = block_timeout if deadline is None else min(block_timeout, deadline - time.monotonic())
            if self.offer(delivery, wait) is QUEUED:
                return
            if not self.alive:
                raise ActorStopped(f"{self.ident} stopped")
            if deadline is not None and time.monotonic() >= deadline:
                raise AskTimeout(f"{self.ident} had no room before the deadline")
        recorder.refused += 1
        raise Refused(f"{self.ident}: mailbox full ({self.inbox.bound} messages), {delivery.msg.type_name} refused")

    def force(self, delivery: Delivery) -> None:
        """Queue past the bound (an actor telling itself must not wait for itself)."""
        if delivery._route is not None:
            self.unanswered.add(delivery)
        self.inbox.put(delivery)

    def note_missed(self, topic: str, count: int) -> None:
        """Count `count` events of `topic` lost before reaching the actor, and make sure the
        actor hears of it even if nothing else arrives (one marker past the bound)."""
        with self._missed_lock:
            self.missed[topic] = self.missed.get(topic, 0) + count
            mark = not self._missed_marked and self.inbox is not None
            self._missed_marked = True
        if mark:
            self.inbox.put(MISSED)

    def take_missed(self) -> dict[str, int]:
        with self._missed_lock:
            missed, self.missed, self._missed_marked = self.missed, {}, False
        return missed
