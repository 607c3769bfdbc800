"""Issue 3: valid but wrong input to the planner, each case on a fresh chat (a wrong input
must not poison test_actor_fuzz's shared one), and what the planner's fix for a lost
worker needs from the transport.
"""

from __future__ import annotations

import queue
import threading

import pytest
import zmq

from everchat.actors.log_writer.actor import LogWriter
from everchat.actors.tree import Budget
from everchat.actors.planner.actor import PlannerActor
from everchat.actors.supervisor.actor import Placement, Supervisor
from everchat.transport import Actor, AskTimeout, Node, RemoteError, schema
from everchat.transport import _wire as wire

from polling import folder_bytes, message_text, wait_until

BUDGET = Budget(ceiling=4000, floor=2000, cceiling=1500, cfloor=800, jobs=2)
FAR = 4e9                                        # a deadline nobody reaches (wall clock, 2096)





# -- valid but wrong: the planner (each on a fresh chat) --------------------------------------

@pytest.fixture
def small_chat(tmp_path):
    """A fresh chat in one process, a few messages logged and built."""
    chat = tmp_path / "chat"
    with Supervisor(chat, Placement("single", workers=2, summarizer="scripted"), BUDGET) as supervisor:
        for n in range(6):
            supervisor.node.ask("log_writer", schema.Append("user", message_text(n), f"small-{n}", [], None), timeout=10.0)
        supervisor.node.ask("planner", schema.PoolIdle(), timeout=30.0)
        yield supervisor


def _planner_stats(supervisor: Supervisor) -> dict:
    return next(s.to_dict() for s in supervisor.node.statistics() if s.name == "planner")


def test_a_built_told_for_a_node_never_handed_out_changes_nothing(small_chat):
    before = folder_bytes(small_chat.chat)
    small_chat.node.tell("planner", schema.Built(1, 1, "a line nobody asked for", "fuzzer"))
    assert small_chat.node.ask("planner", schema.PoolIdle(), timeout=10.0) == schema.Idle(True, 0, 0)
    assert folder_bytes(small_chat.chat) == before
    assert _planner_stats(small_chat)["errors"] == 0


def test_a_built_asked_for_a_node_never_handed_out_gets_an_error_reply(small_chat):
    """A result the planner drops is answered with the reason when it was asked (a silent
    drop would leave the asker waiting for its timeout)."""
    before = folder_bytes(small_chat.chat)
    with pytest.raises(RemoteError) as caught:
        small_chat.node.ask("planner", schema.Built(1, 1, "a line nobody asked for", "fuzzer"), timeout=5.0)
    assert (caught.value.kind, caught.value.text) == ("ValueError", "a result for 2+2: that node is not being built")
    assert folder_bytes(small_chat.chat) == before


def test_r36_a_settle_view_with_a_negative_id_gets_an_error_reply(tmp_path):
    """A wait for no message is refused: answered, it would set the turn wait
    (Planner.waiting_for) to -1, and a real turn waiting meanwhile would lose R31's
    'only lines before its message start'.

    A log writer and a planner with no worker, so the line of a long message stays
    unbuilt and a real wait for it stays open; the planner's turn-wait state is read
    from its actor (no message reports it), after an ask it answered in turn."""
    with Node("test") as node:
        node.host("log_writer", LogWriter, tmp_path / "chat")
        node.host("planner", PlannerActor, BUDGET)
        node.ask("log_writer", schema.Append("user", message_text(1), "long", [], None), timeout=10.0)
        planner = node._mailboxes["planner"].actor   # the actor object: only for its state

        def turn_wait() -> tuple:
            node.ask("planner", schema.PlannerStatus(), timeout=10.0)   # handled after what came before
            memory = planner.planning.planner
            return memory.waiting_for, memory.waiting_since, len(planner.settle_waiters)

        waiting = threading.Thread(target=lambda: node.ask("planner", schema.SettleView(1, 60.0), timeout=70.0))
        waiting.start()
        wait_until(lambda: turn_wait() == (1, 0, 1), 10.0, "a turn waiting for message 0's line")
        with pytest.raises(RemoteError) as caught:
            node.ask("planner", schema.SettleView(-1, 1.0), timeout=5.0)
        assert (caught.value.kind, caught.value.text) == \
            ("ValueError", "SettleView until -1: the chat has messages 0 ... 0, so until must be 0 ... 1")
        assert turn_wait() == (1, 0, 1)
        node.ask("planner", schema.Built(0, 0, "message 0 in a line", "test"), timeout=10.0)  # the wait ends
        waiting.join(10.0)
        assert not waiting.is_alive() and turn_wait() == (-1, 0, 0)


def test_a_logged_notice_that_skips_ahead_of_the_log_does_not_crash_the_planner(small_chat):
    """A notice that does not continue the planner's count plans nothing from its lines:
    the planner asks the log for its count instead (trusting it, it would read messages
    the log does not have, fail, and stop)."""
    before = folder_bytes(small_chat.chat)
    small_chat.node.tell("planner", schema.Logged(100, ["user: from nowhere"]))
    assert small_chat.node.ask("planner", schema.PoolIdle(), timeout=10.0) == schema.Idle(True, 0, 0)
    # The notice was handled before PoolIdle: a handler that raised counted an error, and
    # a planner that stopped itself is no longer listed.
    stats = {row.name: row for row in small_chat.node.statistics()}
    assert "planner" in stats and (stats["planner"].errors, stats["planner"].restarts) == (0, 0)
    assert folder_bytes(small_chat.chat) == before


def test_r31_a_next_job_told_instead_of_asked_never_takes_a_job(small_chat):
    """A told NextJob cannot carry a job back: the job handed to it goes back first in
    line, and the pool still goes idle."""
    node = small_chat.node
    node.tell("planner", schema.NextJob("fuzzer"))
    items = [schema.Append("user", message_text(1) + f" more {n}", f"more-{n}", [], None) for n in range(4)]
    node.ask("log_writer", schema.AppendMany(items), timeout=10.0)
    try:
        idle = node.ask("planner", schema.PoolIdle(), timeout=10.0)
    except AskTimeout:
        idle = None
    assert idle == schema.Idle(True, 0, 0)


# -- what the planner's fix needs from the transport ------------------------------------------

class Holder(Actor):
    """Keeps every Ping's delivery, to answer it when the test says."""

    def __init__(self, kept: queue.Queue) -> None:
        super().__init__()
        self.kept = kept

    def on_ping(self, msg, delivery) -> None:
        self.kept.put(delivery)


def test_a_reply_to_an_asker_whose_process_is_gone_reports_false(tmp_path):
    """`Delivery.reply` is False when the reply cannot leave: a tell, or an asker whose
    connection dropped (here a DEALER closed before the answer). The planner needs this to
    put back a job it handed to a worker that died (test_ops, test_r31 above)."""
    kept: queue.Queue = queue.Queue()
    with Node("holder", bind=f"ipc://{tmp_path}/holder") as node:
        node.host("holder", Holder, kept)
        node.tell("holder", schema.Ping(b"told"))
        assert kept.get(timeout=10).reply(schema.Pong(b"told")) is False
        ctx = zmq.Context()
        asker = ctx.socket(zmq.DEALER)
        asker.connect(node.endpoint)
        asker.send(wire.request_frame(wire.ASK, 1, "holder", "asker", FAR, schema.Ping(b"here")))
        assert kept.get(timeout=10).reply(schema.Pong(b"here")) is True
        assert schema.from_obj(wire.parse_reply(asker.recv())[1]) == schema.Pong(b"here")
        asker.close(0)
        ctx.term()
        # The ROUTER hears of a closed connection a moment later (its I/O thread): until
        # then a reply leaves into nothing and True is all it can say. Each try is a new
        # asker that closes before its answer; one of the first few must be told False.
        outcomes = []
        for attempt in range(200):
            ctx = zmq.Context()
            asker = ctx.socket(zmq.DEALER)
            asker.connect(node.endpoint)
            asker.send(wire.request_frame(wire.ASK, 2, "holder", "asker", FAR, schema.Ping(b"gone")))
            gone = kept.get(timeout=10)
            asker.close(0)
            ctx.term()
            outcomes.append(gone.reply(schema.Pong(b"gone")))
            if outcomes[-1] is False:
                break
        assert outcomes[-1] is False, f"{len(outcomes)} replies to closed askers all reported True"
        assert node.gateway_statistics().errors == 1
