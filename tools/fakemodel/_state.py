"""The server's memory: what to answer next, the cache, and the record of every request.

Shared between the event-loop thread (handlers) and the test's thread (setup and
inspection), so every method takes the one lock. Rules run outside it.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

from ._cache import CacheUsage, Clock, PerfectPrefix, PromptCache
from ._openai import cached_tokens
from ._record import CacheStats, Exchange
from ._replies import Fault, Latency, ModelRequest, Reply, Rule, as_reply
from ._tokens import PromptBlock

__all__ = ["ServerState", "echo_rule"]


def echo_rule(request: ModelRequest) -> Reply:
    """The default rule: a short answer that names the request and echoes the user's words."""
    said = " ".join(request.last_user_text.split())
    if len(said) > 60:
        said = said[:60] + "..."
    return Reply(f"fake reply #{request.exchange_id}: {said}" if said else f"fake reply #{request.exchange_id}")


@dataclass
class _Injection:
    fault: Fault
    probability: float
    rng: random.Random
    times: int | None  # None: without end


class ServerState:
    """Replies to give, faults to inject, the caches and the exchanges. Thread-safe."""

    def __init__(
        self,
        *,
        api_keys: Iterable[str] | None,
        models: Iterable[str] | None,
        latency: Latency,
        seed: int,
        clock: Clock,
        chunk_tokens: int,
        cache_ttl: float,
        cache_min_tokens: int,
        cache_lookback: int,
        record_bodies: bool = True,
    ) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.api_keys = frozenset(api_keys) if api_keys is not None else None
        self.models = tuple(models) if models is not None else None
        self.chunk_bytes = 4 * chunk_tokens
        self.record_bodies = record_bodies
        self.clock = clock
        self._seed = seed
        self._latency = latency
        self._cache_args = dict(ttl=cache_ttl, min_tokens=cache_min_tokens, lookback=cache_lookback)
        self._fresh()

    def _fresh(self) -> None:
        self._rng = random.Random(self._seed)
        self._script: deque[Reply | Fault] = deque()
        self._rule: Rule = echo_rule
        self._injections: list[_Injection] = []
        self.cache = PromptCache(self.clock, **self._cache_args)
        self._perfect = PerfectPrefix()
        self._exchanges: list[Exchange] = []
        self._errors: list[tuple[int, str]] = []

    def reset(self) -> None:
        """Forget script, rule, injections, latency draws, cache and records (not keys, models, latency)."""
        with self.lock:
            self._fresh()
            self.changed.notify_all()

    # --- setup, from the test's thread -----------------------------------------------

    def key_ok(self, key: str | None) -> bool:
        if not key:
            return False
        return self.api_keys is None or key in self.api_keys

    def model_ok(self, model: str) -> bool:
        return self.models is None or model in self.models

    def script(self, items: Sequence[Any]) -> None:
        replies = [as_reply(item) for item in items]
        with self.lock:
            self._script.extend(replies)

    def scripted_left(self) -> int:
        with self.lock:
            return len(self._script)

    def set_rule(self, rule: Rule | None) -> None:
        with self.lock:
            self._rule = rule or echo_rule

    def inject(self, fault: Fault, probability: float, seed: int | None, times: int | None) -> None:
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability {probability} is not within 0 … 1")
        rng = random.Random(self._seed if seed is None else seed)
        with self.lock:
            self._injections.append(_Injection(fault, probability, rng, times))

    def clear_injections(self) -> None:
        with self.lock:
            self._injections.clear()

    @property
    def latency(self) -> Latency:
        with self.lock:
            return self._latency

    @latency.setter
    def latency(self, value: Latency) -> None:
        with self.lock:
            self._latency = value

    # --- per request, from the loop thread -------------------------------------------

    def open_exchange(self, api: str, method: str, path: str, headers: dict[str, str]) -> Exchange:
        with self.lock:
            ex = Exchange(len(self._exchanges) + 1, api, method, path, headers, None, self.clock(), time.monotonic())
            self._exchanges.append(ex)
            self.changed.notify_all()
            return ex

    def choose(self) -> Reply | Fault | None:
        """The next scripted item, else an injected fault that fires, else None (use the rule)."""
        with self.lock:
            if self._script:
                return self._script.popleft()
            for injection in self._injections:
                if injection.times == 0:
                    continue
                if injection.rng.random() < injection.probability:
                    if injection.times is not None:
                        injection.times -= 1
                    return injection.fault
        return None

    def ask_rule(self, request: ModelRequest) -> Reply | Fault:
        with self.lock:
            rule = self._rule
        return as_reply(rule(request))

    def account(self, ex: Exchange, blocks: list[PromptBlock], marks: bool) -> CacheUsage:
        """The request's input accounting: by cache marks (Anthropic) or automatic (OpenAI)."""
        with self.lock:
            perfect = self._perfect.read(blocks)
            if marks:
                usage = self.cache.lookup(ex.id, blocks, perfect)
            else:
                total = sum(b.tokens for b in blocks)
                usage = CacheUsage.uncached(total, len(blocks), perfect, cached_tokens(perfect))
            ex.cache = usage
            self.changed.notify_all()
            return usage

    def draw(self, value: float | tuple[float, float]) -> float:
        if isinstance(value, tuple):
            low, high = value
            with self.lock:
                return max(0.0, self._rng.uniform(low, high))
        return max(0.0, value)

    def first_byte(self, ex: Exchange) -> None:
        with self.lock:
            ex.first_byte = time.monotonic()
            self.cache.commit(ex.id)
            self.changed.notify_all()

    def finish(self, ex: Exchange, status: int | None, outcome: str) -> None:
        with self.lock:
            if ex.first_byte is None:
                self.cache.abandon(ex.id)
            ex.status = status
            ex.outcome = outcome
            if not self.record_bodies:
                ex.body = None
            ex.ended = time.monotonic()
            self.changed.notify_all()

    def record_error(self, ex: Exchange, trace: str) -> None:
        with self.lock:
            ex.notes.append(trace)
            self._errors.append((ex.id, trace))

    # --- inspection, from any thread -------------------------------------------------

    def errors(self) -> list[tuple[int, str]]:
        with self.lock:
            return list(self._errors)

    def exchanges(self, where: Callable[[Exchange], bool] | None = None) -> list[Exchange]:
        """Copies of the exchanges so far (bodies shared, not copied)."""
        with self.lock:
            rows = [replace(e, notes=list(e.notes)) for e in self._exchanges]
        return [e for e in rows if where is None or where(e)]

    def stats(self, where: Callable[[Exchange], bool] | None = None) -> CacheStats:
        return CacheStats.of(self.exchanges(where))

    def wait_for(self, predicate: Callable[[list[Exchange]], bool], timeout: float) -> bool:
        """Block until `predicate(exchanges)` holds (True) or `timeout` passes (False)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self._exchanges):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return True
