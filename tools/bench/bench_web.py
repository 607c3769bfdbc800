"""The web page's speed (issue 10): a streamed delta's trip to the page, the page's load on a
big chat, and one turn watched by many pages.

Everything runs the real path: a `ChatSession` (single placement) over a chat folder, the
web server of docs/WEB.md (`make_app`, served on a thread at a free port, as `everchat web`
serves it) and the fake model server (Anthropic's wire) in this process; the pages are
elsewhere: WebSocket clients in a child process (aiohttp, one loop, standing in for pages)
and headless Chromium (`web_pages.py`) for the load and for real pages on a turn.

1. Delta latency. The fake model streams `--deltas` small text deltas (`w00042 `, one every
   `--gap` ms) and notes when it handed each to its socket (`Exchange.chunks_sent`); one
   client notes when each `text` event arrived. Both clocks are `time.monotonic()`
   (CLOCK_MONOTONIC, one clock for every process on Linux). The hub's half is told apart
   by noting when `ChatSession.next_event` handed the hub each `TurnText` (a thin wrapper
   around the session the hub reads, here, not in the server).
   The default gap (5 ms: 200 deltas a second, faster than models stream) keeps the
   pipeline below saturation: a delta costs this process about 0.8 ms of CPU (fake model
   and SDK included), so a 1 ms gap measures a backlog rather than a delta's trip.
2. Page load to interactive on a `--messages` chat (built once under `--dir` by
   `bench_open.make_chat`): Chromium with the session cookie already set opens `/`; ready
   is the first moment the chat panel shows, the composer is enabled and the newest
   message's row is in the list (`performance.now()`, from navigation start, noted by a
   MutationObserver the bench adds to the page). Also the bytes the page fetched over
   HTTP (Resource Timing's transferSize, headers included) and the messages its
   `/api/history` answers held once the network is idle, and, apart, how long the
   server takes to answer the page's first reads (`/api/me`, `/api/history`, `/api/status`).
3. `--clients` WebSocket clients on one streamed turn: each must get every delta once and
   in order (events numbered without a gap, the texts joined equal to the reply); the lag
   from the model's send to each client's receipt, and the CPU time the server spent on
   the turn (this process, and by threads: the web server's loop and the hub's two, the
   fake model's, the rest: the session's actors and the SDK), vs one client.
4. `--browsers` Chromium pages (the real page, its own socket) on turns of their own:
   each page must show the whole reply; the lag to the page's socket `message` event, and
   how much it grew from the turn's first tenth to its last (a page that cannot keep up
   falls behind). Their deltas come `--page-gap` ms apart (25: 40 a second, a fast model);
   on a loaded machine, 5 ms apart outran the page's rendering of each delta.

Each figure is one JSON line. Percentiles are per turn; a figure's value is the median
over `--turns` turns, with the minimum beside it.

    python tools/bench/bench_web.py [--deltas 1000] [--gap 5] [--turns 3] [--clients 20]
                                    [--browsers 2] [--page-gap 25] [--messages 100000] [--loads 15]
                                    [--dir /tmp/everchat-bench] [--skip stream|page]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from everchat.tools.bench import web_pages
from everchat.tools.bench.bench_open import make_chat
from everchat.tools.bench.bench_settle import percentile

__all__ = ["load_pages", "main", "stream_turns"]

_PIECE = re.compile(r"w(\d{5}) ")
_WEB_THREADS = ("everchat-web-server", "everchat-web-events", "everchat-web-status")


def _piece(k: int) -> str:
    return f"w{k:05d} "


def _indices(text: str) -> list[int]:
    return [int(k) for k in _PIECE.findall(text)]


# -- the server ------------------------------------------------------------------------


class _Stamped:
    """The session as the hub reads it: notes (monotonic time, text) of each `TurnText`
    as `next_event` hands it over; everything else is the session's own."""

    def __init__(self, session) -> None:
        self._session = session
        self.texts: list[tuple[float, str]] = []

    def __getattr__(self, name: str):
        return getattr(self._session, name)

    def next_event(self, timeout: float | None = None):
        from everchat.transport import schema

        event = self._session.next_event(timeout=timeout)
        if isinstance(event, schema.TurnText):
            self.texts.append((time.monotonic(), event.text))
        return event


@dataclass
class _Server:
    """A served chat: its session (and the wrapper the hub reads), port, the bench's
    session cookie and the web server's threads."""

    session: object
    stamped: _Stamped
    port: int
    cookie: str
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far: by the whole process, the web server's threads (its
        loop, the hub's two) and the fake model server's thread."""
        def used(threads) -> float:
            return sum(time.clock_gettime(time.pthread_getcpuclockid(t.ident)) for t in threads if t.is_alive())

        fake = [t for t in threading.enumerate() if t.name.startswith("fakemodel:")]
        return {"process": time.process_time(), "web": used(self.threads), "fakemodel": used(fake)}


@contextmanager
def _served(settings) -> Iterator[_Server]:
    """The chat of `settings` opened (single placement) and served on a free port, with a
    session cookie made for the bench's pages."""
    from everchat.actors.session.session import ChatSession
    from everchat.frontends.web import SessionStore, WebChat, WebConfig, load_token, make_app, start_in_thread

    home = Path(settings.home)
    home.mkdir(parents=True, exist_ok=True)
    store = SessionStore(home)
    with ChatSession.open(settings) as session:
        stamped = _Stamped(session)
        config = WebConfig(home=home, token=load_token(home), port=0, sessions=store)
        running = start_in_thread(make_app(session, settings, config, chat=WebChat(stamped)), "127.0.0.1", 0)
        try:
            cookie, _ = store.create("bench_web")
            threads = [t for t in threading.enumerate() if t.name in _WEB_THREADS]
            if sorted(t.name for t in threads) != sorted(_WEB_THREADS):  # their CPU would read as none
                raise RuntimeError(f"the web server's threads are not {_WEB_THREADS}: {threads}")
            yield _Server(session, stamped, running.port, cookie, threads)
        finally:
            running.stop()


# -- 1 and 3: deltas to many sockets -----------------------------------------------------


async def _listen(url: str, origin: str, cookie: str, clients: int) -> list[list]:
    """Child process: `clients` sockets; "ready" once every hello is in, then each socket's
    events (receipt time, id, type, text) until the turn's `ended`."""
    import aiohttp

    from everchat.frontends.web.auth import COOKIE

    async def collect(ws) -> list:
        got = []
        async for msg in ws:
            now = time.monotonic()
            event = json.loads(msg.data)
            got.append([now, event.get("id"), event["type"], event.get("text")])
            if event["type"] == "ended":
                break
        return got

    async with aiohttp.ClientSession() as http:
        sockets = [await http.ws_connect(url, origin=origin, headers={"Cookie": f"{COOKIE}={cookie}"})
                   for _ in range(clients)]
        hellos = [json.loads((await ws.receive(timeout=30)).data) for ws in sockets]
        assert all(hello["type"] == "hello" for hello in hellos), hellos
        print("ready", flush=True)
        results = await asyncio.gather(*(collect(ws) for ws in sockets))
        for ws in sockets:
            await ws.close()
    return [[hello["last"], events] for hello, events in zip(hellos, results)]


def _check_client(last: int, events: list, reply: str) -> tuple[bool, str]:
    """Every event after the hello once and in order (ids last+1, last+2, … without a
    gap) and the turn's text events joined equal to the reply."""
    ids = [event[1] for event in events]
    if ids != list(range(last + 1, last + 1 + len(ids))):
        return False, f"event ids not consecutive after {last}: {ids[:5]}…"
    text = "".join(event[3] for event in events if event[2] == "text")
    if text != reply:
        return False, f"the text differs from the reply ({len(text)} vs {len(reply)} characters)"
    return True, ""


def _listener_argv(server: _Server, clients: int) -> list[str]:
    """The listening child's command line. Values go as `--name=value`: a cookie is url-safe
    base64 and starts with `-` once in 64, which argparse would take for an option (exit 2)."""
    return [sys.executable, __file__, f"--listen=ws://127.0.0.1:{server.port}/api/events",
            f"--origin={server.origin}", f"--cookie={server.cookie}", f"--clients={clients}"]


def _one_turn(server: _Server, fake, clients: int, deltas: int, timeout: float,
              pages: web_pages.Watchers | None = None) -> dict:
    """One streamed turn watched by `clients` sockets (and `pages`, when given); its lags
    (ms), checks and CPU."""
    reply = "".join(_piece(k) for k in range(deltas))
    last_piece = _piece(deltas - 1).strip()
    child = subprocess.Popen(_listener_argv(server, clients), stdout=subprocess.PIPE, text=True)
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the clients did not connect (exit {child.wait(timeout)})")
        seen = len(fake.requests)
        server.stamped.texts.clear()
        if pages is not None:
            pages.arm(last_piece)
        before = server.cpu()
        server.session.send("stream please")
        out, _ = child.communicate(timeout=timeout)
        cpu = {group: used - before[group] for group, used in server.cpu().items()}
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    (exchange,) = [x for x in fake.requests[seen:] if x.headers.get("x-everchat-call") == "turn"]
    sent = exchange.chunks_sent
    hub = {}
    for at, text in list(server.stamped.texts):
        for k in _indices(text):
            hub.setdefault(k, at)
    lags, hub_lags, complete, problems = [], [], 0, []
    for last, events in json.loads(out):
        ok, why = _check_client(last, events, reply)
        complete += ok
        if why:
            problems.append(why)
        for at, _id, kind, text in events:
            if kind == "text":
                for k in _indices(text):
                    lags.append((at - sent[k]) * 1000)
                    hub_lags.append((at - hub[k]) * 1000)
    to_hub = [(hub[k] - sent[k]) * 1000 for k in hub if k < len(sent)]
    page_lags, pages_complete, growth = [], 0, []
    for watched in pages.collect(reply, last_piece) if pages is not None else []:
        pages_complete += watched["complete"]
        lags = [(at - sent[k]) * 1000 for at, text in watched["texts"] for k in _indices(text)]
        tenth = max(1, len(lags) // 10)
        growth.append(statistics.median(lags[-tenth:]) - statistics.median(lags[:tenth]))
        page_lags += lags
    return {"pages": len(pages.pages) if pages is not None else 0, "pages_complete": pages_complete,
            "page_lag": page_lags, "page_growth": max(growth, default=0.0),
            "clients": clients, "complete": complete, "problems": problems[:3], "deltas_sent": len(sent),
            "lag": lags, "hub_to_client": hub_lags, "model_to_hub": to_hub,
            "cpu_s": {**cpu, "session": cpu["process"] - cpu["web"] - cpu["fakemodel"]}}


def stream_turns(home: Path, clients: tuple[int, ...], deltas: int, gap_ms: float, turns: int,
                 browsers: int = 0, page_gap_ms: float = 25.0, timeout: float = 300.0) -> dict[int | str, list[dict]]:
    """`turns` streamed turns per client count, through the fake model server; then, with
    `browsers`, `turns` more, `page_gap_ms` between deltas, watched by one socket and that
    many Chromium pages ("pages")."""
    from everchat.actors.settings import load
    from everchat.tools.fakemodel import FakeModelServer, Latency, Reply, Text

    pieces = tuple(_piece(k) for k in range(deltas))
    gap = [gap_ms]
    with FakeModelServer(record_bodies=False) as fake:
        fake.rule(lambda request: Reply(Text("".join(pieces), chunks=pieces),
                                        latency=Latency(per_chunk=gap[0] / 1000)))
        settings = load({"reply_provider": "anthropic", "reply_base_url": fake.base_url, "reply_model": "bench",
                         "compaction_provider": "demo"}, env={"ANTHROPIC_API_KEY": "test-key"}, home=home)
        with _served(settings) as server:
            _one_turn(server, fake, 1, deltas, timeout)  # not counted: the SDK's client and imports warm up
            out: dict[int | str, list[dict]] = {
                n: [_one_turn(server, fake, n, deltas, timeout) for _ in range(turns)] for n in clients}
            with web_pages.watchers(server, browsers) as pages:
                if pages is not None:
                    gap[0] = page_gap_ms
                    out["pages"] = [_one_turn(server, fake, 1, deltas, timeout, pages) for _ in range(turns)]
            return out


# -- 2: the page's load -----------------------------------------------------------------

def load_pages(path: Path, home: Path, loads: int) -> dict:
    """The chat at `path` served (both models the demo) and opened `loads` times in
    Chromium (`web_pages.load_pages`); then the page's first reads timed alone."""
    from everchat.actors.settings import load

    settings = load({"demo": True, "data_dir": str(path)}, env={}, home=home)
    with _served(settings) as server:
        messages = server.session.status()["messages"]
        runs = web_pages.load_pages(server, loads)
        api = web_pages.time_api(server, loads)
    return {"messages": messages, "runs": runs, "api": api}


# -- the figures ------------------------------------------------------------------------


def _line(figure: str, values: list[float], what: str, **extra) -> dict:
    """A JSON line: the median over runs, the minimum and every run (rounded)."""
    return {"bench": "web", "figure": figure, "value": round(statistics.median(values), 3),
            "min": round(min(values), 3), "runs": [round(v, 3) for v in values], **extra, "what": what}


def _lag_lines(name: str, runs: list[dict], what: str, key: str = "lag", **extra) -> list[dict]:
    out = []
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        out.append(_line(f"{name}_{label}_ms", [percentile(run[key], q) for run in runs], what, **extra))
    return out


_CPU_GROUPS = (
    ("web", "the web server's threads (its loop, the hub's event and status threads)"),
    ("session", "the ChatSession (its actors, the turn runner, the SDK: the process but the web threads "
                "and the fake model's)"),
    ("fakemodel", "the fake model server's thread"),
    ("process", "the whole server process (the clients are elsewhere)"),
)


def figures(streams: dict[int | str, list[dict]], pages: dict | None, deltas: int, gap_ms: float,
            page_gap_ms: float = 25.0) -> list[dict]:
    """The JSON lines of a run."""
    lines = []
    one = streams.get(1)
    if one:
        common = {"deltas": deltas, "gap_ms": gap_ms, "turns": len(one)}
        lines += _lag_lines("delta_latency", one, "a text delta from the fake model server's socket write to one "
                            "WebSocket client's receipt (another process): SDK stream, turn runner, ChatSession "
                            "event, hub, aiohttp socket, loopback", target_p50_ms=5, **common)
        lines += _lag_lines("delta_hub_to_socket", one, "ChatSession.next_event handing the hub a TurnText to the "
                            "client's receipt of its text event: translate, JSON, ring, the loop's queue, "
                            "send, loopback", key="hub_to_client", **common)
        lines += _lag_lines("delta_model_to_hub", one, "the fake model server's socket write to "
                            "ChatSession.next_event handing the hub the TurnText", key="model_to_hub", **common)
    many = [n for n in streams if isinstance(n, int) and n > 1]
    for n in many:
        turns = streams[n]
        common = {"clients": n, "deltas": deltas, "gap_ms": gap_ms, "turns": len(turns)}
        lines += _lag_lines(f"delivery_lag_{n}_clients", turns, f"a text delta from the fake model server's "
                            f"socket write to each of {n} WebSocket clients' receipt (one child process, one "
                            "loop), over every client and delta", **common)
        lines.append({"bench": "web", "figure": f"clients_complete_{n}_clients",
                      "value": min(t["complete"] for t in turns), "of": n, "deltas_each": deltas,
                      "problems": [p for t in turns for p in t["problems"]][:3],
                      "what": "clients that got every event once, in order, and every delta of the reply "
                              "(worst turn)"})
        if one:
            for group, where in _CPU_GROUPS:
                base = statistics.median(t["cpu_s"][group] for t in one)
                with_n = statistics.median(t["cpu_s"][group] for t in turns)
                lines.append({"bench": "web", "figure": f"turn_cpu_s_{group}_{n}_vs_1_clients",
                              "value": round(with_n, 4), "one_client": round(base, 4),
                              "ratio": round(with_n / base, 2) if base else None, "deltas": deltas,
                              "per_delta_us": [round(base / deltas * 1e6, 1), round(with_n / deltas * 1e6, 1)],
                              "what": f"CPU seconds of {where} for one streamed turn (median of "
                                      f"{len(turns)}), {n} clients vs 1"})
    if one:
        lines.append({"bench": "web", "figure": "clients_complete_1_clients", "value": min(t["complete"] for t in one),
                      "of": 1, "deltas_each": deltas, "problems": [p for t in one for p in t["problems"]][:3],
                      "what": "the one client got every event once, in order, and every delta (worst turn)"})
    watched = streams.get("pages")
    if watched:
        count = watched[0]["pages"]
        lines += _lag_lines("page_delta_lag", watched, "a text delta from the fake model server's socket write to "
                            "real pages' receipt (headless Chromium, the page's own WebSocket message event; "
                            "the page stamps wall-clock time, converted), over every page and delta; growth_ms: "
                            "the lag's median in the turn's last tenth less its first (a backlog grows)",
                            key="page_lag", deltas=deltas, gap_ms=page_gap_ms, turns=len(watched),
                            growth_ms=round(statistics.median(t["page_growth"] for t in watched), 3))
        lines.append({"bench": "web", "figure": "pages_complete", "value": min(t["pages_complete"] for t in watched),
                      "of": count, "what": "Chromium pages whose newest reply row showed the whole reply, word for "
                                           "word, after the turn (worst turn)"})
    if pages is not None:
        runs = pages["runs"]
        ready = [r["ready_ms"] for r in runs]
        lines.append({**_line("page_ready_ms", ready, "Chromium (headless, fresh context, cookie set) from "
                              "navigation start to the chat shown with the composer enabled and the newest "
                              "message rendered (performance.now())", messages=pages["messages"],
                              loads=len(runs), target_ms=300),
                      "p90": round(percentile(ready, 0.9), 3)})
        lines.append(_line("page_history_answered_ms", [r["history_end_ms"] for r in runs], "of page_ready_ms: "
                           "navigation start to the end of the first /api/history answer (the rest is the page "
                           "rendering its first page of messages)", messages=pages["messages"]))
        lines.append(_line("page_modules_loaded_ms", [r["modules_end_ms"] for r in runs], "of page_ready_ms: "
                           "navigation start to the last of the page's script modules loaded (index.html, "
                           "app.js, then its imports)", messages=pages["messages"]))
        lines.append(_line("page_bytes_fetched", [r["transfer"] for r in runs], "bytes the page fetched over "
                           "HTTP until the network was idle (Resource Timing transferSize, headers included; "
                           "the WebSocket's frames not counted)", messages=pages["messages"],
                           requests=max(r["requests"] for r in runs)))
        for route, values in pages["api"].items():
            name = route.removeprefix("/api/").split("?")[0]
            lines.append({**_line(f"api_{name}_p50_ms", [percentile(values, 0.5)], f"GET {route} on the "
                                  f"{pages['messages']}-message chat, asked by a plain HTTP client (request to "
                                  "whole answer), one of the page's reads at its start",
                                  calls=len(values)), "p90": round(percentile(values, 0.9), 3)})
        lines.append({"bench": "web", "figure": "page_messages_fetched",
                      "value": max(r["messages_fetched"] for r in runs),
                      "history_requests": max(r["history_requests"] for r in runs), "messages": pages["messages"],
                      "what": "messages the page's /api/history answers held (most over the loads): a page, "
                              "never the whole chat"})
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=1000, help="text deltas in a streamed reply")
    parser.add_argument("--gap", type=float, default=5.0, help="milliseconds between deltas at the model")
    parser.add_argument("--turns", type=int, default=3, help="streamed turns per client count")
    parser.add_argument("--clients", type=int, default=20, help="sockets on one turn (besides the 1-socket run)")
    parser.add_argument("--browsers", type=int, default=2, help="Chromium pages on turns of their own")
    parser.add_argument("--page-gap", type=float, default=25.0,
                        help="milliseconds between deltas on the Chromium pages' turns")
    parser.add_argument("--messages", type=int, default=100_000, help="the page load's chat size")
    parser.add_argument("--loads", type=int, default=15, help="page loads measured")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/everchat-bench"))
    parser.add_argument("--skip", choices=["stream", "page"], action="append", default=[],
                        help="leave out the streamed turns, or everything Chromium does")
    parser.add_argument("--listen", help=argparse.SUPPRESS)
    parser.add_argument("--origin", help=argparse.SUPPRESS)
    parser.add_argument("--cookie", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.listen:
        print(json.dumps(asyncio.run(_listen(args.listen, args.origin, args.cookie, args.clients))), flush=True)
        return 0
    for name in ("EVERCHAT_CONFIG", "EVERCHAT_DEMO"):
        os.environ.pop(name, None)
    streams, pages = {}, None
    with tempfile.TemporaryDirectory(prefix="everchat-bench-web-") as scratch:
        if "stream" not in args.skip:
            counts = (1, args.clients) if args.clients > 1 else (1,)
            browsers = 0 if "page" in args.skip else args.browsers
            streams = stream_turns(Path(scratch) / "stream", counts, args.deltas, args.gap, args.turns, browsers,
                                   args.page_gap)
        if "page" not in args.skip:
            path = args.dir / f"web-chat-{args.messages}"
            if not (path / "view.json").exists():
                began = time.perf_counter()
                make_chat(path, args.messages)
                print(json.dumps({"bench": "web", "figure": "make_seconds",
                                  "value": round(time.perf_counter() - began, 1)}), flush=True)
            pages = load_pages(path, Path(scratch) / "page", args.loads)
    for line in figures(streams, pages, args.deltas, args.gap, args.page_gap):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
