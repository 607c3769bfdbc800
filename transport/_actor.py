"""Actors: the base class of every Everchat actor, and the Delivery its handlers receive.

    class Echo(Actor):
        def on_ping(self, msg, delivery):          # handles schema.Ping
            return Pong(msg.payload)               # the reply to an ask (ignored for a tell)

    node.host("echo", Echo)
    node.ask("echo", Ping(b"hi"), timeout=1.0)     # Pong(payload=b'hi')

A handler is `on_<snake_case type name>(self, msg, delivery)`. It answers an ask by returning
a Message, or by returning None and calling `delivery.reply(msg)` later, from any thread
(the planner answers SettleView once the lines are built). A handler that raises answers the
asker with ErrorReply (`ask` raises RemoteError); for a tell the traceback is logged and
counted. Either way the actor keeps running.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

import pykka

from ._errors import ActorStopped, BadFrame, Refused, RemoteError
from ._mailbox import MISSED, Delivery, Inbox
from .schema import ErrorReply, Message

if TYPE_CHECKING:
    from types import TracebackType

    from ._ports import Host

__all__ = ["Actor", "unwrap", "hosting",
           "K_REFUSED", "K_STOPPED", "K_BAD", "K_UNHANDLED", "K_BAD_REPLY"]

log = logging.getLogger("everchat.transport")

# ErrorReply kinds the transport itself sends (handler errors use the exception's class name)
K_REFUSED = "transport:Refused"
K_STOPPED = "transport:ActorStopped"
K_BAD = "transport:BadFrame"
K_UNHANDLED = "transport:Unhandled"
K_BAD_REPLY = "transport:BadReply"

_monotonic = time.monotonic
_perf = time.perf_counter
_UNKNOWN = object()
hosting = threading.local()   # Node.host puts (node, mailbox) here while the actor is built


def unwrap(reply: Message) -> Message:
    """The reply itself, or the exception an ErrorReply stands for, raised."""
    if reply.__class__ is not ErrorReply:
        return reply
    kind, text = reply.kind, reply.text
    if kind == K_REFUSED:
        raise Refused(text)
    if kind == K_STOPPED:
        raise ActorStopped(text)
    if kind == K_BAD:
        raise BadFrame(text)
    raise RemoteError(kind, text)


class _Ref(pykka.ActorRef):
    """pykka's ActorRef, named like its actor: `<ActorRef for Probe probe@proc-a (pid 7 on h)>`."""

    def __init__(self, actor: Actor) -> None:
        super().__init__(actor)
        self._name = str(actor)

    def __str__(self) -> str:
        return self._name


class Actor(pykka.ThreadingActor):
    """Base class of every Everchat actor: pykka's ThreadingActor fed by a Node.

    Start one with `node.host(name, ActorClass, *args)`; `self.node` and `self.name` are set
    before `__init__` runs. Messages arrive as Delivery and go to `on_<type>(msg, delivery)`
    (`on_receive` is pykka's, for anything else; do not override it for transport messages).
    A request whose deadline passed before it was dequeued is not run (counted as
    dropped_late). A message type without a handler is logged and counted (errors); an ask
    of it is answered with ErrorReply. The mailbox holds at most `mailbox_size` deliveries
    (see the policy table in the transport README).

    Lifecycle hooks (pykka's, all run in the actor's own thread):
    - `on_start()`: before the first message. If it raises, the traceback is logged and the
      actor stops; deliveries already queued are dropped, asks among them get ActorStopped.
    - `on_stop()`: after `stop_actor` / `node.stop()`, once the messages queued before the
      stop are handled. If it raises, the traceback is logged; the actor stops anyway.
    - `on_failure(type, value, tb)`: only when the actor's loop itself breaks (a handler's
      exception never gets here: it is answered or logged and counted instead).
    - `on_events_missed(topic, count)`: events of `topic` were dropped before reaching this
      actor (its mailbox was full, or the publisher's queue towards this process was).
    - `on_stop_requested()`: the one hook *not* run in the actor's thread: it runs in the
      thread that asks the stop (`stop_actor`, `node.stop()`), at once, while a handler may
      still be busy. If it raises, the traceback is logged; the stop goes on.
    When the actor stops, every ask it has not answered is answered with ActorStopped. A
    tell whose handler raises ActorStopped once the actor's stop was asked (a peer closed
    before it, the usual race of a shutdown) is logged at info, not as an error (P10).
    """

    mailbox_size: ClassVar[int] = 1000
    node: Host | None
    name: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spot = getattr(hosting, "spot", None)
        self.node, self._mailbox = spot if spot is not None else (None, None)
        self.name = self._mailbox.name if self._mailbox is not None else type(self).__name__
        self._handlers: dict[type, Any] = {}
        self._actor_ref = _Ref(self)       # before pykka registers it: a ref that names us

    def _create_actor_inbox(self) -> Inbox:   # pykka calls this from Actor.__init__
        return Inbox(self.mailbox_size)

    def __str__(self) -> str:
        where = self._mailbox.ident if getattr(self, "_mailbox", None) is not None else "unhosted"
        return f"{type(self).__name__} {where}"

    __repr__ = __str__

    def on_start(self) -> None:
        """Runs in the actor's thread before the first message; raising stops the actor."""

    def on_stop(self) -> None:
        """Runs in the actor's thread after the last message; a failure is logged."""

    def on_failure(self, exception_type: type[BaseException] | None,
                   exception_value: BaseException | None, traceback: TracebackType | None) -> None:
        """Runs in the actor's thread when its loop breaks (not for handler errors)."""

    def on_stop_requested(self) -> None:
        """Runs in the thread that asks this actor to stop, before the messages queued
        before the stop are handled: an actor whose handler may wait long (a model call
        that never answers, P10) sets an event here so that handler gives up. Must not
        block."""

    def _stop_requested(self) -> None:   # the node calls this as it asks the stop
        try:
            self.on_stop_requested()
        except Exception:
            log.error("%s: on_stop_requested raised", self, exc_info=True)

    @property
    def stop_asked(self) -> bool:
        """This actor's stop was asked (it may still be handling what came before)."""
        mailbox = self._mailbox
        return mailbox is not None and (not mailbox.alive or getattr(mailbox.node, "_stopping", False))

    def on_events_missed(self, topic: str, count: int) -> None:
        """Runs in the actor's thread after `count` events of `topic` were dropped on their
        way here. Override to resynchronise (ask the log writer or the planner for the
        state the events would have told); the default logs a warning."""
        log.warning("%s missed %d %r events (dropped on the way: a full queue)", self, count, topic)

    def _handle_receive(self, message: Any) -> Any:   # pykka's dispatch, our messages first
        if message.__class__ is Delivery:
            return self._on_delivery(message)
        if message is MISSED:
            for topic, count in self._mailbox.take_missed().items():
                self.on_events_missed(topic, count)
            return None
        return super()._handle_receive(message)

    def _on_delivery(self, message: Delivery) -> None:
        recorder = self._mailbox.recorder
        msg = message.msg
        deadline = message.deadline
        if deadline is not None and _monotonic() > deadline:
            recorder.dropped_late += 1
            message._abandon()
            log.info("%s: %s from %s not run: its deadline passed %.1f ms ago", self,
                     msg.type_name, message.sender, (_monotonic() - deadline) * 1000)
            return None
        cls = msg.__class__
        handler = self._handlers.get(cls, _UNKNOWN)
        if handler is _UNKNOWN:
            handler = self._handlers[cls] = getattr(type(self), cls.handler, None)
        if handler is None:
            recorder.errors += 1
            log.warning("%s has no %s(): %s from %s dropped", self, cls.handler, cls.type_name, message.sender)
            message.fail(K_UNHANDLED, f"{self} has no handler for {cls.type_name}")
            return None
        start = _perf()
        answer = None   # sent after the counts: an asker never reads statistics without its ask
        try:
            result = handler(self, msg, message)
        except Exception as exc:
            recorder.errors += 1
            if message._route is None and isinstance(exc, ActorStopped) and self.stop_asked:
                log.info("%s: tell %s from %s not finished: %s (stopping)", self, cls.type_name, message.sender, exc)
            elif message._route is not None:
                log.info("%s: %s from %s raised; the error goes back to the asker", self,
                         cls.type_name, message.sender, exc_info=True)
                answer = ErrorReply(type(exc).__name__, str(exc))
            else:
                log.error("%s: tell %s from %s raised", self, cls.type_name, message.sender, exc_info=True)
        else:
            if result is not None and message._route is not None:
                if isinstance(result, Message):
                    answer = result
                else:
                    recorder.errors += 1
                    log.error("%s: %s() returned %s, not a Message", self, cls.handler, type(result).__name__)
                    answer = ErrorReply(K_BAD_REPLY, f"{self}: {cls.handler}() returned {type(result).__name__}")
        recorder.times.append(_perf() - start)
        recorder.handled += 1
        recorder.last_type = cls.type_name
        if answer is not None:
            message.reply(answer)
        return None

    def _actor_loop(self) -> None:   # pykka's thread body, wrapped to bind and unbind the node
        node = self.node
        if node is None:
            return super()._actor_loop()
        node._enter_actor_thread(self._mailbox)
        try:
            super()._actor_loop()
        finally:
            node._leave_actor_thread(self._mailbox, self)

    def _actor_loop_teardown(self) -> None:
        left = self.actor_inbox.qsize()
        if left:
            log.info("%s stopped with %d messages unhandled (asks among them get ActorStopped)", self, left)
        super()._actor_loop_teardown()
