"""Transport benchmark: ask round trips and one-way throughput, ours beside a bare echo.

    python tools/bench/bench_transport.py [--rounds 5] [--n 2000] [--oneway 50000]

Prints one JSON line per figure:
- `rtt_inproc`, `rtt_ipc`, `rtt_tcp`: p50 and p99 of `node.ask(Ping)` -> Pong round trips
  (ours), beside a bare pyzmq + msgpack DEALER/ROUTER echo of the same frames measured in
  the same run (inproc: a bare echo thread; ipc and tcp: a bare echo process; tcp bare uses
  CURVE like ours, `bare_plain_*` is tcp without CURVE). Rounds of ours and bare alternate,
  so both see the same machine load. `ratio_p50` = ours / bare.
- `oneway_ipc`: messages per second for `node.tell(Built)` to an actor in another process
  (measured until an ask sent after the last tell is answered: every tell was handled),
  beside a bare DEALER -> ROUTER stream of the same frames.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgpack
import zmq

from everchat.transport import Actor, KeyStore, Node, schema

PAYLOAD = b"x" * 16


class Echo(Actor):
    mailbox_size = 10_000

    def __init__(self) -> None:
        super().__init__()
        self.built = 0

    def on_ping(self, msg: schema.Ping, delivery) -> schema.Pong:
        return schema.Pong(msg.payload)

    def on_built(self, msg: schema.Built, delivery) -> None:
        self.built += 1

    def on_stats_request(self, msg, delivery) -> schema.StatsReply:
        return schema.StatsReply([{"built": self.built}])


# ---- servers (child processes) ----

def serve_bare(endpoint: str, secret: str | None) -> None:
    """A bare echo: decode the body, encode it again, send it back."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    if secret:
        router.curve_server = True
        router.curve_secretkey = secret.encode()
    router.bind(endpoint)
    print(router.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)
    counted = 0
    while True:
        identity, header, body = router.recv_multipart()
        if header == b"count":               # one-way stream: count, answer after the last
            schema.decode(body)
            counted += 1
            continue
        if header == b"last":
            router.send_multipart([identity, header, str(counted).encode()])
            counted = 0
            continue
        router.send_multipart([identity, header, msgpack.packb(msgpack.unpackb(body))])


def serve_ours(bind: str, config: str | None) -> None:
    keys = KeyStore(config) if config else None
    node = Node("bench-server", bind=bind, keys=keys).start()
    node.host("echo", Echo)
    print(node.endpoint, flush=True)
    sys.stdin.read()                         # until the parent closes our stdin
    node.stop()


def spawn(*args: str) -> tuple[subprocess.Popen, str]:
    child = subprocess.Popen([sys.executable, __file__, "--serve", *args], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    return child, child.stdout.readline().strip()


# ---- clients ----

def bare_client(ctx: zmq.Context, endpoint: str, server_key: bytes | None = None) -> zmq.Socket:
    dealer = ctx.socket(zmq.DEALER)
    if server_key:
        public, secret = zmq.curve_keypair()
        dealer.curve_serverkey, dealer.curve_publickey, dealer.curve_secretkey = server_key, public, secret
    dealer.connect(endpoint)
    return dealer


def bare_round(dealer: zmq.Socket, n: int) -> list[float]:
    header = msgpack.packb([2, 1, "echo", "bench", 0.0])
    body = schema.encode(schema.Ping(PAYLOAD))
    times = []
    for _ in range(n):
        start = time.perf_counter()
        dealer.send_multipart([header, body])
        schema.decode(dealer.recv_multipart()[1])
        times.append(time.perf_counter() - start)
    return times


def ours_round(node: Node, n: int) -> list[float]:
    ping = schema.Ping(PAYLOAD)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        node.ask("echo", ping, 5.0)
        times.append(time.perf_counter() - start)
    return times


def percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return (round(ordered[len(ordered) // 2] * 1e6, 1), round(ordered[int(len(ordered) * 0.99)] * 1e6, 1))


def compare(name: str, rounds: int, n: int, ours, bare, extra: dict | None = None) -> dict:
    ours(200), bare(200)                      # warm up: connections, caches
    ours_times: list[float] = []
    bare_times: list[float] = []
    for _ in range(rounds):
        ours_times += ours(n)
        bare_times += bare(n)
    o50, o99 = percentiles(ours_times)
    b50, b99 = percentiles(bare_times)
    line = {"figure": f"rtt_{name}", "ours_p50_us": o50, "ours_p99_us": o99, "bare_p50_us": b50,
            "bare_p99_us": b99, "ratio_p50": round(o50 / b50, 2), "samples": len(ours_times)}
    line.update(extra or {})
    print(json.dumps(line), flush=True)
    return line


def bench_inproc(rounds: int, n: int) -> None:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://bare-echo")

    def echo() -> None:
        while True:
            frames = router.recv_multipart()
            if frames[1] == b"stop":
                return
            router.send_multipart([frames[0], frames[1], msgpack.packb(msgpack.unpackb(frames[2]))])

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    dealer = bare_client(ctx, "inproc://bare-echo")
    with Node("bench-client") as node:
        node.host("echo", Echo)
        compare("inproc", rounds, n, lambda k: ours_round(node, k), lambda k: bare_round(dealer, k))
    dealer.send_multipart([b"stop", b""])
    thread.join()
    dealer.close()
    router.close()
    ctx.term()


def bench_ipc(rounds: int, n: int, oneway: int, folder: Path) -> None:
    bare, bare_ep = spawn("bare", f"ipc://{folder}/bare")
    ours, ours_ep = spawn("ours", f"ipc://{folder}/ours")
    ctx = zmq.Context()
    dealer = bare_client(ctx, bare_ep)
    try:
        with Node("bench-client") as node:
            node.route("echo", ours_ep)
            compare("ipc", rounds, n, lambda k: ours_round(node, k), lambda k: bare_round(dealer, k))
            print(json.dumps({"figure": "oneway_ipc", "ours_msgs_per_s": oneway_ours(node, oneway),
                              "bare_msgs_per_s": oneway_bare(dealer, oneway), "messages": oneway}), flush=True)
    finally:
        dealer.close(0)
        ctx.term()
        stop(bare, ours)


def oneway_ours(node: Node, count: int) -> int:
    node.ask("echo", schema.Ping(b""), 5.0)
    before = node.ask("echo", schema.StatsRequest(), 5.0).actors[0]["built"]
    start = time.perf_counter()
    for i in range(count):
        node.tell("echo", schema.Built(1, i, "x" * 16, "bench"))
    after = node.ask("echo", schema.StatsRequest(), 60.0).actors[0]["built"]
    elapsed = time.perf_counter() - start
    assert after - before == count, (before, after)
    return int(count / elapsed)


def oneway_bare(dealer: zmq.Socket, count: int) -> int:
    body = schema.encode(schema.Built(1, 0, "x" * 16, "bench"))
    start = time.perf_counter()
    for _ in range(count):
        dealer.send_multipart([b"count", body])
    dealer.send_multipart([b"last", b""])
    counted = int(dealer.recv_multipart()[1])
    elapsed = time.perf_counter() - start
    assert counted == count, counted
    return int(count / elapsed)


def bench_tcp(rounds: int, n: int, folder: Path) -> None:
    public, secret = zmq.curve_keypair()
    bare, bare_ep = spawn("bare", "tcp://127.0.0.1:0", secret.decode())
    plain, plain_ep = spawn("bare", "tcp://127.0.0.1:0")
    ours, ours_ep = spawn("ours", "tcp://127.0.0.1:0", str(folder / "config"))
    ctx = zmq.Context()
    dealer = bare_client(ctx, bare_ep, public)
    plain_dealer = bare_client(ctx, plain_ep)
    try:
        with Node("bench-client", keys=KeyStore(folder / "config")) as node:
            node.route("echo", ours_ep)
            bare_round(plain_dealer, 200)
            p50, p99 = percentiles(sum((bare_round(plain_dealer, n) for _ in range(rounds)), []))
            compare("tcp", rounds, n, lambda k: ours_round(node, k), lambda k: bare_round(dealer, k),
                    {"bare_plain_p50_us": p50, "bare_plain_p99_us": p99})
    finally:
        dealer.close(0)
        plain_dealer.close(0)
        ctx.term()
        stop(bare, plain, ours)


def stop(*children: subprocess.Popen) -> None:
    for child in children:
        child.stdin.close()
        if child.args[3] == "bare":
            child.kill()
        child.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=2000, help="round trips per round")
    parser.add_argument("--oneway", type=int, default=50_000, help="messages in the one-way run")
    parser.add_argument("--only", choices=["inproc", "ipc", "tcp"])
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        kind, endpoint, *rest = args.serve
        return serve_bare(endpoint, rest[0] if rest else None) if kind == "bare" else serve_ours(
            endpoint, rest[0] if rest else None)
    with tempfile.TemporaryDirectory(prefix="everchat-bench-") as tmp:
        folder = Path(tmp)
        if args.only in (None, "inproc"):
            bench_inproc(args.rounds, args.n)
        if args.only in (None, "ipc"):
            bench_ipc(args.rounds, args.n, args.oneway, folder)
        if args.only in (None, "tcp"):
            bench_tcp(args.rounds, args.n, folder)
    os.sys.stdout.flush()


if __name__ == "__main__":
    main()
