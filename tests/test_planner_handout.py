"""R31 at hand-out (issue 9): while a turn waits, the leaves it waits for go to the first
free worker, ahead of jobs started before it came; otherwise jobs go in start order."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from everchat.actors.tree import Budget, key_of
from everchat.actors.planner.actor import PlannerActor


def actor_with(queue: list[int], waiting_for: int = -1, waiting_since: int = 0) -> PlannerActor:
    actor = PlannerActor(Budget())
    actor.planning = SimpleNamespace(planner=SimpleNamespace(waiting_for=waiting_for, waiting_since=waiting_since))
    actor.queue = deque(queue)
    return actor


MERGE, OLD_LEAF, TURN_LEAF, LATER_LEAF = key_of(1, 2), key_of(0, 1), key_of(0, 7), key_of(0, 9)


def test_r31_no_turn_waits_jobs_go_out_in_start_order():
    assert actor_with([MERGE, OLD_LEAF, TURN_LEAF])._turn_first() == [MERGE, OLD_LEAF, TURN_LEAF]


def test_r31_a_waiting_turns_leaves_go_out_before_a_merge_started_earlier():
    actor = actor_with([MERGE, LATER_LEAF, TURN_LEAF, OLD_LEAF], waiting_for=9, waiting_since=0)
    assert actor._turn_first() == [TURN_LEAF, OLD_LEAF, MERGE, LATER_LEAF]


def test_p18_an_ask_waiting_for_its_own_lines_puts_only_those_first():
    actor = actor_with([OLD_LEAF, MERGE, TURN_LEAF], waiting_for=9, waiting_since=5)
    assert actor._turn_first() == [TURN_LEAF, OLD_LEAF, MERGE]
