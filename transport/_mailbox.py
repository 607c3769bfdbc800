"""Bounded mailboxes: the pykka inbox with a depth limit, and what a node keeps per name.

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
from .schema import BLOCK, DROP

if TYPE_CHECKING:
    from ._actor import Actor, Delivery
    from ._node import Node

__all__ = ["Inbox", "Mailbox", "MISSED", "QUEUED", "FULL"]

log = logging.getLogger("everchat.transport")

QUEUED, FULL = True, False


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


class Mailbox:
    """Everything a node keeps for one hosted name; outlives restarts of the actor.

    `unanswered` holds every ask delivered and not yet answered: `Delivery.reply` claims its
    entry (so an ask is answered once), and whatever is left when the actor stops is failed
    with ActorStopped. `missed` counts events dropped before reaching the actor, per topic,
    until the actor's `on_events_missed` hears of them.
    """

    def __init__(self, name: str, node: Node) -> None:
        self.name = name
        self.node = node
        self.ident = f"{name}@{node.ident}"
        self.recorder = Recorder()
        self.inbox: Inbox | None = None
        self.actor: Actor | None = None
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
