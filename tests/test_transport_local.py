"""Actors in one process: ask, tell and publish go straight into the pykka inbox.

Handlers that must hold still wait on a threading.Event the test opens; "the actor has
handled everything before this" is an ask sent after it (a mailbox is FIFO). Nothing here
sleeps.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time

import pytest

from everchat.transport import Actor, ActorStopped, AskTimeout, Node, Refused, RemoteError, schema
from everchat.transport.schema import Built, NodeBuilt, Ping, Pong


class Probe(Actor):
    """Puts what it handles on `seen`; some payloads make it misbehave on purpose."""

    def __init__(self, seen: queue.Queue, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.seen = seen
        self.gate = gate
        self.held: list = []

    def on_ping(self, msg: Ping, delivery):
        self.seen.put(("ping", msg.payload, delivery.sender))
        if msg.payload == b"boom":
            raise ValueError("boom")
        if msg.payload == b"wait":
            assert self.gate.wait(10)
        if msg.payload == b"later":
            threading.Thread(target=delivery.reply, args=(Pong(b"later"),)).start()
            return None
        if msg.payload == b"hold":
            self.held.append(delivery)
            return None
        if msg.payload == b"self":
            return self.node.ask(self.name, Ping(b"x"), 1.0)
        if msg.payload == b"tell-self":
            for i in range(5):
                self.node.tell(self.name, Built(0, i, "", "self"))
        return Pong(msg.payload)

    def on_built(self, msg: Built, delivery) -> None:
        self.seen.put(("built", msg.i, delivery.sender))
        if msg.worker == "boom":
            raise RuntimeError("tell failed")

    def on_node_built(self, msg: NodeBuilt, delivery) -> None:
        self.seen.put(("event", msg.i, delivery.topic, delivery.sender))

    def on_events_missed(self, topic: str, count: int) -> None:
        self.seen.put(("missed", topic, count))

    def on_append(self, msg: schema.Append, delivery) -> schema.Ack:
        return schema.Ack()       # `sync`: an ask of a BLOCK type, which waits for room


def sync(node: Node, name: str) -> None:
    """Return once `name` has handled everything sent to it before (its mailbox is FIFO)."""
    assert node.ask(name, schema.Append("sync", "", None, [], None), 5.0) == schema.Ack()


class SmallProbe(Probe):
    mailbox_size = 2


class Asker(Actor):
    """Asks `target` on every Ping and answers with what came back."""

    def on_ping(self, msg: Ping, delivery):
        return self.node.ask("probe", Ping(b"from-asker"), 2.0)


@pytest.fixture
def node():
    with Node("local-test", block_timeout=5.0) as node:
        yield node


@pytest.fixture
def seen():
    return queue.Queue()


def drain(seen: queue.Queue) -> list:
    items = []
    while not seen.empty():
        items.append(seen.get_nowait())
    return items


def stats(node: Node, name: str):
    return next(s for s in node.statistics() if s.name == name)


def test_an_ask_in_the_same_process_returns_the_handlers_reply(node, seen):
    node.host("probe", Probe, seen)
    assert node.ask("probe", Ping(b"hi"), 1.0) == Pong(b"hi")
    assert seen.get_nowait() == ("ping", b"hi", "local-test")


def test_tells_are_handled_in_the_order_they_were_sent(node, seen):
    node.host("probe", Probe, seen)
    for i in range(50):
        node.tell("probe", Built(0, i, "", "w"))
    node.ask("probe", Ping(b"sync"), 1.0)
    assert [item[1] for item in drain(seen) if item[0] == "built"] == list(range(50))


def test_an_actor_asking_another_is_named_as_the_sender(node, seen):
    node.host("probe", Probe, seen)
    node.host("asker", Asker)
    assert node.ask("asker", Ping(b"go"), 2.0) == Pong(b"from-asker")
    assert drain(seen) == [("ping", b"from-asker", "asker")]


def test_publish_reaches_each_local_subscriber_once_and_no_one_else(node):
    first, second, other = queue.Queue(), queue.Queue(), queue.Queue()
    node.host("first", Probe, first)
    node.host("second", Probe, second)
    node.host("other", Probe, other)
    node.subscribe("built", "first")
    node.subscribe("built", "second")
    node.subscribe("built", "second")          # idempotent
    node.publish("built", NodeBuilt(1, 6))
    node.publish("logged", NodeBuilt(1, 7))    # nobody subscribed to this topic
    for name in ("first", "second", "other"):
        node.ask(name, Ping(b"sync"), 1.0)
    assert [i for i in drain(first) if i[0] == "event"] == [("event", 6, "built", "local-test")]
    assert [i for i in drain(second) if i[0] == "event"] == [("event", 6, "built", "local-test")]
    assert [i for i in drain(other) if i[0] == "event"] == []


def test_a_handler_that_raises_answers_the_asker_and_the_actor_keeps_running(node, seen):
    node.host("probe", Probe, seen)
    with pytest.raises(RemoteError) as caught:
        node.ask("probe", Ping(b"boom"), 1.0)
    assert (caught.value.kind, caught.value.text) == ("ValueError", "boom")
    assert node.ask("probe", Ping(b"after"), 1.0) == Pong(b"after")
    assert stats(node, "probe").errors == 1


def test_a_tell_whose_handler_raises_is_logged_with_its_traceback_and_counted(node, seen, caplog):
    node.host("probe", Probe, seen)
    with caplog.at_level(logging.ERROR, logger="everchat.transport"):
        node.tell("probe", Built(0, 1, "", "boom"))
        node.ask("probe", Ping(b"sync"), 1.0)
    record = next(r for r in caplog.records if "raised" in r.getMessage())
    assert record.getMessage() == (f"Probe probe@local-test (pid {os.getpid()} on {socket.gethostname()}): "
                                   "tell Built from local-test raised")
    assert record.exc_info[0] is RuntimeError
    assert stats(node, "probe").errors == 1


def test_a_message_type_without_a_handler_is_counted_and_an_ask_of_it_fails(node, seen, caplog):
    node.host("probe", Probe, seen)
    with caplog.at_level(logging.WARNING, logger="everchat.transport"):
        node.tell("probe", schema.Ack())
        with pytest.raises(RemoteError) as caught:
            node.ask("probe", schema.PoolIdle(), 1.0)
    assert caught.value.kind == "transport:Unhandled"
    assert any("has no on_ack()" in r.getMessage() for r in caplog.records)
    assert node.ask("probe", Ping(b"still"), 1.0) == Pong(b"still")
    assert stats(node, "probe").errors == 2


def test_a_reply_can_come_later_and_from_another_thread(node, seen):
    node.host("probe", Probe, seen)
    assert node.ask("probe", Ping(b"later"), 2.0) == Pong(b"later")


def test_an_ask_that_times_out_has_its_late_reply_dropped_and_counted(node, seen):
    gate = threading.Event()
    node.host("probe", Probe, seen, gate)
    with pytest.raises(AskTimeout, match="no reply from probe@local-test"):
        node.ask("probe", Ping(b"wait"), 0.05)
    gate.set()
    assert node.ask("probe", Ping(b"sync"), 2.0) == Pong(b"sync")
    assert stats(node, "probe").dropped_late == 1


def test_a_request_whose_deadline_passed_in_the_mailbox_is_not_run(node, seen):
    gate = threading.Event()
    node.host("probe", Probe, seen, gate)
    node.tell("probe", Ping(b"wait"))
    with pytest.raises(AskTimeout):
        node.ask("probe", Ping(b"too-late"), 0.05)
    gate.set()
    node.ask("probe", Ping(b"sync"), 2.0)
    assert [item[1] for item in drain(seen)] == [b"wait", b"sync"]
    assert stats(node, "probe").dropped_late == 1


def test_stopping_an_actor_answers_its_pending_asks_with_actor_stopped(node, seen):
    node.host("probe", Probe, seen)
    outcome: queue.Queue = queue.Queue()

    def ask_and_hold() -> None:
        try:
            node.ask("probe", Ping(b"hold"), 10.0)
        except ActorStopped as exc:
            outcome.put(exc)

    thread = threading.Thread(target=ask_and_hold)
    thread.start()
    assert seen.get(timeout=5) == ("ping", b"hold", "local-test")
    assert node.stop_actor("probe") is True
    thread.join(5)
    assert str(outcome.get_nowait()) == f"probe@{node.ident} stopped before answering"
    with pytest.raises(ActorStopped, match="'probe' is stopped and not routed elsewhere"):
        node.tell("probe", Ping(b"x"))
    assert node.stop_actor("probe") is False


def test_stopping_the_node_fails_asks_still_waiting(seen):
    node = Node("stopping-node").start()
    node.host("probe", Probe, seen)
    outcome: queue.Queue = queue.Queue()

    def ask() -> None:
        try:
            node.ask("probe", Ping(b"hold"), 10.0)
        except ActorStopped as exc:
            outcome.put(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    seen.get(timeout=5)
    node.stop()
    thread.join(5)
    assert isinstance(outcome.get_nowait(), ActorStopped)
    with pytest.raises(ActorStopped, match="is stopped"):
        node.ask("probe", Ping(b"x"), 1.0)


def test_a_name_nobody_hosts_or_routes_is_actor_stopped(node):
    with pytest.raises(ActorStopped, match="'ghost' is not hosted here and not routed elsewhere"):
        node.ask("ghost", Ping(b"x"), 1.0)


def test_an_actor_that_asks_itself_fails_at_once_instead_of_waiting_for_itself(node, seen):
    node.host("probe", Probe, seen)
    with pytest.raises(RemoteError) as caught:
        node.ask("probe", Ping(b"self"), 2.0)
    assert caught.value.kind == "TransportError"
    assert "asked itself" in caught.value.text


def test_only_messages_can_be_sent(node, seen):
    node.host("probe", Probe, seen)
    with pytest.raises(TypeError, match="is not a schema.Message"):
        node.tell("probe", {"not": "a message"})


# ---- backpressure ----

pause = threading.Event()  # never set: its wait is a sleep inside a deadline loop


def block_and_fill(node: Node, seen: queue.Queue) -> threading.Event:
    """A SmallProbe (room for 2) busy behind a gate, with its mailbox full of two Built."""
    gate = threading.Event()
    node.host("small", SmallProbe, seen, gate)
    node.tell("small", Ping(b"wait"))
    assert seen.get(timeout=5)[1] == b"wait"       # being handled: out of the mailbox
    node.tell("small", Built(0, 0, "", "w"))
    node.tell("small", Built(0, 1, "", "w"))
    return gate


def test_a_full_mailbox_drops_events_counts_them_and_tells_the_subscriber(node, seen):
    gate = block_and_fill(node, seen)
    node.subscribe("built", "small")
    for i in range(3):
        node.publish("built", NodeBuilt(1, i))
    assert stats(node, "small").dropped_full == 3
    gate.set()
    sync(node, "small")
    handled = drain(seen)
    assert ("missed", "built", 3) in handled
    assert not [item for item in handled if item[0] == "event"]


def test_a_full_mailbox_refuses_an_ask_of_a_refuse_type_at_once(node, seen):
    gate = block_and_fill(node, seen)
    with pytest.raises(Refused, match=r"small@.*mailbox full \(2 messages\), Ping refused"):
        node.ask("small", Ping(b"x"), 2.0)
    assert stats(node, "small").refused == 1
    gate.set()


def test_a_full_mailbox_makes_a_block_tell_wait_for_room_and_loses_nothing(node, seen):
    gate = block_and_fill(node, seen)
    done = threading.Event()

    def tell() -> None:
        node.tell("small", Built(0, 2, "", "w"))
        done.set()

    inbox = node._mailboxes["small"].inbox          # its count of producers waiting for room
    telling = threading.Thread(target=tell)
    telling.start()
    end = time.monotonic() + 10
    while inbox._waiting != 1:                      # the tell is inside the wait, not just late
        assert time.monotonic() < end, "the tell never waited for room"
        pause.wait(0.005)
    assert telling.is_alive() and not done.is_set()
    gate.set()
    assert done.wait(5)
    assert inbox._waiting == 0
    sync(node, "small")
    assert [item[1] for item in drain(seen) if item[0] == "built"] == [0, 1, 2]


def test_a_block_tell_that_finds_no_room_in_time_is_refused_not_dropped(seen):
    with Node("impatient", block_timeout=0.05) as node:
        gate = block_and_fill(node, seen)
        with pytest.raises(Refused):
            node.tell("small", Built(0, 2, "", "w"))
        gate.set()
        sync(node, "small")
        assert stats(node, "small").refused == 1


def test_an_actor_telling_itself_never_waits_for_room(node, seen):
    node.host("small", SmallProbe, seen)
    assert node.ask("small", Ping(b"tell-self"), 2.0) == Pong(b"tell-self")
    sync(node, "small")
    assert [item[1] for item in drain(seen) if item[0] == "built"] == [0, 1, 2, 3, 4]


# ---- statistics and identity ----

def test_statistics_report_each_running_actor_with_its_place(node, seen):
    node.host("probe", Probe, seen)
    for _ in range(10):
        node.ask("probe", Ping(b"x"), 1.0)
    with pytest.raises(RemoteError):
        node.ask("probe", Ping(b"boom"), 1.0)
    node.stop_actor("probe")
    node.host("probe", Probe, seen)
    node.ask("probe", Ping(b"x"), 1.0)
    [entry] = node.statistics()
    assert (entry.name, entry.node, entry.host, entry.pid) == ("probe", "local-test", socket.gethostname(), os.getpid())
    assert (entry.depth, entry.handled, entry.errors, entry.restarts, entry.last_type) == (0, 12, 1, 1, "Ping")
    assert 0 < entry.p50_ms <= entry.p99_ms
    reply = schema.StatsReply([entry.to_dict()])
    assert type(entry).from_dict(schema.decode(schema.encode(reply)).actors[0]) == entry


@pytest.mark.parametrize("payload", [b"x", b"boom"])
def test_an_ask_is_counted_before_its_reply_leaves(node, seen, monkeypatch, payload):
    """An asker that reads the statistics right after its reply finds its ask counted
    (handled, and errors for a handler that raised): the counts come before the reply.
    Checked at the moment the reply is handed over, so the test does not race."""
    from everchat.transport import _mailbox

    at_reply = []
    hand_over = _mailbox.Slot.set

    def counting(slot, value):
        at_reply.append((stats(node, "probe").handled, stats(node, "probe").errors))
        hand_over(slot, value)

    monkeypatch.setattr(_mailbox.Slot, "set", counting)
    node.host("probe", Probe, seen)
    try:
        node.ask("probe", Ping(payload), 5.0)
    except RemoteError:
        pass
    assert at_reply == [(1, 1 if payload == b"boom" else 0)]


def test_reprs_name_the_actor_the_process_and_the_host(node, seen):
    ref = node.host("probe", Probe, seen)
    where = f"(pid {os.getpid()} on {socket.gethostname()})"
    assert repr(node) == f"<Node local-test {where} in-process only>"
    assert f"Probe probe@local-test {where}" in repr(ref)
