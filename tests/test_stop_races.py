"""P10 (issue 20): a chat that stops is a normal end, not an error. What an actor handles
while it stops (a summary that arrived just before, a message logged after the planner
stopped) is finished and saved, and says nothing to the person; a call that never
answers does not hold the close.

The transport part (events published by a stopping node, a tell that meets a peer closed
first, an ask for work that a stop ends, the stop hook) drives a Node with small actors
that hold still on a gate the test opens. The chat part drives the real Supervisor with
the real actors. Nothing sleeps: every wait is on an event, a reply or a thread.
"""

from __future__ import annotations

import logging
import queue
import threading

import pytest
from hung_world import HungServer
from polling import wait_until

from everchat.actors.compactor.call_thread import CallThread, Cancelled
from everchat.actors.settings import load
from everchat.actors.log_writer.actor import LogWriter
from everchat.actors.tree import Budget
from everchat.actors.folder import ChatStore
from everchat.actors.supervisor.actor import Placement, Supervisor
from everchat.transport import Actor, ActorStopped, Node, RemoteError, schema
from everchat.transport.schema import Built, NodeBuilt, Ping, Pong


class Holder(Actor):
    """Ping b"wait" holds the actor on `gate`; Built tells `peer` (which may be gone) and
    publishes, then reports that it got past both on `seen`."""

    def __init__(self, seen: queue.Queue, gate: threading.Event, peer: str = "nobody") -> None:
        super().__init__()
        self.seen, self.gate, self.peer = seen, gate, peer
        self.stop_thread = None

    def on_ping(self, msg: Ping, delivery):
        if msg.payload == b"wait":
            self.seen.put("holding")
            assert self.gate.wait(30)
        return Pong(msg.payload)

    def on_built(self, msg: Built, delivery) -> None:
        if msg.worker == "publish":
            self.node.publish("built", NodeBuilt(l=msg.l, i=msg.i))
            self.seen.put(("past the publish", msg.i))
        else:
            self.node.tell(self.peer, Ping(b"x"))
            self.seen.put(("past the tell", msg.i))

    def on_stop_requested(self) -> None:
        self.stop_thread = threading.current_thread()
        self.gate.set()


class Subscriber(Actor):
    def __init__(self, seen: queue.Queue) -> None:
        super().__init__()
        self.seen = seen

    def on_node_built(self, msg: NodeBuilt, delivery) -> None:
        self.seen.put(("event", msg.i))


class WorkAsker(Actor):
    """Ping asks `giver` for work (an interruptible ask) and reports how it ended."""

    def __init__(self, seen: queue.Queue) -> None:
        super().__init__()
        self.seen = seen

    def on_ping(self, msg: Ping, delivery) -> None:
        try:
            self.node.ask("giver", schema.NextJob(worker=self.name), timeout=60.0, interruptible=True)
        except ActorStopped as error:
            self.seen.put(("ended", str(error)))


class Giver(Actor):
    """Never answers NextJob (a planner with no work)."""

    def on_next_job(self, msg: schema.NextJob, delivery) -> None:
        return None


def _start_holder(node: Node, seen: queue.Queue, gate: threading.Event, **kwargs) -> threading.Thread:
    node.host("holder", Holder, seen, gate, **kwargs)
    asking = threading.Thread(target=node.ask, args=("holder", Ping(b"wait"), 30.0), daemon=True)
    asking.start()
    assert seen.get(timeout=10) == "holding"
    return asking


def test_p10_a_stopping_node_publishes_nothing_counts_it_and_the_handler_goes_on(caplog):
    seen: queue.Queue = queue.Queue()
    gate = threading.Event()
    node = Node("p10-publish").start()
    node.host("listener", Subscriber, seen)
    node.subscribe("built", "listener")
    asking = _start_holder(node, seen, gate)
    node.tell("holder", Built(0, 7, "", "publish"))  # queued behind the held Ping: handled while stopping
    with caplog.at_level(logging.INFO, logger="everchat.transport"):
        node.stop()  # the holder's stop hook opens the gate
    asking.join(10)
    assert seen.get(timeout=10) == ("past the publish", 7)
    assert node.dropped_stopped == 1
    assert seen.empty()  # no subscriber got it: they stopped with the node
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_p10_a_tell_to_a_peer_closed_first_is_no_error_while_its_actor_stops(caplog):
    seen: queue.Queue = queue.Queue()
    gate = threading.Event()
    node = Node("p10-tell").start()
    node.host("peer", Subscriber, seen)
    asking = _start_holder(node, seen, gate, peer="peer")
    node.stop_actor("peer")
    node.tell("holder", Built(0, 1, "", "tell"))  # handled while the holder stops: its peer is gone
    with caplog.at_level(logging.INFO, logger="everchat.transport"):
        node.stop_actor("holder")
    asking.join(10)
    node.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == []
    assert any("tell Built from" in r.getMessage() and "(stopping)" in r.getMessage() for r in caplog.records)


def test_a_tell_to_a_closed_peer_is_still_an_error_while_its_actor_runs(caplog):
    seen: queue.Queue = queue.Queue()
    node = Node("p10-running").start()
    node.host("peer", Subscriber, seen)
    node.host("holder", Holder, seen, threading.Event(), peer="peer")
    node.stop_actor("peer")
    with caplog.at_level(logging.INFO, logger="everchat.transport"):
        node.tell("holder", Built(0, 1, "", "tell"))
        assert node.ask("holder", Ping(b"sync"), 10.0) == Pong(b"sync")
    node.stop()
    assert [r.levelname for r in caplog.records if "tell Built from" in r.getMessage()] == ["ERROR"]


def test_p10_the_stop_hook_runs_at_once_in_the_stopping_thread():
    seen: queue.Queue = queue.Queue()
    gate = threading.Event()
    node = Node("p10-hook").start()
    asking = _start_holder(node, seen, gate)  # held: only the hook can open the gate
    assert node.stop_actor("holder", timeout=30.0) is True
    asking.join(10)
    actor_threads = [t for t in threading.enumerate() if t.name.startswith("Holder")]
    node.stop()
    assert gate.is_set() and actor_threads == []


@pytest.mark.parametrize("where", ["local", "remote"])
def test_p10_an_ask_for_work_ends_once_the_askers_stop_is_asked(where, tmp_path):
    seen: queue.Queue = queue.Queue()
    giver = Node("p10-giver", bind=f"ipc://{tmp_path}/giver.sock" if where == "remote" else None).start()
    node = giver if where == "local" else Node("p10-asker").start()
    try:
        giver.host("giver", Giver)
        if where == "remote":
            node.route("giver", giver.endpoint)
        node.host("asker", WorkAsker, seen)
        node.tell("asker", Ping(b"go"))
        wait_until(lambda: giver.statistics()[0].handled >= 1, 30, "the giver got the NextJob")
        assert node.stop_actor("asker", timeout=30.0) is True  # the Giver never answers: the stop ends the wait
        kind, text = seen.get(timeout=10)
        assert kind == "ended" and "was asked to stop while asking" in text
    finally:
        node.stop()
        giver.stop()


# -- the call a stop gives up on (actors/compactor/call_thread.py) ------------------------------------

def test_p10_a_call_thread_hands_over_what_the_call_posts_in_order_then_its_result():
    calls = CallThread("t")
    got = []

    def call():
        calls.post(1)
        calls.post(2)
        return "done"

    assert calls.run(call, got.append) == "done"
    assert got == [1, 2]
    with pytest.raises(ValueError, match="bad"):
        calls.run(lambda: (_ for _ in ()).throw(ValueError("bad")))


def test_p10_a_cancelled_call_thread_releases_its_caller_and_refuses_the_next_call():
    calls = CallThread("t")
    release = threading.Event()
    started = threading.Event()
    outcome: queue.Queue = queue.Queue()

    def hung():
        started.set()
        release.wait(30)
        calls.post("late")  # dropped: nobody waits any more
        return "late"

    def caller():
        try:
            outcome.put(calls.run(hung, outcome.put))
        except Cancelled as error:
            outcome.put(error)

    waiting = threading.Thread(target=caller)
    waiting.start()
    assert started.wait(10)
    calls.cancel()
    waiting.join(10)
    assert isinstance(outcome.get(timeout=1), Cancelled) and outcome.empty()
    with pytest.raises(Cancelled):
        calls.run(lambda: "never runs")
    release.set()
    wait_until(lambda: not any(t.name == "t-call" for t in threading.enumerate()), 30, "the call's thread ended")
    assert outcome.empty()


# -- the chat: the real supervisor and actors ------------------------------------------------

@pytest.fixture
def hung_settings(tmp_path, monkeypatch):
    """Demo replies; summaries by a compaction model that accepts and never answers."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-never-sent")
    monkeypatch.setenv("EVERCHAT_HOME", str(tmp_path / "home"))
    with HungServer() as hung:
        yield hung, load({"reply.provider": "demo", "compaction.provider": "anthropic", "compaction.model": "m",
                          "compaction.base_url": hung.url}, home=tmp_path / "home")
    # The server closed its connections: the call given up at the stop ends too.
    wait_until(lambda: not any(t.name.endswith("-call") for t in threading.enumerate()), 120,
               "the abandoned compaction call's thread ended")


def _log_one(chat) -> None:
    with ChatStore.open(chat, create=True) as store:
        store.append_message("note", "amber-42 is the word. " * 100, key="k0")  # over a line: summarized


def test_p10_a_summary_that_comes_while_the_chat_stops_is_saved_and_answers_the_waits(tmp_path, hung_settings,
                                                                                     caplog):
    hung, settings = hung_settings
    chat = tmp_path / "chat"
    _log_one(chat)  # one message: one summary to build, the pool idle once it is
    supervisor = Supervisor(chat, Placement(workers=1), Budget(jobs=1), settings=settings).start()
    node = supervisor.node
    assert hung.wait_accepted(1, 60)  # the worker's call hangs: only our Built builds the node
    idle: queue.Queue = queue.Queue()

    def wait_idle():
        try:
            idle.put(node.ask("planner", schema.PoolIdle(), timeout=120.0))
        except Exception as error:  # what the assertion below shows
            idle.put(error)

    waiter = threading.Thread(target=wait_idle)
    waiter.start()
    for _ in range(800):  # a backlog, so the Built below is handled once the stop has begun
        node.tell("planner", schema.PlannerStatus())
    node.tell("planner", schema.Built(l=0, i=0, text="the word is amber-42", worker="compactor.0"))
    with caplog.at_level(logging.INFO):
        supervisor.stop()
    waiter.join(30)
    assert idle.get(timeout=1) == schema.Idle(idle=True, running=0, queued=0)
    with ChatStore.open(chat, writer=False) as store:
        assert store.node(0, 0) == "the word is amber-42"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_p10_a_compaction_call_that_never_answers_does_not_hold_the_stop(tmp_path, hung_settings):
    hung, settings = hung_settings
    chat = tmp_path / "chat"
    _log_one(chat)
    supervisor = Supervisor(chat, Placement(workers=1), Budget(jobs=1), settings=settings).start()
    assert hung.wait_accepted(1, 60)
    supervisor.stop()
    # Every actor's thread ended (before, the worker's stayed in the call, holding the
    # process open until its 600 s timeout); the call's own daemon thread is given up.
    assert [t.name for t in threading.enumerate() if t.name.startswith("CompactorWorker")] == []
    with ChatStore.open(chat, writer=False) as store:
        assert store.node(0, 0) is None  # left for the next run


def test_p10_a_message_logged_while_the_planner_is_stopped_is_answered_and_planned_at_the_next_start(tmp_path):
    chat = tmp_path / "chat"
    node = Node("p10-writer").start()
    try:
        node.host("log_writer", LogWriter, chat)  # no planner: its Logged tell meets a closed name
        try:
            reply = node.ask("log_writer", schema.Append("note", "logged late. " * 100, "late-1", [], None), 30.0)
        except RemoteError as error:  # before P10: an error for a message that was logged
            reply = error
        assert reply == schema.Appended(ids=[0])
    finally:
        node.stop()
    supervisor = Supervisor(chat, Placement(workers=1, summarizer="scripted"), Budget(jobs=1)).start()
    try:
        supervisor.node.ask("planner", schema.PoolIdle(), timeout=60.0)
    finally:
        supervisor.stop()
    with ChatStore.open(chat, writer=False) as store:
        assert store.message_count == 1 and "logged late" in store.node(0, 0)
