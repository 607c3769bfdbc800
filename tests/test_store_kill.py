"""The store law of issue 2: `kill -9` of a writing process at random moments loses no
acknowledged record, leaves no duplicate id and no gap, and a torn tail is handled by R2.

A real child process (tests/store_kill_child.py, a fork server) starts worker processes
that append to one chat in a loop and print each acknowledged call after it returns. The
test kills each worker with SIGKILL at a random moment (mostly 0-30 ms after it is ready,
sometimes while it is still opening the chat), reopens the chat, checks everything the
worker acknowledged and runs `check()`; then the next worker continues the same chat.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from store_kill_child import digest, node_text

from everchat.actors.folder import ChatStore

CHILD = Path(__file__).with_name("store_kill_child.py")
KILLS = 240
SERVER_LIFE = 60  # workers per fork server: the server process is restarted too
SEED = 20261008


class Server:
    """The fork server: send it a command, read its and its workers' lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.buffer = b""

    def send(self, command: dict) -> None:
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")

    def lines(self, until: float) -> list[dict]:
        """The complete lines that arrive before the monotonic time `until`."""
        out = []
        while True:
            left = until - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return out
            chunk = os.read(self.fd, 1 << 16)
            assert chunk, "the fork server died"
            self.buffer += chunk
            *done, self.buffer = self.buffer.split(b"\n")
            for raw in done:
                try:
                    out.append(json.loads(raw))
                except ValueError:
                    pass  # a line cut short by the kill: never acknowledged
            if any(mark in line for line in out for mark in ("worker", "ready", "reaped")):
                return out

    def wait_for(self, mark: str, lines: list[dict]) -> dict:
        """Read on until a line with `mark` arrived (a minute at most); return it."""
        deadline = time.monotonic() + 60
        while not any(mark in line for line in lines):
            assert time.monotonic() < deadline, f"no {mark!r} line: {lines}"
            lines += self.lines(deadline)
        return next(line for line in lines if mark in line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Acknowledged:
    """Everything workers acknowledged, and the checks a reopened chat must pass."""

    def __init__(self) -> None:
        self.groups: list[tuple[list[int], str, str, str | None]] = []
        self.keys: dict[str, list[int]] = {}
        self.nodes: dict[tuple[int, int], str] = {}
        self.merges: list[tuple[list[tuple[int, int]], int, bool]] = []
        self.checked = 0

    def take(self, line: dict) -> None:
        assert "error" not in line, line
        for ids, kind, h, key in line.get("m", ()):
            if key is not None:
                # A resent keyed append returns the ids it got the first time.
                assert self.keys.setdefault(key, ids) == ids, (key, ids, self.keys[key])
            self.groups.append((ids, kind, h, key))
        for level, i, h in line.get("n", ()):
            self.nodes[(level, i)] = h
        if "g" in line:
            pairs, t, is_open = line["g"]
            self.merges.append(([tuple(p) for p in pairs], t, is_open))

    def verify(self, store: ChatStore, rng: random.Random, everything: bool = False) -> None:
        fresh = self.groups[self.checked:]
        old = self.groups[:self.checked]
        sample = old if everything else rng.sample(old, min(25, len(old)))
        for ids, kind, h, key in fresh + sample:
            assert ids == list(range(ids[0], ids[0] + len(ids)))
            records = [store.message(i) for i in ids]
            assert {r.kind for r in records} == {kind}
            assert digest(kind, "".join(r.text for r in records)) == h
            assert all(r.key == key for r in records)
        self.checked = len(self.groups)
        for (level, i), h in self.nodes.items():
            assert digest("node", store.node(level, i)) == h == digest("node",
                                                                      node_text(level, i))
        logged = iter(store.merge_records())
        assert all(any(m == got for got in logged) for m in self.merges), "a merge is lost"


def _kind_of(op: int) -> str:
    """Which call operation `op` makes (the worker draws it first, see one_op)."""
    r = random.Random(f"{SEED}:{op}").random()
    return "message" if r < 0.4 else "group" if r < 0.7 else "nodes" if r < 0.85 else "merge"


def _tear(chat: Path, rng: random.Random) -> None:
    """Leave a torn last line as a crash inside `write` would (R2)."""
    stream = rng.choice(["main", "tree"])
    files = sorted((chat / stream).iterdir()) if (chat / stream).is_dir() else []
    if files:
        partial = b'{"i":999999,"kind":"user","text":"torn' if stream == "main" else \
            b'{"l":0,"i":0,"te'
        with open(files[-1], "ab") as f:
            f.write(partial[:rng.randint(1, len(partial))])


def test_kill_9_at_random_moments_loses_no_acknowledged_record(tmp_path):
    chat = tmp_path / "chat"
    rng = random.Random(SEED)
    acked = Acknowledged()
    start, kills, natural_torn, in_open = 0, 0, 0, 0
    in_flight = {"message": 0, "group": 0, "nodes": 0, "merge": 0}
    server = Server()
    while kills < KILLS:
        if kills and kills % SERVER_LIFE == 0:
            server.close()
            server = Server()
        server.send({"chat": str(chat), "seed": SEED, "start": start,
                     "checkpoint": rng.choice([8 << 10, 64 << 10, 4 << 20])})
        lines: list[dict] = []
        pid = server.wait_for("worker", lines)["worker"]
        if rng.random() < 0.15:  # kill while the worker opens the chat (repair, checkpoint)
            until = time.monotonic() + rng.uniform(0, 0.004)
        else:
            server.wait_for("ready", lines)
            until = time.monotonic() + rng.uniform(0, 0.030)
        while time.monotonic() < until:
            lines += server.lines(until)
        os.kill(pid, signal.SIGKILL)
        kills += 1
        in_open += not any("ready" in line for line in lines)
        server.wait_for("reaped", lines)
        ops = [line for line in lines if "op" in line]
        for line in ops:
            acked.take(line)
        if ops:
            start = ops[-1]["op"]  # redo the last acknowledged operation: keys must hold
        if any("ready" in line for line in lines):
            in_flight[_kind_of(start + 1 if ops else start)] += 1
        torn = rng.random() < 0.1
        if torn:
            _tear(chat, rng)
        with ChatStore.open(chat, create=True) as store:  # a kill may come mid-creation
            natural_torn += len(store.repairs) - torn
            acked.verify(store, rng)
            store.check()
    server.close()
    with ChatStore.open(chat, writer=False) as store:
        acked.verify(store, rng, everything=True)
        counts = store.check()
    assert kills >= 200 and counts["messages"] > 500 and len(acked.merges) > 20
    assert len(acked.nodes) > 100 and counts["repaired"] >= 10 and in_open >= 5
    assert min(in_flight.values()) >= 5, in_flight
    print(f"kills={kills} while opening={in_open} during={in_flight} "
          f"torn by the kill={natural_torn} {counts}")
