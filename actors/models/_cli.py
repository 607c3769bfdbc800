"""The shared base of subscription connections: a model call through an official CLI.

`CliConnection.stream(request)` keeps the `Connection` contract: the caller (turn runner,
agent, compactor) runs the tool loop itself. Underneath, one call is one *run* of the CLI:

1. wait for a slot of the machine-wide gate (`--cli-concurrency`, replies first, then
   leaf summaries, then merges: `Request.priority`);
2. start the CLI in its own process group in a fresh temporary folder, with an
   environment scrubbed of every API key (a failure never falls back to paid access),
   its own tools off, and our tools (`request.tools`) offered through `_mcp_bridge`;
3. feed it the request (the subclass says how) and decode its output (the subclass's
   `Decoder`) into `TextDelta` / `ThinkingDelta` / `Usage` / `Stop`.

When the CLI calls one of our tools, the bridge holds the CLI and `stream` yields
`ToolCall(...)`, `Usage`, `Stop("tool_use")`. The caller runs the tool and calls
`stream(next_request)`, whose last user message holds the `ToolResultBlock`s: their ids
match the run's pending calls, so the results go back to the CLI and the same process
streams on. Any other request starts a fresh run and leaves parked runs alone (the thread
a call comes on says nothing of whose run it is); a parked run nobody continues ends once
parked longer than the timeout. A run is killed (its whole process group) on timeout, on
close, when its generator is dropped, and by the bridge itself when this process dies.

A subclass (Claude Code: `_claudecode.py`, Codex: `_codex.py`) implements `argv`,
`opening` and `decoder`, and may extend `environment`.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from everchat.actors.models.credentials import CREDENTIAL_NAMES, without_credentials

from ._cli_gate import Gate
from ._cli_run import (
    LIVE,
    BridgeCall,
    Closed,
    Decoder,
    Finished,
    Run,
    accept,
    answer,
    continuation,
    read_output,
    read_stderr,
    writer,
)
from ._errors import CliMissing, ModelError, ModelTimeout, ProtocolError
from ._mcp_bridge import TOOLS_NAME
from ._types import Connection, Event, Request, Stop, TextDelta, ThinkingDelta, ToolCall, ToolResultBlock, Usage

__all__ = [
    "CliConnection",
    "Decoder",
    "Finished",
    "Run",
    "SCRUBBED",
    "ToolsAsked",
    "priority_of",
    "scrubbed_environment",
]

SCRUBBED = CREDENTIAL_NAMES
"""Variables a paid API path reads (actors/models/credentials.py): with every name ending in
`_API_KEY` or `_AUTH_TOKEN`, never in the child's environment."""


def scrubbed_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: ours) without any variable that would let the CLI pay by API."""
    return without_credentials(os.environ if base is None else base)


def priority_of(request: Request) -> int:
    """The gate's order: 0 replies (turns, agents, goal checks), 1 leaf summaries, 2 merges
    (`Request.priority`, which compaction sets); an unlabelled compaction counts as a leaf."""
    if request.priority:
        return min(max(request.priority, 0), 9)
    return 1 if request.label == "compaction" else 0


@dataclass(frozen=True)
class ToolsAsked:
    """From a decoder whose CLI streams its model messages (Claude Code): the message that
    just ended asks for tools. A bridge call can overtake the CLI's output on its own
    channel; the run waits for this before it stops, so text and usage stay in order."""


# --- the connection ----------------------------------------------------------------------


class CliConnection(Connection):
    """A model behind an official CLI. `executable`: the CLI's path; `model`: the model the
    CLI uses when a request names none; `timeout`: seconds for each `stream` call, from the
    slot taken to its `Stop`; `concurrency`: slots of the machine-wide gate (1…8) in
    `state_dir` (default: a folder in the system temp dir); `effort`: the default reasoning
    effort. Subclasses set `provider` and implement `argv`, `opening` and `decoder`."""

    provider = "cli"
    tool_prefix = ""  # how the CLI names our tools to the model (Claude Code: "mcp__everchat__")
    announces_tool_turns = False  # its decoder sends `ToolsAsked` (else a bridge call stops the run at once)

    def __init__(self, executable: str, *, model: str | None = None, timeout: float = 300.0,
                 concurrency: int = 1, effort: str | None = None,
                 state_dir: str | os.PathLike[str] | None = None) -> None:
        if not timeout > 0:
            raise ValueError("the CLI timeout is positive")
        self.executable = executable
        self.model = model
        self.timeout = timeout
        self.effort = effort
        base = Path(state_dir) if state_dir is not None else Path(tempfile.gettempdir()) / f"everchat-cli-{os.getuid()}"
        self.state_dir = base
        self.gate = Gate(base / "gate", concurrency)
        # run waiting for its caller's results -> since when; no owner: callers use a fresh
        # thread per call and thread ids are reused (issue 13), only the results say whose it is
        self._parked: dict[Run, float] = {}
        self._lock = threading.Lock()
        self._reaped = threading.Condition(self._lock)  # wakes the reaper when a run parks
        self._reaper: threading.Thread | None = None  # alive while runs are parked
        self._runs: weakref.WeakSet[Run] = weakref.WeakSet()  # every run started here, for close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.executable}, slots={self.gate.slots})"

    # --- what a subclass says -------------------------------------------------------

    def argv(self, run: Run, request: Request) -> list[str]:  # pragma: no cover - abstract
        """The command line (no prompt text, no images: those go through `opening`)."""
        raise NotImplementedError

    def opening(self, run: Run, request: Request) -> bytes:  # pragma: no cover - abstract
        """What goes to the CLI's stdin when the run starts (the view and the turn)."""
        raise NotImplementedError

    def decoder(self, request: Request) -> Decoder:  # pragma: no cover - abstract
        raise NotImplementedError

    def environment(self, run: Run, request: Request) -> dict[str, str]:
        """The child's environment: ours without API keys. Extend, never re-add keys."""
        return scrubbed_environment()

    def working_folder(self, run: Run) -> Path:
        """Where the CLI runs. Default: the run's fresh folder. A CLI that writes its
        working folder into the prompt before the view overrides this with a stable one,
        so that prefix stays cacheable (R23)."""
        return run.folder

    def model_for(self, request: Request) -> str | None:
        """The model the run asks for: the request's, else the connection's, else the CLI's own."""
        name = request.model if request.model and request.model != "default" else None
        return name or self.model

    def effort_for(self, request: Request) -> str | None:
        return request.effort or self.effort

    def bridge_command(self, run: Run) -> list[str]:
        """How the CLI starts our MCP bridge (put it in the CLI's MCP config)."""
        return [sys.executable, "-m", "everchat.actors.models._mcp_bridge", str(run.folder)]

    # --- the contract ---------------------------------------------------------------

    def close(self) -> None:
        """End every live run: parked ones and those still streaming (issue 13)."""
        with self._lock:
            runs = [*self._parked, *self._runs]
            self._parked.clear()
        for run in runs:
            run.kill()

    def stream(self, request: Request) -> Iterator[Event]:
        run, results = self._take_parked(request)
        if run is None:
            run = self._start(request)
        deadline = time.monotonic() + self.timeout
        run.parked = False
        run.label = request.label
        try:
            if results is not None:
                # inside the try: the run has left the parked ones, so if this fails
                # only the finally below still ends it (issue 13)
                answer(run, results, request.messages[-1])
            yield from self._events(run, request, deadline)
        finally:
            # parked before its Stop("tool_use") is yielded, so a caller that stops reading
            # right at the Stop still continues this run with its results
            if run.parked and run.pending and not run.ended:
                self._park(run)
            else:
                run.kill()

    def parked_pids(self) -> list[int]:
        """The CLI processes waiting for their callers' tool results (for status and tests)."""
        with self._lock:
            return [run.proc.pid for run in self._parked if run.proc is not None]

    def _park(self, run: Run) -> None:
        """Keep `run` for its caller's results, at most `timeout` seconds: a caller that
        never comes back (a turn stopped in its tool step) must not hold the slot until
        the next call or the exit (issue 13). One reaper thread ends the overdue runs."""
        with self._reaped:
            self._parked[run] = time.monotonic()
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, daemon=True, name="cli-parked")
                self._reaper.start()
            self._reaped.notify()

    def _reap(self) -> None:
        """End each parked run once its caller is later than `timeout`; return when none is parked."""
        while True:
            with self._reaped:
                while True:
                    if not self._parked:
                        self._reaper = None
                        return
                    now = time.monotonic()
                    overdue = [run for run, since in self._parked.items()
                               if run.ended or now - since >= self.timeout]
                    if overdue:
                        break
                    self._reaped.wait(min(self._parked.values()) + self.timeout - now)
                for run in overdue:
                    del self._parked[run]
            for run in overdue:
                run.kill()  # outside the lock: it waits for the process

    def _take_parked(self, request: Request) -> tuple[Run | None, list[ToolResultBlock] | None]:
        """The parked run this request continues (its last user message answers exactly
        that run's pending calls), with those results; else (None, None). Any other parked
        run is left alone: whose it is cannot be told (issue 13), and one nobody continues
        ends by the reaper once it has been parked longer than the timeout."""
        abandoned: list[Run] = []
        try:
            with self._lock:
                for run in list(self._parked):
                    results = continuation(run, request)
                    if results is not None:
                        del self._parked[run]  # the reaper no longer sees it
                        return run, results
                if request.label == "turn":
                    # A chat runs one turn at a time: a new turn that continues no parked
                    # turn means that one was stopped in its tool step (R37) and will never
                    # come back; its slot is free now, not at the reaper's deadline.
                    abandoned = [run for run in self._parked if run.label == "turn"]
                    for run in abandoned:
                        del self._parked[run]
            return None, None
        finally:
            for run in abandoned:
                run.kill()

    # --- inside -----------------------------------------------------------------------

    def _start(self, request: Request) -> Run:
        waited = self.timeout
        slot = self.gate.acquire(priority_of(request), waited)
        if slot is None:
            raise ModelTimeout(f"no free CLI slot within {waited:g} s (--cli-concurrency {self.gate.slots})",
                               provider=self.provider, model=request.model)
        try:
            folder = Path(tempfile.mkdtemp(prefix="everchat-run-"))
        except OSError as error:
            slot.release()
            raise self._unprepared(error, request) from None
        run = Run(folder=folder, slot=slot)
        LIVE.add(run)
        with self._lock:
            self._runs.add(run)
        try:
            tools = [{"name": t.name, "description": t.description, "inputSchema": dict(t.schema)}
                     for t in request.tools]
            (folder / TOOLS_NAME).write_text(json.dumps(tools), encoding="utf-8")
            run.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            run.listener.bind(run.socket_path())
            run.listener.listen(16)
            threading.Thread(target=accept, args=(run,), daemon=True, name="cli-bridge").start()
            argv = self.argv(run, request)
            try:
                run.proc = subprocess.Popen(
                    argv, cwd=self.working_folder(run), env=self.environment(run, request),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True)  # its own process group: killed whole
            except OSError as error:  # missing, not executable, not a program (ENOEXEC) …
                raise CliMissing(f"cannot start {argv[0]} ({error.strerror or error}): install it or point "
                                 f"--cli-executable at it", provider=self.provider, model=request.model) from None
            errors = threading.Thread(target=read_stderr, args=(run,), daemon=True, name="cli-stderr")
            errors.start()
            decoder = self.decoder(request)
            decoder.attach(run, writer(run))
            threading.Thread(target=read_output, args=(run, decoder, errors), daemon=True, name="cli-output").start()
            assert run.proc.stdin is not None
            try:
                run.proc.stdin.write(self.opening(run, request))
                run.proc.stdin.flush()  # stdin stays open: Claude Code's stream-json input and Codex's app server expect more
            except (BrokenPipeError, OSError):
                pass  # it exited at once: its output and exit code tell why
        except OSError as error:  # callers catch ModelError only (issue 13)
            run.kill()
            raise self._unprepared(error, request) from None
        except BaseException:
            run.kill()
            raise
        return run

    def _unprepared(self, error: OSError, request: Request) -> ProtocolError:
        """An OSError while preparing a run (its folder, tools file, bridge socket: a
        socket path longer than AF_UNIX allows, from a long TMPDIR), in words."""
        return ProtocolError(f"could not prepare the CLI run ({error}); check the temp dir "
                             f"({tempfile.gettempdir()}): it must be writable and its path short",
                             provider=self.provider, model=request.model)

    def _events(self, run: Run, request: Request, deadline: float) -> Iterator[Event]:
        run.usage = Usage()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ModelTimeout(f"no complete answer within {self.timeout:g} s (--cli-timeout)",
                                   provider=self.provider, model=request.model)
            try:
                item = run.held.pop(0) if run.held else run.items.get(timeout=left)
            except queue.Empty:
                continue
            if isinstance(item, (TextDelta, ThinkingDelta)):
                yield item
            elif isinstance(item, Usage):
                run.usage = _add(run.usage, item)
                run.asked = False  # a new model message
            elif isinstance(item, ToolsAsked):
                run.asked = True
            elif isinstance(item, BridgeCall):
                run.waiting.append(item)
            if run.waiting and (run.asked or not self.announces_tool_turns):
                # Stop for these calls and any others already waiting: the CLI may call its
                # tools one at a time (Claude Code does), so never wait for more.
                yield from self._tool_calls(run)
                run.parked = True
                yield run.usage
                yield Stop("tool_use")
                return
            if isinstance(item, Finished):
                yield run.usage
                yield Stop(item.reason, incomplete=item.incomplete)
                return
            elif isinstance(item, ModelError):
                raise item
            elif isinstance(item, Closed):
                raise ProtocolError(_exit_text(run), provider=self.provider, model=request.model)

    def _tool_calls(self, run: Run) -> Iterator[Event]:
        """The waiting calls and any others already queued; anything else read on the way is
        held, in order, for after the results."""
        calls, run.waiting = run.waiting, []
        while True:
            for call in calls:
                run.pending[call.id] = call
                yield ToolCall(call.id, call.name, call.arguments)
            try:
                item = run.items.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, BridgeCall):
                calls = [item]
            else:
                calls = []
                run.held.append(item)


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(a.input + b.input, a.output + b.output, a.cache_read + b.cache_read, a.cache_write + b.cache_write)


def _exit_text(run: Run) -> str:
    code = run.proc.poll() if run.proc is not None else None
    tail = " ".join("".join(run.stderr).split())[-300:]
    return f"the CLI ended without a final answer (exit code {code})" + (f": {tail}" if tail else "")


