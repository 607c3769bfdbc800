"""Planner throughput: messages per second through the planner core (issue 2).

100,000 messages of mixed sizes (two in three are free leaves of 20-400 bytes,
one in three needs a compaction: 600-3,000 bytes); every compaction the planner
starts is answered at once with a 300-byte line (instant builds). Default budgets
(128,000 / 64,000, 32,000 / 16,000, 8 jobs). Prints one JSON line per figure.

    python tools/bench/bench_planner.py [--messages 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from everchat.actors.tree import Budget, Planner

__all__ = ["run"]


def _sizes(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(600, 3000) if rng.random() < 1 / 3 else rng.randint(20, 400) for _ in range(count)]


def run(count: int) -> dict:
    sizes = _sizes(count, seed=1)
    planner = Planner(Budget())
    builds = batches = 0
    began = time.perf_counter()
    for size in sizes:
        step = planner.add_message(size)
        batches += step.batch
        todo = step.started
        while todo:
            todo.extend(planner.node_built(todo.pop(), 300).started)
            builds += 1
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "builds": builds, "batches": batches, "view_lines": len(planner.view)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [run(args.messages) for _ in range(args.repeat)]
    best = min(runs, key=lambda result: result["seconds"])
    rates = sorted(args.messages / result["seconds"] for result in runs)
    print(json.dumps({"bench": "planner", "figure": "messages_per_s_best", "value": round(rates[-1]),
                      "messages": args.messages, "builds": best["builds"], "batches": best["batches"],
                      "target": 50_000}))
    print(json.dumps({"bench": "planner", "figure": "messages_per_s_median", "value": round(rates[len(rates) // 2]),
                      "runs": args.repeat}))


if __name__ == "__main__":
    main()
