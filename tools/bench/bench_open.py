"""Open a big chat: time and peak memory to open 1,000,000 messages and render the view.

The chat is made once (messages of mixed sizes, every compaction answered at once,
written with group commits) and kept under --dir for later runs. Each measurement
runs in a fresh process: `Chat.open` (read-only, as `everchat view` does) plus
`render_view()`. Peak memory is the process's peak resident set (interpreter
included) and, apart, the peak of Python allocations during the open.

    python tools/bench/bench_open.py [--messages 1000000] [--dir /tmp/everchat-bench] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

__all__ = ["make_chat", "measure_open"]

_GROUP = 5_000


def make_chat(path: Path, count: int, seed: int = 7) -> None:
    """Write a chat of `count` messages with a fully built tree, fast (group commits)."""
    from everchat.actors.session.local import Chat
    from everchat.actors.tree import Budget, Planner, node_of, pair_of
    from everchat.actors.planner.planning import VIEW_VERSION
    from everchat.actors.folder import ChatStore

    rng = random.Random(seed)
    words = ["amber", "zoom", "tree", "view", "path/to/file.py", "error", "42", "the", "log", "summary"]
    store = ChatStore.open(path, create=True)
    planner = Planner(Budget())
    merges = 0
    try:
        done = 0
        while done < count:
            group = min(_GROUP, count - done)
            items = []
            for _ in range(group):
                size = rng.randint(600, 3000) if rng.random() < 1 / 3 else rng.randint(20, 400)
                text = " ".join(rng.choice(words) for _ in range(size // 6 + 1))[:size]
                items.append(("user" if rng.random() < 0.5 else "everchat", text, None, (), None))
            ids = [i for part in store.append_messages(items) for i in part]
            nodes: list[tuple[int, int, str]] = []
            for i in ids:
                line = store.message_line(i)
                step = planner.add_message(len(line.encode()), line)
                nodes += [(*node_of(key), text) for key, text in zip(step.built, step.built_texts)]
                if step.batch:
                    store.append_nodes(nodes)
                    nodes = []
                    store.append_merge([pair_of(up) for up in step.merged], planner.messages, planner.view.shrinking)
                    merges += 1
                todo = list(step.started)
                while todo:
                    key = todo.pop()
                    text = f"summary {node_of(key)} " + "s" * rng.randint(100, 400)
                    built = planner.node_built(key, len(text.encode()), text)
                    nodes.append((*node_of(key), text))
                    nodes += [(*node_of(up), t) for up, t in zip(built.built, built.built_texts)]
                    todo += built.started
            store.append_nodes(nodes)
            done += group
            print(f"made {done} of {count} messages", file=sys.stderr, flush=True)
        view, cview = planner.saved_views()
        view.update(version=VIEW_VERSION, merges=merges)  # as Planning saves it (R24's count)
        store.save_views(view, cview)
    finally:
        store.close()
    # A chat's writer leaves the fold checkpoint (index/fold.json) behind, as every
    # chat's first writer open does: later opens check the view from it.
    Chat.open(path).close()


def measure_open(path: Path, writer: bool = False) -> dict:
    """Open (read-only, or as the writer) and render; run this in a fresh process."""
    from everchat.actors.session.local import Chat

    tracemalloc.start()
    began = time.perf_counter()
    with Chat.open(path, writer=writer) as chat:
        view = chat.render_view()
        opened = time.perf_counter() - began
        messages = chat.messages
    _, python_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "seconds": opened,
        "messages": messages,
        "view_bytes": len(view.encode()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "python_peak_mb": python_peak / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/everchat-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--as-writer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure_open(args.measure, args.as_writer)))
        return
    path = args.dir / f"chat-{args.messages}"
    if not (path / "view.json").exists():
        began = time.perf_counter()
        make_chat(path, args.messages)
        print(json.dumps({"bench": "open", "figure": "make_seconds", "value": round(time.perf_counter() - began, 1)}))
    for writer in (False, True):
        runs = []
        for _ in range(args.repeat):
            # A fresh process each time: the open must not lean on anything warm in Python.
            done = subprocess.run(
                [sys.executable, __file__, "--measure", str(path), *(["--as-writer"] if writer else [])],
                capture_output=True, text=True, check=True,
            )
            runs.append(json.loads(done.stdout))
        role = "writer" if writer else "reader"
        best = min(runs, key=lambda run: run["seconds"])
        print(json.dumps({"bench": "open", "figure": f"{role}_open_and_render_seconds", "value": round(best["seconds"], 4),
                          "median": round(sorted(run["seconds"] for run in runs)[len(runs) // 2], 4),
                          "messages": best["messages"], "view_bytes": best["view_bytes"], "target": 0.5}))
        print(json.dumps({"bench": "open", "figure": f"{role}_peak_rss_mb", "value": round(max(run["peak_rss_mb"] for run in runs), 1),
                          "target": 200}))
        print(json.dumps({"bench": "open", "figure": f"{role}_python_alloc_peak_mb",
                          "value": round(max(run["python_peak_mb"] for run in runs), 2)}))
    # A reader of a chat whose fold checkpoint is gone (no writer opened it since) checks
    # the view against every merge record: R24's cost without the checkpoint.
    fold = path / "index" / "fold.json"
    aside = fold.with_name("fold.json.bench-aside")
    fold.rename(aside)
    try:
        done = subprocess.run([sys.executable, __file__, "--measure", str(path)], capture_output=True, text=True, check=True)
    finally:
        aside.rename(fold)
    print(json.dumps({"bench": "open", "figure": "reader_open_without_fold_checkpoint_seconds",
                      "value": round(json.loads(done.stdout)["seconds"], 4)}))


if __name__ == "__main__":
    main()
