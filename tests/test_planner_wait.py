"""R31's turn wait, directly: while a turn waits for the lines before its message m,
only the unbuilt lines before m start (from `since` on), leaves first, in id order;
ready merges wait, unless the turn also waits for a fit (issue 8). Then the same
through the planner actor: which jobs a worker is handed while a SettleView waits. And
the pool size R31 allows: 1 to 8."""

from __future__ import annotations

import threading
import time

import pytest

from everchat.actors.tree import Budget, Planner, PlannerError, key_of, name
from everchat.transport import schema
from planner_world import PlannerWorld

LONG = 600  # a message line this long is no free leaf: it needs a compaction (R11)
HALF = "h" * 300  # two built halves of 300 bytes do not join freely (R11): their merge is a job


def leaf(i: int) -> int:
    return key_of(0, i)


def names(keys) -> list[str]:
    return [name(key) for key in keys]


def planner_with(jobs: int, messages: int) -> Planner:
    planner = Planner(Budget(jobs=jobs))
    for _ in range(messages):
        planner.add_message(LONG)
    return planner


def test_r31_a_waiting_turn_starts_leaves_before_its_message_and_no_ready_merge():
    planner = planner_with(jobs=2, messages=8)
    assert names(planner.running) == ["0+1", "1+1"]
    assert planner.wait_for(4) == []  # the pool is full
    assert names(planner.node_built(leaf(0), len(HALF), HALF).started) == ["2+1"]
    # 0+2 is ready now (its halves are built and do not join freely), but the turn comes first.
    step = planner.node_built(leaf(1), len(HALF), HALF)
    assert list(planner.merge_queue) == [key_of(1, 0)]
    assert names(step.started) == ["3+1"]
    # Every line before message 4 is built or running: a free slot stays free (no merge,
    # no leaf 4 or later) while the turn waits.
    assert planner.node_built(leaf(2), 5, "two").started == []
    assert planner.node_built(leaf(3), 5, "thr").started == []
    assert planner.settled(4) and list(planner.merge_queue) == [key_of(1, 0)]
    # The turn stops waiting: the ready merge first, then leaves by id (R31).
    assert names(planner.stop_waiting()) == ["0+2", "4+1"]


def test_r31_a_waiting_turn_starts_its_lines_in_id_order_from_since_past_the_leaf_window():
    planner = planner_with(jobs=2, messages=12)
    assert planner.wait_for(10, since=6) == []
    # A failed leaf frees its slot; the wait starts leaf 6, the first of its own lines,
    # although 6 lines before it are unbuilt (the 8-line window does not hold a turn's lines).
    assert names(planner.node_failed(leaf(0)).started) == ["6+1"]
    assert names(planner.node_built(leaf(1), 3, "one").started) == ["7+1"]
    assert names(planner.node_built(leaf(6), 3, "six").started) == ["8+1"]
    assert names(planner.node_built(leaf(7), 3, "sev").started) == ["9+1"]
    assert planner.node_built(leaf(8), 3, "eig").started == []  # 10 and 11 are not the turn's
    # Without the wait, leaves start by id within the window; the failed leaf 0 waits for
    # the next message (R30).
    assert names(planner.stop_waiting()) == ["2+1"]


def test_r31_wait_for_starts_at_once_what_a_free_pool_allows_in_id_order():
    planner = planner_with(jobs=4, messages=12)
    planner.unstart()  # no call was made: the pool is free, every leaf pending
    assert names(planner.wait_for(11, since=5)) == ["5+1", "6+1", "7+1", "8+1"]
    planner.unstart()
    assert names(planner.wait_for(7, since=5)) == ["5+1", "6+1"]  # only the turn's lines


def test_r31_a_turn_waiting_for_a_fit_starts_its_leaves_first_then_ready_merges():
    for fit, then in ((True, ["0+2"]), (False, [])):
        planner = planner_with(jobs=2, messages=6)
        assert planner.wait_for(4, fit=fit) == []
        planner.node_built(leaf(0), len(HALF), HALF)  # starts 2+1
        step = planner.node_built(leaf(1), len(HALF), HALF)  # 0+2 ready: leaf 3 still first
        assert names(step.started) == ["3+1"]
        assert names(planner.node_built(leaf(2), 3, "two").started) == then


# -- through the actors --------------------------------------------------------------------


@pytest.fixture
def chat(tmp_path):
    """A log writer and a planner (2 jobs, no prefix gate) in one node; the test is the worker."""
    world = PlannerWorld(tmp_path / "chat", jobs=2)
    try:
        yield world
    finally:
        world.close()


def test_r31_through_the_planner_actor_a_waiting_turn_is_handed_its_lines_before_ready_merges(chat):
    for n in range(6):
        chat.append(f"message {n} " + "w" * LONG)
    assert [chat.next_name(), chat.next_name()] == ["0+1", "1+1"]
    replies = []
    waiter = threading.Thread(target=lambda: replies.append(
        chat.node.ask("planner", schema.SettleView(until=4, timeout=60.0), timeout=90)), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 10
    while not chat.actor("planner").settle_waiters:  # the turn's wait is in before the results come
        assert time.monotonic() < deadline and not replies, "the SettleView never waited in the planner"
        time.sleep(0.01)
    chat.built(0, 0, HALF)
    chat.built(0, 1, HALF)  # 0+2 is ready now; the turn's leaves 2 and 3 go first
    assert [chat.next_name(), chat.next_name()] == ["2+1", "3+1"]
    chat.built(0, 2, "two")
    chat.built(0, 3, "three")
    waiter.join(30)
    assert replies and replies[0].unbuilt == 0 and replies[0].messages == 6
    # The turn got its view: the ready merge goes out, then leaf 4 (R31's order without a wait).
    assert [chat.next_name(), chat.next_name()] == ["0+2", "4+1"]


def test_r31_a_pool_runs_1_to_8_compactions():
    for jobs in (0, 9):
        with pytest.raises(PlannerError, match="jobs must be 1 to 8"):
            Budget(jobs=jobs)
    planner = planner_with(jobs=8, messages=12)
    assert len(planner.running) == 8
