"""The pool benchmark's accounting on a small import (issue 4): its function runs a real chat
under the supervisor, 8 workers with the configured summarizer through the anthropic SDK
and the fake server (no latency here: the test checks counts, never speed)."""

from __future__ import annotations

import pytest

from everchat.tools.bench.bench_pool import note_texts, run

MESSAGES = 300


def complete_nodes(messages: int) -> int:
    """R10: every node whose messages are all logged, at every level."""
    total, level = 0, 0
    while messages >> level:
        total += messages >> level
        level += 1
    return total


@pytest.fixture(scope="module")
def gated():
    return run(MESSAGES, latency=0.0, spread=0.0, batch=25, backlog=16)  # the default gate: reread


def test_every_call_built_one_node_and_every_node_was_built_once(gated):
    assert gated["messages"] == MESSAGES
    assert gated["nodes"] == complete_nodes(MESSAGES) and gated["built_twice"] == 0
    assert gated["failed_calls"] == 0
    assert gated["calls"] == gated["nodes_by_model"] == gated["nodes_asked"] > MESSAGES // 2


def test_r23_with_the_gate_no_call_wrote_a_prefix_another_was_writing(gated):
    assert gated["duplicate_writers"] == 0
    assert 0.0 < gated["cache_read_share"] <= gated["perfect_read_share"] <= 1.0
    assert 0.0 <= gated["in_flight_share"] <= 1.0


def test_r23_holding_jobs_for_a_prefix_being_written_keeps_every_count_right():
    held = run(150, gate="wait", latency=0.01, spread=0.0, batch=25, backlog=16)
    assert held["duplicate_writers"] == 0 and held["failed_calls"] == 0
    assert held["calls"] == held["nodes_by_model"] == held["nodes_asked"]
    assert held["nodes"] == complete_nodes(150) and held["built_twice"] == 0


def test_r27_the_import_waits_for_the_pool_so_contexts_stay_small(gated):
    flooded = run(MESSAGES, latency=0.0, spread=0.0, batch=25, backlog=None)
    assert flooded["calls"] == gated["calls"]
    assert flooded["import_waits_s"] == 0.0 < gated["import_waits_s"]
    assert gated["input_tokens_per_call"] < flooded["input_tokens_per_call"]


def test_the_notes_are_40_to_400_bytes_and_the_same_for_a_seed():
    texts = note_texts(500, seed=3)
    assert texts == note_texts(500, seed=3) != note_texts(500, seed=4)
    sizes = [len(text.encode()) for text in texts]
    assert 36 <= min(sizes) and max(sizes) <= 400 and len(set(sizes)) > 100
