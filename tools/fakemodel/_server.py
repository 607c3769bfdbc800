"""FakeModelServer: the aiohttp app on its own event loop in a background thread."""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from concurrent.futures import Future
from typing import Any, Callable, Iterable

from aiohttp import web

from ._app import make_app
from ._cache import Clock, monotonic_clock
from ._record import CacheStats, Exchange
from ._replies import Fault, Gate, Latency, Rule
from ._state import ServerState

__all__ = ["FakeModelServer"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class FakeModelServer:
    """A local stand-in for Anthropic's and OpenAI's APIs, for the official SDKs.

    Use as a context manager (or `start()` / `stop()`); it serves from a background
    thread with its own event loop, so synchronous code and SDK clients can call it::

        with FakeModelServer() as server:
            server.script("hello")
            client = anthropic.Anthropic(base_url=server.base_url, api_key="test-key")

    Replies come from the script queue (`script`), else from injected faults that
    fire (`inject`), else from the rule (`rule`; by default a short echo). Every
    request is recorded (`requests`), with its cache accounting (`cache_stats`).

    `api_keys`: keys accepted (None: any non-empty key). `models`: model names
    served (None: any; others get 404). `latency`: default `Latency` of replies.
    `seed`: seeds latency ranges and injections. `clock`: the cache's clock (a
    callable giving seconds; pass a `ManualClock` to move time by hand).
    `chunk_tokens`: tokens per streamed piece. The cache model's parameters:
    `cache_ttl`, `cache_min_tokens`, `cache_lookback` (Anthropic's: 300 s, 1,024,
    20). `record_bodies=False` drops each request's body from its record once it
    ends (long benchmarks; tell requests apart by a header of your own, e.g.
    ``extra_headers={"x-everchat-kind": "compaction"}``, which is recorded). Binds
    loopback addresses only.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        api_keys: Iterable[str] | None = ("test-key",),
        models: Iterable[str] | None = None,
        latency: Latency | None = None,
        seed: int = 0,
        clock: Clock | None = None,
        chunk_tokens: int = 4,
        cache_ttl: float = 300.0,
        cache_min_tokens: int = 1024,
        cache_lookback: int = 20,
        record_bodies: bool = True,
    ) -> None:
        if not _loopback(host):
            raise ValueError(f"the fake model server binds loopback addresses only, not {host!r}")
        if chunk_tokens < 1:
            raise ValueError("chunk_tokens must be at least 1")
        self.host = host
        self._port = port
        self._state = ServerState(
            api_keys=api_keys,
            models=models,
            latency=latency or Latency(),
            seed=seed,
            clock=clock or monotonic_clock,
            chunk_tokens=chunk_tokens,
            cache_ttl=cache_ttl,
            cache_min_tokens=cache_min_tokens,
            cache_lookback=cache_lookback,
            record_bodies=record_bodies,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        where = self.url if self._thread is not None else f"http://{self.host}:{self._port} (stopped)"
        return f"FakeModelServer({where})"

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeModelServer:
        """Start serving; returns once the socket listens (raises what startup raised)."""
        if self._thread is not None:
            raise RuntimeError(f"{self!r} is already running")
        ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name=f"fakemodel:{self._port}",
                                        daemon=True)
        self._thread.start()
        try:
            ready.result(timeout=30)
        except BaseException:
            self._thread.join(timeout=5)
            self._thread = None
            raise
        return self

    def _serve(self, ready: Future[None]) -> None:
        """Runs in the server's thread: the event loop until `stop()`."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._open())
        except BaseException as err:  # noqa: BLE001 - handed to start() to raise
            ready.set_exception(err)
            loop.close()
            return
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    async def _open(self) -> None:
        self._runner = web.AppRunner(make_app(self._state), shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._port)
        await site.start()
        self._port = self._runner.addresses[0][1]

    def stop(self) -> None:
        """Stop serving: cancel replies in flight (gated ones too), join the thread."""
        if self._thread is None or self._loop is None:
            return
        loop, runner = self._loop, self._runner
        if runner is not None:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=30)
        self._thread = None
        self._loop = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- addresses --------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    @property
    def base_url(self) -> str:
        """For `anthropic.Anthropic(base_url=...)`: the server's root."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """For `openai.OpenAI(base_url=...)`: the root plus ``/v1``."""
        return self.url + "/v1"

    # --- replies ----------------------------------------------------------------------

    def script(self, *replies: Any) -> FakeModelServer:
        """Queue replies, one per coming model request: a `Reply`, a block, a string or a `Fault`."""
        self._state.script(replies)
        return self

    @property
    def scripted_left(self) -> int:
        """Scripted replies not yet used."""
        return self._state.scripted_left()

    def rule(self, rule: Rule | None) -> FakeModelServer:
        """Answer with `rule(request)` when the script is empty (None: the default echo).

        The rule runs on the server's event loop: keep it quick and never block in it
        (hold a reply with a `Gate` instead). What it raises fails that request (see `errors`)."""
        self._state.set_rule(rule)
        return self

    def inject(self, fault: Fault, probability: float = 1.0, *, seed: int | None = None,
               times: int | None = None) -> FakeModelServer:
        """Fail requests with `fault` at `probability` (drawn from `seed`, default the server's),
        at most `times` times (None: without end). Checked in the order added, after the script."""
        self._state.inject(fault, probability, seed, times)
        return self

    def clear_injections(self) -> None:
        self._state.clear_injections()

    @property
    def latency(self) -> Latency:
        return self._state.latency

    @latency.setter
    def latency(self, value: Latency) -> None:
        self._state.latency = value

    def gate(self) -> Gate:
        """A closed gate for `Reply(..., gate=...)`: the reply waits before its first byte until
        `gate.open()`."""
        return Gate()

    # --- records ----------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        return self._state.clock

    @property
    def requests(self) -> list[Exchange]:
        """Every request so far, oldest first (copies)."""
        return self._state.exchanges()

    @property
    def model_calls(self) -> list[Exchange]:
        """The requests to the three model endpoints (not token counts or model lists)."""
        return self._state.exchanges(lambda e: e.is_model_call)

    @property
    def errors(self) -> list[tuple[int, str]]:
        """(exchange id, traceback) of every request the server itself failed (a broken rule,
        or a bug here); each was answered 500 and logged. A test fixture can assert it stays empty."""
        return self._state.errors()

    def cache_stats(self, where: Callable[[Exchange], bool] | None = None) -> CacheStats:
        """Input accounting summed over the requests `where` accepts (default: all)."""
        return self._state.stats(where)

    def wait_for_requests(self, count: int, timeout: float = 10.0, *, finished: bool = False) -> bool:
        """Block until `count` model calls arrived (or finished); False on timeout."""
        def enough(rows: list[Exchange]) -> bool:
            calls = [e for e in rows if e.is_model_call and (not finished or e.ended is not None)]
            return len(calls) >= count

        return self._state.wait_for(enough, timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every request so far has ended (its outcome recorded); False on timeout.

        A client can hold a whole response a moment before the server records how the
        request ended: wait for this before asserting on `outcome`, `status` or `ended`.
        """
        return self._state.wait_for(lambda rows: all(e.ended is not None for e in rows), timeout)

    def wait_until(self, predicate: Callable[[list[Exchange]], bool], timeout: float = 10.0) -> bool:
        """Block until `predicate(exchanges)` holds; False on timeout. The predicate sees the
        live records under the server's lock: read them, keep nothing."""
        return self._state.wait_for(predicate, timeout)

    def reset(self) -> None:
        """Forget script, rule, injections, cache entries and records."""
        self._state.reset()
