"""Cache replay: the prompt cache's read share for turns and compactions (issue 4, R23).

A seeded chat of about `--messages` messages (`tools/bench/workload.py`: `pastes`, the
issue's workload, or `chatty`) runs through the real session: `ChatSession` with its turn
runner and a pool of 8 compactor workers, both on the `anthropic` SDK pointed at the fake
model server, whose rule plays the workload (tool calls and replies of the drawn sizes;
compaction lines of 380-500 bytes). The bench-only `fetch` tool is offered through
`extra_tools` and returns results of the drawn sizes. Turns go one after another, each
waiting for its view to settle (R36); compactions run as the pool makes them.

The fake server models Anthropic's cache (marks, 20-block lookback, 5-minute lifetime,
1,024-token minimum, entries readable once the writer's response starts) and beside it a
perfect prefix cache that could read any prefix sent before. Per kind (turns, compactions)
it prints one JSON line: requests, input (uncached), cache_read, cache_write (tokens of
the fake tokenizer, bytes / 4), share = cache_read / (input + cache_read + cache_write),
perfect_share, and ratio = share / perfect_share (target: at least 0.99). A line sums up
the run, then one line per kind and cause splits the tokens the perfect cache read and
ours did not (`CAUSES`); `--misses N` adds the N requests that read least against the
perfect cache, with what the cache model saw.

    python tools/bench/bench_cache.py [--messages 3000] [--workload pastes|chatty]
                                      [--latency 0.0] [--seed 4] [--misses 0]

The pool's prefix gate (R23's one writer per new prefix) follows EVERCHAT_PREFIX_GATE.
Compactions mark their context's closing block (a fourth mark, our choice beyond R23,
see `Compaction`): at 3,000 messages compactions read 0.9945 (pastes) / 0.9948 (chatty)
of the perfect cache with it, 0.982 / 0.985 without; turns 0.9999 / 0.9998.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from everchat.actors.settings import load
from everchat.actors.session.session import ChatSession
from everchat.actors.supervisor.actor import Placement
from everchat.tools.bench.workload import FETCH_TOOL, WorkloadRule, Workload, fetch, make_workload
from everchat.tools.fakemodel import CacheStats, Exchange, FakeModelServer, Latency
from everchat.transport import schema

__all__ = ["CAUSES", "CacheRun", "bench_env", "cause_of", "causes", "figures", "main", "misses", "run", "summary"]

TARGET = 0.99
REPLY_MODEL = "claude-sonnet-5-5"
COMPACTION_MODEL = "claude-haiku-5-5"
KINDS = (("turns", "turn"), ("compactions", "compaction"))

_TURN_SECONDS = 900.0  # a turn waits for its view (R36) and its tool rounds; generous on a busy machine


@dataclass
class CacheRun:
    """What one replay left: the workload, the server's records, the rule's notes, the
    session's last status, the chat folder, the turns that did not end "done"."""

    workload: Workload
    exchanges: list[Exchange]
    rule: WorkloadRule
    status: dict
    chat: Path
    seconds: float
    failed_turns: list[tuple[int, str, str]] = field(default_factory=list)
    by_id: dict[int, Exchange] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id = {e.id: e for e in self.exchanges}

    def kind_of(self, exchange: Exchange) -> str:
        return self.rule.notes.kinds.get(exchange.id, "other")

    def stats(self, kind: str) -> CacheStats:
        return CacheStats.of(e for e in self.exchanges if self.kind_of(e) == kind)


@contextlib.contextmanager
def bench_env(home: Path, base_url: str) -> Iterator[None]:
    """The environment the session and its compactor workers read their settings from
    (the workers load settings themselves, R33): both models on the anthropic SDK pointed
    at the fake server, with the fake's test key; turns always wait for a settled view.
    Every variable is put back afterwards."""
    values = {
        "EVERCHAT_HOME": str(home),
        "ANTHROPIC_API_KEY": "test-key",  # the fake server's own key, not a real one
        "EVERCHAT_REPLY_PROVIDER": "anthropic",
        "EVERCHAT_REPLY_MODEL": REPLY_MODEL,
        "EVERCHAT_REPLY_BASE_URL": base_url,
        "EVERCHAT_COMPACTION_PROVIDER": "anthropic",
        "EVERCHAT_COMPACTION_MODEL": COMPACTION_MODEL,
        "EVERCHAT_COMPACTION_BASE_URL": base_url,
        "EVERCHAT_COMPACTION_JOBS": "8",
        "EVERCHAT_SETTLE_TIMEOUT": str(_TURN_SECONDS),
    }
    cleared = ("EVERCHAT_CONFIG", "EVERCHAT_DEMO", "EVERCHAT_REPLY_EFFORT", "EVERCHAT_COMPACTION_EFFORT",
               "EVERCHAT_INSTRUCTIONS", "EVERCHAT_TOOL_ROUNDS")
    with environment(values, cleared):
        yield


@contextlib.contextmanager
def environment(values: dict[str, str], cleared: tuple[str, ...] = ()) -> Iterator[None]:
    """`values` set and `cleared` unset in this process's environment, each put back after."""
    saved = {name: os.environ.get(name) for name in (*values, *cleared)}
    try:
        for name in cleared:
            os.environ.pop(name, None)
        os.environ.update(values)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def play_turn(session, text: str, what: str, seconds: float = _TURN_SECONDS,
              seen: Callable[[schema.Message], None] | None = None) -> schema.TurnEnded:
    """Send `text` through `session` and follow its events until that turn ends, within
    `seconds` (else TimeoutError naming `what`); `seen(event)` sees every event on the way."""
    opened = session.send(text)
    deadline = time.monotonic() + seconds
    while True:
        event = session.next_event(timeout=max(0.0, deadline - time.monotonic()))
        if event is None:
            raise TimeoutError(f"{what} (message {opened}) did not end within {seconds:g} s")
        if seen is not None:
            seen(event)
        if isinstance(event, schema.TurnEnded) and event.turn == opened:
            return event


def _play(session, workload: Workload, failed: list[tuple[int, str, str]]) -> None:
    for turn in workload.turns:
        def notice(event, index=turn.index) -> None:
            if isinstance(event, schema.Notice) and event.level not in ("info",):
                failed.append((index, "notice", event.text))

        ended = play_turn(session, turn.user, f"turn {turn.index}", seen=notice)
        if ended.reason != "done" or ended.incomplete:
            failed.append((turn.index, ended.reason, ended.detail))


def run(workload: str | Workload = "pastes", messages: int = 3000, *, seed: int = 4, latency: float = 0.0,
        record_bodies: bool = False, home: str | Path | None = None, workers: int = 8) -> CacheRun:
    """Replay a workload through the real session against the fake server; see the module
    docstring. `home` keeps the chat folder (default: a temporary one, removed)."""
    plan = workload if isinstance(workload, Workload) else make_workload(workload, messages, seed)
    rule = WorkloadRule(plan)
    spread = Latency.around(latency, latency / 4) if latency > 0 else Latency()
    failed: list[tuple[int, str, str]] = []
    with contextlib.ExitStack() as stack:
        folder = Path(home) if home is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = stack.enter_context(FakeModelServer(latency=spread, chunk_tokens=64, seed=seed,
                                                     record_bodies=record_bodies))
        server.rule(rule)
        stack.enter_context(bench_env(folder, server.base_url))
        settings = load()
        began = time.perf_counter()
        with ChatSession.open(settings, placement=Placement(workers=workers),
                              extra_tools=[(FETCH_TOOL, fetch)]) as session:
            _play(session, plan, failed)
            session.compact(timeout=_TURN_SECONDS)
            status = session.status()
        seconds = time.perf_counter() - began
        server.wait_idle(timeout=60)
        if server.errors:
            raise RuntimeError(f"the fake model server failed {len(server.errors)} requests; first: "
                               f"{server.errors[0][1]}")
        exchanges = server.model_calls
        return CacheRun(plan, exchanges, rule, status, settings.chat_dir, seconds, failed)


def figures(result: CacheRun) -> list[dict]:
    """One row per kind: the issue's figures."""
    rows = []
    for label, kind in KINDS:
        stats = result.stats(kind)
        ratio = stats.read_share / stats.perfect_share if stats.perfect_share else 1.0
        rows.append({
            "bench": "cache", "workload": result.workload.name, "kind": label, "requests": stats.requests,
            "input": stats.input_tokens, "cache_read": stats.cache_read, "cache_write": stats.cache_write,
            "share": round(stats.read_share, 4), "perfect_share": round(stats.perfect_share, 4),
            "ratio": round(ratio, 4), "target": TARGET, "duplicate_writers": stats.duplicate_writers,
            "missed": stats.perfect_read - stats.cache_read,
        })
    return rows


def misses(result: CacheRun, count: int) -> list[dict]:
    """The `count` requests whose reads fell furthest below the perfect cache's, with the
    cache model's view of them (marks, the block read, the marks written, duplicate writers)."""
    rows = []
    for e in result.exchanges:
        if e.cache is None or e.cache.perfect_read <= e.cache.cache_read:
            continue
        rows.append({
            "bench": "cache", "figure": "miss", "exchange": e.id, "kind": result.kind_of(e),
            "turn": result.rule.notes.turns.get(e.id), "missed": e.cache.perfect_read - e.cache.cache_read,
            "total": e.cache.total, "cache_read": e.cache.cache_read, "perfect_read": e.cache.perfect_read,
            "blocks": e.cache.blocks, "marks": list(e.cache.marks), "read_end": e.cache.read_end,
            "written": list(e.cache.written), "duplicate_of": list(e.cache.duplicate_of),
            "cause": cause_of(result, e),
        })
    rows.sort(key=lambda row: -row["missed"])
    return rows[:count]


CAUSES = {
    "view_closing_block": "the prefix runs into the view's closing block (its last 0-3 lines and </chat>), "
                          "which the request did not mark (a turn; a compaction whose closing block is "
                          "</chat> alone, or whose closing mark the prefix gate dropped)",
    "shorter_cut": "no earlier request marked the prefix: it was only sent inside a longer one whose "
                   "mark sat further on",
    "writer_in_flight": "the first request that marked the prefix had not started its response yet (R23: "
                        "an entry is readable from then on)",
    "marked_not_read": "the prefix was marked and written before, yet not read (expired, or past the "
                       "20-block lookback)",
}


def cause_of(result: CacheRun, exchange: Exchange) -> str | None:
    """Why `exchange` read less than the perfect prefix cache (a key of `CAUSES`), or None
    when it read as much."""
    usage = exchange.cache
    if usage is None or usage.perfect_read <= usage.cache_read:
        return None
    notes = result.rule.notes
    shape = notes.shapes[exchange.id]
    block = shape.ends.index(usage.perfect_read)
    closing_unmarked = not any(shape.closing <= m < shape.opening_end - 1 for m in usage.marks)
    if 0 <= shape.closing <= block < shape.opening_end and closing_unmarked:
        return "view_closing_block"
    writer = notes.first_marked.get(shape.digests[block])
    if writer is None or writer >= exchange.id:
        return "shorter_cut"
    first_byte = result.by_id[writer].first_byte
    if first_byte is None or first_byte > exchange.started:
        return "writer_in_flight"
    return "marked_not_read"


def causes(result: CacheRun) -> list[dict]:
    """The tokens the perfect cache read and ours did not, per kind and cause (`CAUSES`)."""
    rows: dict[tuple[str, str], list[int]] = {}
    for exchange in result.exchanges:
        cause = cause_of(result, exchange)
        if cause is None:
            continue
        row = rows.setdefault((result.kind_of(exchange), cause), [0, 0])
        row[0] += 1
        row[1] += exchange.cache.perfect_read - exchange.cache.cache_read
    out = []
    for label, kind in KINDS:
        missed = sum(tokens for (k, _), (_, tokens) in rows.items() if k == kind)
        for cause in CAUSES:
            requests, tokens = rows.get((kind, cause), (0, 0))
            if requests:
                out.append({"bench": "cache", "workload": result.workload.name, "figure": "missed_by_cause",
                            "kind": label, "cause": cause, "requests": requests, "missed": tokens,
                            "of_missed": round(tokens / missed, 4)})
    return out


def peak(exchanges: list[Exchange]) -> int:
    """The most requests in flight at once (R31 caps compactions at 8)."""
    edges = sorted([(e.started, 1) for e in exchanges] + [(e.ended, -1) for e in exchanges if e.ended is not None],
                   key=lambda edge: (edge[0], edge[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def summary(result: CacheRun) -> dict:
    notes = result.rule.notes
    return {
        "bench": "cache", "workload": result.workload.name, "figure": "run", "seconds": round(result.seconds, 1),
        "turns": len(result.workload.turns), "messages": result.status.get("messages"),
        "requests": len(result.exchanges), "view_bytes": result.status.get("view_bytes"),
        "placeholders": len(notes.placeholders), "unknown_requests": len(notes.problems),
        "failed_turns": len(result.failed_turns),
        "peak_compactions": peak([e for e in result.exchanges if result.kind_of(e) == "compaction"]),
        "prefix_gate": os.environ.get("EVERCHAT_PREFIX_GATE") or "default",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--workload", choices=("pastes", "chatty"), default="pastes")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.0,
                        help="the fake model's first-byte latency in seconds (± a quarter)")
    parser.add_argument("--misses", type=int, default=0, help="also print the N worst-read requests")
    args = parser.parse_args()
    result = run(args.workload, args.messages, seed=args.seed, latency=args.latency)
    for row in figures(result):
        print(json.dumps(row), flush=True)
    print(json.dumps(summary(result)), flush=True)
    for row in causes(result):
        print(json.dumps(row), flush=True)
    for row in misses(result, args.misses):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
