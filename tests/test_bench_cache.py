"""The cache replay benchmark (issue 4, R23) on a tiny chat: its workload, its rule and its
accounting, through the real session, turn runner and compactor pool against the fake
model server. It checks what the figures mean, never how fast anything ran."""

from __future__ import annotations

import json
import re

import pytest

from everchat.actors.session.local import Chat
from everchat.actors.compactor.compaction import read_task
from everchat.actors.tree import key_of, render_text
from everchat.actors.prompt import split_turn
from everchat.tools.bench import bench_cache
from everchat.tools.bench.workload import (
    PLACEHOLDER,
    WorkloadRule,
    call_input,
    fetch,
    make_workload,
    summary_line,
    turn_tag,
)
from everchat.tools.fakemodel import CacheStats, ModelRequest

MESSAGES = 60


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    home = tmp_path_factory.mktemp("cache-bench")
    return bench_cache.run("pastes", MESSAGES, seed=7, record_bodies=True, home=home)


# --- the workload --------------------------------------------------------------------------


def test_a_workload_is_the_same_for_the_same_seed_and_differs_for_another():
    assert make_workload("pastes", 200, seed=1) == make_workload("pastes", 200, seed=1)
    assert make_workload("pastes", 200, seed=1) != make_workload("pastes", 200, seed=2)


@pytest.mark.parametrize("name", ["pastes", "chatty"])
def test_a_workload_draws_the_issues_sizes_and_logs_at_least_the_messages_asked(name):
    workload = make_workload(name, 3000)
    assert workload.messages() >= 3000
    assert workload.messages() - workload.turns[-1].messages() < 3000  # stops at the first turn past it
    users = [len(t.user.encode()) for t in workload.turns]
    rounds = [r for t in workload.turns for r in t.rounds]
    assert all(40 <= size <= 6000 for size in users)
    assert {len(t.rounds) for t in workload.turns} == {0, 1, 2, 3, 4, 5}
    assert all(120 <= r.call_bytes <= 400 for r in rounds)
    assert all(300 <= t.reply_bytes <= 2500 for t in workload.turns)
    pastes = sum(size >= 1500 for size in users) / len(users)
    if name == "pastes":
        assert 0.15 < pastes < 0.25  # one in five
        assert all(200 <= r.result_bytes <= 30_000 for r in rounds)
        assert max(r.result_bytes for r in rounds) > 16_000  # some results are logged in two parts (R8)
    else:
        assert pastes == 0 and all(200 <= r.result_bytes <= 2_000 for r in rounds)


def test_a_tool_call_has_the_drawn_size_and_fetch_returns_the_size_it_names():
    workload = make_workload("pastes", 300)
    turn = next(t for t in workload.turns if len(t.rounds) >= 2)
    for k, rnd in enumerate(turn.rounds):
        arguments = call_input(turn, k)
        assert len(json.dumps(arguments, separators=(",", ":"))) == rnd.call_bytes
        assert len(fetch(arguments).encode()) == rnd.result_bytes
        assert fetch(arguments) == fetch(dict(arguments))


def test_a_compaction_line_fits_r29_and_differs_per_input():
    lines = {summary_line("leaf", f"{n}+1", (f"user: message {n}",)) for n in range(50)}
    assert len(lines) == 50
    assert all(380 <= len(line.encode()) <= 500 for line in lines)


def request(body: dict, exchange_id: int = 1) -> ModelRequest:
    return ModelRequest("anthropic", exchange_id, "m", True, body, "", (), (), 100)


def test_the_rule_plays_a_turn_round_by_round_and_knows_a_compaction_by_its_task():
    workload = make_workload("pastes", 300)
    turn = next(t for t in workload.turns if len(t.rounds) == 2)
    rule = WorkloadRule(workload)
    opening = {"role": "user", "content": [{"type": "text", "text": "<chat>\n0+1|user: hi\n</chat>"},
                                           {"type": "text", "text": f"[turn] This call is a turn.\n\n{turn.user}"}]}
    calls = []
    for k in range(3):
        messages = [opening]
        for call in calls:
            messages += [{"role": "assistant", "content": [{"type": "tool_use"}]},
                         {"role": "user", "content": [{"type": "tool_result"}]}]
        reply = rule(request({"messages": messages}, k + 1))
        calls.append(reply)
    assert [b.input["round"] for r in calls[:2] for b in r.blocks] == [0, 1]
    assert len(calls[2].text().encode()) == turn.reply_bytes
    task = "Compaction: write the line for message 5 (5+1).\nruler\n" + "-" * 512 + "\n<input>\nuser: x\n</input>"
    line = rule(request({"messages": [{"role": "user", "content": [{"type": "text", "text": task}]}]}, 9))
    assert line.text() == summary_line("leaf", "5+1", ("user: x",))
    assert rule.notes.kinds == {1: "turn", 2: "turn", 3: "turn", 9: "compaction"}
    assert rule.notes.lines == {"0+1|user: hi"} and rule.notes.placeholders == []


# --- a tiny replay through the real session --------------------------------------------------


def test_r36_every_turn_of_the_replay_ended_done_and_logged_the_workloads_messages(replay):
    assert replay.failed_turns == []
    assert replay.status["messages"] == replay.workload.messages()
    turns = [e for e in replay.exchanges if replay.kind_of(e) == "turn"]
    assert len(turns) == sum(len(t.rounds) + 1 for t in replay.workload.turns)
    assert replay.rule.notes.problems == []


def test_r23_the_replay_holds_turns_and_compactions_told_apart_by_their_last_block(replay):
    kinds = {"turn": 0, "compaction": 0}
    for e in replay.exchanges:
        first = e.body["messages"][0]["content"][-1]["text"]
        told = "compaction" if read_task(first) is not None else "turn" if split_turn(first) else "other"
        assert told == replay.kind_of(e) == e.headers["x-everchat-call"]
        kinds[told] += 1
    assert kinds["turn"] >= 10 and kinds["compaction"] >= 20
    assert 1 <= bench_cache.summary(replay)["peak_compactions"] <= 8  # R31: never more than 8 at once


def test_r23_the_shares_are_between_0_and_1_and_never_above_the_perfect_prefix_caches(replay):
    rows = {row["kind"]: row for row in bench_cache.figures(replay)}
    assert set(rows) == {"turns", "compactions"}
    for row in rows.values():
        assert row["requests"] > 0
        assert 0 < row["share"] <= row["perfect_share"] <= 1
        assert 0 < row["ratio"] <= 1 and row["missed"] >= 0
        assert row["input"] + row["cache_read"] + row["cache_write"] > row["cache_read"]
    for e in replay.exchanges:
        usage = e.cache
        assert usage.total == usage.input_tokens + usage.cache_read + usage.cache_write
        assert usage.cache_read <= usage.perfect_read <= usage.total
    both = CacheStats.of(replay.exchanges)
    parts = [replay.stats(kind) for kind in ("turn", "compaction")]
    assert both.cache_read == sum(p.cache_read for p in parts) and both.total == sum(p.total for p in parts)
    misses = bench_cache.misses(replay, 5)
    assert [m["missed"] for m in misses] == sorted((m["missed"] for m in misses), reverse=True)
    assert all(m["missed"] > 0 for m in misses)


def test_r23_every_token_the_perfect_cache_read_and_ours_did_not_has_one_named_cause(replay):
    by_kind = {row["kind"]: row["missed"] for row in bench_cache.figures(replay)}
    rows = bench_cache.causes(replay)
    assert {row["cause"] for row in rows} <= set(bench_cache.CAUSES)
    for kind, missed in by_kind.items():
        assert sum(row["missed"] for row in rows if row["kind"] == kind) == missed
    for e in replay.exchanges:
        cause = bench_cache.cause_of(replay, e)
        assert (cause is None) == (e.cache.perfect_read == e.cache.cache_read)
    shapes = replay.rule.notes.shapes
    assert set(shapes) == {e.id for e in replay.exchanges}
    for e in replay.exchanges:  # the rule's shape is the prompt the cache model accounted
        assert shapes[e.id].ends[-1] == e.cache.total and shapes[e.id].marks == e.cache.marks
        assert shapes[e.id].closing > e.cache.marks[0]


@pytest.fixture(scope="module")
def chatty(tmp_path_factory):
    return bench_cache.run("chatty", MESSAGES, seed=7, home=tmp_path_factory.mktemp("cache-bench-chatty"))


@pytest.mark.parametrize("workload", ["replay", "chatty"])
def test_r23_issue_4_turns_and_compactions_read_at_least_099_of_the_perfect_caches_share(workload, request):
    """Issue 4's target on a small run of both workloads (measured 0.999+ for compactions
    with the closing mark at 60 messages; 0.993 / 0.995 without it, 0.989 at 200)."""
    run = request.getfixturevalue(workload)
    assert run.failed_turns == [] and run.rule.notes.placeholders == []
    rows = {row["kind"]: row for row in bench_cache.figures(run)}
    assert rows["compactions"]["requests"] >= 50
    for row in rows.values():
        assert row["ratio"] >= bench_cache.TARGET, row
    for e in run.exchanges:  # R23's one writer per new prefix: the gate knows the closing prefix too
        if run.kind_of(e) == "compaction":
            assert all(run.kind_of(run.by_id[other]) != "compaction" for other in e.cache.duplicate_of), e.id


def test_r23_later_turns_read_the_earlier_turns_prefix(replay):
    turns = [e for e in replay.exchanges if replay.kind_of(e) == "turn"]
    system_only = min(e.cache.cache_read for e in turns[1:])
    assert system_only > 1000  # at least the system prompt's entry (R23), for every turn after the first
    assert sum(e.cache.cache_read > system_only for e in turns) > len(turns) // 2


_LINE = re.compile(r"^(\d+)\+(\d+)\|(.*)$")


def test_r27_r36_no_request_holds_a_placeholder_or_part_of_an_unsummarized_message(replay):
    assert replay.rule.notes.placeholders == []
    for e in replay.exchanges:
        assert PLACEHOLDER not in json.dumps(e.body["messages"])
    assert replay.rule.notes.lines
    with Chat.open(replay.chat, writer=False) as chat:
        for line in replay.rule.notes.lines:  # every view line any request carried is a built node's
            first, count, text = _LINE.match(line).groups()
            level = int(count).bit_length() - 1
            assert render_text(chat.node_text(key_of(level, int(first) >> level))) == text, line


def test_the_rule_noted_every_view_line_a_turn_carried(replay):
    turn = next(e for e in reversed(replay.exchanges) if replay.kind_of(e) == "turn")
    view = "".join(b["text"] for b in turn.body["messages"][0]["content"][:-1])
    lines = view.removeprefix("<chat>\n").removesuffix("</chat>").splitlines()
    assert lines and set(lines) <= replay.rule.notes.lines
    assert turn_tag(replay.rule.notes.turns[turn.id]) in turn.body["messages"][0]["content"][-1]["text"]


def closing_block(body: dict) -> dict:
    """The first message's block that closes the view (its last 0-3 lines and `</chat>`)."""
    return next(b for b in body["messages"][0]["content"] if b.get("text", "").endswith("</chat>"))


def holds_lines(block: dict) -> bool:
    return bool(block["text"].removeprefix("<chat>\n").removesuffix("</chat>"))


def test_r23_every_request_carries_at_most_four_marks_and_none_for_an_hour(replay):
    for e in replay.exchanges:
        body = json.dumps(e.body)
        assert body.count("cache_control") == len(e.cache.marks) <= 4
        assert '"ttl"' not in body


def test_r23_compactions_mark_their_closing_block_when_it_holds_lines(replay):
    """Our fourth mark, beyond R23's three: the closing block of a compaction's context,
    unless the prefix gate dropped it because another call marked that very prefix."""
    shapes = replay.rule.notes.shapes
    compactions = [e for e in replay.exchanges if replay.kind_of(e) == "compaction"]
    with_lines = [e for e in compactions if holds_lines(closing_block(e.body))]
    assert len(with_lines) >= 10
    marked = [e for e in with_lines if shapes[e.id].closing in e.cache.marks]
    assert len(marked) > len(with_lines) // 2
    prefixes = {shapes[e.id].digests[shapes[e.id].closing] for e in marked}
    for e in with_lines:  # a dropped mark: another call marked (and wrote) the same prefix
        assert shapes[e.id].digests[shapes[e.id].closing] in prefixes
    for e in compactions:
        if not holds_lines(closing_block(e.body)):  # `</chat>` alone: not worth a mark
            assert shapes[e.id].closing not in e.cache.marks
    turns = [e for e in replay.exchanges if replay.kind_of(e) == "turn"]
    assert all(shapes[e.id].closing not in e.cache.marks for e in turns)  # turns keep R23's marks
