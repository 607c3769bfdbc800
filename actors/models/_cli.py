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
streams on. Any other request ends a live run and starts a fresh one. A run is killed
(its whole process group) on timeout, on close, when its generator is dropped, and by
the bridge itself when this process dies.

A subclass (Claude Code: `_claudecode.py`, Codex: `_codex.py`) implements `argv`,
`opening` and `decoder`, and may extend `environment`.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._cli_gate import Gate, Slot
from ._errors import CliMissing, ModelError, ModelTimeout, ProtocolError
from ._mcp_bridge import SOCKET_NAME, TOOLS_NAME
from ._types import (
    Connection,
    Event,
    ImageBlock,
    Message,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    Usage,
)

__all__ = [
    "CliConnection",
    "Decoder",
    "Finished",
    "Run",
    "asked_tool",
    "SCRUBBED",
    "priority_of",
    "scrubbed_environment",
]

SCRUBBED = (
    "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY", "AZURE_OPENAI_API_KEY",
    "ANTHROPIC_FOUNDRY_API_KEY", "AWS_BEARER_TOKEN_BEDROCK", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY", "CLAUDE_CODE_API_KEY_HELPER_TTL_MS", "ANTHROPIC_VERTEX_PROJECT_ID",
)
"""Variables a paid API path reads (keys, tokens, cloud-provider switches). Every name
ending in `_API_KEY` or `_AUTH_TOKEN` goes too; the CLI's own login (its credentials
file, CLAUDE_CODE_OAUTH_TOKEN) is the subscription and stays."""


def scrubbed_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: ours) without any variable that would let the CLI pay by API."""
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if name in SCRUBBED or name.endswith("_API_KEY") or name.endswith("_AUTH_TOKEN"):
            del env[name]
    return env


def priority_of(request: Request) -> int:
    """The gate's order: 0 replies (turns, agents, goal checks), 1 leaf summaries, 2 merges
    (`Request.priority`, which compaction sets); an unlabelled compaction counts as a leaf."""
    if request.priority:
        return min(max(request.priority, 0), 9)
    return 1 if request.label == "compaction" else 0


# --- what a decoder gives besides events -------------------------------------------------


@dataclass(frozen=True)
class Finished:
    """The CLI ended the request (its final event): `reason` as in `Stop`."""

    reason: str = "end_turn"
    incomplete: bool = False


class Decoder:
    """Turns the CLI's output, one line at a time, into events (`TextDelta`, `ThinkingDelta`,
    `Usage` per model message: the run sums them), `Finished`, or a `ModelError` *instance*
    to raise. Tool calls do not come from here but from the bridge. `end` is called once when the output closes, with the exit code and stderr."""

    def feed(self, line: str) -> Iterable[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def end(self, returncode: int | None, stderr: str) -> Iterable[Any]:
        return ()

    def attach(self, run: Run, write: Callable[[bytes], None]) -> None:
        """Called once the CLI started, before its output is read: `write` sends bytes to its
        stdin (thread-safe). For a CLI that converses (Codex's app server answers requests
        and asks for our tools on its own channel, see `asked_tool`)."""


# --- one run of the CLI ------------------------------------------------------------------


@dataclass
class _BridgeCall:
    id: str
    name: str
    arguments: dict[str, Any]
    sock: socket.socket | None
    reply: Callable[[list[TextBlock | ImageBlock], bool], None] | None = None  # see asked_tool


def asked_tool(call_id: str, name: str, arguments: dict[str, Any],
               reply: Callable[[list[TextBlock | ImageBlock], bool], None]) -> _BridgeCall:
    """A tool call a decoder read from the CLI's own output instead of the bridge (Codex's
    dynamic tools): the base stops for it like a bridge call, and `reply(parts, is_error)`
    answers it with the result's blocks."""
    return _BridgeCall(call_id, name, arguments, None, reply)


@dataclass
class _Closed:
    """The CLI's output ended."""


_ids = iter(range(1, 1 << 62))
_ids_lock = threading.Lock()


def _next_id() -> str:
    with _ids_lock:
        return f"cli_{os.getpid()}_{next(_ids)}"


@dataclass(eq=False)  # hashed by identity (kept in a WeakSet)
class Run:
    """One CLI process and what belongs to it. `folder` is its fresh temporary folder
    (tools.json, the bridge socket, the MCP config); `items` is fed by the output reader and
    the bridge listener; `pending` are bridge calls waiting for the caller's results."""

    folder: Path
    slot: Slot | None
    proc: subprocess.Popen | None = None
    listener: socket.socket | None = None
    items: queue.Queue = field(default_factory=queue.Queue)
    pending: dict[str, _BridgeCall] = field(default_factory=dict)
    lifelines: list[socket.socket] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stderr: list[str] = field(default_factory=list)
    ended: bool = False
    parked: bool = False  # stopped for tool results: kept for the next request

    def socket_path(self) -> str:
        return str(self.folder / SOCKET_NAME)

    def kill(self) -> None:
        """End the run for good: the process group, the socket, the folder, the slot."""
        if self.ended:
            return
        self.ended = True
        for call in self.pending.values():
            if call.sock is not None:
                _close_quietly(call.sock)
        self.pending.clear()
        for sock in self.lifelines:
            _close_quietly(sock)
        if self.listener is not None:
            _close_quietly(self.listener)
        if self.proc is not None:
            _kill_group(self.proc)
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.slot is not None:
            self.slot.release()


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: its pgid is its pid
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


_LIVE: weakref.WeakSet[Run] = weakref.WeakSet()


def _kill_all_live() -> None:
    for run in list(_LIVE):
        run.kill()


import atexit  # noqa: E402 - next to what it registers

atexit.register(_kill_all_live)


# --- the connection ----------------------------------------------------------------------


class CliConnection(Connection):
    """A model behind an official CLI. `executable`: the CLI's path; `model`: the model the
    CLI uses when a request names none; `timeout`: seconds for each `stream` call, from the
    slot taken to its `Stop`; `concurrency`: slots of the machine-wide gate (1…8) in
    `state_dir` (default: a folder in the system temp dir); `effort`: the default reasoning
    effort. Subclasses set `provider` and implement `argv`, `opening` and `decoder`."""

    provider = "cli"
    tool_prefix = ""  # how the CLI names our tools to the model (Claude Code: "mcp__everchat__")

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
        self._run: Run | None = None
        self._lock = threading.Lock()

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

    def keep_stdin_open(self) -> bool:
        """Whether stdin stays open after `opening` (Claude Code's stream-json input does;
        a CLI that reads its prompt to EOF does not)."""
        return True

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
        """End any live run."""
        with self._lock:
            if self._run is not None:
                self._run.kill()
                self._run = None

    def stream(self, request: Request) -> Iterator[Event]:
        with self._lock:
            run = self._run
            self._run = None
        results = _continuation(run, request)
        if run is not None and results is None:
            run.kill()  # stale: the caller moved on
            run = None
        if run is None:
            run = self._start(request)
        else:
            _answer(run, results, request.messages[-1])
        deadline = time.monotonic() + self.timeout
        run.parked = False
        try:
            yield from self._events(run, request, deadline)
        finally:
            # parked before its Stop("tool_use") is yielded, so a caller that stops reading
            # right at the Stop still continues this run with its results
            if run.parked and run.pending and not run.ended:
                with self._lock:
                    self._run = run  # waits for the caller's tool results
            else:
                run.kill()

    # --- inside -----------------------------------------------------------------------

    def _start(self, request: Request) -> Run:
        waited = self.timeout
        slot = self.gate.acquire(priority_of(request), waited)
        if slot is None:
            raise ModelTimeout(f"no free CLI slot within {waited:g} s (--cli-concurrency {self.gate.slots})",
                               provider=self.provider, model=request.model)
        folder = Path(tempfile.mkdtemp(prefix="everchat-run-"))
        run = Run(folder=folder, slot=slot)
        _LIVE.add(run)
        try:
            tools = [{"name": t.name, "description": t.description, "inputSchema": dict(t.schema)}
                     for t in request.tools]
            (folder / TOOLS_NAME).write_text(json.dumps(tools), encoding="utf-8")
            run.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            run.listener.bind(run.socket_path())
            run.listener.listen(16)
            threading.Thread(target=_accept, args=(run,), daemon=True, name="cli-bridge").start()
            argv = self.argv(run, request)
            try:
                run.proc = subprocess.Popen(
                    argv, cwd=self.working_folder(run), env=self.environment(run, request),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True)  # its own process group: killed whole
            except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
                raise CliMissing(f"cannot start {argv[0]} ({error.strerror}): install it or point "
                                 f"--cli-executable at it", provider=self.provider, model=request.model) from None
            errors = threading.Thread(target=_read_stderr, args=(run,), daemon=True, name="cli-stderr")
            errors.start()
            decoder = self.decoder(request)
            decoder.attach(run, _writer(run))
            threading.Thread(target=_read_output, args=(run, decoder, errors), daemon=True,
                             name="cli-output").start()
            assert run.proc.stdin is not None
            try:
                run.proc.stdin.write(self.opening(run, request))
                run.proc.stdin.flush()
                if not self.keep_stdin_open():
                    run.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass  # it exited at once: its output and exit code tell why
        except BaseException:
            run.kill()
            raise
        return run

    def _events(self, run: Run, request: Request, deadline: float) -> Iterator[Event]:
        run.usage = Usage()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ModelTimeout(f"no complete answer within {self.timeout:g} s (--cli-timeout)",
                                   provider=self.provider, model=request.model)
            try:
                item = run.items.get(timeout=left)
            except queue.Empty:
                continue
            if isinstance(item, (TextDelta, ThinkingDelta)):
                yield item
            elif isinstance(item, Usage):
                run.usage = _add(run.usage, item)
            elif isinstance(item, _BridgeCall):
                # Stop for this call and any others already waiting: the CLI may call its
                # tools one at a time (Claude Code does), so never wait for more.
                yield from self._tool_calls(run, item)
                run.parked = True
                yield run.usage
                yield Stop("tool_use")
                return
            elif isinstance(item, Finished):
                yield run.usage
                yield Stop(item.reason, incomplete=item.incomplete)
                return
            elif isinstance(item, ModelError):
                raise item
            elif isinstance(item, _Closed):
                raise ProtocolError(_exit_text(run), provider=self.provider, model=request.model)


    def _tool_calls(self, run: Run, first: _BridgeCall) -> Iterator[Event]:
        later: list[Any] = []
        call: Any = first
        while True:
            if isinstance(call, _BridgeCall):
                run.pending[call.id] = call
                yield ToolCall(call.id, call.name, call.arguments)
            elif isinstance(call, Usage):
                run.usage = _add(run.usage, call)
            else:
                later.append(call)  # read after the results come back
            try:
                call = run.items.get_nowait()
            except queue.Empty:
                break
        for item in later:
            run.items.put(item)


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(a.input + b.input, a.output + b.output, a.cache_read + b.cache_read, a.cache_write + b.cache_write)


def _exit_text(run: Run) -> str:
    code = run.proc.poll() if run.proc is not None else None
    tail = " ".join("".join(run.stderr).split())[-300:]
    return f"the CLI ended without a final answer (exit code {code})" + (f": {tail}" if tail else "")


def _continuation(run: Run | None, request: Request) -> list[ToolResultBlock] | None:
    """The results that answer the live run's pending calls, exactly; else None."""
    if run is None or run.ended or not run.pending:
        return None
    last = request.messages[-1]
    if last.role != "user":
        return None
    results = [b for b in last.content if isinstance(b, ToolResultBlock)]
    if {r.tool_use_id for r in results} != set(run.pending):
        return None
    return results


def _answer(run: Run, results: list[ToolResultBlock] | None, last: Message) -> None:
    """Send each result to the bridge call waiting for it. Text the caller added beside the
    results (input that joined the turn, R36) rides on the last result."""
    assert results is not None
    extra = [b for b in last.content if isinstance(b, (TextBlock, ImageBlock))]
    for n, result in enumerate(results):
        call = run.pending.pop(result.tool_use_id)
        parts = list(result.content) + (extra if n == len(results) - 1 else [])
        if call.reply is not None:
            call.reply(parts, result.is_error)
            continue
        assert call.sock is not None
        content = [_mcp_part(p) for p in parts] or [{"type": "text", "text": "(empty)"}]
        line = json.dumps({"content": content, "isError": result.is_error}).encode() + b"\n"
        try:
            call.sock.sendall(line)
        except OSError:
            pass  # the CLI went away: its output tells
        _close_quietly(call.sock)


def _writer(run: Run) -> Callable[[bytes], None]:
    """Writes to the run's stdin, one writer at a time; a CLI that went away is told by its output."""
    lock = threading.Lock()

    def write(data: bytes) -> None:
        assert run.proc is not None and run.proc.stdin is not None
        with lock:
            try:
                run.proc.stdin.write(data)
                run.proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass

    return write


def _mcp_part(block: TextBlock | ImageBlock) -> dict[str, Any]:
    if isinstance(block, ImageBlock):
        return {"type": "image", "data": base64.b64encode(block.data).decode(), "mimeType": block.media_type}
    return {"type": "text", "text": block.text}


def _accept(run: Run) -> None:
    """The bridge listener: each connection brings one tool call (or the lifeline)."""
    assert run.listener is not None
    while True:
        try:
            sock, _ = run.listener.accept()
        except OSError:
            return  # closed: the run ended
        try:
            line = sock.makefile("rb").readline()
            message = json.loads(line) if line else {}
        except (OSError, ValueError):
            _close_quietly(sock)
            continue
        if message.get("lifeline"):
            run.lifelines.append(sock)  # kept open: its close kills the run (see _mcp_bridge)
            if run.ended:
                _close_quietly(sock)
            continue
        meta = message.get("meta") or {}
        call_id = str(meta.get("claudecode/toolUseId") or _next_id())
        arguments = message.get("arguments")
        run.items.put(_BridgeCall(call_id, str(message.get("name", "")),
                                  arguments if isinstance(arguments, dict) else {}, sock))


def _read_output(run: Run, decoder: Decoder, errors: threading.Thread) -> None:
    assert run.proc is not None and run.proc.stdout is not None
    try:
        for raw in run.proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if line:
                for item in decoder.feed(line):
                    run.items.put(item)
    except (OSError, ValueError):
        pass  # the pipe was closed by kill()
    code = run.proc.poll()
    if code is None:
        try:
            code = run.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
    errors.join(timeout=5)  # its last words, for the error message
    for item in decoder.end(code, "".join(run.stderr)):
        run.items.put(item)
    run.items.put(_Closed())


def _read_stderr(run: Run) -> None:
    assert run.proc is not None and run.proc.stderr is not None
    try:
        for raw in run.proc.stderr:
            if sum(map(len, run.stderr)) < 64_000:
                run.stderr.append(raw.decode("utf-8", "replace"))
    except (OSError, ValueError):
        pass
