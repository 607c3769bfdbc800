"""Log store appends and reads: one JSON line per figure.

Figures (all on a fresh chat in a temporary folder under /tmp, removed afterwards):

- `single_fsync_msgs_per_s`: acknowledged single appends, one write and one fsync each (R4),
  with the median and 99th percentile latency;
- `bulk_group_commit_msgs_per_s`: `append_messages` in batches of 1,000 messages of about
  200 bytes, one write and one fsync per batch (target: at least 20,000/s);
- `nodes_group_commit_per_s`: `append_nodes` in batches of 1,000 leaves;
- `reopen_reader_s`, `reopen_writer_s`: opening the chat after a clean close;
- `reopen_after_crash_s`: opening as the writer after a crash left a full checkpoint's worth
  of log (`ChatStore.CHECKPOINT_BYTES`) unindexed, the worst tail an open scans;
- `read_message_per_s`, `read_node_per_s`: random reads by id through the index;
- `check_msgs_per_s`: `check()` over the whole chat.

    python tools/bench/bench_append.py [--messages 200000] [--single 1000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from everchat.actors.folder import ChatStore

__all__ = ["main"]

_WORDS = ["amber", "zoom", "tree", "view", "path/to/file.py", "error", "42", "the", "log",
          "été", "summary"]


def _emit(figure: str, value: float, **extra: object) -> None:
    print(json.dumps({"bench": "append", "figure": figure, "value": round(value, 4), **extra}),
          flush=True)


def _text(rng: random.Random, size: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(size // 5 + 1))[:size]


def _log_bytes(chat: Path) -> int:
    return sum(p.stat().st_size for p in (chat / "main").iterdir())


def run(folder: Path, messages: int, singles: int) -> None:
    rng = random.Random(7)
    chat = folder / "chat"
    store = ChatStore.open(chat, create=True)

    latencies = []
    for n in range(singles):
        text = _text(rng, 200)
        began = time.perf_counter()
        store.append_message("user", text, key=f"single-{n}")
        latencies.append(time.perf_counter() - began)
    _emit("single_fsync_msgs_per_s", singles / sum(latencies), messages=singles,
          p50_ms=round(statistics.median(latencies) * 1e3, 3),
          p99_ms=round(sorted(latencies)[int(0.99 * (singles - 1))] * 1e3, 3))

    batch, done, spent = 1_000, 0, 0.0
    pool = [_text(rng, rng.randint(150, 250)) for _ in range(5_000)]
    while done < messages:
        items = [("everchat" if k % 2 else "user", pool[(done + k) % len(pool)])
                 for k in range(min(batch, messages - done))]
        began = time.perf_counter()
        store.append_messages(items)
        spent += time.perf_counter() - began
        done += len(items)
    _emit("bulk_group_commit_msgs_per_s", done / spent, messages=done, batch=batch,
          avg_bytes=round(sum(map(len, pool)) / len(pool)), target=20_000)

    total = store.message_count
    leaves, spent = min(total, 100_000), 0.0
    for start in range(0, leaves, batch):
        nodes = [(0, i, f"user: leaf {i} " + pool[i % len(pool)][:200])
                 for i in range(start, min(start + batch, leaves))]
        began = time.perf_counter()
        store.append_nodes(nodes)
        spent += time.perf_counter() - began
    _emit("nodes_group_commit_per_s", leaves / spent, nodes=leaves, batch=batch)
    store.close()

    for role, writer in (("reader", False), ("writer", True)):
        began = time.perf_counter()
        store = ChatStore.open(chat, writer=writer)
        _emit(f"reopen_{role}_s", time.perf_counter() - began, messages=store.message_count,
              target=0.5)
        store.close()

    store = ChatStore.open(chat)
    logged = _log_bytes(chat)
    items = [("note", pool[k % len(pool)]) for k in range(100)]
    tail = 0
    while True:  # stop one batch short of the checkpoint the next batch would trigger
        store.append_messages(items)
        tail += len(items)
        grown = _log_bytes(chat) - logged
        if grown * (tail + 2 * len(items)) / tail >= ChatStore.CHECKPOINT_BYTES:
            break
    store._abandon()  # as kill -9 would: no checkpoint
    began = time.perf_counter()
    store = ChatStore.open(chat)
    _emit("reopen_after_crash_s", time.perf_counter() - began, tail_messages=tail,
          tail_bytes=grown, checkpoint_bytes=ChatStore.CHECKPOINT_BYTES)
    store.close()

    with ChatStore.open(chat, writer=False) as store:
        count = store.message_count
        ids = [rng.randrange(count) for _ in range(50_000)]
        began = time.perf_counter()
        for i in ids:
            store.message(i)
        _emit("read_message_per_s", len(ids) / (time.perf_counter() - began))
        ids = [rng.randrange(leaves) for _ in range(50_000)]
        began = time.perf_counter()
        for i in ids:
            store.node(0, i)
        _emit("read_node_per_s", len(ids) / (time.perf_counter() - began))
        began = time.perf_counter()
        counts = store.check()
        _emit("check_msgs_per_s", counts["messages"] / (time.perf_counter() - began),
              messages=counts["messages"], nodes=counts["nodes"], mb=round(counts["bytes"] / 2**20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000,
                        help="messages for the bulk figure (the chat's size)")
    parser.add_argument("--single", type=int, default=1_000, help="single appends")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        run(args.keep, args.messages, args.single)
        return
    folder = Path(tempfile.mkdtemp(prefix="everchat-bench-append-", dir="/tmp"))
    try:
        run(folder, args.messages, args.single)
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
