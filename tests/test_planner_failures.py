"""R30 at the planner actor: a node's third failed call builds it from its input cut to 512
bytes, with no fourth call, and the count of failed calls outlives a planner restart."""

from __future__ import annotations

import pytest

from planner_world import PlannerWorld

LINE = "user: " + "".join(f"word{n} " for n in range(120))  # a 786-byte line: its leaf needs a call
FALLBACK = LINE.encode()[:512].decode()  # R30: the message line cut to 512 bytes (ASCII: no cut character)


@pytest.fixture
def world(tmp_path):
    world = PlannerWorld(tmp_path / "chat", jobs=1)
    try:
        yield world
    finally:
        world.close()


def _fail_once(world: PlannerWorld, attempt: int, n: int) -> None:
    """Message 0's leaf is handed out (its `attempt`-th call) and fails; a new short message
    (free, R11) makes it startable again (R30)."""
    job = world.next_job()
    assert (job.l, job.i, job.attempt) == (0, 0, attempt)
    world.failed(0, 0)
    assert world.status()["unbuilt_lines"] == 1 and world.node_text(0, 0) is None, f"built after {attempt}"
    world.append(f"short {n}")


def _third_call_builds_the_fallback(world: PlannerWorld) -> None:
    job = world.next_job()
    assert (job.l, job.i, job.attempt) == (0, 0, 3)
    world.failed(0, 0)
    world.status()  # the planner handled the failure (and saved what it built) before answering
    assert world.node_text(0, 0) == FALLBACK
    world.append("short after")  # would retry a node that is still failed: no fourth call
    assert world.status()["unbuilt_lines"] == 0
    # The next job is the merge over the built leaf and message 1 (not free, R11), not 0+1 again.
    assert world.next_name() == "0+2"


def test_r30_the_third_failed_call_builds_the_node_from_its_input_and_no_fourth_is_made(world):
    assert len(LINE.encode()) > 512
    world.append(LINE[len("user: "):])
    _fail_once(world, 1, 1)
    _fail_once(world, 2, 2)
    _third_call_builds_the_fallback(world)


def test_r30_the_count_of_failed_calls_outlives_a_planner_restart(world):
    world.append(LINE[len("user: "):])
    _fail_once(world, 1, 1)
    _fail_once(world, 2, 2)
    world.restart_planner()  # recovers from the chat folder: two calls have failed
    _third_call_builds_the_fallback(world)
