"""The settle wait users feel (issue 9, R36): how long a turn waits for its view before its call.

A chatty conversation (`tools/bench/workload.py`'s `chatty`: user messages of 40-400
bytes, 0-5 tool rounds with results of 200 bytes to 2 KB, replies of 300-2,500 bytes) runs
through the real session (`ChatSession`, single process, `--jobs` compactor workers, 8 by
default) against the
fake model server. The person thinks `--think` seconds (real time) after each reply before
typing the next message; every compaction call takes 1.5 ± 1 s before its first byte
(`--compaction`, `--spread`), a turn's calls `--turn-latency`.

A turn settles its view before its call (R36): every line before its message must be built.
With a 5 s pause and 1.5 s summaries the previous reply's line should be ready in time; a
wait means it started late (R31's leaf window, merges ahead of it, R23's prefix gate).

Figures, one JSON line each: `wait_s` (from the input, `session.send`, to the turn's first
request reaching the model server) p50 and p95 over the turns after the first; `waited`,
the share of those turns whose settle found unbuilt lines (the planner could not answer at
once); `settle_s` p50 and p95 of the planner's settle time (arrival to answer) for the
turns that waited; then a `detail` line with the run's counts.

    python -m everchat.tools.bench.bench_settle [--turns 36] [--think 5] [--seed 4]
        [--compaction 1.5 --spread 1.0] [--turn-latency 0.1] [--jobs 8]

The default run takes about four minutes: `--turns` times (`--think` plus a turn).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import statistics
import tempfile
import threading
import time
from pathlib import Path

from everchat.actors.planner import actor as planner_module
from everchat.actors.settings import load
from everchat.actors.session.session import ChatSession
from everchat.actors.supervisor.actor import Placement
from everchat.tools.bench.bench_cache import bench_env, play_turn
from everchat.tools.bench.workload import FETCH_TOOL, WorkloadRule, fetch, make_workload
from everchat.tools.fakemodel import FakeModelServer, Latency, ModelRequest, Reply

__all__ = ["SettleRule", "SettleWatch", "percentile", "run", "main"]

_TURN_SECONDS = 600.0


class SettleRule:
    """The workload's answers (`WorkloadRule`), with the compactions' latency apart from the turns'."""

    def __init__(self, rule: WorkloadRule, compaction: Latency, turn: Latency) -> None:
        self.rule, self.compaction, self.turn = rule, compaction, turn

    def __call__(self, request: ModelRequest) -> Reply:
        reply = self.rule(request)
        kind = self.rule.notes.kinds.get(request.exchange_id)
        reply.latency = self.compaction if kind == "compaction" else self.turn
        return reply


class SettleWatch:
    """Notes each SettleView the planner takes: when it came, whether it was answered at
    once, when it was answered. Wraps the planner actor's two methods for the run (the
    single placement runs the planner in this process) and puts them back after."""

    def __init__(self) -> None:
        self.settles: list[dict] = []
        self._lock = threading.Lock()
        self._open: dict[int, dict] = {}

    @contextlib.contextmanager
    def installed(self):
        actor = planner_module.PlannerActor
        settle, answer = actor.on_settle_view, actor._answer_settled
        watch = self

        def on_settle_view(self, msg, delivery):
            note = {"until": msg.until, "since": msg.since, "came": time.monotonic(), "answered": None}
            with watch._lock:
                watch.settles.append(note)
                watch._open[id(delivery)] = note
            try:
                return settle(self, msg, delivery)
            finally:
                watch._answered(self)
                note["at_once"] = note["answered"] is not None

        def answer_settled(self):
            answer(self)
            watch._answered(self)

        actor.on_settle_view, actor._answer_settled = on_settle_view, answer_settled
        try:
            yield self
        finally:
            actor.on_settle_view, actor._answer_settled = settle, answer

    def _answered(self, actor) -> None:
        waiting = {id(waiter.delivery) for waiter in actor.settle_waiters}
        now = time.monotonic()
        with self._lock:
            for key in [key for key in self._open if key not in waiting]:
                self._open.pop(key)["answered"] = now


def percentile(values: list[float], share: float) -> float:
    """The value below which `share` of `values` lie (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def _play_turn(session, turn, opened_at: dict[int, float]) -> None:
    opened_at[turn.index] = time.monotonic()
    ended = play_turn(session, turn.user, f"turn {turn.index}", _TURN_SECONDS)
    if ended.reason != "done":
        raise RuntimeError(f"turn {turn.index} ended {ended.reason}: {ended.detail}")


def run(turns: int = 36, *, think: float = 5.0, compaction: float = 1.5, spread: float = 1.0,
        turn_latency: float = 0.1, seed: int = 4, jobs: int = 8) -> dict:
    """Play `turns` turns of the chatty workload with `think` seconds between them; the figures."""
    plan = make_workload("chatty", messages=1, seed=seed)
    while len(plan.turns) < turns:
        plan = make_workload("chatty", messages=plan.messages() * 2, seed=seed)
    plan = type(plan)(plan.name, plan.seed, plan.turns[:turns])
    rule = WorkloadRule(plan)
    watch = SettleWatch()
    opened_at: dict[int, float] = {}
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-settle-")))
        server = stack.enter_context(FakeModelServer(chunk_tokens=64, seed=seed))
        server.rule(SettleRule(rule, Latency.around(compaction, spread), Latency(first_byte=turn_latency)))
        stack.enter_context(bench_env(folder, server.base_url))
        stack.enter_context(watch.installed())
        settings = dataclasses.replace(load(), compaction_jobs=jobs)
        began = time.monotonic()
        with ChatSession.open(settings, placement=Placement(workers=jobs),
                              extra_tools=[(FETCH_TOOL, fetch)]) as session:
            for turn in plan.turns:
                if turn.index:
                    time.sleep(think)  # the person reads the reply and types (real time, by design)
                _play_turn(session, turn, opened_at)
        seconds = time.monotonic() - began
        server.wait_idle(timeout=60)
        exchanges = server.model_calls
    first_request: dict[int, float] = {}
    for exchange in exchanges:
        index = rule.notes.turns.get(exchange.id)
        if index is not None:
            first_request[index] = min(first_request.get(index, exchange.started), exchange.started)
    counted = [index for index in range(1, turns)]  # the first turn has nothing before it to wait for
    waits = [first_request[index] - opened_at[index] for index in counted]
    turn_settles = [note for note in watch.settles if note["since"] == 0 and note["until"] > 0]
    waited = [note for note in turn_settles if not note.get("at_once")]
    settle_waits = [note["answered"] - note["came"] for note in waited if note["answered"] is not None]
    compactions = sum(1 for e in exchanges if rule.notes.kinds.get(e.id) == "compaction")
    return {
        "turns": turns, "counted": len(counted), "jobs": jobs, "think_s": think, "compaction_s": compaction, "spread_s": spread,
        "wait_p50_s": round(percentile(waits, 0.5), 4), "wait_p95_s": round(percentile(waits, 0.95), 4),
        "wait_max_s": round(max(waits, default=0.0), 4),
        "waited_share": round(len(waited) / len(turn_settles), 4) if turn_settles else 0.0,
        "settles": len(turn_settles), "waited": len(waited),
        "settle_p50_s": round(percentile(settle_waits, 0.5), 4),
        "settle_p95_s": round(percentile(settle_waits, 0.95), 4),
        "compactions": compactions, "messages": plan.messages(), "seconds": round(seconds, 1),
        "mean_wait_s": round(statistics.fmean(waits), 4) if waits else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=36)
    parser.add_argument("--think", type=float, default=5.0, help="seconds between a reply and the next input")
    parser.add_argument("--compaction", type=float, default=1.5, help="a compaction's seconds to its first byte")
    parser.add_argument("--spread", type=float, default=1.0, help="± seconds around --compaction")
    parser.add_argument("--turn-latency", type=float, default=0.1, help="a turn call's seconds to its first byte")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=8, help="compactions at once (R31, 1 to 8): fewer, a busier pool")
    args = parser.parse_args(argv)
    result = run(args.turns, think=args.think, compaction=args.compaction, spread=args.spread,
                 turn_latency=args.turn_latency, seed=args.seed, jobs=args.jobs)
    for figure in ("wait_p50_s", "wait_p95_s", "waited_share", "settle_p50_s", "settle_p95_s"):
        print(json.dumps({"bench": "settle", "figure": figure, "value": result[figure]}), flush=True)
    print(json.dumps({"bench": "settle", "figure": "detail", **result}), flush=True)


if __name__ == "__main__":
    main()
