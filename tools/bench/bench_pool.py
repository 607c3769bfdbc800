"""The compactor pool importing a chat (issue 4): wall time against the ideal, and R23's gate.

A real chat under the supervisor (single process by default, `--processes` for one
OS process per actor), 8 compactor workers with the configured summarizer: the
official anthropic SDK pointed at the fake model server (a dummy key it accepts),
whose replies wait 200 ms ± 50 ms for their first byte. 10,000 `note` messages of
40-400 bytes are logged in batches as a bulk import would: each batch waits until
at most 16 compactions are ready but not handed out (`WaitBacklog`), so the pool
keeps up and the compaction context stays near the compaction view's 16-32 KB
(R21, R27) instead of growing with the whole import. Then it waits for the pool to
be idle.

The ideal is calls x 0.2 s / 8 (every worker always waiting on a first byte). The
run is repeated per prefix-gate policy (`--gate reread,off` by default; see
actors/planner/prefix_gate.py): `reread` (the chat's default) and `auto` and `wait` keep
one writer per new prefix (R23), `off` lets calls write copies. One JSON line per figure:

    python -m everchat.tools.bench.bench_pool [--messages 10000] [--gate reread,off,auto,wait]
        [--processes] [--latency 0.2 --spread 0.05] [--batch 100 --backlog 16]

`calls` counts model calls; `nodes_by_model` the non-free nodes in the chat folder
(they must agree: one call per node here, as every answer fits in 512 bytes);
`cache_read_share` is cache reads over all input tokens of the compactions (the
fake's Anthropic cache model), `duplicate_writers` the calls that wrote a prefix
another call in flight was writing. The profile: `in_flight_share` is the time
calls were open at the server over 8 x wall; `mean_call_s` a call's time at the
server (the latency plus the streaming); the rest of the gap to the ideal is spent
between calls (a worker's hand-out, the SDK, the planner saving each line).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from everchat.actors.compactor.compaction import read_task
from everchat.actors.tree import Budget
from everchat.actors.supervisor.actor import Placement, Supervisor
from everchat.tools.fakemodel import FakeModelServer, Latency, Reply
from everchat.transport import schema

__all__ = ["run", "summary_rule", "note_texts", "folder_nodes"]

MODEL = "claude-haiku-5-5"
DUMMY_KEY = "test-key"  # the fake server's own; never a real key
_WORDS = ("build", "deploy", "error", "fixed", "path/to/file.py", "amber-42", "tests", "green", "review",
          "the", "a", "and", "of", "memory", "view", "node", "cache", "prefix", "worker", "planner",
          "issue", "note", "déjà", "vu", "ok", "pending", "merged", "branch", "main", "release")


def note_texts(count: int, seed: int = 1) -> list[str]:
    """`count` notes of 40-400 bytes of words, the same for the same seed."""
    rng = random.Random(seed)
    texts = []
    for n in range(count):
        size = rng.randint(40, 400)
        words = [f"#{n}"]
        while len(" ".join(words).encode()) < size:
            words.append(rng.choice(_WORDS))
        texts.append(" ".join(words).encode()[:size].decode(errors="ignore").strip())
    return texts


class summary_rule:  # noqa: N801 (used like a function by the fake server)
    """The fake model's answer to a compaction: a line of 300-480 bytes made from a
    digest of its task, so every node's line is its own. Notes each node asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, request) -> Reply:
        said = request.last_user_text
        task = read_task(said[said.rfind("</chat>") + len("</chat>"):].lstrip())
        name = task.name if task is not None else "?"
        self.asked.append(name)
        digest = hashlib.sha256(request.last_user_text.encode()).hexdigest()
        size = 300 + int(digest[:4], 16) % 181
        head = f"summary of {name} [{digest[:16]}] "
        return Reply((head + "notes kept " * 60)[:size])


@contextmanager
def _settings(base_url: str, home: Path, gate: str):
    """The environment the workers read their settings from (R33): the compaction
    model on the fake server, with the fake's dummy key."""
    saved = {key: value for key, value in os.environ.items()
             if key.startswith("EVERCHAT_") or key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    for key in saved:
        del os.environ[key]
    os.environ.update({
        "EVERCHAT_HOME": str(home),
        "EVERCHAT_COMPACTION_PROVIDER": "anthropic",
        "EVERCHAT_COMPACTION_MODEL": MODEL,
        "EVERCHAT_COMPACTION_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "EVERCHAT_PREFIX_GATE": gate,
    })
    try:
        yield
    finally:
        for key in [key for key in os.environ if key.startswith("EVERCHAT_") or key == "ANTHROPIC_API_KEY"]:
            del os.environ[key]
        os.environ.update(saved)


def folder_nodes(chat: Path) -> dict:
    """The chat folder's tree: every node (each once, R12), and which were built by a
    model call rather than free (R11)."""
    lines: list[str] = []
    for path in sorted((chat / "main").glob("*.jsonl")):
        for raw in path.read_text().splitlines():
            if raw:
                record = json.loads(raw)
                lines.append(f"{record['kind']}: {record['text']}")
    nodes: dict[tuple[int, int], str] = {}
    twice = 0
    for path in sorted((chat / "tree").glob("*.jsonl")):
        for raw in path.read_text().splitlines():
            record = json.loads(raw) if raw else {}
            if "l" in record:
                key = (record["l"], record["i"])
                twice += key in nodes
                nodes[key] = record["text"]
    by_model = 0
    for (l, i), text in nodes.items():  # noqa: E741
        if l == 0:
            by_model += text != lines[i]
        else:
            left, right = nodes.get((l - 1, 2 * i)), nodes.get((l - 1, 2 * i + 1))
            by_model += left is None or right is None or text != left + "\n" + right
    return {"messages": len(lines), "nodes": len(nodes), "nodes_by_model": by_model, "built_twice": twice}


def run(messages: int = 10_000, *, gate: str = "reread", processes: bool = False, workers: int = 8,
        latency: float = 0.2, spread: float = 0.05, batch: int = 100, backlog: int | None = 16, seed: int = 1,
        chunk_tokens: int = 32, timeout: float = 1800.0) -> dict:
    """Import `messages` notes into a fresh chat and wait for the pool; the figures.
    `backlog` None logs every batch at once (no flow control)."""
    texts = note_texts(messages, seed)
    rule = summary_rule()
    with tempfile.TemporaryDirectory(prefix="everchat-bench-pool-") as tmp, \
            FakeModelServer(latency=Latency.around(latency, spread), seed=seed, record_bodies=False,
                            api_keys=(DUMMY_KEY,), chunk_tokens=chunk_tokens) as server, \
            _settings(server.base_url, Path(tmp) / "home", gate):
        server.rule(rule)
        chat = Path(tmp) / "chat"
        placement = Placement("processes" if processes else "single", workers=workers)
        with Supervisor(chat, placement, Budget(jobs=workers)) as supervisor:
            node = supervisor.node
            began = time.monotonic()
            waits = 0.0
            for first in range(0, messages, batch):
                if first and backlog is not None:
                    before = time.monotonic()
                    node.ask("planner", schema.WaitBacklog(at_most=backlog), timeout=timeout)
                    waits += time.monotonic() - before
                items = [schema.Append(kind="note", text=text, key=f"bench-pool-{first + n}", images=[], meta=None)
                         for n, text in enumerate(texts[first:first + batch])]
                node.ask("log_writer", schema.AppendMany(items=items), timeout=60.0)
            imported = time.monotonic() - began
            node.ask("planner", schema.PoolIdle(), timeout=timeout)
            wall = time.monotonic() - began
        server.wait_idle(timeout=30.0)
        calls = [e for e in server.model_calls if e.headers.get("x-everchat-call") == "compaction"]
        stats = server.cache_stats(lambda e: e.headers.get("x-everchat-call") == "compaction")
        tree = folder_nodes(chat)
    ok = [e for e in calls if e.outcome == "ok"]
    open_seconds = sum(e.ended - e.started for e in ok if e.ended is not None)
    first_bytes = [e.first_byte - e.started for e in ok if e.first_byte is not None]
    ideal = len(calls) * latency / workers
    return {
        "gate": gate,
        "placement": placement.mode,
        "messages": messages,
        "workers": workers,
        "latency_s": latency,
        "calls": len(calls),
        "failed_calls": len(calls) - len(ok),
        "nodes_asked": len(set(rule.asked)),
        **tree,
        "wall_s": round(wall, 2),
        "import_s": round(imported, 2),
        "import_waits_s": round(waits, 2),
        "ideal_s": round(ideal, 2),
        "share_of_ideal": round(ideal / wall, 4) if wall else 0.0,
        "cache_read_share": round(stats.read_share, 4),
        "cache_write_share": round(stats.cache_write / stats.total, 4) if stats.total else 0.0,
        "perfect_read_share": round(stats.perfect_share, 4),
        "duplicate_writers": stats.duplicate_writers,
        "input_tokens_per_call": round(stats.total / len(calls)) if calls else 0,
        "in_flight_share": round(open_seconds / (workers * wall), 4) if wall else 0.0,
        "mean_call_s": round(open_seconds / len(ok), 4) if ok else 0.0,
        "mean_first_byte_s": round(sum(first_bytes) / len(first_bytes), 4) if first_bytes else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--gate", default="reread,off", help="prefix-gate policies to run, comma-separated "
                        "(reread, auto, wait, off)")
    parser.add_argument("--processes", action="store_true", help="every actor in its own process (ipc)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.2, help="first-byte latency, seconds")
    parser.add_argument("--spread", type=float, default=0.05, help="± seconds around --latency")
    parser.add_argument("--batch", type=int, default=100, help="messages per logged batch")
    parser.add_argument("--backlog", type=int, default=16, help="ready compactions a batch waits for")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for gate in args.gate.split(","):
        result = run(args.messages, gate=gate.strip(), processes=args.processes, workers=args.workers,
                     latency=args.latency, spread=args.spread, batch=args.batch, backlog=args.backlog,
                     seed=args.seed)
        figures = {key: result[key] for key in ("gate", "placement", "messages", "calls", "nodes_by_model")}
        for figure in ("wall_s", "ideal_s", "share_of_ideal", "cache_read_share", "duplicate_writers",
                       "in_flight_share", "mean_call_s"):
            print(json.dumps({"bench": "pool", "figure": figure, "value": result[figure], **figures,
                              **({"target": 0.9} if figure == "share_of_ideal" else {})}), flush=True)
        print(json.dumps({"bench": "pool", "figure": "detail", **result}), flush=True)


if __name__ == "__main__":
    main()
