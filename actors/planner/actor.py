"""The planner actor: the view, the compaction view and the work queues (R13-R33).

A thin shell around `Planning`, whose store is a proxy that asks the log writer.
It plans each message the log writer announces, hands build jobs to compactor
workers that pull them (never found by scanning, R32), records their results, and
answers the waits of turns (`SettleView`, R36) and of tests (`PoolIdle`).

A failure to save (the log writer is gone) is not papered over: the handler
raises, the actor stops, and the supervisor restarts it; the new planner recovers
from the chat folder (R22, R24) exactly as after a crash.

R30's failure counts outlive a planner restart: they ride in compaction-view.json,
the planner's own derived file (the store keeps its contents opaque), as
`"failures": [[l, i, n], ...]` (n failed calls of node (l, i), 1 … FAILURE_CAP - 1),
absent when no node has failed. The proxy adds them to every SaveViews, and a
failure that is not the last one saves the views at once, so a restarted planner
reads the count back (`failure_counts`) and the third failed call of a node is the
third of the chat, not of this run. Losing the file costs at most a few more calls:
it is refitted from the view without counts (R24).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, replace

from everchat.actors.tree import Budget, key_of, name, node_of
from everchat.actors.compactor.compaction import FAILURE_CAP, fallback_line
from everchat.actors.planner.planning import Planning
from everchat.actors.planner.prefix_gate import PrefixGate, prefix_chain
from everchat.transport import Actor, ActorStopped, TransportError, schema

__all__ = ["PlannerActor", "StoreProxy", "failure_counts"]

log = logging.getLogger("everchat.planner")

_ASK_SECONDS = 30.0
_TOP_LEVEL = 62  # a level's node spans 2**l messages: nothing above fits a 64-bit key (R10)
_RETRY_SECONDS = 10.0
_IDLE_WORKER_SECONDS = 15.0
"""A worker waiting longer than this gets `NoJob` and asks again, so no reply ever
lands near its ask's deadline (a late reply would be dropped with the job in it)."""


class StoreProxy:
    """The log store's methods that `Planning` uses, as asks to the log writer."""

    def __init__(self, node, log_writer: str, state: schema.ChatState, broken=lambda error: None,
                 failures: dict[int, int] | None = None) -> None:
        self._node = node  # not `node`: that is the store's method reading a tree node
        self.log_writer = log_writer
        self.state = state
        self.broken = broken
        self.failures = failures if failures is not None else {}  # R30's counts, saved with the views
        self.path = f"<log writer {log_writer}>"

    def _ask(self, msg):
        try:
            return self._node.ask(self.log_writer, msg, timeout=_ASK_SECONDS)
        except TransportError as error:
            # The planner's memory is now ahead of the disk: stop, and let the supervisor
            # restart it; the new planner recovers from the folder (R22, R24).
            self.broken(error)
            raise

    @property
    def message_count(self) -> int:
        return self.state.messages

    def load_views(self):
        return self.state.view, self.state.cview

    @property
    def merge_count(self) -> int:
        return self.state.first + len(self.state.records)

    def first_merge_after(self, t: int) -> int:
        return self.state.first  # the log writer already chose them (planning.records_after)

    def merge_records(self, after_t: int = -1, *, first: int | None = None):
        if first != self.state.first:
            raise ValueError(f"the log writer sent the merge records from {self.state.first}, not {first}")
        return self.state.records

    def message_line(self, i: int) -> str:
        record = self._ask(schema.ReadMessage(i=i))
        return f"{record.kind}: {record.text}"

    def message(self, i: int):
        return self._ask(schema.ReadMessage(i=i))

    def node(self, l: int, i: int) -> str | None:
        return self._ask(schema.ReadNodes(nodes=[(l, i)])).texts[0]

    def append_nodes(self, nodes) -> None:
        self._ask(schema.SaveNodes(nodes=[(l, i, text) for l, i, text in nodes]))

    def append_merge(self, merges, t: int, still_open: bool) -> None:
        self._ask(schema.SaveMerge(merges=[(l, i) for l, i in merges], t=t, open=still_open))

    def save_views(self, view: dict, cview: dict) -> None:
        if self.failures:  # R30: the counts go with the compaction view (see the module docstring)
            cview = dict(cview, failures=[[*node_of(key), n] for key, n in sorted(self.failures.items())])
        self._ask(schema.SaveViews(view=view, cview=cview))


def failure_counts(cview: dict | None) -> dict[int, int]:
    """R30: the failed calls per node saved in compaction-view.json (empty when none are).
    Derived data: an entry that is not `[l, i, n]` with 1 <= n < FAILURE_CAP is dropped,
    with a warning, and that node counts from zero again."""
    counts: dict[int, int] = {}
    entries = cview.get("failures", []) if isinstance(cview, dict) else []
    for entry in entries if isinstance(entries, list) else [entries]:
        if (isinstance(entry, list) and len(entry) == 3 and all(type(x) is int for x in entry)
                and 0 <= entry[0] <= _TOP_LEVEL and entry[1] >= 0 and 1 <= entry[2] < FAILURE_CAP):
            counts[key_of(entry[0], entry[1])] = entry[2]
        else:
            log.warning("compaction-view.json: a failure count that is not [l, i, n] (R30): %r; dropped", entry)
    return counts


@dataclass
class _Waiter:
    delivery: object
    since: float  # when it came (monotonic seconds)
    until: int = 0
    timeout: float = 0.0
    first: int = 0  # the first message whose line it waits for (SettleView.since)


class PlannerActor(Actor):
    """Plans messages and hands out build jobs; handlers run in the actor's thread."""

    def __init__(self, budget: Budget | None = None, log_writer: str = "log_writer", gate: str | None = None) -> None:
        super().__init__()
        # R23: one writer per new prefix; the policy from EVERCHAT_PREFIX_GATE (actors/planner/prefix_gate.py)
        self.gate = PrefixGate(gate or os.environ.get("EVERCHAT_PREFIX_GATE") or "reread")
        self.backlog_waiters: list[tuple[int, object]] = []  # WaitBacklog asks: (at_most, delivery)
        self.budget = budget or Budget()
        self.log_writer = log_writer
        self.planning: Planning | None = None
        self.queue: deque[int] = deque()  # started jobs not yet handed to a worker
        self.assigned: dict[int, str] = {}  # job key -> worker
        self.failures: dict[int, int] = {}  # failed calls per node (R30), saved with the views
        self.workers: deque[_Waiter] = deque()  # NextJob asks waiting for work
        self.idle_waiters: list[_Waiter] = []
        self.settle_waiters: list[_Waiter] = []
        self._ticker: threading.Timer | None = None
        self.last_retry = 0.0

    def on_start(self) -> None:
        """Runs in the actor's thread: recover from the log writer's saved state.

        If the log writer cannot be reached the start fails and the supervisor
        restarts this actor later."""
        super().on_start()
        state = self.node.ask(self.log_writer, schema.LoadState(), timeout=_ASK_SECONDS)
        self.failures = failure_counts(state.cview)
        proxy = StoreProxy(self.node, self.log_writer, state, self._broken, self.failures)
        self.planning = Planning.recover(proxy, self.budget, verify=False)  # the log writer checked at open (R24)
        # Messages planned during the recovery started jobs too, and nothing is handed
        # out yet: every running job goes to the queue, in the order it started.
        self.planning.start_all()
        self._dispatch(list(self.planning.planner.running))
        self._tick()

    def _broken(self, error: Exception) -> None:
        if isinstance(error, ActorStopped) and self.stop_asked:
            # The chat is closing and the log writer with it: what was not saved is
            # planned again by the next run (R22, R24), so this is no failure (P10).
            log.info("%s: not saved, the chat is closing (%s)", self, error)
            return
        log.error("%s: the log writer failed (%s); stopping so the supervisor restarts me", self, error)
        self.actor_ref.stop(block=False)

    def on_stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        super().on_stop()

    def _tick(self) -> None:
        self._ticker = threading.Timer(1.0, self._tell_tick)
        self._ticker.daemon = True
        self._ticker.start()

    def _tell_tick(self) -> None:
        """Runs in the timer's thread; a timer that fires after we stopped finds no one."""
        try:
            self.node.tell(self.name, schema.Tick())
        except TransportError as error:
            log.info("%s: no tick (%s)", self, error)

    # -- messages ---------------------------------------------------------------------

    def on_logged(self, msg: schema.Logged, delivery) -> None:
        """Plans the messages the log writer announces. A notice that does not continue
        this planner's count (one it already planned after a restart, or a forged one that
        skips ahead) plans nothing from its lines: the count is asked of the log instead."""
        if delivery.sender != self.log_writer:
            log.warning("%s: ignored a Logged notice from %s (only %s logs)", self, delivery.sender, self.log_writer)
            if delivery.is_ask:
                raise ValueError(f"only {self.log_writer} announces logged messages, not {delivery.sender}")
            return
        planning = self.planning
        count = planning.planner.messages
        if msg.first > count:
            self._catch_up()
        elif msg.first + len(msg.lines) > count:
            planning.store.state = _advanced(planning.store.state, msg.first + len(msg.lines))
            lines = {msg.first + n: line for n, line in enumerate(msg.lines) if msg.first + n >= count}
            for step in planning.plan(list(lines), lines):
                self._dispatch(step.started)
        self._answer_idle()
        return schema.Ack() if delivery.is_ask else None

    def _running_key(self, l: int, i: int, delivery, what: str) -> int | None:
        """The key of a result's node when that node is being built; None (or, for an ask,
        ValueError) when it is not: a retried job's late twin, or a result nobody asked for."""
        if not (0 <= l <= _TOP_LEVEL and i >= 0):
            raise ValueError(f"{what} for node ({l}, {i}): no such node can exist (R10)")
        key = key_of(l, i)
        if key in self.planning.planner.running:
            return key
        if delivery.is_ask:
            raise ValueError(f"{what} for {name(key)}: that node is not being built")
        log.info("%s: dropped %s for %s from %s: not running (a retried job)", self, what, name(key), delivery.sender)
        return None

    def on_built(self, msg: schema.Built, delivery) -> None:
        """A worker built a node: saved, announced, then planned on (the jobs it starts,
        the waits it ends). Also while the chat closes (P10): the announcement is then a
        no-op of the stopping node, never an error that leaves the planning undone."""
        key = self._running_key(msg.l, msg.i, delivery, "a result")
        if key is None:
            return
        self.gate.started(key, time.monotonic())  # a built job's response surely started (R23)
        self._release(key)
        self.failures.pop(key, None)
        step = self.planning.built(key, msg.text)
        self.node.publish("built", schema.NodeBuilt(l=msg.l, i=msg.i))
        self._dispatch(step.started)
        self._answer_settled()
        self._answer_idle()
        return schema.Ack() if delivery.is_ask else None

    def on_build_failed(self, msg: schema.BuildFailed, delivery) -> None:
        """R30: a failed call is tried again at the next message; the third failure
        builds the node from its own input cut to 512 bytes, so nothing stalls."""
        key = self._running_key(msg.l, msg.i, delivery, "a failure")
        if key is None:
            return
        self._release(key)
        failures = self.failures[key] = self.failures.get(key, 0) + 1
        log.warning("%s: building %s failed on %s (%d of %d): %s", self, name(key), msg.worker, failures,
                    FAILURE_CAP, msg.reason)
        self.node.publish("failed", schema.CompactionFailed(l=msg.l, i=msg.i, reason=msg.reason, failures=failures))
        if failures >= FAILURE_CAP:
            line = fallback_line(self._job(key))
            del self.failures[key]
            step = self.planning.built(key, line)
            self.node.publish("built", schema.NodeBuilt(l=msg.l, i=msg.i))
        else:
            step = self.planning.failed(key)
            self.planning._save_views()  # the count outlives a restart (module docstring)
        self._dispatch(step.started)
        self._answer_settled()
        self._answer_idle()
        return schema.Ack() if delivery.is_ask else None

    def on_next_job(self, msg: schema.NextJob, delivery):
        self.workers.append(_Waiter(delivery, time.monotonic()))
        self._hand_out()
        return None  # answered later, with delivery.reply

    def on_planner_status(self, msg: schema.PlannerStatus, delivery) -> schema.PlannerState:
        """The figures and the view (or the compaction view, R21) as they stand, for `status`,
        `view` and the web page (never waits,
        never changes what starts, unlike SettleView)."""
        status = dict(self.planning.status(), queued=len(self.queue), workers_waiting=len(self.workers),
                      handed_out={name(key): worker for key, worker in sorted(self.assigned.items())})
        view = self.planning.render_compaction_view() if msg.compaction else self.planning.render_view()
        return schema.PlannerState(status=status, view=view)

    def on_pool_idle(self, msg: schema.PoolIdle, delivery):
        """Answered once no compaction runs, after planning every message logged so far
        (a notice lost while this planner restarted is caught up here)."""
        self._catch_up()
        self.idle_waiters.append(_Waiter(delivery, time.monotonic()))
        self._answer_idle()
        return None  # answered later, with delivery.reply

    def on_settle_view(self, msg: schema.SettleView, delivery):
        """R36: answer once every view line of messages `since` … `until` - 1 is built, or
        at the timeout with the unbuilt lines shown as their message cut to 512 bytes.

        Several waits at once (a turn and a `compact`) restrict the starts to the
        earliest one's lines (R31), so the turn that waits least is served first.

        A wait for the whole view (`since` 0: a turn, or `compact`) whose view is still
        over the ceiling once its lines are built waits for the merges that can fit it,
        then runs the batch R19 would run at the next message (`Planning.fit_now`) before
        it renders (issue 8). At the timeout the batch merges what is built. Whatever is
        left unbuilt, the text answered is `Planning.request_view`: at most the ceiling
        (issue 20, P2)."""
        self._catch_up()
        messages = self.planning.planner.messages
        if not 0 <= msg.until <= messages:
            raise ValueError(f"SettleView until {msg.until}: the chat has messages 0 ... {messages - 1}, "
                             f"so until must be 0 ... {messages}")
        if not 0 <= msg.since <= msg.until:
            raise ValueError(f"SettleView since {msg.since}: must be 0 ... until ({msg.until})")
        if not msg.timeout >= 0:
            raise ValueError(f"SettleView timeout {msg.timeout}: must be 0 or more seconds")
        self.settle_waiters.append(_Waiter(delivery, time.monotonic(), msg.until, msg.timeout, msg.since))
        self._answer_settled()
        return None  # answered later, with delivery.reply

    def on_fit_view(self, msg: schema.FitView, delivery) -> schema.Ack:
        """`compact` ends with the batch R19 would run at the next message (issue 8)."""
        self._catch_up()
        self._fit()
        return schema.Ack()

    def _fit(self) -> None:
        step = self.planning.fit_now()
        if step.batch:
            log.info("%s: fitted the view without a new message (merged %d)", self, len(step.merged))
        self._dispatch(step.started)

    def _answer_settled(self) -> None:
        planner = self.planning.planner
        now = time.monotonic()
        keep = []
        fit_wanted = False
        for waiter in self.settle_waiters:
            settled = planner.settled(waiter.until, waiter.first)
            timed_out = now - waiter.since >= waiter.timeout
            whole = waiter.first == 0
            if whole and settled and planner.over_ceiling():
                if planner.merging() and not timed_out:
                    keep.append(waiter)
                    fit_wanted = True
                    continue
                self._fit()
            elif whole and timed_out and planner.over_ceiling():
                self._fit()
            if settled or timed_out:
                waiter.delivery.reply(
                    schema.SettledView(
                        text=self.planning.request_view(fallback=not settled),
                        messages=planner.messages,
                        unbuilt=planner.unbuilt_between(waiter.first, waiter.until),
                    )
                )
            else:
                keep.append(waiter)
        self.settle_waiters = keep
        earliest = min((waiter.until for waiter in keep), default=-1)
        first = min((waiter.first for waiter in keep), default=0)
        if (earliest, first, fit_wanted) != (planner.waiting_for, planner.waiting_since, planner.fit_wanted):
            if earliest >= 0:
                self._dispatch(planner.wait_for(earliest, first, fit_wanted))
            else:
                self._dispatch(planner.stop_waiting())

    def on_actor_restarted(self, msg: schema.ActorRestarted, delivery) -> None:
        """A worker died: its jobs go back to the queue at once (they are still running)."""
        lost = [key for key, worker in self.assigned.items() if worker == msg.name]
        for key in lost:
            del self.assigned[key]
            self.gate.ended(key)
            self.queue.appendleft(key)
        if lost:
            log.warning("%s: %s restarted; handing out %s again", self, msg.name, [name(key) for key in lost])
        self._hand_out()
        return schema.Ack() if delivery.is_ask else None

    def on_tick(self, msg: schema.Tick, delivery) -> None:
        now = time.monotonic()
        while self.workers and now - self.workers[0].since > _IDLE_WORKER_SECONDS:
            self.workers.popleft().delivery.reply(schema.NoJob())
        if self.settle_waiters:
            # R30: while a turn waits, failed nodes are tried again every 10 seconds.
            if self.planning.planner.failed and now - self.last_retry >= _RETRY_SECONDS:
                self.last_retry = now
                self._dispatch(self.planning.planner.retry_failed())
            self._answer_settled()
        self._tick()

    def _catch_up(self) -> None:
        count = self.node.ask(self.log_writer, schema.CountMessages(), timeout=_ASK_SECONDS).messages
        if count > self.planning.planner.messages:
            missing = list(range(self.planning.planner.messages, count))
            log.info("%s: catching up with %d messages logged while no notice came", self, len(missing))
            self.planning.store.state = _advanced(self.planning.store.state, count)
            for step in self.planning.plan(missing):
                self._dispatch(step.started)

    # -- jobs ---------------------------------------------------------------------------

    def _dispatch(self, started: list[int]) -> None:
        self.queue.extend(started)
        self._hand_out()

    def _hand_out(self) -> None:
        while self.queue and self.workers:
            waiter = self.workers[0]
            if waiter.delivery.deadline is not None and waiter.delivery.deadline < time.monotonic() + 1.0:
                self.workers.popleft()
                continue  # about to expire: the worker asks again
            job = self._next_job()
            if job is None:
                break  # each queued job waits for a prefix another call is writing (R23)
            self.workers.popleft()
            key = key_of(job.l, job.i)
            self.assigned[key] = waiter.delivery.sender
            if not waiter.delivery.reply(job):
                # A told NextJob, or a worker that is gone: the job goes back first in line.
                del self.assigned[key]
                self.gate.ended(key)
                self.queue.appendleft(key)
        self._answer_backlog()

    def _next_job(self) -> schema.BuildJob | None:
        """The first queued job R23's prefix gate lets go, with the marks it chose: while a
        turn waits, the leaves it waits for first (R31, issue 9), then in start order."""
        now = time.monotonic()
        for key in self._turn_first():
            job = self._job(key)
            marks = self.gate.offer(key, prefix_chain(job.context), now)
            if marks is not None:
                self.queue.remove(key)
                return replace(job, mark=marks.view, closing=marks.closing)
        return None

    def _turn_first(self) -> list[int]:
        """The queue in hand-out order. The core starts only a waiting turn's leaves, but
        jobs it started before the turn came (merges, other leaves) may still wait for a
        worker: the turn's leaves go ahead of them, so the first free worker serves the
        person who waits (R31: leaves first while a turn waits)."""
        planner = self.planning.planner
        if planner.waiting_for < 0 or len(self.queue) < 2:
            return list(self.queue)
        first, until = planner.waiting_since, planner.waiting_for
        wanted = [key for key in self.queue if node_of(key)[0] == 0 and first <= node_of(key)[1] < until]
        return wanted + [key for key in self.queue if key not in wanted]

    def on_response_started(self, msg: schema.ResponseStarted, delivery) -> None:
        """R23: the first response of a job started, so the prefix it wrote is readable:
        jobs held for it go out now."""
        key = key_of(msg.l, msg.i)
        if self.assigned.get(key) != msg.worker:
            return  # a job lost with its worker and handed out again: the new call tells
        self.gate.started(key, time.monotonic())
        self._hand_out()
        return schema.Ack() if delivery.is_ask else None

    def on_wait_backlog(self, msg: schema.WaitBacklog, delivery):
        """A bulk import's flow control: answered (Idle) once at most `at_most` compactions
        are ready but not handed out, so the pool keeps up and contexts stay small (R27)."""
        self._catch_up()
        self.backlog_waiters.append((msg.at_most, delivery))
        self._answer_backlog()
        return None  # answered later, with delivery.reply

    def _answer_backlog(self) -> None:
        if not self.backlog_waiters:
            return
        planner = self.planning.planner
        backlog = len(planner.merge_queue) + len(planner.pending) + len(self.queue)
        keep = []
        for at_most, delivery in self.backlog_waiters:
            if backlog <= at_most:
                delivery.reply(schema.Idle(idle=not planner.running, running=len(planner.running), queued=backlog))
            else:
                keep.append((at_most, delivery))
        self.backlog_waiters = keep

    def _job(self, key: int) -> schema.BuildJob:
        l, i = node_of(key)
        return schema.BuildJob(
            l=l,
            i=i,
            context=self.planning.compaction_context(key),
            input=self.planning.compaction_input(key),
            attempt=self.failures.get(key, 0) + 1,
        )

    def _release(self, key: int) -> None:
        self.gate.ended(key)
        self.assigned.pop(key, None)
        if key in self.queue:
            self.queue.remove(key)

    def _answer_idle(self) -> None:
        if not self.idle_waiters:
            return
        planner = self.planning.planner
        if planner.running:
            return
        reply = schema.Idle(idle=True, running=0, queued=len(self.queue))
        for waiter in self.idle_waiters:
            waiter.delivery.reply(reply)
        self.idle_waiters.clear()


def _advanced(state: schema.ChatState, messages: int) -> schema.ChatState:
    """The proxy's message count after new messages were logged."""
    if messages <= state.messages:
        return state
    return schema.ChatState(messages=messages, view=state.view, cview=state.cview, records=[],
                            first=state.first + len(state.records))

