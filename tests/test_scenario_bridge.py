"""SPEC section 8: the production planner and the independent reference model agree.

The reference (tools/reference_planner.py) was written from docs/SPEC.md alone by
another engineer, without reading the planner core; the driver plays both with
the same seeded choices and compares every output line byte for byte.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from everchat.tools.planner_scenario import ScenarioSession
from everchat.tools.scenario_driver import CallablePlanner, SubprocessPlanner, cross_check

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = [sys.executable, str(ROOT / "tools" / "planner_scenario.py")]


@pytest.mark.parametrize("block", range(8))
def test_section8_planner_and_reference_agree_on_random_scenarios(block):
    for seed in range(block * 40, block * 40 + 40):
        result = cross_check(CallablePlanner(ScenarioSession().feed), seed, 250, bad=seed % 7 == 0)
        assert result.agree, f"seed {seed}: {result.difference}"


def test_section8_the_command_agrees_line_by_line_over_pipes():
    planner = SubprocessPlanner(SCENARIO, timeout=30)
    try:
        result = cross_check(planner, 4242, 400, bad=True)
    finally:
        planner.close()
    assert result.agree, result.difference


def _run(lines: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(SCENARIO, input="".join(line + "\n" for line in lines), capture_output=True, text=True, timeout=60)


def test_section8_exact_output_of_a_small_scenario():
    params = '{"ceiling": 60, "floor": 30, "cceiling": 40, "cfloor": 20, "jobs": 2, "unit": "bytes"}'
    done = _run([params, '{"m": 5}', '{"m": 600}', '{"m": 5}', '{"b": [0, 1], "s": 3}', '{"m": 5}'])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        # R11: a 5-byte leaf is free; its line "0+1|" + 5 + newline is 10 bytes (R16).
        "T=1 view=0+1 size=10 shrink=0 cview=0+1 csize=10 cshrink=0 start=",
        # An unbuilt leaf counts as its 34-byte placeholder line (R15); the compaction view
        # passes 40 but no pair has a built parent, so it stays shrinking (R21).
        "T=2 view=0+1,1+1 size=44 shrink=0 cview=0+1,1+1 csize=44 cshrink=1 start=1+1",
        "T=3 view=0+1,1+1,2+1 size=54 shrink=0 cview=0+1,1+1,2+1 csize=54 cshrink=1 start=",
        # The build changes sizes, never lines; 0+2 is built free (5 + 1 + 3 bytes).
        "T=3 view=0+1,1+1,2+1 size=28 shrink=0 cview=0+1,1+1,2+1 csize=28 cshrink=1 start=",
        # Leaf 3 frees 2+2 and 0+4; the shrinking compaction view merges by due:
        # 0-1 (due 3), then 2-3 (due 1), then 0+2 with 2+2 (due 1/2).
        "T=4 view=0+1,1+1,2+1,3+1 size=38 shrink=0 cview=0+4 csize=26 cshrink=1 start=",
    ]


@pytest.mark.parametrize(
    "lines, reason",
    [
        (['{"jobs": 9}'], "jobs"),
        (["{}", "not json"], "not JSON"),
        (["{}", '{"m": 600}', '{"b": [0, 5], "s": 3}'], "not running"),
        (["{}", '{"m": 600}', '{"b": [0, 0], "s": 513}'], "s must be"),
        (["{}", '{"x": 1}'], "unknown event"),
        (["{}", '{"m": 1, "colour": 2}'], "unknown field"),
    ],
)
def test_section8_a_bad_line_prints_error_and_exits_2_after_the_lines_before(lines, reason):
    done = _run(lines)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and reason in done.stderr
    assert len(done.stdout.splitlines()) == max(0, len(lines) - 2)
