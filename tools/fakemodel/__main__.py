"""Run the fake model server by hand: ``python -m everchat.tools.fakemodel --port 8765``.

Prints the base URLs for the two SDKs and serves until interrupted. Every request
gets the default echo reply, or a fault at --fault-rate.
"""

from __future__ import annotations

import argparse
import logging
import threading

from ._replies import Latency, Overloaded, RateLimited, ServerError
from ._server import FakeModelServer

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m everchat.tools.fakemodel", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--api-key", action="append", dest="api_keys", metavar="KEY",
                        help="a key to accept (repeatable; default: test-key)")
    parser.add_argument("--any-key", action="store_true", help="accept any non-empty key")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before the first byte")
    parser.add_argument("--jitter", type=float, default=0.0, help="± seconds around --latency")
    parser.add_argument("--per-chunk", type=float, default=0.0, help="seconds before each streamed chunk")
    parser.add_argument("--fault-rate", type=float, default=0.0,
                        help="probability of each of 429, 500 and overloaded per request")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="log one line per request (never keys)")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    keys = None if args.any_key else tuple(args.api_keys or ["test-key"])
    latency = Latency.around(args.latency, args.jitter, args.per_chunk)
    server = FakeModelServer(args.host, args.port, api_keys=keys, latency=latency, seed=args.seed)
    for fault in (RateLimited(retry_after=1), ServerError(), Overloaded()):
        if args.fault_rate:
            server.inject(fault, args.fault_rate)
    with server:
        print(f"fake model server on {server.url}")
        print(f"  anthropic base_url: {server.base_url}")
        print(f"  openai base_url:    {server.openai_base_url}")
        print("  accepted keys: " + ("any" if keys is None else f"{len(keys)} configured"), flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
