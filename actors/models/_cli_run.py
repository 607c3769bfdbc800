"""One run of a subscription CLI: its process, its bridge socket, and the threads that feed
its items queue (`_cli.py` drives it; see there for the whole story).

A `Run` owns a process group (the CLI and what it starts: our MCP bridge among them), a
fresh temporary folder, the bridge's socket and, while it lives, a slot of the gate.
`Run.kill()` ends all of it; `_kill_all_live` does so for every run at interpreter exit,
and the bridge's lifeline does so if this process dies without a word.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._cli_gate import Slot
from ._errors import ModelError, ProtocolError
from ._mcp_bridge import SOCKET_NAME
from ._types import ImageBlock, Message, Request, TextBlock, ToolResultBlock, Usage

__all__ = ["Decoder", "Finished", "Run", "answer", "continuation", "read_output", "read_stderr", "accept", "BridgeCall",
           "asked_tool", "writer",
           "Closed", "LIVE"]


# --- what a decoder gives besides events -------------------------------------------------


@dataclass(frozen=True)
class Finished:
    """The CLI ended the request (its final event): `reason` as in `Stop`."""

    reason: str = "end_turn"
    incomplete: bool = False


class Decoder:
    """Turns the CLI's output, one line at a time, into events (`TextDelta`, `ThinkingDelta`,
    `Usage` per model message: the run sums them), `Finished`, or a `ModelError` *instance*
    to raise. Tool calls come from the bridge, or from here as `asked_tool` items for a CLI that asks on its own channel (Codex). `end` is called once when the output closes, with the exit code and stderr."""

    def feed(self, line: str) -> Iterable[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def end(self, returncode: int | None, stderr: str) -> Iterable[Any]:
        return ()

    def attach(self, run: Run, write: Callable[[bytes], None]) -> None:
        """Called once the CLI started, before its output is read: `write` sends bytes to its
        stdin (thread-safe). For a CLI that converses: Codex's app server answers requests
        and asks for our tools on its own channel (see `asked_tool`)."""


# --- one run of the CLI ------------------------------------------------------------------


@dataclass
class BridgeCall:
    id: str
    name: str
    arguments: dict[str, Any]
    sock: socket.socket | None
    reply: Callable[[list[TextBlock | ImageBlock], bool], None] | None = None  # see asked_tool


def asked_tool(call_id: str, name: str, arguments: dict[str, Any],
               reply: Callable[[list[TextBlock | ImageBlock], bool], None]) -> BridgeCall:
    """A tool call a decoder read from the CLI's own output instead of the bridge (Codex's
    dynamic tools): the run stops for it like a bridge call, and `reply(parts, is_error)`
    answers it with the result's blocks."""
    return BridgeCall(call_id, name, arguments, None, reply)


@dataclass
class Closed:
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
    pending: dict[str, BridgeCall] = field(default_factory=dict)
    lifelines: list[socket.socket] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stderr: list[str] = field(default_factory=list)
    ended: bool = False
    parked: bool = False  # stopped for tool results: kept for the next request
    label: str = ""  # the request's (`Request.label`): "turn" runs come one at a time
    held: list = field(default_factory=list)  # items read past a tool call, first out next time
    asked: bool = False  # the last model message ended asking for tools (`ToolsAsked`)
    waiting: list = field(default_factory=list)  # bridge calls that came before their message's end
    _ending: threading.Lock = field(default_factory=threading.Lock, repr=False)  # kill() runs once

    def socket_path(self) -> str:
        return str(self.folder / SOCKET_NAME)

    def kill(self) -> None:
        """End the run for good: the process group, the socket, the folder, the slot. Safe
        from any thread, at once with others (the reaper, close(), the caller; issue 13)."""
        with self._ending:
            if self.ended:
                return
            self.ended = True
            calls = list(self.pending.values())  # the stream's thread may add one meanwhile
            self.pending.clear()
        if self.proc is not None:
            # First: a call's socket closed while the CLI still ran would let it answer
            # itself (an error result) and finish, as if the run had not been ended.
            _kill_group(self.proc)
        for call in calls:
            if call.sock is not None:
                _close_quietly(call.sock)
        for sock in self.lifelines:
            _close_quietly(sock)
        if self.listener is not None:
            _end_listener(self.listener)
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.slot is not None:
            self.slot.release()
        LIVE.discard(self)  # only live runs are kept (issue 13)


def _end_listener(listener: socket.socket) -> None:
    """Close the bridge's listener so its `accept` thread ends: a bare close() does not
    wake a thread blocked in accept() on Linux, shutdown() does (issue 13); where it does
    not (macOS), the thread sees `ended` at its next poll (`_ACCEPT_POLL`)."""
    try:
        listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # ENOTCONN on some systems: the poll covers those
    _close_quietly(listener)


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


LIVE: weakref.WeakSet[Run] = weakref.WeakSet()


def _kill_all_live() -> None:
    for run in list(LIVE):
        run.kill()


atexit.register(_kill_all_live)


def continuation(run: Run | None, request: Request) -> list[ToolResultBlock] | None:
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


def answer(run: Run, results: list[ToolResultBlock] | None, last: Message) -> None:
    """Send each result to the bridge call waiting for it. Text the caller added beside the
    results (input that joined the turn, R36) rides on the last result."""
    assert results is not None
    extra = [b for b in last.content if isinstance(b, (TextBlock, ImageBlock))]
    for n, result in enumerate(results):
        call = run.pending.pop(result.tool_use_id, None)
        if call is None:
            continue  # the run was ended meanwhile (close()): its output tells
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


def writer(run: Run) -> Callable[[bytes], None]:
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


_ACCEPT_POLL = 0.5  # seconds between looks at `ended` where closing does not wake accept()


def accept(run: Run) -> None:
    """The bridge listener: each connection brings one tool call (or the lifeline). Ends
    with the run (see `_end_listener`)."""
    assert run.listener is not None
    try:
        run.listener.settimeout(_ACCEPT_POLL)  # accepted sockets still block (no default timeout)
    except OSError:
        return  # the run ended before this thread began
    while not run.ended:
        try:
            sock, _ = run.listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return  # closed or shut down: the run ended
        sock.setblocking(True)
        try:
            line = sock.makefile("rb").readline()
            message = json.loads(line) if line else {}
        except (OSError, ValueError):
            _close_quietly(sock)
            continue
        if message.get("lifeline"):
            run.lifelines.append(sock)  # kept open: its close kills the run (see _mcp_bridge)
            try:
                sock.sendall(json.dumps({"cli": run.proc.pid if run.proc else None}).encode() + b"\n")
            except OSError:
                pass
            if run.ended:
                _close_quietly(sock)
            continue
        meta = message.get("meta") or {}
        call_id = str(meta.get("claudecode/toolUseId") or _next_id())
        arguments = message.get("arguments")
        run.items.put(BridgeCall(call_id, str(message.get("name", "")),
                                  arguments if isinstance(arguments, dict) else {}, sock))


def read_output(run: Run, decoder: Decoder, errors: threading.Thread) -> None:
    assert run.proc is not None and run.proc.stdout is not None
    try:
        try:
            for raw in run.proc.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if line:
                    for item in _fed(decoder, line):
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
        for item in _fed(decoder, None, code, "".join(run.stderr)):
            run.items.put(item)
    finally:
        run.items.put(Closed())  # whatever happened above, the call must not wait out its timeout (issue 13)


def _fed(decoder: Decoder, line: str | None, *end: Any) -> list[Any]:
    """`decoder.feed(line)`, or `decoder.end(*end)` when `line` is None; a decoder that
    raises (a line of a shape it did not expect) gives the error as an item, so the call
    fails at once instead of waiting out its timeout for an end this thread would never send."""
    try:
        return list(decoder.feed(line) if line is not None else decoder.end(*end))
    except ModelError as error:
        return [error]
    except Exception as error:
        what = f"a line that could not be read ({type(error).__name__}: {error}): {line[:120]!r}" \
            if line is not None else f"an end that could not be read ({type(error).__name__}: {error})"
        return [ProtocolError(f"the CLI wrote {what}", provider=getattr(decoder, "provider", ""),
                              model=getattr(decoder, "model", ""))]


def read_stderr(run: Run) -> None:
    assert run.proc is not None and run.proc.stderr is not None
    try:
        for raw in run.proc.stderr:
            if sum(map(len, run.stderr)) < 64_000:
                run.stderr.append(raw.decode("utf-8", "replace"))
    except (OSError, ValueError):
        pass

