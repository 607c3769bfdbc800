"""The reference planner (SPEC section 8) on hand-worked scenarios, and its R20 check.

Every expected output line below was worked out by hand from docs/SPEC.md. Byte sizes: a line
is ``{id}+{n}|`` + text + newline, so leaf 4 with a 300-byte text is 4 + 300 + 1 = 305 and
an unbuilt single-digit leaf is 4 + 29 + 1 = 34 (R15, R16).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from everchat.tools.push_model import push_steps
from everchat.tools.reference_planner import MergeRecord, ReferencePlanner, ScenarioError
from everchat.tools.scenario_driver import (
    cross_check,
    parse_output,
    play,
    play_push_check,
    push_check_mismatch,
)

TOOLS = Path(__file__).resolve().parent.parent / "tools"
PRODUCTION = TOOLS / "planner_scenario.py"


def run(params: dict, events: list[dict]) -> tuple[ReferencePlanner, list[str]]:
    """Feed a parameters line and events; return the planner and its output lines."""
    planner = ReferencePlanner()
    assert planner.feed(json.dumps(params)) is None
    return planner, [planner.feed(json.dumps(event)) for event in events]


def leaves(count: int) -> str:
    """``0+1,1+1,…`` for a view of ``count`` single leaves."""
    return ",".join(f"{i}+1" for i in range(count))


def quiet(t: int, start: str = "") -> str:
    """The output line of a lines-mode scenario whose views never merge."""
    return f"T={t} view={leaves(t)} size={t} shrink=0 cview={leaves(t)} csize={t} cshrink=0 start={start}"


LINES_NO_MERGES = {"ceiling": 1000, "floor": 1000, "cceiling": 1000, "cfloor": 1000, "unit": "lines"}


# --- R18 / R20 ---------------------------------------------------------------------------------


def test_r20_t10_merges_8_9_not_0_7() -> None:
    planner, out = run(
        {"ceiling": 3, "floor": 3, "cceiling": 100, "cfloor": 100, "jobs": 8, "unit": "lines"},
        [{"m": 1}] * 10,
    )
    assert out == [
        "T=1 view=0+1 size=1 shrink=0 cview=0+1 csize=1 cshrink=0 start=",
        "T=2 view=0+1,1+1 size=2 shrink=0 cview=0+1,1+1 csize=2 cshrink=0 start=",
        "T=3 view=0+1,1+1,2+1 size=3 shrink=0 cview=0+1,1+1,2+1 csize=3 cshrink=0 start=",
        # 0-1 due (4-1)/1 = 3 beats 2-3 due 1.
        "T=4 view=0+2,2+1,3+1 size=3 shrink=0 cview=0+2,2+1,3+1 csize=3 cshrink=0 start=",
        "T=5 view=0+2,2+2,4+1 size=3 shrink=0 cview=0+2,2+2,4+1 csize=3 cshrink=0 start=",
        # 0-3 due (6-3)/2 = 3/2 beats 4-5 due 1.
        "T=6 view=0+4,4+1,5+1 size=3 shrink=0 cview=0+4,4+1,5+1 csize=3 cshrink=0 start=",
        "T=7 view=0+4,4+2,6+1 size=3 shrink=0 cview=0+4,4+2,6+1 csize=3 cshrink=0 start=",
        "T=8 view=0+4,4+2,6+2 size=3 shrink=0 cview=0+4,4+2,6+2 csize=3 cshrink=0 start=",
        "T=9 view=0+4,4+4,8+1 size=3 shrink=0 cview=0+4,4+4,8+1 csize=3 cshrink=0 start=",
        # 8-9 due (10-9)/1 = 1 beats 0-7 due (10-7)/4 = 3/4 (R40's first-message rule: 0-7).
        "T=10 view=0+4,4+4,8+2 size=3 shrink=0 cview=0+4,4+4,8+2 csize=3 cshrink=0 start=",
    ]
    assert planner.batches[-1] == MergeRecord([(0, 8)], 10, False)
    assert (3, 0) in planner.built  # 0-7 could have merged: its parent is free (15 bytes)


def test_r18_equal_dues_merge_the_leftmost_pair() -> None:
    _, out = run(
        {"ceiling": 100, "floor": 100, "cceiling": 100, "cfloor": 100, "jobs": 8, "unit": "lines"},
        [
            {"m": 10},
            {"m": 10},
            {"m": 10},
            {"m": 10, "ceiling": 3, "floor": 3},
            {"m": 10},
            {"m": 10, "ceiling": 100, "floor": 100},
            {"m": 10, "ceiling": 4, "floor": 4},
        ],
    )
    assert out == [
        quiet(1),
        quiet(2),
        quiet(3),
        "T=4 view=0+2,2+1,3+1 size=3 shrink=0 cview=0+2,2+1,3+1 csize=3 cshrink=0 start=",
        "T=5 view=0+2,2+2,4+1 size=3 shrink=0 cview=0+2,2+2,4+1 csize=3 cshrink=0 start=",
        "T=6 view=0+2,2+2,4+1,5+1 size=4 shrink=0 cview=0+2,2+2,4+1,5+1 csize=4 cshrink=0 start=",
        # 0-3 due (7-3)/2 = 2 and 4-5 due (7-5)/1 = 2: the leftmost wins, one merge fits.
        "T=7 view=0+4,4+1,5+1,6+1 size=4 shrink=0 cview=0+4,4+1,5+1,6+1 csize=4 cshrink=0 start=",
    ]


def test_r20_reference_view_is_push_list_at_every_t_up_to_2000() -> None:
    transcript = play_push_check(ReferencePlanner().feed, 2000, seed=1)
    assert push_check_mismatch(transcript) is None
    messages = [parse_output(step.output) for step in transcript.steps if '"m"' in step.line]
    assert [out.T for out in messages] == list(range(1, 2001))
    assert any(step.line.startswith('{"b"') for step in transcript.steps)  # compactions ran


def test_r20_push_list_at_t10_is_0_4_then_4_4_then_8_2() -> None:
    steps = {t: (nodes, length) for t, nodes, length in push_steps(10)}
    assert steps[9] == (["0+4", "4+4", "8+1"], 3)
    assert steps[10] == (["0+4", "4+4", "8+2"], 3)
    assert steps[7] == (["0+4", "4+2", "6+1"], 3)
    assert [steps[t][1] for t in range(1, 11)] == [1, 1, 2, 2, 2, 2, 3, 3, 3, 3]


# --- R11 ---------------------------------------------------------------------------------------


def test_r11_free_nodes_cascade_up_three_levels_and_a_built_merge_joins_them() -> None:
    planner, out = run(
        {"ceiling": 300, "floor": 200, "cceiling": 250, "cfloor": 150, "jobs": 8, "unit": "bytes"},
        [
            {"m": 100},
            {"m": 100},
            {"m": 100},
            {"m": 100},
            {"m": 300},
            {"m": 300},
            {"b": [1, 2], "s": 10},
            {"m": 5},
            {"m": 5},
        ],
    )
    assert out == [
        "T=1 view=0+1 size=105 shrink=0 cview=0+1 csize=105 cshrink=0 start=",
        "T=2 view=0+1,1+1 size=210 shrink=0 cview=0+1,1+1 csize=210 cshrink=0 start=",
        # 315 > 300: 0-1 (free, 201 bytes) merges to 206 + 105 = 311, still above 200.
        "T=3 view=0+2,2+1 size=311 shrink=1 cview=0+2,2+1 csize=311 cshrink=1 start=",
        # Leaf 3 cascades: 2-3 is free (201), then 0-3 (403): both merge in one batch.
        "T=4 view=0+4 size=408 shrink=1 cview=0+4 csize=408 cshrink=1 start=",
        "T=5 view=0+4,4+1 size=713 shrink=1 cview=0+4,4+1 csize=713 cshrink=1 start=",
        # 300 + 1 + 300 > 512: 4-5 needs a compaction.
        "T=6 view=0+4,4+1,5+1 size=1018 shrink=1 cview=0+4,4+1,5+1 csize=1018 cshrink=1 start=4+2",
        "T=6 view=0+4,4+1,5+1 size=1018 shrink=1 cview=0+4,4+1,5+1 csize=1018 cshrink=1 start=",
        "T=7 view=0+4,4+2,6+1 size=433 shrink=1 cview=0+4,4+2,6+1 csize=433 cshrink=1 start=",
        # Leaf 7: 6-7 free (11), 4-7 = 10+1+11 = 22, 0-7 = 403+1+22 = 426, all at once.
        "T=8 view=0+8 size=431 shrink=1 cview=0+8 csize=431 cshrink=1 start=",
    ]
    assert planner.built[(3, 0)] == 426
    assert planner.batches[-1] == MergeRecord([(0, 6), (1, 2), (2, 0)], 8, True)


# --- R19 ---------------------------------------------------------------------------------------


def test_r19_batch_goes_on_while_shrinking_until_the_floor() -> None:
    planner, out = run(
        {"ceiling": 4, "floor": 2, "cceiling": 100, "cfloor": 100, "jobs": 8, "unit": "lines"},
        [
            {"m": 300},
            {"m": 300},
            {"m": 300},
            {"m": 300},
            {"b": [1, 0], "s": 300},
            {"b": [1, 1], "s": 300},
            {"m": 300},
            {"b": [2, 0], "s": 50},
            {"m": 300},
            {"b": [1, 2], "s": 20},
            {"m": 300},
            {"m": 300},
            {"b": [1, 3], "s": 20},
            {"m": 300},
            {"m": 300},
        ],
    )
    assert out == [
        quiet(1),
        quiet(2, "0+2"),
        quiet(3),
        quiet(4, "2+2"),
        quiet(4),
        quiet(4, "0+4"),
        # 5 lines > 4: 0-1 (due 4), 2-3 (due 2); 0-3 is running, so the batch ends at 3 > 2.
        "T=5 view=0+2,2+2,4+1 size=3 shrink=1 cview=0+2,2+2,4+1 csize=3 cshrink=0 start=",
        # A build does not change the views, nor the shrinking flag.
        "T=5 view=0+2,2+2,4+1 size=3 shrink=1 cview=0+2,2+2,4+1 csize=3 cshrink=0 start=",
        # 4 lines is not above the ceiling, but the view is still shrinking.
        "T=6 view=0+4,4+1,5+1 size=3 shrink=1 cview=0+4,4+1,5+1 csize=3 cshrink=0 start=4+2",
        "T=6 view=0+4,4+1,5+1 size=3 shrink=1 cview=0+4,4+1,5+1 csize=3 cshrink=0 start=",
        "T=7 view=0+4,4+2,6+1 size=3 shrink=1 cview=0+4,4+2,6+1 csize=3 cshrink=0 start=",
        # A batch that merges nothing: the compaction view takes the leaf by R21.
        "T=8 view=0+4,4+2,6+1,7+1 size=4 shrink=1 cview=0+4,4+2,6+1,7+1 csize=4 cshrink=0 start=6+2",
        # 6-7 is built (20 bytes): 4-7 = 20+1+20 = 41 and 0-7 = 50+1+41 = 92 are free.
        "T=8 view=0+4,4+2,6+1,7+1 size=4 shrink=1 cview=0+4,4+2,6+1,7+1 csize=4 cshrink=0 start=",
        "T=9 view=0+8,8+1 size=2 shrink=0 cview=0+8,8+1 csize=2 cshrink=0 start=",
        "T=10 view=0+8,8+1,9+1 size=3 shrink=0 cview=0+8,8+1,9+1 csize=3 cshrink=0 start=8+2",
    ]
    assert planner.batches == [
        MergeRecord([(0, 0), (0, 2)], 5, True),
        MergeRecord([(1, 0)], 6, True),
        MergeRecord([(0, 4)], 7, True),
        MergeRecord([], 8, True),
        MergeRecord([(0, 6), (1, 2), (2, 0)], 9, False),
    ]


def test_r19_a_message_may_carry_new_budgets_that_apply_at_once() -> None:
    _, out = run(
        {"ceiling": 1000, "floor": 1000, "cceiling": 1000, "cfloor": 1000, "jobs": 8, "unit": "bytes"},
        [{"m": 5}, {"m": 5, "ceiling": 15, "floor": 12}],
    )
    # 10 + 10 = 20 > 15: 0-1 (11 bytes) merges to one 16-byte line, above the floor of 12.
    assert out[1] == "T=2 view=0+2 size=16 shrink=1 cview=0+2 csize=16 cshrink=0 start="


# --- R21 ---------------------------------------------------------------------------------------


def test_r21_a_view_merge_replaces_the_compaction_view_fitted_to_cfloor() -> None:
    _, out = run(
        {"ceiling": 3, "floor": 2, "cceiling": 100, "cfloor": 1, "jobs": 8, "unit": "lines"},
        [{"m": 10}] * 8,
    )
    assert out == [
        quiet(1),
        quiet(2),
        quiet(3),
        "T=4 view=0+2,2+2 size=2 shrink=0 cview=0+4 csize=1 cshrink=0 start=",
        # No view merge: the leaf is appended, no fit (2 <= 100, not shrinking).
        "T=5 view=0+2,2+2,4+1 size=3 shrink=0 cview=0+4,4+1 csize=2 cshrink=0 start=",
        "T=6 view=0+4,4+2 size=2 shrink=0 cview=0+4,4+2 csize=2 cshrink=1 start=",
        # Appended, and fitted because it is still shrinking (nothing can merge).
        "T=7 view=0+4,4+2,6+1 size=3 shrink=0 cview=0+4,4+2,6+1 csize=3 cshrink=1 start=",
        "T=8 view=0+4,4+4 size=2 shrink=0 cview=0+8 csize=1 cshrink=0 start=",
    ]


def test_r21_compaction_view_fits_past_cceiling_and_goes_on_while_shrinking() -> None:
    before = "T=4 view=0+1,1+1,2+1,3+1 size=4 shrink=0 cview=0+1,1+1,2+1,3+1 csize=4 cshrink=0"
    _, out = run(
        {"ceiling": 100, "floor": 100, "cceiling": 4, "cfloor": 1, "jobs": 8, "unit": "lines"},
        [
            {"m": 600},
            {"m": 600},
            {"m": 600},
            {"m": 600},
            {"b": [0, 0], "s": 300},
            {"b": [0, 1], "s": 300},
            {"b": [0, 2], "s": 300},
            {"b": [0, 3], "s": 300},
            {"b": [1, 0], "s": 300},
            {"b": [1, 1], "s": 300},
            {"m": 600},
            {"b": [2, 0], "s": 300},
            {"m": 600},
            {"m": 600, "ceiling": 6, "floor": 6},
        ],
    )
    assert out == [
        quiet(1, "0+1"),
        quiet(2, "1+1"),
        quiet(3, "2+1"),
        quiet(4, "3+1"),  # 4 lines does not pass a cceiling of 4
        before + " start=",
        before + " start=0+2",
        before + " start=",
        before + " start=2+2",
        before + " start=",
        before + " start=0+4",
        # 5 > 4: 0-1 and 2-3 merge, 0-3 is still running.
        f"T=5 view={leaves(5)} size=5 shrink=0 cview=0+2,2+2,4+1 csize=3 cshrink=1 start=4+1",
        f"T=5 view={leaves(5)} size=5 shrink=0 cview=0+2,2+2,4+1 csize=3 cshrink=1 start=",
        # 4 lines, fitted only because it is still shrinking.
        f"T=6 view={leaves(6)} size=6 shrink=0 cview=0+4,4+1,5+1 csize=3 cshrink=1 start=5+1",
        # The view merges 0-1 (due 6): the compaction view is its copy fitted down to 1.
        "T=7 view=0+2,2+1,3+1,4+1,5+1,6+1 size=6 shrink=0 cview=0+4,4+1,5+1,6+1 csize=4 cshrink=1 start=6+1",
    ]


# --- R30 / R31 ---------------------------------------------------------------------------------


def test_r30_failed_leaves_and_merges_are_retried_at_the_next_message() -> None:
    _, out = run(
        {"ceiling": 128000, "floor": 64000, "cceiling": 32000, "cfloor": 16000, "jobs": 1, "unit": "bytes"},
        [
            {"m": 600},
            {"m": 600},
            {"f": [0, 0]},
            {"b": [0, 1], "s": 200},
            {"m": 100},
            {"f": [0, 0]},
            {"m": 100},
            {"b": [0, 0], "s": 300},
            {"f": [2, 0]},
            {"m": 600},
        ],
    )
    assert out == [
        "T=1 view=0+1 size=34 shrink=0 cview=0+1 csize=34 cshrink=0 start=0+1",
        "T=2 view=0+1,1+1 size=68 shrink=0 cview=0+1,1+1 csize=68 cshrink=0 start=",
        # Leaf 0 failed: the next startable leaf goes.
        "T=2 view=0+1,1+1 size=68 shrink=0 cview=0+1,1+1 csize=68 cshrink=0 start=1+1",
        # A build changes the size (a 34-byte placeholder becomes 205 bytes), not the views.
        "T=2 view=0+1,1+1 size=239 shrink=0 cview=0+1,1+1 csize=239 cshrink=0 start=",
        "T=3 view=0+1,1+1,2+1 size=344 shrink=0 cview=0+1,1+1,2+1 csize=344 cshrink=0 start=0+1",
        "T=3 view=0+1,1+1,2+1 size=344 shrink=0 cview=0+1,1+1,2+1 csize=344 cshrink=0 start=",
        "T=4 view=0+1,1+1,2+1,3+1 size=449 shrink=0 cview=0+1,1+1,2+1,3+1 csize=449 cshrink=0 start=0+1",
        # 0-1 is free (300+1+200 = 501), 0-3 is not (501+1+201).
        "T=4 view=0+1,1+1,2+1,3+1 size=720 shrink=0 cview=0+1,1+1,2+1,3+1 csize=720 cshrink=0 start=0+4",
        "T=4 view=0+1,1+1,2+1,3+1 size=720 shrink=0 cview=0+1,1+1,2+1,3+1 csize=720 cshrink=0 start=",
        # The failed merge rejoins the queue and goes before the new unbuilt leaf.
        "T=5 view=0+1,1+1,2+1,3+1,4+1 size=754 shrink=0 cview=0+1,1+1,2+1,3+1,4+1 csize=754 cshrink=0 start=0+4",
    ]


def test_r31_merge_queue_is_fifo_and_failed_merges_rejoin_its_end() -> None:
    _, out = run(
        {**LINES_NO_MERGES, "jobs": 1},
        [{"m": 100}] * 8
        + [{"m": 400}] * 4
        + [
            {"f": [3, 0]},
            {"m": 400},
            {"f": [1, 4]},
            {"m": 400},
            {"b": [1, 5], "s": 100},
            {"b": [3, 0], "s": 500},
            {"b": [1, 4], "s": 100},
        ],
    )
    assert out == [
        quiet(1),
        quiet(2),
        quiet(3),
        quiet(4),
        quiet(5),
        quiet(6),
        quiet(7),
        quiet(8, "0+8"),  # 0-3 and 4-7 are free (403 bytes each), 0-7 is not
        quiet(9),
        quiet(10),  # 8-9 queued
        quiet(11),
        quiet(12),  # 10-11 queued after it
        quiet(12, "8+2"),
        quiet(13),  # 0-7 rejoins: queue 10-11, 0-7
        quiet(13, "10+2"),
        quiet(14),  # 8-9 rejoins, then leaf 13 queues 12-13: 0-7, 8-9, 12-13
        quiet(14, "0+8"),
        quiet(14, "8+2"),
        quiet(14, "12+2"),  # 8-11 was free (201 bytes)
    ]


def test_r31_failed_merges_rejoin_lower_level_first() -> None:
    _, out = run(
        {**LINES_NO_MERGES, "jobs": 2},
        [{"m": 100}] * 8 + [{"m": 400}] * 2 + [{"f": [3, 0]}, {"f": [1, 4]}, {"m": 100}],
    )
    assert out[7:] == [
        quiet(8, "0+8"),
        quiet(9),
        quiet(10, "8+2"),
        quiet(10),
        quiet(10),
        # 0-7 failed first, but 8-9 is the lower level.
        quiet(11, "8+2,0+8"),
    ]


def test_r31_a_leaf_waits_while_8_lines_before_it_are_unbuilt() -> None:
    _, out = run(
        {**LINES_NO_MERGES, "jobs": 8},
        [{"m": 600}] * 10
        + [
            {"f": [0, 0]},
            {"b": [0, 1], "s": 10},
            {"m": 600},
            {"b": [0, 2], "s": 10},
            {"b": [0, 3], "s": 10},
        ],
    )
    assert out == [quiet(t, f"{t - 1}+1") for t in range(1, 9)] + [
        quiet(9),
        quiet(10),
        # A free job, but leaf 8 has 8 unbuilt lines before it (0 .. 7), leaf 9 has 9.
        quiet(10),
        # Leaf 1 built: leaf 8 has 7 unbuilt before it (0, 2 .. 7).
        quiet(10, "8+1"),
        # The failed leaf 0 is retried; the 8 jobs are then all running.
        quiet(11, "0+1"),
        quiet(11, "9+1"),
        quiet(11, "10+1"),
    ]


# --- section 8: errors -----------------------------------------------------------------------


def test_a_b_for_a_node_not_running_exits_2_after_the_lines_already_printed() -> None:
    scenario = "".join(
        json.dumps(line) + "\n"
        for line in [
            {"ceiling": 1000, "floor": 500, "cceiling": 400, "cfloor": 200, "jobs": 8, "unit": "bytes"},
            {"m": 600},
            {"b": [0, 1], "s": 5},
            {"m": 1},
        ]
    )
    done = subprocess.run(
        [sys.executable, str(TOOLS / "reference_planner.py")],
        input=scenario,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == "T=1 view=0+1 size=34 shrink=0 cview=0+1 csize=34 cshrink=0 start=0+1\n"
    assert done.stderr == "error: b for [0, 1] (1+1), which is not running\n"


@pytest.mark.parametrize(
    "line",
    [
        "",
        '{"m": ',
        "[1, 2]",
        '{"x": 1}',
        '{"m": 1.5}',
        '{"m": true}',
        '{"m": -1}',
        '{"m": 1, "f": [0, 0]}',
        '{"m": 1, "cfloor": 3}',
        '{"b": [0, 0]}',
        '{"b": [0, 0], "s": 0}',
        '{"b": [0, 0], "s": 513}',
        '{"b": [0], "s": 5}',
        '{"f": [0, -1]}',
        '{"f": [1, 0]}',
        '{"b": [0, 1], "s": 5}',
    ],
)
def test_a_malformed_line_or_an_idle_node_is_refused(line: str) -> None:
    planner, _ = run({"jobs": 8}, [{"m": 600}, {"m": 5}])  # leaf 0 running, leaf 1 built
    with pytest.raises(ScenarioError):
        planner.feed(line)
    with pytest.raises(ScenarioError, match="earlier error"):
        planner.feed('{"m": 1}')


@pytest.mark.parametrize(
    "line",
    ['{"jobs": 0}', '{"jobs": 9}', '{"unit": "tokens"}', '{"ceiling": "1"}', '{"m": 1}', "{}x"],
)
def test_a_bad_parameters_line_is_refused(line: str) -> None:
    with pytest.raises(ScenarioError):
        ReferencePlanner().feed(line)


def test_a_failed_node_is_not_running_until_it_is_started_again() -> None:
    planner, _ = run({"jobs": 1}, [{"m": 600}, {"f": [0, 0]}])
    with pytest.raises(ScenarioError, match="not running"):
        planner.feed('{"b": [0, 0], "s": 5}')


# --- the driver --------------------------------------------------------------------------------


def test_the_driver_plays_one_seed_the_same_way_twice() -> None:
    first = play(ReferencePlanner().feed, seed=11, events=300)
    second = play(ReferencePlanner().feed, seed=11, events=300)
    assert first == second
    assert len(first.steps) == 300
    kinds = {next(iter(json.loads(step.line))) for step in first.steps}
    assert kinds == {"m", "b", "f"}


def test_the_reference_command_agrees_with_the_reference_in_process(tmp_path: Path) -> None:
    for seed in range(3):
        check = cross_check(
            [sys.executable, str(TOOLS / "reference_planner.py")], seed=seed, events=150, bad=True
        )
        assert check.agree, check.difference
        assert check.planner.steps[-1].error is not None  # the bad line was refused by both
    scenario = tmp_path / "scenario.jsonl"
    transcript = play(ReferencePlanner().feed, seed=5, events=100)
    scenario.write_text(transcript.events_text())
    done = subprocess.run(
        [sys.executable, str(TOOLS / "reference_planner.py")],
        stdin=scenario.open(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == transcript.outputs()


def test_the_driver_reports_the_first_line_where_two_planners_differ() -> None:
    def off_by_one(feed):
        def wrapped(line: str) -> str | None:
            out = feed(line)
            if out is not None and out.startswith("T=3 "):
                return out.replace("T=3 ", "T=4 ", 1)
            return out

        return wrapped

    check = cross_check(off_by_one(ReferencePlanner().feed), seed=2, events=100)
    assert not check.agree
    assert "planner:   T=4 " in check.difference
    assert "reference: T=3 " in check.difference


def test_the_production_planner_agrees_with_the_reference_byte_for_byte() -> None:
    command = [sys.executable, str(PRODUCTION)]
    for seed in range(10):
        check = cross_check(command, seed=seed, events=200, bad=True)
        assert check.agree, check.difference
    assert push_check_mismatch(play_push_check(command, 2000, seed=4)) is None
