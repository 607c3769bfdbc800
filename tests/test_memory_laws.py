"""The memory rules of docs/SPEC.md as hypothesis properties over the production planner.

Each history is random: messages of mixed sizes and texts, builds of running
compactions in any order, failures, and restarts from the chat folder (with and
without view.json). Every event goes through the production `Planning` over a real
`ChatStore` (tests/memory_world.py), so R25's merge records and the shrinking flag
are read back from the store as Planning wrote them. After every event the laws
below must hold. Brute-force checkers (tests/memory_world.py) are written straight
from the rules' text.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from everchat.actors.tree import (
    LINE_LIMIT,
    Budget,
    children,
    end,
    level,
    name,
    node_of,
    pair_of,
    parent,
    start,
)
from memory_world import World, is_cover, most_due_pair, rendered_size

_WORDS = ["amber-42", "zoom", "héllo", "日本", "path/to/file.py", "x", "\r\n", "\n", "error: 7"]


def _text(draw, low: int, high: int) -> str:
    """A text of about low … high bytes, with newlines, CR LF and non-ASCII.

    Hypothesis draws only its size and a seed, so histories stay small to shrink.
    """
    target = draw(st.integers(low, high))
    rng = random.Random(draw(st.integers(0, 2**16)))
    parts: list[str] = []
    size = 0
    while size < target:
        word = rng.choice(_WORDS) if rng.random() < 0.5 else "w" * rng.randint(1, 60)
        parts.append(word)
        size += len(word.encode()) + 1
    return " ".join(parts)


@st.composite
def budgets(draw) -> Budget:
    if draw(st.integers(0, 4)) == 0:
        ceiling = draw(st.integers(2, 12))
        floor = draw(st.integers(1, ceiling))
        cceiling = draw(st.integers(1, ceiling))
        cfloor = draw(st.integers(1, cceiling))
        return Budget(ceiling, floor, cceiling, cfloor, draw(st.integers(1, 8)), "lines")
    ceiling = draw(st.integers(200, 4000))
    floor = draw(st.integers(0, ceiling))
    cceiling = draw(st.integers(100, ceiling))
    cfloor = draw(st.integers(0, cceiling))
    return Budget(ceiling, floor, cceiling, cfloor, draw(st.integers(1, 8)))


def check_laws(world: World) -> None:
    """Every law that must hold between events."""
    planner = world.planner
    messages = planner.messages
    view, cview = planner.view.ordered(), planner.cview.ordered()
    count_lines = world.budget.unit == "lines"
    # R13: both views cover 0 … T-1 exactly once, oldest first, with tree nodes.
    assert is_cover(view, messages), [name(key) for key in view]
    assert is_cover(cview, messages), [name(key) for key in cview]
    # Only message leaves can be unbuilt in the view (and so in the compaction view).
    for key in view + cview:
        assert level(key) == 0 or key in world.nodes, name(key)
    # R21: compaction-view lines are the view's lines or their built ancestors.
    members = set(view)
    for key in cview:
        covered = [line for line in view if start(key) <= start(line) and end(line) <= end(key)]
        assert key in members or (key in world.nodes and covered), name(key)
    # R16: sizes are the rendered lines' bytes, placeholders for unbuilt lines.
    assert planner.view.size == rendered_size(view, world.nodes, count_lines)
    assert planner.cview.size == rendered_size(cview, world.nodes, count_lines)
    # Every built line is 1 … 512 bytes (R10, R29).
    for key in view:
        if key in world.nodes:
            assert 1 <= len(world.nodes[key].encode()) <= LINE_LIMIT
    # R31: never more than `jobs` compactions at once; no built node runs.
    assert len(planner.running) <= world.budget.jobs
    for key in planner.running:
        assert key not in world.nodes
        if level(key):
            assert all(half in world.nodes for half in children(key))
    # R27: a node's context ends at the node and holds only built lines.
    for key in planner.running:
        context = planner.context(key)
        assert context == cview[: len(context)]
        limit = start(key) if level(key) == 0 else end(key)
        assert all(end(line) <= limit and line in world.nodes for line in context)
        following = cview[len(context)] if len(context) < len(cview) else None
        assert following is None or end(following) > limit or following not in world.nodes


def check_message(world: World, before: tuple, step, records: int) -> None:
    """Laws of one message: R17, R18, R19, R21, R25.

    `before` is the view, the compaction view and both shrinking flags before it;
    `records` the number of merge records in the store before it.
    """
    before, before_cview, was_shrinking, was_cshrinking = before
    planner = world.planner
    # R25: exactly one merge record per batch (also one that merged nothing while the view
    # is shrinking), as Planning wrote it: the pairs by their left member, in merge order,
    # this message's t and the flag saying whether the batch is still going.
    written = world.store.merge_records(first=records)
    if step.batch:
        assert written == [([pair_of(up) for up in step.merged], planner.messages, planner.view.shrinking)]
    else:
        assert written == []
    # R22: the saved view is the live one, saved with this message.
    saved = world.store.load_views()[0]
    assert (saved["t"], saved["open"]) == (planner.messages, planner.view.shrinking)
    assert saved["view"] == [list(node_of(key)) for key in planner.view.ordered()]
    budget, messages = world.budget, planner.messages
    leaf = (messages - 1) << 6
    appended = before + [leaf]
    after = planner.view.ordered()
    count_lines = budget.unit == "lines"
    # Free leaves (R11): a message line of at most 512 bytes is its own leaf, word for word.
    line = world.lines[-1]
    if len(line.encode()) <= LINE_LIMIT:
        assert world.nodes[leaf] == line
    # Free parents are the children joined by one newline, and fit (R11).
    for key in step.built:
        if level(key):
            assert world.nodes[key] == world.free_text(key)
            assert len(world.nodes[key].encode()) <= LINE_LIMIT
    # R19: a batch runs exactly when the view passed the ceiling or was shrinking.
    size_then = rendered_size(appended, world.nodes, count_lines)
    assert step.batch == (size_then > budget.ceiling or was_shrinking)
    if not step.batch:
        # R17: a message with no batch only appends its line.
        assert after == appended
        assert not step.merged
    else:
        # R18: each merge is the most due built pair, replacing two siblings by their parent.
        current = list(appended)
        for up in step.merged:
            assert rendered_size(current, world.nodes, count_lines) > budget.floor
            assert most_due_pair(current, world.nodes, messages) == up, name(up)
            left, right = children(up)
            at = current.index(left)
            assert current[at + 1] == right
            current[at : at + 2] = [up]
        assert current == after
        # The batch ends at or under the floor unless no pair can merge.
        final = rendered_size(after, world.nodes, count_lines)
        assert final <= budget.floor or most_due_pair(after, world.nodes, messages) is None
        assert planner.view.shrinking == (final > budget.floor)
    # R21: on a view merge the compaction view is the view fitted down, else it grows by the leaf.
    cview = planner.cview.ordered()
    if step.merged:
        current = list(after)
    else:
        current = before_cview + [leaf]
    size = rendered_size(current, world.nodes, count_lines)
    must_fit = bool(step.merged) or size > budget.cceiling or was_cshrinking
    if must_fit:
        while size > budget.cfloor:
            up = most_due_pair(current, world.nodes, messages)
            if up is None:
                break
            left, _ = children(up)
            at = current.index(left)
            current[at : at + 2] = [up]
            size = rendered_size(current, world.nodes, count_lines)
        assert planner.cview.shrinking == (size > budget.cfloor)
    assert cview == current


def play(data, world: World, events: int) -> None:
    draw = data.draw
    for _ in range(events):
        planner = world.planner
        running = sorted(planner.running)
        choice = draw(st.integers(0, 99))
        if choice < 45 or not running:
            before = (
                list(planner.view.ordered()),
                list(planner.cview.ordered()),
                planner.view.shrinking,
                planner.cview.shrinking,
            )
            small = draw(st.integers(0, 3)) > 0
            text = _text(draw, 1, 500) if small else _text(draw, 513, 2500)
            records = world.store.merge_count
            step = world.message(draw(st.sampled_from(["user", "everchat", "tool", "echo"])) + ": " + text)
            check_message(world, before, step, records)
        elif choice < 85:
            key = draw(st.sampled_from(running))
            text = _text(draw, 1, 500)
            while len(text.encode()) > LINE_LIMIT:
                text = text[:-1]
            records = world.store.merge_count
            world.build(key, text)
            assert world.store.merge_count == records, "a build writes no merge record (R25)"
        elif choice < 93:
            world.fail(draw(st.sampled_from(running)))
        else:
            saved = world.planner.saved_views()
            lose_view = draw(st.booleans())
            world.restart(lose_view=lose_view, lose_cview=draw(st.booleans()))
            # R24: the view after a restart is byte-identical to the view before it.
            assert world.planner.saved_views()[0]["view"] == saved[0]["view"]
            assert world.planner.saved_views()[0]["open"] == saved[0]["open"]
            assert not world.planner.running, "nothing runs right after a restart"
            for key in world.planner.start_all():
                assert key in world.planner.running
        check_laws(world)


_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])


@_SETTINGS
@given(budgets(), st.data())
def test_r13_r17_r18_r19_r21_r25_r27_r31_laws_hold_over_random_histories(budget, data):
    with World(budget) as world:
        play(data, world, data.draw(st.integers(20, 160)))
        # Every node a step reported built is in the store with that text.
        assert world.stored() == world.nodes


@_SETTINGS
@given(budgets(), st.data())
def test_r24_restart_gives_the_same_view_also_mid_batch(budget, data):
    """Restarts at random moments, shrinking or not, with and without view.json."""
    with World(budget) as world:
        play(data, world, data.draw(st.integers(5, 60)))
        for lose_view in (False, True):
            saved = world.planner.saved_views()[0]
            world.restart(lose_view=lose_view)
            again = world.planner.saved_views()[0]
            assert (again["t"], again["view"], again["open"]) == (saved["t"], saved["view"], saved["open"])
            check_laws(world)


def test_parent_key_arithmetic_matches_rule_r10():
    # node(3, 5) is 40+8; its parent is node(4, 2) = 32+16; children 40+4 and 44+4.
    from everchat.actors.tree import key_of

    key = key_of(3, 5)
    assert name(key) == "40+8" and name(parent(key)) == "32+16"
    assert [name(half) for half in children(key)] == ["40+4", "44+4"]


def test_r19_r24_a_restart_in_the_middle_of_a_shrinking_batch_keeps_it_going():
    """A batch that cannot reach the floor goes on at each message, across restarts."""
    for lose_view in (False, True):
        with World(Budget(ceiling=400, floor=100, cceiling=300, cfloor=50, jobs=1)) as world:
            for n in range(12):
                world.message(f"user: message {n} " + "p" * 600)  # needs a compaction each
            for key in sorted(world.planner.running):
                world.build(key, "built")
            assert world.planner.view.shrinking, "with one job most parents are unbuilt: still shrinking"
            saved = world.planner.saved_views()[0]
            world.restart(lose_view=lose_view)
            assert world.planner.saved_views()[0] == saved
            # R19: the next message runs a batch because the view is still shrinking, and R25
            # logs its record although it may merge nothing.
            records = len(world.records)
            step = world.message("user: next")
            assert step.batch and len(world.records) == records + 1
            assert world.records[-1][1:] == (13, world.planner.view.shrinking)
