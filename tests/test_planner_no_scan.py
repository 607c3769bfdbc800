"""R32, R52: the planner works from ready queues and never scans the tree for work.

A scan shows as work per message that grows with the chat. Time is too noisy to tell on
a shared machine, so this counts what the planner core does instead: the Python calls
into `actors/memory` while 1,000 messages are planned and their compactions answered at
once, in a chat of 2,000 messages and in one of 20,000 (the same seeded sizes). Ten
times the history must not cost more per message.
"""

from __future__ import annotations

import random
import sys

from everchat.actors.tree import Budget, Planner

_WINDOW = 1_000


def _calls_for_the_last_window(total: int) -> int:
    """Core calls while the last `_WINDOW` of `total` messages are planned and built."""
    rng = random.Random(7)
    planner = Planner(Budget())
    calls = 0

    def count(frame, event, arg) -> None:
        nonlocal calls
        if event == "call" and "/actors/tree/" in frame.f_code.co_filename.replace("\\", "/"):
            calls += 1

    for m in range(total):
        size = rng.randint(600, 3000) if rng.random() < 1 / 3 else rng.randint(20, 400)  # 1 in 3 needs a compaction
        line = "x" * size
        counting = m >= total - _WINDOW
        if counting:
            sys.setprofile(count)
        try:
            todo = list(planner.add_message(len(line.encode()), line).started)
            while todo:  # every started compaction answers at once, with a 300-byte line
                todo += planner.node_built(todo.pop(), 300, "s" * 300).started
        finally:
            if counting:
                sys.setprofile(None)
    return calls


def test_r32_r52_planning_a_message_costs_the_same_in_a_chat_ten_times_longer():
    short, long = _calls_for_the_last_window(2 * _WINDOW), _calls_for_the_last_window(20 * _WINDOW)
    assert short > 10 * _WINDOW  # the count sees the core at work (the test can fail)
    assert long < 1.5 * short, f"{long} calls for the last {_WINDOW} of 20,000 messages, {short} of 2,000"
