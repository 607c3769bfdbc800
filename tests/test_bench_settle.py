"""The settle and start benchmarks' accounting (issue 9), on tiny runs: counts, never speed."""

from __future__ import annotations

from everchat.tools.bench.bench_settle import percentile, run
from everchat.tools.bench.bench_start import run_once


def test_percentile_is_the_nearest_rank():
    values = [float(n) for n in range(1, 21)]
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile([], 0.5)) == (10.0, 19.0, 0.0)


def test_r36_every_turn_after_the_first_is_counted_once_with_its_settle():
    result = run(3, think=0.2, compaction=0.05, spread=0.0, turn_latency=0.0, jobs=2)
    assert (result["counted"], result["settles"]) == (2, 2)
    assert 0 <= result["waited"] <= 2 and result["waited_share"] == result["waited"] / 2
    assert 0.0 <= result["wait_p50_s"] <= result["wait_p95_s"] <= result["wait_max_s"]
    assert result["compactions"] > 0


def test_the_start_bench_times_the_open_inside_the_whole_command(tmp_path):
    figures = run_once("single", tmp_path, jobs=1)
    assert 0.0 < figures["open_s"] < figures["command_s"]
