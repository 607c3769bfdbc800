"""The fake server's model of Anthropic's prompt cache, through the real `anthropic` SDK.

Sizes: every block of text below is a multiple of 4 bytes, so its tokens are exact
(ceil(bytes / 4)): SYSTEM is 10 tokens, each `block-NN` 2 tokens.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import anthropic
import pytest

from everchat.tools.fakemodel import FakeModelServer, ManualClock, RateLimited, Reply

SYSTEM = "You are a fake model, be kind :-) ok"[:40].ljust(40, ".")  # 40 bytes: 10 tokens


@pytest.fixture(scope="module")
def shared():
    with FakeModelServer(clock=ManualClock(), cache_min_tokens=0) as server:
        yield server, anthropic.Anthropic(base_url=server.base_url, api_key="test-key", max_retries=0)


@pytest.fixture
def server(shared):
    shared[0].reset()
    return shared[0]


@pytest.fixture
def client(shared, server):
    return shared[1]


def text(s: str, mark: str | None = None) -> dict:
    block = {"type": "text", "text": s}
    if mark == "5m":
        block["cache_control"] = {"type": "ephemeral"}
    elif mark == "1h":
        block["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    return block


def blocks(prefix: str, count: int, marked: int | None = None) -> list[dict]:
    """`count` text blocks of 2 tokens each ("pfx-NN.." padded to 8 bytes), one marked."""
    return [text(f"{prefix}-{i:02d}".ljust(8, ".")[:8], "5m" if i == marked else None) for i in range(count)]


def ask(client, content, *, system=None, tools=None, model="claude-test", **extra):
    kwargs = dict(model=model, max_tokens=64, messages=[{"role": "user", "content": content}], **extra)
    if system is not None:
        kwargs["system"] = system
    if tools is not None:
        kwargs["tools"] = tools
    return client.messages.create(**kwargs)


def usage_of(message) -> tuple[int, int, int]:
    """(cache read, cache write, uncached input) as the SDK parsed them."""
    u = message.usage
    return u.cache_read_input_tokens, u.cache_creation_input_tokens, u.input_tokens


def test_a_mark_writes_its_prefix_and_a_later_request_with_that_prefix_reads_it(client, server):
    system = [text(SYSTEM, "5m")]
    first = ask(client, blocks("block", 3, marked=2) + [text("tail-one")], system=system)
    assert usage_of(first) == (0, 10 + 6, 2)
    second = ask(client, blocks("block", 3, marked=2) + [text("tail-two")], system=system)
    assert usage_of(second) == (16, 0, 2)
    assert [e.cache.read_end for e in server.model_calls] == [-1, 3]
    assert [e.cache.written for e in server.model_calls] == [(0, 3), ()]


def test_streamed_usage_carries_the_cache_counts_in_message_start_and_the_final_message(client, server):
    system = [text(SYSTEM, "5m")]
    ask(client, blocks("block", 2) + [text("tail-one")], system=system)
    with client.messages.stream(model="claude-test", max_tokens=64, system=system,
                                messages=[{"role": "user", "content": blocks("block", 2) + [text("tail-two")]}]) as s:
        start = next(e for e in s if e.type == "message_start")
        final = s.get_final_message()
    assert usage_of(start.message) == (10, 0, 6)
    assert usage_of(final) == (10, 0, 6)
    assert final.usage.output_tokens == server.model_calls[-1].output_tokens > 0


def test_only_marks_write_a_prefix_sent_before_without_a_mark_is_not_read(client, server):
    ask(client, blocks("block", 4), system=[text(SYSTEM, "5m")])
    again = ask(client, blocks("block", 4, marked=2), system=[text(SYSTEM, "5m")])
    assert usage_of(again) == (10, 6, 2)  # the system's entry; block-02 had no entry to read
    assert server.model_calls[-1].cache.perfect_read == 18  # the whole prompt was sent before


def test_an_entry_lives_five_minutes_from_its_last_use(client, server):
    content = blocks("block", 2, marked=1)
    assert usage_of(ask(client, content, system=SYSTEM)) == (0, 14, 0)
    server.clock.advance(299)
    assert usage_of(ask(client, content, system=SYSTEM)) == (14, 0, 0)
    server.clock.advance(299)  # 598 s after the write, 299 after the last read
    assert usage_of(ask(client, content, system=SYSTEM)) == (14, 0, 0)
    server.clock.advance(300)
    assert usage_of(ask(client, content, system=SYSTEM)) == (0, 14, 0)


def test_a_one_hour_mark_outlives_five_minutes_and_is_reported_apart(client, server):
    content = [text(SYSTEM), text("block-00", "1h")]
    first = ask(client, content)
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == 12
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == 0
    server.clock.advance(3000)
    assert usage_of(ask(client, content)) == (12, 0, 0)
    server.clock.advance(3600)
    assert usage_of(ask(client, content)) == (0, 12, 0)


def test_the_lookback_reaches_an_entry_exactly_twenty_blocks_before_a_mark(client, server):
    base = blocks("block", 10, marked=9)  # the entry ends at block index 10 (the system is 0)
    assert usage_of(ask(client, base, system=SYSTEM)) == (0, 30, 0)

    within = [dict(b) for b in base]
    within[9] = text("block-09".ljust(8, ".")[:8])
    within += blocks("near", 20, marked=19)  # mark at index 30: twenty blocks after the entry
    assert usage_of(ask(client, within, system=SYSTEM)) == (30, 40, 0)

    beyond = [dict(b) for b in within[:10]] + blocks("far", 21, marked=20)  # mark at 31
    assert usage_of(ask(client, beyond, system=SYSTEM)) == (0, 72, 0)
    assert server.model_calls[-1].cache.perfect_read == 30


def test_a_read_ends_at_the_longest_entry_of_any_mark(client, server):
    ask(client, blocks("block", 6, marked=5), system=[text(SYSTEM, "5m")])
    mixed = blocks("block", 6, marked=5) + blocks("more", 3, marked=2)
    assert usage_of(ask(client, mixed, system=[text(SYSTEM, "5m")])) == (22, 6, 0)


def test_tools_come_first_so_changing_a_tool_invalidates_system_and_messages(client, server):
    tool = {"name": "zoom", "description": "fetch details", "input_schema": {"type": "object"}}
    content = blocks("block", 2, marked=1)
    ask(client, content, system=SYSTEM, tools=[tool])
    same = ask(client, content, system=SYSTEM, tools=[tool])
    assert same.usage.cache_read_input_tokens > 0
    changed = ask(client, content, system=SYSTEM, tools=[{**tool, "description": "fetch more details"}])
    assert changed.usage.cache_read_input_tokens == 0


def test_a_top_level_mark_marks_the_last_block(client, server):
    ask(client, blocks("block", 3), system=SYSTEM, extra_body={"cache_control": {"type": "ephemeral"}})
    assert server.model_calls[-1].cache.marks == (3,)
    assert usage_of(ask(client, blocks("block", 3) + [text("tail-one")], system=[text(SYSTEM)],
                        extra_body={"cache_control": {"type": "ephemeral"}})) == (16, 2, 0)


def test_prefixes_shorter_than_the_minimum_are_not_cached():
    with FakeModelServer(clock=ManualClock()) as default:  # Anthropic's 1,024-token minimum
        client = anthropic.Anthropic(base_url=default.base_url, api_key="test-key", max_retries=0)
        small = ask(client, blocks("block", 2, marked=1), system=SYSTEM)
        assert usage_of(small) == (0, 0, 14)
        big = [text("x" * 4096, "5m"), text("question")]
        assert usage_of(ask(client, big)) == (0, 1024, 2)
        assert usage_of(ask(client, big)) == (1024, 0, 2)


def test_more_than_four_marks_is_a_bad_request(client):
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks with cache_control"):
        ask(client, [text(f"block-{i:02d}", "5m") for i in range(5)])


def test_models_have_separate_caches_and_separate_perfect_prefixes(client, server):
    content = blocks("block", 2, marked=1)
    ask(client, content, system=SYSTEM, model="claude-a")
    other = ask(client, content, system=SYSTEM, model="claude-b")
    assert usage_of(other) == (0, 14, 0)
    assert server.model_calls[-1].cache.perfect_read == 0


def test_a_request_that_fails_before_its_response_writes_nothing(client, server):
    server.script(RateLimited(retry_after=1))
    with pytest.raises(anthropic.RateLimitError):
        ask(client, blocks("block", 2, marked=1), system=SYSTEM)
    assert server.model_calls[0].cache is None
    assert usage_of(ask(client, blocks("block", 2, marked=1), system=SYSTEM)) == (0, 14, 0)


def test_r23_a_prefix_becomes_readable_only_when_its_writer_starts_answering(client, server):
    gate = server.gate()
    server.script(Reply("held", gate=gate))
    content = blocks("block", 2, marked=1)
    with ThreadPoolExecutor(2) as pool:
        writer = pool.submit(ask, client, content, system=SYSTEM)
        assert server.wait_until(lambda rows: rows and rows[0].cache is not None)
        early = pool.submit(ask, client, content, system=SYSTEM).result(timeout=10)
        gate.open()
        assert usage_of(writer.result(timeout=10)) == (0, 14, 0)
    assert usage_of(early) == (0, 14, 0)  # wrote it again: a second writer of the same prefix
    first, second = server.model_calls
    assert second.cache.duplicate_of == (first.id,)
    assert second.first_byte < first.first_byte
    assert usage_of(ask(client, content, system=SYSTEM)) == (14, 0, 0)
    assert server.cache_stats().duplicate_writers == 1


def test_r23_a_caller_that_waits_for_the_first_byte_reads_instead_of_writing(client, server):
    gate = server.gate()
    server.script(Reply("held", gate=gate))
    content = blocks("block", 2, marked=1)
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(ask, client, content, system=SYSTEM)
        assert server.wait_until(lambda rows: rows and rows[0].cache is not None)
        gate.open()
        assert server.wait_until(lambda rows: rows[0].first_byte is not None)
        follower = ask(client, content, system=SYSTEM)
        writer.result(timeout=10)
    assert usage_of(follower) == (14, 0, 0)
    assert server.cache_stats().duplicate_writers == 0


def test_cache_stats_compare_actual_reads_with_the_perfect_prefix_cache(client, server):
    system = [text(SYSTEM, "5m")]
    ask(client, blocks("block", 4), system=system)  # writes the system: 10
    ask(client, blocks("block", 4, marked=3), system=system)  # reads 10, writes 8
    ask(client, blocks("block", 4) + [text("tail-one")], system=system)  # reads 10 only (no mark on 3)
    stats = server.cache_stats()
    assert (stats.requests, stats.total, stats.cache_read, stats.cache_write) == (3, 18 + 18 + 20, 20, 18)
    assert stats.input_tokens == stats.total - stats.cache_read - stats.cache_write
    assert stats.perfect_read == 0 + 18 + 18
    assert stats.read_share == pytest.approx(20 / 56)
    assert stats.perfect_share == pytest.approx(36 / 56)
    assert stats.of_perfect == pytest.approx(20 / 36)
    only_last = server.cache_stats(lambda e: e.id == 3)
    assert (only_last.cache_read, only_last.perfect_read) == (10, 18)


def test_reset_forgets_entries_and_records(client, server):
    ask(client, blocks("block", 2, marked=1), system=SYSTEM)
    server.reset()
    assert server.requests == []
    assert usage_of(ask(client, blocks("block", 2, marked=1), system=SYSTEM)) == (0, 14, 0)
    assert server.model_calls[0].cache.perfect_read == 0


def test_a_mark_on_or_inside_a_tool_result_marks_that_block(client, server):
    def exchange(result: dict) -> list[dict]:
        return [
            {"role": "user", "content": "look it up"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "zoom", "input": {}}]},
            {"role": "user", "content": [result, text("and then")]},
        ]

    nested = {"type": "tool_result", "tool_use_id": "t1", "content": [text("the detail", "5m")]}
    on_block = {"type": "tool_result", "tool_use_id": "t1", "content": [text("the detail")],
                "cache_control": {"type": "ephemeral"}}
    client.messages.create(model="claude-test", max_tokens=64, system=SYSTEM, messages=exchange(nested))
    again = client.messages.create(model="claude-test", max_tokens=64, system=SYSTEM, messages=exchange(on_block))
    assert [e.cache.marks for e in server.model_calls] == [(3,), (3,)]
    assert again.usage.cache_read_input_tokens == server.model_calls[0].cache.cache_write > 0
