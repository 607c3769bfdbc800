"""R23's "one writer per new prefix": the prefix gate's pure core, the view mark it moves,
the closing mark it drops, and the compaction's "response started" hook.

The law, over random runs of offers, response starts and ends: at no time do two calls
whose responses have not started write the same prefix, and a job is held only while a
call in flight is writing what it would write.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from everchat.actors.compactor.compaction import Compaction, CompactionJob, summarize
from everchat.actors.models import Connection, Request, Stop, TextBlock, TextDelta, Usage
from everchat.actors.models import ServerError as ModelServerError
from everchat.actors.planner.prefix_gate import SYSTEM, Marks, PrefixGate, prefix_chain
from everchat.actors.prompt import Prompt

PROMPT = Prompt.make()


def lines(count: int, tag: str = "") -> list[str]:
    return [f"{k}+1|note: line {k}{tag}" for k in range(count)]


# -- the chain of block prefixes ---------------------------------------------------------


def size(count: int) -> int:
    return sum(len(line.encode()) + 1 for line in lines(count))


def test_r23_the_chain_has_one_prefix_per_whole_block_of_four_lines_then_the_closing_one():
    assert prefix_chain([]) == []
    (closing,) = prefix_chain(lines(3))
    assert closing.closing and closing.size == size(3)
    chain = prefix_chain(lines(11))
    assert [(p.closing, p.size) for p in chain] == [(False, size(4)), (False, size(8)), (True, size(11))]
    assert not any(p.closing for p in prefix_chain(lines(8)))  # a closing block of `</chat>` alone: no prefix


def test_r23_two_contexts_share_a_block_prefix_exactly_when_their_first_lines_agree():
    a = prefix_chain(lines(13))
    b = prefix_chain(lines(9))
    assert a[:2] == b[:2] and a[2] != b[2]
    changed = lines(13)
    changed[5] = "5+1|note: another line"
    c = prefix_chain(changed)
    assert c[0] == a[0] and c[1] != a[1] and c[2] != a[2]


def test_the_closing_prefix_is_shared_exactly_by_equal_contexts():
    assert prefix_chain(lines(10))[-1] == prefix_chain(lines(10))[-1]
    assert prefix_chain(lines(10))[-1] != prefix_chain(lines(11))[-1]
    assert prefix_chain(lines(10))[-1] != prefix_chain(lines(10, "'"))[-1]
    assert prefix_chain(lines(9))[-1].digest not in {p.digest for p in prefix_chain(lines(12))}


# -- the policies, step by step -------------------------------------------------------------


def test_r23_a_second_call_waits_for_the_first_to_start_writing_the_system_prompt():
    gate = PrefixGate("wait")
    assert gate.offer(1, [], now=0.0) == Marks(0, False)
    assert gate.writing == {SYSTEM: 1}
    assert gate.offer(2, [], now=0.1) is None
    gate.started(1, now=0.2)
    assert gate.offer(2, [], now=0.2) == Marks(0, False)
    assert gate.jobs[2] == ()  # it reads the system prompt's entry, writes none of it


def test_r23_wait_holds_a_job_whose_view_prefix_is_being_written_until_that_response_starts():
    gate = written_system(PrefixGate("wait"))
    chain = prefix_chain(lines(10))
    assert gate.offer(1, chain, now=1.0) == Marks(2, True)
    assert gate.writing == {chain[1].digest: 1, chain[2].digest: 1}
    other = prefix_chain(lines(11))
    assert gate.offer(2, other, now=1.1) is None  # same last whole block
    assert gate.blocked_by(other) == 1
    gate.started(1, now=1.2)
    assert gate.offer(2, other, now=1.2) == Marks(2, True)
    assert gate.jobs[2] == (other[-1].digest,) and gate.holds == 1  # reads block 2, writes its own closing


def test_r23_a_second_call_on_the_same_context_waits_for_the_closing_prefix_or_drops_its_mark():
    for policy, second in (("wait", None), ("reread", Marks(2, False)), ("auto", Marks(2, False))):
        gate = written_system(PrefixGate(policy))
        gate.offer(1, prefix_chain(lines(8)), now=1.0)
        gate.started(1, now=1.1)
        chain = prefix_chain(lines(10))
        assert gate.offer(2, chain, now=1.2) == Marks(2, True) and gate.jobs[2] == (chain[-1].digest,)
        assert gate.blocked_by(chain) == 2
        assert gate.offer(3, chain, now=1.2) == second, policy
        if second is not None:
            assert gate.jobs[3] == () and gate.dropped == 1 and gate.moved == 0
        gate.started(2, now=1.3)
        gate.ended(3)
        assert gate.offer(3, chain, now=1.3) == Marks(2, True) and gate.jobs[3] == ()  # reads it whole


def test_r23_a_call_that_fails_before_its_response_writes_nothing_and_the_next_one_writes():
    gate = written_system(PrefixGate("wait"))
    chain = prefix_chain(lines(8))
    gate.offer(1, chain, now=1.0)
    gate.ended(1)
    assert gate.writing == {} and chain[-1].digest not in gate.written
    assert gate.offer(2, chain, now=1.1) == Marks(2, False)
    assert gate.writing == {chain[-1].digest: 2}


def test_r23_reread_moves_the_view_mark_back_to_the_newest_prefix_already_written():
    gate = written_system(PrefixGate("reread"))
    gate.offer(1, prefix_chain(lines(12)), now=1.0)
    gate.started(1, now=1.1)
    gate.ended(1)
    gate.offer(2, prefix_chain(lines(20)), now=1.2)  # writing block 5
    chain = prefix_chain(lines(21))
    assert gate.offer(3, chain, now=1.3) == Marks(3, True)  # its closing prefix is its own to write
    assert gate.jobs[3] == (chain[-1].digest,) and gate.moved == 1 and gate.holds == 0


def test_r23_reread_with_no_block_written_sends_no_view_mark():
    gate = written_system(PrefixGate("reread"))
    gate.offer(1, prefix_chain(lines(8)), now=1.0)
    assert gate.offer(2, prefix_chain(lines(8)), now=1.0) == Marks(0, False)
    gate.offer(3, prefix_chain(lines(9)), now=1.0)
    assert gate.offer(4, prefix_chain(lines(9)), now=1.0) == Marks(0, False) and gate.jobs[4] == ()


def test_r23_auto_waits_for_a_large_new_prefix_and_rereads_a_small_one():
    gate = written_system(PrefixGate("auto", large=600))
    chain = prefix_chain(lines(80))
    gate.offer(1, chain[:9], now=1.0)
    gate.started(1, now=1.1)
    gate.offer(2, chain[:10], now=1.2)  # one block past what is written: small
    assert gate.offer(3, chain[:10], now=1.2) == Marks(9, False)
    gate.offer(4, chain, now=1.3)  # a whole new stretch: large
    assert chain[-1].size - chain[8].size >= 600
    # first bytes take 0.1 s (job 1): job 4's response is due at 1.4
    assert gate.offer(5, chain, now=1.3) == Marks(9, False)  # due in 0.1 s, past a quarter latency: reread
    gate.ended(5)
    assert gate.offer(6, chain, now=1.38) is None  # due in 0.02 s: worth the wait
    gate.started(4, now=1.4)
    assert gate.offer(6, chain, now=1.4) == Marks(20, False) and gate.jobs[6] == ()


def test_r23_off_always_marks_the_last_whole_block_and_the_closing_block():
    gate = PrefixGate("off")
    chain = prefix_chain(lines(9))
    assert gate.offer(1, chain, now=0.0) == Marks(2, True)
    assert gate.offer(2, chain, now=0.0) == Marks(2, True)
    assert gate.offer(3, prefix_chain(lines(8)), now=0.0) == Marks(2, False)


def test_r23_a_written_prefix_unused_for_five_minutes_is_gone():
    gate = written_system(PrefixGate("reread"))
    chain = prefix_chain(lines(8))
    gate.offer(1, chain, now=1.0)
    gate.started(1, now=1.0)
    gate.ended(1)
    assert gate.offer(2, chain, now=200.0) == Marks(2, False) and gate.jobs[2] == ()  # read, and kept alive
    gate.ended(2)
    assert gate.offer(3, chain, now=499.0) == Marks(2, False) and gate.jobs[3] == ()
    gate.ended(3)
    assert gate.offer(4, chain, now=800.0) == Marks(2, False)
    assert set(gate.jobs[4]) == {SYSTEM, chain[-1].digest}  # both expired: written again


def test_a_job_is_offered_once_while_it_runs_and_policies_are_checked():
    gate = PrefixGate()
    gate.offer(1, [], now=0.0)
    with pytest.raises(ValueError):
        gate.offer(1, [], now=0.0)
    with pytest.raises(ValueError):
        PrefixGate("sometimes")


def written_system(gate: PrefixGate) -> PrefixGate:
    gate.offer(-1, [], now=0.0)
    gate.started(-1, now=0.0)
    gate.ended(-1)
    return gate


# -- the law, over random runs ----------------------------------------------------------------

CONTEXTS = [lines(n, tag) for n in (0, 3, 4, 7, 8, 9, 10, 12, 16, 17, 24) for tag in ("", "'")]
OPS = st.lists(
    st.tuples(st.sampled_from(["offer", "start", "end", "tick"]), st.integers(0, len(CONTEXTS) - 1),
              st.integers(0, 7)),
    min_size=1,
    max_size=80,
)


def run_world(policy: str, ops, large: int = 300):
    """Drive a gate like the planner does; after each step check the law. Returns
    whether two unstarted calls ever wrote one prefix (only `off` may)."""
    gate = PrefixGate(policy, large=large, ttl=300.0)
    now = 0.0
    written: dict[str, float] = {}  # the test's own account of what the cache holds
    running: dict[int, dict] = {}  # key -> {"writes", "started"}
    held: dict[int, list] = {}  # key -> chain
    next_key = 0
    duplicate = False

    def offer(key: int, chain) -> None:
        nonlocal duplicate
        blocker = gate.blocked_by(chain)
        marks = gate.offer(key, chain, now)
        live = {prefix for prefix, used in written.items() if now - used < 300.0}
        if marks is None:
            assert policy != "off"
            # held only while a call in flight writes what this one would write
            assert blocker is not None and blocker in running and not running[blocker]["started"]
            held[key] = chain
            return
        held.pop(key, None)
        blocks = [prefix for prefix in chain if not prefix.closing]
        closing = chain[-1] if chain and chain[-1].closing else None
        whole, (view, close) = len(blocks), marks
        if policy == "wait" or policy == "off":
            assert view == whole and close == (closing is not None)
        assert 0 <= view <= whole and (closing is not None or not close)

        def written_by_another(prefix) -> bool:
            return any(not other["started"] and prefix.digest in other["writes"] for other in running.values())

        if 0 < view < whole:
            assert blocks[view - 1].digest in live  # moved back onto a written prefix only
        if view < whole:
            assert written_by_another(blocks[-1])  # and only while another call writes the last whole block
        if closing is not None and not close:
            assert written_by_another(closing)  # the closing mark is dropped only then
        writes = {SYSTEM} - live
        if view and blocks[view - 1].digest not in live:
            writes.add(blocks[view - 1].digest)
        if close and closing.digest not in live:
            writes.add(closing.digest)
        for prefix in (SYSTEM, *(block.digest for block in blocks[:view]), *([closing.digest] if close else [])):
            if prefix in live:
                written[prefix] = now
        for other in running.values():
            if not other["started"] and other["writes"] & writes:
                duplicate = True
        if policy != "off":
            assert set(gate.jobs[key]) == writes
        running[key] = {"writes": writes, "started": False}

    for op, which, pick in ops:
        now += 0.05
        if op == "offer":
            offer(next_key, prefix_chain(CONTEXTS[which]))
            next_key += 1
        elif op == "tick":
            now += 60.0 * pick
        elif running:
            key = sorted(running)[pick % len(running)]
            job = running[key]
            if op == "start" and not job["started"]:
                gate.started(key, now)
                job["started"] = True
                for prefix in job["writes"]:
                    written[prefix] = now
            elif op == "end":
                gate.ended(key)
                del running[key]
        for key, chain in sorted(held.items()):  # the planner offers held jobs again
            offer(key, chain)
        if policy != "off":
            assert not duplicate, "two calls wrote one prefix before either response started"
    return duplicate


@pytest.mark.parametrize("policy", ["wait", "reread", "auto"])
def test_r23_law_no_two_unstarted_calls_ever_write_the_same_prefix(policy):
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(OPS)
    def law(ops):
        run_world(policy, ops)

    law()


def test_r23_without_the_gate_two_calls_do_write_one_prefix():
    ops = [("offer", 8, 0), ("offer", 10, 0)]  # 8 and 9 lines: the same two whole blocks
    assert run_world("off", [("offer", 0, 0), ("start", 0, 0)] + ops)
    assert not run_world("wait", [("offer", 0, 0), ("start", 0, 0)] + ops)
    same = [("offer", 0, 0), ("start", 0, 0), ("offer", 8, 0), ("start", 1, 1), ("offer", 12, 0), ("offer", 12, 0)]
    assert run_world("off", same)  # 10 lines twice, block 2 written: the same closing prefix
    assert not run_world("reread", same)


# -- the view mark in the request, and the "response started" hook ---------------------------


def job(mark: int = -1, context: int = 10, closing: bool = True) -> CompactionJob:
    return CompactionJob(0, context, tuple(lines(context)), ("note: " + "x" * 600,), mark=mark, closing=closing)


def marked(request: Request) -> list[int]:
    return [k for k, block in enumerate(request.messages[0].content) if block.cache]


def test_r23_the_view_mark_sits_after_the_block_the_gate_chose_and_the_closing_mark_as_it_chose():
    assert marked(Compaction(job(), PROMPT, model="m").request()) == [1, 2, 3]
    assert marked(Compaction(job(2), PROMPT, model="m").request()) == [1, 2, 3]
    assert marked(Compaction(job(1), PROMPT, model="m").request()) == [0, 2, 3]
    assert marked(Compaction(job(0), PROMPT, model="m").request()) == [2, 3]
    assert marked(Compaction(job(2, closing=False), PROMPT, model="m").request()) == [1, 3]
    assert marked(Compaction(job(0, closing=False), PROMPT, model="m").request()) == [3]
    assert marked(Compaction(job(context=8), PROMPT, model="m").request()) == [1, 3]  # `</chat>` alone: no mark
    joined = "".join(b.text for b in Compaction(job(0), PROMPT, model="m").request().messages[0].content
                     if isinstance(b, TextBlock))
    assert joined.startswith("<chat>\n" + "".join(line + "\n" for line in lines(10)) + "</chat>")
    with pytest.raises(ValueError):
        Compaction(job(3), PROMPT, model="m").request()


class Scripted(Connection):
    """Answers each call with the next text; `fail_first` raises before any event."""

    provider = "scripted"

    def __init__(self, *texts: str, fail_first: bool = False) -> None:
        self.texts = list(texts)
        self.fail_first = fail_first
        self.calls: list[Request] = []

    def stream(self, request: Request):
        self.calls.append(request)
        if self.fail_first:
            self.fail_first = False
            raise ModelServerError("boom", provider="scripted", model=request.model)
        yield TextDelta(self.texts.pop(0))
        yield Usage()
        yield Stop("end_turn")


def test_r23_started_is_told_once_at_the_first_event_even_across_follow_up_tries():
    told: list[int] = []
    connection = Scripted("a" * 700, "short line")
    line = summarize(job(), connection, PROMPT, model="m", started=lambda: told.append(len(connection.calls)))
    assert line == "short line" and len(connection.calls) == 2
    assert told == [1]


def test_r23_a_call_that_fails_before_any_event_never_tells_started():
    told: list[int] = []
    with pytest.raises(ModelServerError):
        summarize(job(), Scripted("x", fail_first=True), PROMPT, model="m", started=lambda: told.append(1))
    assert told == []
