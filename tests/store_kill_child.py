"""The writer the kill test kills (tests/test_store_kill.py).

Run as a script, this process is a small fork server: it imports the store once, then for
each command line on stdin (`{"chat", "seed", "start", "checkpoint"}`) forks a worker and
prints `{"worker": pid}`. The worker opens the chat as its writer, prints `{"ready": T}`
and appends in a loop (single appends, group commits, some with keys, nodes, merge
records), printing one acknowledgement line after each call returns. The test kills the
worker with SIGKILL; the server reaps it and prints `{"reaped": pid}` on a fresh line.

Every operation is a pure function of (seed, op number) and the chat's state, so a worker
restarted at an operation it may already have done repeats it exactly: a keyed append must
then return the ids it got the first time.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import traceback

from everchat.actors.folder import ChatStore

KINDS = ["user", "everchat", "tool", "echo", "work", "note"]
_BASES = ["a", "é", "word ", "😀", "line\n", "x y "]


def digest(kind: str, text: str) -> str:
    return hashlib.sha1(f"{kind}\0{text}".encode()).hexdigest()[:16]


def _text(rng: random.Random, kind: str) -> str:
    r = rng.random()
    if r < 0.03 and kind != "echo":
        n = rng.randint(16_001, 40_000)  # split by R8
    elif r < 0.2:
        n = rng.randint(200, 2_000)
    else:
        n = rng.randint(0, 120)
    base = rng.choice(_BASES)
    text = (base * (n // len(base) + 1))[:n]
    return f"[Worker] {text}" if kind == "work" else text


def _message(rng: random.Random, key: str) -> tuple:
    kind = rng.choice(KINDS)
    return (kind, _text(rng, kind), key if rng.random() < 0.5 else None)


def node_text(level: int, i: int) -> str:
    return f"node {level}.{i} " + "é" * (i % 40)


def _ack(line: dict) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def one_op(store: ChatStore, seed: int, op: int) -> dict:
    """Do operation `op` and return its acknowledgement."""
    rng = random.Random(f"{seed}:{op}")
    r = rng.random()
    if r < 0.4:
        kind, text, key = _message(rng, f"{seed}-{op}")
        ids = store.append_message(kind, text, key=key)
        return {"op": op, "m": [[ids, kind, digest(kind, text), key]]}
    if r < 0.7:
        items = [_message(rng, f"{seed}-{op}-{j}") for j in range(rng.randint(1, 12))]
        got = store.append_messages(items)
        return {"op": op, "m": [[ids, kind, digest(kind, text), key]
                                for ids, (kind, text, key) in zip(got, items)]}
    count = store.message_count
    if r < 0.85:
        nodes = set()
        for _ in range(rng.randint(1, 6)):
            if count:
                nodes.add((0, rng.randrange(count)))
            for level in (1, 2):
                if count >> level:
                    j = rng.randrange(count >> level)
                    if store.node(level - 1, 2 * j) and store.node(level - 1, 2 * j + 1):
                        nodes.add((level, j))
        nodes = sorted(nodes)
        store.append_nodes([(lv, i, node_text(lv, i)) for lv, i in nodes])
        return {"op": op, "n": [[lv, i, digest("node", node_text(lv, i))] for lv, i in nodes]}
    pairs = []
    for _ in range(rng.randint(0, 3)):
        if count >> 1:
            j = rng.randrange(count >> 1)
            if store.node(1, j) is not None and (0, 2 * j) not in pairs:
                pairs.append((0, 2 * j))
    is_open = rng.random() < 0.5
    store.append_merge(pairs, count, is_open)
    return {"op": op, "g": [pairs, count, is_open]}


def worker(command: dict) -> None:
    ChatStore.CHECKPOINT_BYTES = command["checkpoint"]
    store = ChatStore.open(command["chat"], create=True)
    _ack({"ready": store.message_count})
    for op in range(command["start"], command["start"] + 100_000):
        _ack(one_op(store, command["seed"], op))
    store.close()


def serve() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                worker(command)
            except BaseException as exc:  # report it to the test, which fails on it
                traceback.print_exc()
                _ack({"error": repr(exc)})
                code = 1
            finally:
                os._exit(code)
        _ack({"worker": pid})
        _, status = os.waitpid(pid, 0)
        sys.stdout.write("\n")  # ends a line the worker's death may have cut short
        _ack({"reaped": pid, "status": status})


if __name__ == "__main__":
    serve()
