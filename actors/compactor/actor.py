"""Compactor workers: each builds one node at a time (R26-R31).

A worker pulls its next job from the planner (`NextJob`, answered when there is
work), builds the line with its summarizer, and tells the planner `Built` or
`BuildFailed`. When the first call's response starts it tells `ResponseStarted`,
so the planner's prefix gate (R23, actors/planner/prefix_gate.py) can hand out the jobs
that wait to read the prefix this call wrote. Up to 8 workers run (R31); the planner never starts more jobs than
that at once, whatever the number of workers. Workers hold no state that must
outlive them: a job lost with a dead worker is handed out again by the planner.

The summarizer is made in the worker's own thread (and process), from the chat's
settings: `"configured"` builds `compaction.Summarizer` over the configured
compaction model (R33; the offline demo when no key is set); `"scripted"` is
`scripted_summary`, a deterministic stand-in the placement tests use.

Each call's token usage, and each failed build, is told to the log writer
(`RecordUsage`, role "compactions"), which keeps them in usage.json (actors/folder/usage.py).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable

from everchat.actors.compactor.call_thread import CallThread, Cancelled
from everchat.actors.tree import LINE_LIMIT, cut_utf8
from everchat.actors.models import Connection
from everchat.actors.folder.usage import metered
from everchat.transport import Actor, ActorStopped, AskTimeout, PeerLost, Refused, TransportError, schema

__all__ = ["CompactorWorker", "configured_summarizer", "scripted_summary", "Summarizer"]

log = logging.getLogger("everchat.compactor")

Summarizer = Callable[[schema.BuildJob], str]

_PULL_SECONDS = 30.0


def configured_summarizer(on_usage: Callable | None = None, settings=None, extra_tools: tuple = ()) -> Summarizer:
    """The compaction model of the settings (R33), with the chat's one prompt (R26);
    `on_usage(usage)` runs for each call's `models.Usage`. `settings`: the session's (a
    worker in its process); None reads the session's from the environment the supervisor
    gave this process (`SETTINGS_ENV`, so `--demo` and the model flags reach the workers
    too), else the flag-less load. `extra_tools`: the `ToolSpec`s the turn runner offers
    after the memory tools, so compactions send the very tools turns send (R26, R45)."""
    from everchat.actors.compactor.compaction import Summarizer as ModelSummarizer
    from everchat.actors.prompt import chat_prompt
    from everchat.actors.turns.actor import configured_settings

    settings = settings if settings is not None else configured_settings()
    prompt = chat_prompt(settings, extra_tools)
    model = settings.compaction
    connection = model.connect()
    if on_usage is not None:
        connection = _Metered(connection, on_usage)
    return ModelSummarizer(connection, prompt, model=model.model, effort=model.effort)


class _Metered(Connection):
    """A connection whose calls' `Usage` also goes to `on_usage`."""

    def __init__(self, inner: Connection, on_usage: Callable) -> None:
        self.inner = inner
        self.provider = inner.provider
        self.on_usage = on_usage

    def __repr__(self) -> str:
        return repr(self.inner)

    def stream(self, request):
        return metered(self.inner.stream(request), self.on_usage)


def scripted_summary(job: schema.BuildJob) -> str:
    """A deterministic line for a job: the node's name, a digest of its input, and
    the input's first words, cut to 512 bytes (R29's final cut)."""
    body = " / ".join(part.split("|", 1)[-1] for part in job.input)
    digest = hashlib.sha256("\n".join(job.input).encode()).hexdigest()[:12]
    first = job.i << job.l
    return cut_utf8(f"[{first}+{1 << job.l} #{digest}] {body}".replace("\n", " "), LINE_LIMIT)


class CompactorWorker(Actor):
    """One compaction at a time; the handlers run in the worker's own thread."""

    def __init__(self, planner: str = "planner", summarizer: Summarizer | str = "configured",
                 log_writer: str = "log_writer", settings=None, extra_tools: tuple = ()) -> None:
        super().__init__()
        self.settings = settings  # the session's, for the configured summarizer (None: see configured_summarizer)
        self.extra_tools = tuple(extra_tools)  # the turn runner's ToolSpecs: one prompt for both (R26)
        self.planner = planner
        self.log_writer = log_writer
        self.summarizer = summarizer
        self._backoff = 0.0
        self._quiet = threading.Event()  # set when the worker stops: no more waiting
        self._calls = CallThread(self.name)  # the model call, which a stop does not wait for (P10)

    def on_start(self) -> None:
        """Runs in the worker's thread: make the summarizer, then start pulling. A
        configuration error (a provider without its key) fails the start loudly."""
        super().on_start()
        if self.summarizer == "scripted":
            self.summarizer = scripted_summary
        elif self.summarizer == "configured":
            self.summarizer = configured_summarizer(lambda usage: self._calls.post(schema.RecordUsage.of("compactions", usage)),
                                                    self.settings, self.extra_tools)
        self.node.tell(self.name, schema.PullWork())

    def on_pull_work(self, msg: schema.PullWork, delivery) -> None:
        try:
            job = self.node.ask(self.planner, schema.NextJob(worker=self.name), timeout=_PULL_SECONDS * 2,
                                interruptible=True)  # a stop does not wait for work to come
            self._backoff = 0.0
        except (AskTimeout, PeerLost, ActorStopped, Refused) as error:
            # The planner restarts, is stopping, or is busy: ask again a little later
            # (backing off up to a second, so a planner that is down costs nothing).
            self._backoff = min(1.0, self._backoff * 2 or 0.02)
            if self._backoff >= 1.0:
                log.info("%s: no job from %s (%s); asking again", self, self.planner, error)
            if self._quiet.wait(self._backoff):
                return
            job = None
        try:
            if isinstance(job, schema.BuildJob):
                self._build(job)
            self.node.tell(self.name, schema.PullWork())
        except ActorStopped:
            return  # this worker's node is stopping: no more pulls

    def on_stop_requested(self) -> None:
        """Runs in the thread that stops the worker (P10): the call in flight is given up
        at once (a model that never answers does not hold the chat's close), and no other
        starts. Its job stays unbuilt: the next run of the chat builds it."""
        self._quiet.set()
        self._calls.cancel()

    def on_stop(self) -> None:
        self._quiet.set()
        super().on_stop()

    def _build(self, job: schema.BuildJob) -> None:
        try:
            text = self._calls.run(lambda: self._summarize(job), self._posted)
        except Cancelled:
            log.info("%s: stopping; %d+%d is left for the next run", self, job.i << job.l, 1 << job.l)
            return
        except Exception as error:  # any failure of the model call is reported, never silent (R30)
            log.warning("%s: building %d+%d failed: %s", self, job.i << job.l, 1 << job.l, error)
            self.node.tell(self.planner, schema.BuildFailed(l=job.l, i=job.i, reason=str(error), worker=self.name))
            self._record(schema.RecordUsage.of("compactions", failures=1))
            return
        self.node.tell(self.planner, schema.Built(l=job.l, i=job.i, text=text, worker=self.name))

    def _summarize(self, job: schema.BuildJob) -> str:
        """In the call's thread (`CallThread`): what it tells goes through `_posted`."""
        if getattr(self.summarizer, "tells_start", False):
            return self.summarizer(job, started=lambda: self._calls.post(job))
        return self.summarizer(job)

    def _posted(self, item) -> None:
        """In the worker's thread: a usage report, or the job whose response started."""
        if isinstance(item, schema.BuildJob):
            self._started(item)
        else:
            self._record(item)

    def _record(self, usage: schema.RecordUsage) -> None:
        """Usage and failures to usage.json, through the log writer (figures only: a
        report that cannot leave is logged, and the work goes on)."""
        try:
            self.node.tell(self.log_writer, usage)
        except TransportError as error:
            log.warning("%s: usage not recorded: %s", self, error)

    def _started(self, job: schema.BuildJob) -> None:
        """R23: the job's first response started; the planner's prefix gate may now
        hand out jobs that mark the prefix it wrote (a summarizer that cannot tell
        lets its `Built` say it)."""
        self.node.tell(self.planner, schema.ResponseStarted(l=job.l, i=job.i, worker=self.name))
