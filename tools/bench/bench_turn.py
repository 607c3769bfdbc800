"""Turn overhead: from the person's input to the first byte of the model request on the wire.

A chat whose view is settled and about `--view-bytes` (default 100 KB) of built lines
(short notes, each its own free leaf) runs `--turns` turns against the fake model server
(in this process, answering at once). Each turn's overhead is the time from just before
`ChatSession.send` (the previous turn's messages planned and saved) to the moment the fake server took the request (`Exchange.started`,
the same monotonic clock): the settle ask, logging the message (one fsync), the request's
assembly and the SDK's HTTP send. One JSON line per figure (p50, p99, mean), also for the
time `send` took to return (the message logged) and for the turn's whole round trip.

    python tools/bench/bench_turn.py [--view-bytes 100000] [--turns 200] [--provider anthropic|openai]
                                     [--placement single|processes]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

__all__ = ["main", "run"]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _emit(figure: str, values_ms: list[float], **extra) -> None:
    for name, value in (("p50", _percentile(values_ms, 0.5)), ("p99", _percentile(values_ms, 0.99)),
                        ("mean", statistics.fmean(values_ms))):
        print(json.dumps({"bench": "turn", "figure": f"{figure}_{name}_ms", "value": round(value, 3), **extra}),
              flush=True)


def run(view_bytes: int, turns: int, provider: str, placement_mode: str, home: Path) -> None:
    from everchat.actors.settings import load
    from everchat.actors.session.session import ChatSession
    from everchat.actors.supervisor.actor import Placement
    from everchat.tools.fakemodel import FakeModelServer, Reply, Text
    from everchat.transport import schema

    with FakeModelServer(record_bodies=False) as server:
        server.rule(lambda request: Reply(Text("ok")))
        key = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
        url = server.base_url if provider == "anthropic" else server.openai_base_url
        os.environ.update({key: "test-key", "EVERCHAT_HOME": str(home)})
        for role in ("REPLY", "COMPACTION"):
            os.environ.update({f"EVERCHAT_{role}_PROVIDER": provider, f"EVERCHAT_{role}_BASE_URL": url,
                               f"EVERCHAT_{role}_MODEL": "bench"})
        settings = load()
        placement = Placement(placement_mode, workers=2)
        with ChatSession.open(settings, placement=placement) as session:
            n = 0
            while session.status()["view_bytes"] < view_bytes:
                session.note(f"note {n}: " + " ".join(f"word{n}-{k}" for k in range(40)))  # ~400 bytes, free
                n += 1
            session.compact(timeout=60)
            size = session.status()["view_bytes"]
            overhead, logged, whole = [], [], []
            for k in range(turns):
                # Untimed: the last turn's messages are planned and saved (the planner answers
                # after its mailbox's Logged), as when a person reads before typing again.
                session.status()
                seen = len(server.requests)
                began = time.monotonic()
                turn = session.send(f"Turn {k}: how are you?")
                returned = time.monotonic()
                while True:
                    event = session.next_event(timeout=30)
                    if event is None:
                        raise TimeoutError(f"turn {turn} did not end")
                    if isinstance(event, schema.TurnEnded) and event.turn == turn:
                        break
                ended = time.monotonic()
                # compactions of the tree above the view go on meanwhile (R31); the turn's is the one
                (exchange,) = [x for x in server.requests[seen:] if x.headers.get("x-everchat-call") == "turn"]
                overhead.append((exchange.started - began) * 1000)
                logged.append((returned - began) * 1000)
                whole.append((ended - began) * 1000)
            extra = {"view_bytes": size, "turns": turns, "provider": provider, "placement": placement_mode}
            _emit("input_to_request", overhead, **extra)
            _emit("send_returned", logged, **extra)
            _emit("whole_turn", whole, **extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--view-bytes", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--provider", choices=["anthropic", "openai"], default="anthropic")
    parser.add_argument("--placement", choices=["single", "processes"], default="single")
    args = parser.parse_args(argv)
    for name in ("EVERCHAT_CONFIG", "EVERCHAT_DEMO"):
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="everchat-bench-turn-") as home:
        run(args.view_bytes, args.turns, args.provider, args.placement, Path(home))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
