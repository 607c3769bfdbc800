"""No request carries more of the memory than the ceiling, whatever is built (issue 20, P2).

R36's fallback once showed every unbuilt line as its message's first 512 bytes, a limit per
line only: 6,026 of them sent 3.57 MB. The rule (docs/SPEC.md, R36's "Our choice"): the
view a turn or an agent carries is `memory.request_lines`, at most the ceiling (R16's
bytes); a compaction's context is `memory.newest_within`, its newest lines within the
ceiling. Here as hypothesis properties over the production renderer (random covers, and
real planner histories through `Planning` over a real store), plus worked examples.
"""

from __future__ import annotations

import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from everchat.actors.session.local import Chat
from everchat.actors.turns.goals import check_text
from everchat.actors.tree import (FOLDED, PLACEHOLDER, Budget, aligned, end, key_of, level, name, newest_within,
                                    render_line, request_lines, start)
from everchat.actors.planner.planning import UNSETTLED_MARK
from memory_world import World

CEILING = Budget().ceiling
_HEAD = re.compile(r"(\d+)\+(\d+)\|")
_WORDS = ["amber-42", "héllo", "日本", "path/to/file.py", "\n", "x" * 40, "🦊"]


def _size(lines: list[str]) -> int:
    """R16: the rendered lines' bytes, each with its newline."""
    return sum(len(line.encode()) + 1 for line in lines)


def _text(rng: random.Random, low: int, high: int) -> str:
    """About low … high bytes (never over `high`), with newlines and non-ASCII."""
    target = rng.randint(low, high)
    out = ""
    while len(out.encode()) < target:
        out += rng.choice(_WORDS) + " "
    return out.encode()[:high].decode(errors="ignore") or "x"


def _heads(lines: list[str]) -> list[tuple[int, int, str]]:
    """(id, n, text) of each rendered line."""
    found = []
    for line in lines:
        head = _HEAD.match(line)
        assert head, line
        found.append((int(head.group(1)), int(head.group(2)), line[head.end():]))
    return found


def check_request(lines: list[str], keys: list[int], texts: dict, starts: dict | None, limit: int) -> None:
    """The rule, for one rendering of the view `keys` (texts: built ones; starts: R36's
    marked starts of the unbuilt ones, None without a settle timeout)."""
    messages = end(keys[-1]) if keys else 0
    # At most the limit (every limit drawn here is above the fold of a whole chat).
    assert _size(lines) <= limit
    # Every message covered exactly once, in order, by real nodes the model can zoom (R35).
    expect = 0
    for first, count, _ in _heads(lines):
        assert first == expect and count & (count - 1) == 0 and first % count == 0, lines
        expect = first + count
    assert expect == messages
    # Each line says the truth about what it covers.
    view = {key: texts.get(key) for key in keys}
    unbuilt = [key for key in keys if view[key] is None]
    shown = []
    for first, count, text in _heads(lines):
        key = key_of(count.bit_length() - 1, first // count)
        covered = [line for line in keys if first <= start(line) and end(line) <= first + count]
        if text == FOLDED:
            continue
        if key in view and view[key] is not None:
            assert render_line(key, view[key]) == f"{first}+{count}|{text}"  # built: word for word
        elif text == PLACEHOLDER:
            assert covered and all(view[line] is None for line in covered)  # R15: nothing built under it
        else:
            assert starts is not None and key in view and render_line(key, starts[key]) == f"{first}+{count}|{text}"
            shown.append(key)
    # Marked starts go to the newest unbuilt lines: those shown are the last ones.
    assert shown == unbuilt[len(unbuilt) - len(shown):]
    # Folded lines are the oldest ones, and only when the built lines leave no room.
    heads = _heads(lines)
    folded = [k for k, (_, _, text) in enumerate(heads) if text == FOLDED]
    assert folded == list(range(len(folded)))
    # The view as it stands is sent untouched whenever it fits (the prefix cache, R23).
    whole = [render_line(key, view[key] if view[key] is not None or starts is None else starts[key]) for key in keys]
    if _size(whole) <= limit:
        assert lines == whole


@st.composite
def views(draw):
    """A random view: a cover of 0 … T-1 by tree nodes (R13), built lines of 1 … 512 bytes,
    unbuilt leaves (only leaves are unbuilt, R18), marked starts when it timed out."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    count = draw(st.integers(0, 400))
    unbuilt_share = draw(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]))
    long_lines = draw(st.booleans())
    keys, texts, starts = [], {}, {}
    first = 0
    for _ in range(count):
        room = 6 if first == 0 else min(6, (first & -first).bit_length() - 1)
        l = rng.randint(0, room) if rng.random() < 0.3 else 0
        key = key_of(l, first >> l)
        keys.append(key)
        if l == 0 and rng.random() < unbuilt_share:
            starts[key] = UNSETTLED_MARK + _text(rng, 1, 512)
        else:
            texts[key] = _text(rng, 300 if long_lines else 1, 512)
        first += 1 << l
    timed_out = draw(st.booleans())
    limit = draw(st.integers(4_000, 150_000))
    return keys, texts, starts if timed_out else None, limit


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(views())
def test_p2_any_view_is_sent_within_the_ceiling_covering_every_message_once_in_order(drawn):
    keys, texts, starts, limit = drawn
    start_of = None if starts is None else starts.__getitem__
    lines = request_lines(list(keys), texts.get, start_of, limit)
    check_request(lines, keys, texts, starts, limit)
    assert request_lines(list(keys), texts.get, start_of, limit) == lines  # same state, same bytes (R23)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 700), max_size=300), st.integers(0, 120_000))
def test_p2_a_compaction_context_keeps_its_newest_lines_within_the_ceiling(sizes, limit):
    lines = [f"{n}+1|" + "c" * size for n, size in enumerate(sizes)]
    kept = newest_within(lines, limit)
    assert _size(kept) <= limit
    assert kept == lines[len(lines) - len(kept):]  # R27's cut point stays: the end is kept
    assert len(kept) == len(lines) or _size(lines[len(lines) - len(kept) - 1:]) > limit  # only what must go


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_p2_a_real_planners_requests_stay_within_the_ceiling_through_any_history(data):
    """Planning over a real store, messages of any size, builds and failures in any order:
    after every event, the turn's view (settled or timed out) and every running
    compaction's context stay within the ceiling, and the saved view never changes."""
    ceiling = data.draw(st.integers(4_000, 12_000))
    budget = Budget(ceiling, ceiling // 2, ceiling // 4, ceiling // 8, data.draw(st.integers(1, 8)))
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    with World(budget) as world:
        for _ in range(data.draw(st.integers(1, 120))):
            running = sorted(world.planner.running)
            if running and rng.random() < 0.35:
                key = rng.choice(running)
                if rng.random() < 0.1:
                    world.fail(key)
                else:
                    world.build(key, _text(rng, 1, 512))
            else:
                world.message(rng.choice(["user", "note", "echo"]) + ": " + _text(rng, 1, 1500))
            planning, planner = world.planning, world.planner
            saved = world.store.load_views()
            keys = planner.view.ordered()
            texts = {key: planning.node_text(key) for key in keys if planning.node_text(key) is not None}
            starts = {key: UNSETTLED_MARK + planning.compaction_input(key)[0].encode()[:512].decode(errors="ignore")
                      for key in keys if key not in texts}
            for fallback in (False, True):
                view = planning.request_view(fallback=fallback)
                assert view.startswith("<chat>\n") and view.endswith("</chat>")
                lines = view[len("<chat>\n"):-len("</chat>")].splitlines()
                check_request(lines, keys, texts, starts if fallback else None, ceiling)
            for key in planner.running:
                context = planning.compaction_context(key)
                assert _size(context) <= ceiling
                whole = [render_line(line, planning.node_text(line)) for line in planner.context(key)]
                assert context == whole[len(whole) - len(context):]  # R27's cut, the oldest dropped
            assert world.store.load_views() == saved  # rendering only (R22, R42)


# --- worked examples ---------------------------------------------------------------------


def test_p2_a_run_of_6026_unbuilt_lines_is_sent_as_eight_placeholders_of_real_nodes():
    """The review's chat: 120 summarized lines, then 6,026 messages logged without a
    compactor. R15's view is 223 KB; the request folds the run into the aligned nodes that
    cover messages 120 … 6145, each an R15 placeholder that zoom opens."""
    keys = [key_of(0, i) for i in range(6146)]
    texts = {key: f"note {start(key)}" for key in keys[:120]}
    assert _size([render_line(key, texts.get(key)) for key in keys]) > CEILING
    lines = request_lines(keys, texts.get, None, CEILING)
    assert lines[:120] == [f"{i}+1|note {i}" for i in range(120)]
    assert lines[120:] == [f"{head}|{PLACEHOLDER}" for head in
                           ("120+8", "128+128", "256+256", "512+512", "1024+1024", "2048+2048", "4096+2048",
                            "6144+2")]


def test_p2_after_a_settle_timeout_the_newest_unbuilt_lines_get_the_marked_starts_that_fit():
    """Ten messages, 0-5 built, 6-9 unbuilt, after a settle timeout: each marked start is
    55 bytes of line; the limit leaves room for two. The newest two get them; 6 and 7
    become the one placeholder 6+2."""
    keys = [key_of(0, i) for i in range(10)]
    texts = {key: "built" for key in keys[:6]}

    def start_of(key: int) -> str:
        return UNSETTLED_MARK + f"note: {start(key)}" + "." * 8

    base = [f"{i}+1|built" for i in range(6)]
    shown = [f"{i}+1|{UNSETTLED_MARK}note: {i}........" for i in (8, 9)]
    limit = _size(base) + _size(["6+2|" + PLACEHOLDER]) + _size(shown)
    assert request_lines(keys, texts.get, start_of, limit) == base + ["6+2|" + PLACEHOLDER] + shown
    # One byte less: only message 9's start fits; 6-8 fold as 6+2 and 8+1.
    assert request_lines(keys, texts.get, start_of, limit - 1) == (
        base + ["6+2|" + PLACEHOLDER, "8+1|" + PLACEHOLDER, shown[1]])
    # Room for all: R36's fallback as it always was.
    everything = base + [f"{i}+1|{UNSETTLED_MARK}note: {i}........" for i in range(6, 10)]
    assert request_lines(keys, texts.get, start_of, _size(everything)) == everything


def test_p2_built_lines_alone_over_the_ceiling_fold_the_oldest_into_aligned_nodes():
    """600 built lines of 489 bytes (merges not built yet) are 300 KB: the newest lines that
    fit stay word for word, messages 0 … s-1 before them fold into aligned nodes."""
    keys = [key_of(0, i) for i in range(600)]
    texts = {key: "b" * 480 for key in keys}
    lines = request_lines(keys, texts.get, None, CEILING)
    heads = _heads(lines)
    folded = [(first, count) for first, count, text in heads if text == FOLDED]
    kept = [first for first, count, text in heads if text != FOLDED]
    assert folded == [(0, 256), (256, 64), (320, 16), (336, 2)]  # messages 0 … 337
    assert kept == list(range(338, 600)) and _size(lines) <= CEILING
    assert [(start(key), 1 << level(key)) for key in aligned(0, 338)] == folded
    one_more = [f"{name(key)}|{FOLDED}" for key in aligned(0, 337)] + [f"337+1|{'b' * 480}"] + lines[len(folded):]
    assert _size(one_more) > CEILING  # keeping message 337 too would not fit


def test_p2_a_chat_of_thousands_of_unbuilt_notes_renders_within_the_ceiling_and_saves_nothing(tmp_path):
    """Through `Chat` (Planning over the real store), 2,500 notes logged with no compactor
    (as `import --log-only` does): the view as it stands, the request after a timeout, and
    the saved view, which rendering leaves byte for byte as it was (R22, R42)."""
    with Chat.open(tmp_path / "chat", create=True) as chat:
        chat.add_many(("note", f"note {n}: " + "long " * 120) for n in range(2500))
        saved = (tmp_path / "chat" / "view.json").read_bytes()
        assert chat.planner.unbuilt_lines() == 2500
        view = chat.render_view()
        assert len(view.encode()) < CEILING  # R15's 2,500 placeholders fit, ...
        request = chat.request_view(fallback=True)
        body = request[len("<chat>\n"):-len("</chat>")]
        assert len(body.encode()) <= CEILING  # ... the 1.5 MB of marked starts did not
        lines = body.splitlines()
        assert lines[-1].startswith(f"2499+1|{UNSETTLED_MARK}note: note 2499: long")
        assert lines[0] == f"0+2048|{PLACEHOLDER}"
        assert chat.request_view() == view  # settled or not, a view that fits is sent as it is
        assert chat.render_view() == view and (tmp_path / "chat" / "view.json").read_bytes() == saved


def test_p2_a_compaction_context_of_thousands_of_built_lines_keeps_the_newest_within_the_ceiling(tmp_path):
    """2,000 free notes of 300 bytes whose pairs need a compaction (R11): the compaction
    view holds them all (620 KB). The last merge's context keeps its newest lines within
    the ceiling and still ends at R27's cut."""
    with Chat.open(tmp_path / "chat", create=True) as chat:
        chat.add_many(("note", f"{n:04} " + "basalt " * 42) for n in range(2000))
        planner = chat.planner
        key = key_of(1, 999)  # the merge of messages 1998 and 1999
        whole = [render_line(line, chat.node_text(line)) for line in planner.context(key)]
        assert _size(whole) > 4 * CEILING
        context = chat.compaction_context(key)
        assert _size(context) <= CEILING < _size(whole[len(whole) - len(context) - 1:])
        assert context[-1] == whole[-1] and context[-1].startswith("1999+1|note: 1999 basalt")


def test_p2_a_goal_check_is_within_the_ceiling_even_at_four_bytes_a_character():
    """The check carries no view, but a goal pasted whole went out whole: now the goal is
    cut like each message (head and tail), so the worst case stays within the ceiling."""
    fox = "🦊"
    text = check_text(fox * 80_000, [("user", fox * 80_000)] + [("echo", fox * 9_000)] * 200)
    assert len(text.encode()) <= CEILING
    assert text.startswith("<goal>\n" + fox * 2_000 + "\n[… ") and "characters cut" in text.split("</goal>")[0]
