"""Exact worked examples of docs/SPEC.md over the production planner core."""

from __future__ import annotations

from fractions import Fraction

import pytest

from everchat.actors.tree import (
    PLACEHOLDER,
    Budget,
    Planner,
    PlannerError,
    key_of,
    name,
    node_of,
    recover,
    refold,
    render_line,
)
from everchat.tools.push_model import push_steps
from memory_world import World


def _all_built(lines: dict[tuple[int, int], str]):
    class Source:
        def node(self, l, i):
            return lines.get((l, i))

        def message_line(self, i):
            return lines[(0, i)]

    return Source()


def _full_tree(messages: int) -> dict[tuple[int, int], str]:
    nodes = {}
    l = 0
    while (1 << l) <= messages:
        for i in range(messages >> l):
            nodes[(l, i)] = "x" * 400  # not free: parents need a compaction
        l += 1
    return nodes


def test_r20_t10_last_rule_merges_8_9_where_first_rule_would_merge_0_7():
    lines = [(2, 0), (2, 1), (0, 8), (0, 9)]
    planner, _ = Planner.restore(Budget(3, 3, 3, 3, unit="lines"), 10, lines, False, _all_built(_full_tree(10)))
    merged = planner.view.fit(3, 10, planner.tree)
    assert [name(up) for up in merged] == ["8+2"]
    assert [name(key) for key in planner.view.ordered()] == ["0+4", "4+4", "8+2"]

    # The forbidden rule (R40) measures age from the pair's first message.
    def due_from_first(l, i):
        return Fraction(10 - i * 2**l, 2**l)

    assert due_from_first(2, 0) > due_from_first(0, 8)  # it would merge 0+4 and 4+4 into 0+8


def test_r20_push_agreement_at_every_step_up_to_20000():
    """With a line budget equal to push's list length, R18 makes push's merges."""
    planner = Planner(Budget(1, 1, 1, 1, jobs=8, unit="lines"))
    for messages, expected, length in push_steps(20_001):
        budget = Budget(length, length, 1, 1, jobs=8, unit="lines")
        step = planner.add_message(1, budget=budget)  # 1-byte leaves: free, so pairs of leaves merge at once
        todo = list(step.started)
        while todo:  # instant builds: every compaction finishes before the next message
            todo += planner.node_built(todo.pop(0), 300).started
        view = [name(key) for key in planner.view.ordered()]
        assert view == expected, f"T={messages}"
        assert len(step.merged) <= 1


def test_r11_small_messages_are_their_own_leaves_and_join_freely():
    world = World(Budget())
    world.message("user: hello")
    step = world.message("everchat: hi\r\nthere")
    assert [name(key) for key in step.built] == ["1+1", "0+2"]
    assert world.nodes[key_of(1, 0)] == "user: hello\neverchat: hi\r\nthere"
    # R14: the view shows each line flat; CR LF became one space.
    assert render_line(key_of(1, 0), world.nodes[key_of(1, 0)]) == "0+2|user: hello everchat: hi there"
    assert world.planner.view.size == len("0+1|user: hello\n1+1|everchat: hi there\n")


def test_r11_parent_is_not_free_when_joined_text_passes_512_bytes():
    world = World(Budget())
    world.message("user: " + "a" * 250)
    step = world.message("user: " + "b" * 250)  # 256 + 1 + 256 = 513 bytes
    assert [name(key) for key in step.built] == ["1+1"]
    assert [name(key) for key in step.started] == ["0+2"]


def test_r15_unbuilt_line_renders_as_placeholder():
    assert render_line(key_of(0, 7), None) == f"7+1|{PLACEHOLDER}"
    assert PLACEHOLDER == "(not summarized yet: zoom it)"


def test_r31_merges_start_first_then_leaves_by_id_with_at_most_jobs_running():
    world = World(Budget(jobs=2))
    for _ in range(4):
        world.message("user: " + "q" * 600)  # not free: leaves need compactions
    assert [name(key) for key in world.planner.running] == ["0+1", "1+1"]
    step = world.build(key_of(0, 1), "one")
    assert [name(key) for key in step.started] == ["2+1"]
    step = world.build(key_of(0, 0), "zero")  # 0+2 is ready (its halves are built), not free? joined "zero\none" is free
    assert [name(key) for key in step.built] == ["0+2"]
    assert [name(key) for key in step.started] == ["3+1"]


def test_r31_a_leaf_waits_while_8_lines_before_it_are_unbuilt():
    world = World(Budget(jobs=8))
    for _ in range(10):
        world.message("user: " + "q" * 600)
    assert sorted(node_of(key)[1] for key in world.planner.running) == list(range(8))
    world.fail(key_of(0, 3))
    # A failed leaf stays unbuilt, so leaf 8 still has 8 unbuilt lines before it.
    assert key_of(0, 8) not in world.planner.running
    world.build(key_of(0, 0), "zero")
    assert key_of(0, 8) in world.planner.running
    # A build frees a slot, but the failed leaf waits for the next message (R30).
    world.build(key_of(0, 1), "one")
    assert key_of(0, 3) not in world.planner.running and key_of(0, 9) in world.planner.running
    step = world.message("user: ok")
    assert step.started == [key_of(0, 3)]


def test_r27_context_stops_at_the_node_and_at_the_first_unbuilt_line():
    world = World(Budget())
    for i in range(6):
        world.message(f"user: short {i}")
    world.message("user: " + "z" * 700)  # message 6: unbuilt
    world.message("user: after")
    planner = world.planner
    before_6 = ["0+1", "1+1", "2+1", "3+1", "4+1", "5+1"]
    assert [name(key) for key in planner.context(key_of(0, 6))] == before_6
    # Nothing after an unbuilt line, even for a later node: never a placeholder (R44).
    assert [name(key) for key in planner.context(key_of(0, 7))] == before_6
    # A merge's context holds the lines that end at or before its last message.
    assert [name(key) for key in planner.context(key_of(1, 1))] == ["0+1", "1+1", "2+1", "3+1"]


def test_r25_merge_records_name_pairs_by_their_left_member_and_refold():
    assert refold([([(0, 0), (0, 2)], 4, False), ([(1, 0)], 5, True)]) == (5, [(2, 0), (0, 4)], True)
    with pytest.raises(PlannerError, match="not both lines"):
        refold([([(1, 0)], 4, False)])
    with pytest.raises(PlannerError, match="left member"):
        refold([([(0, 1)], 4, False)])


def test_r24_saved_view_that_disagrees_with_the_log_is_a_loud_error():
    source = _all_built(_full_tree(8))
    with pytest.raises(PlannerError, match="covers"):
        recover(Budget(), 4, source, [], {"t": 8, "view": [[3, 0]], "open": False}, None)
    with pytest.raises(PlannerError, match="once each"):
        Planner.restore(Budget(), 4, [(0, 0), (0, 2), (1, 1)], False, source)


def test_a_build_of_a_node_that_is_not_running_changes_nothing():
    world = World(Budget())
    world.message("user: " + "q" * 600)
    before = world.planner.saved_views()
    with pytest.raises(PlannerError, match="not running"):
        world.planner.node_built(key_of(0, 5), 10)
    with pytest.raises(PlannerError, match="1 to 512"):
        world.planner.node_built(key_of(0, 0), 513)
    assert world.planner.saved_views() == before
    assert key_of(0, 0) in world.planner.running
