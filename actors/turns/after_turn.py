"""The after-turn command (issue 13, docs/GOALS.md): `--after-turn 'COMMAND'` runs a local
command after each turn.

- It runs with `/bin/sh -c COMMAND` in a session of its own (its own process group), with
  stdin from /dev/null (no chat text reaches it), its output to a temporary file (the end
  of which a failure shows), for at most `LIMIT` seconds: then the whole group is killed.
- Its environment is the chat's without model credentials: `ANTHROPIC_API_KEY`,
  `OPENAI_API_KEY`, `ANTHROPIC_AUTH_TOKEN`, `CODEX_API_KEY`, `BRAVE_SEARCH_API_KEY`, any
  other `*_API_KEY` and `*_AUTH_TOKEN`, and the turn runner's settings variable. Added:
  `EVERCHAT_TURN` (the id of the message that opened the turn), `EVERCHAT_CHAT` (the chat
  folder) and `EVERCHAT_HOME` (Everchat's home, as the chat uses it).
- It runs in the chat process's working folder (where Everchat was started); what it leaves
  running when it exits is ended with it, also a process that left its group (`setsid`) or
  was orphaned on purpose: it runs under the devices' job keeper (actors/devices/keeper.py,
  `--end-rest`), which keeps the whole tree it started (P16 of issue 20).
- `HookRunner` runs them one at a time, in the order the turns ended, on a thread of its
  own: a slow command never delays the next turn, and commands never overlap.
- Closing (the chat exits, a one-shot `ask` ends) takes no new command, and the commands
  already queued still run, in order, each to its end or its limit: the last turn's command
  is never dropped. One still waiting `CLOSE_START_SECONDS` after the close is not started
  (said, as a failure); so a close takes at most `CLOSE_START_SECONDS + LIMIT` (and a
  little), and the supervisor waits `STOP_SECONDS` for the turn runner's stop
  (actors/supervisor/actor.py), so a running command is never cut by that wait.
- A failure (a non-zero exit, the time limit, a command that cannot start) goes to
  `on_failure(turn, detail)`; it never touches the log, so a saved reply stays saved. Those
  that end after the close are kept too (`failed_since_close`): the closing front end may no
  longer hear them as events, so the turn runner hands them to it (`CloseAfterTurn`).

Works on Linux and macOS: the keeper reads the process tree from /proc on Linux (as a
child subreaper) and from `ps` elsewhere (docs/HANDS.md §4 says what that misses).
"""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from everchat.actors.models.credentials import is_credential
from everchat.actors.devices.keeper import SCRIPT as _KEEPER, end_keeper

__all__ = ["CLOSE_START_SECONDS", "LIMIT", "STOP_SECONDS", "HookResult", "HookRunner", "hook_env", "run_hook"]

log = logging.getLogger("everchat.after_turn")

LIMIT = 30.0
"""Seconds an after-turn command may run."""

CLOSE_START_SECONDS = 60.0
"""At close, a queued command still starts up to this many seconds after the close."""

STOP_SECONDS = 5.0 + CLOSE_START_SECONDS + LIMIT + 10.0
"""The longest the turn runner's stop may take with after-turn commands queued: its worker's
end (5 s), the queued commands (the last starting `CLOSE_START_SECONDS` after the close and
running `LIMIT`), and a margin for a killed group's end and the failure's report. The
supervisor waits this long for the turn runner before it kills it."""

TAIL_CHARS = 2000
"""How much of a failed command's output is shown."""

def _secret(name: str) -> bool:
    """A model or search credential (actors/models/credentials.py), or the turn runner's settings."""
    return is_credential(name) or name.upper() == "EVERCHAT_TURN_SETTINGS"


def hook_env(environ: Mapping[str, str], turn: int, chat: Path | str, home: Path | str) -> dict[str, str]:
    """The command's environment: `environ` without credentials, plus the turn's facts."""
    env = {name: value for name, value in environ.items() if not _secret(name)}
    env["EVERCHAT_TURN"] = str(turn)
    env["EVERCHAT_CHAT"] = str(chat)
    env["EVERCHAT_HOME"] = str(home)
    return env


@dataclass(frozen=True)
class HookResult:
    ok: bool
    detail: str = ""


_GRACE = 0.5  # seconds a killed process has between SIGTERM and SIGKILL
_KEEPER_MARGIN = 5.0  # seconds past that the keeper has before we kill its tree from here


def run_hook(command: str, env: Mapping[str, str], *, limit: float = LIMIT, cwd: str | Path | None = None) -> HookResult:
    """Run `command` once (see the module's docstring); its result, never an exception."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(_KEEPER), "--end-rest", f"{_GRACE:g}",
                                     "/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(env), cwd=cwd, start_new_session=True)
        except OSError as error:
            return HookResult(False, f"the after-turn command could not start: {error}")
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            end_keeper(proc, _GRACE + _KEEPER_MARGIN)  # every process it started ends
            return HookResult(False, f"the after-turn command was killed after {limit:g} s{_tail(out)}")
        if code != 0:
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            return HookResult(False, f"the after-turn command failed ({how}){_tail(out)}")
        return HookResult(True)


def _tail(out) -> str:
    out.seek(0, os.SEEK_END)
    size = out.tell()
    out.seek(max(0, size - TAIL_CHARS * 4))
    text = out.read().decode("utf-8", "replace")[-TAIL_CHARS:].strip()
    return f":\n{text}" if text else ""


class HookRunner:
    """Runs the after-turn command for each ended turn, one at a time, in order, on its
    own thread. `submit(turn)` returns at once; `close()` takes no more and waits while the
    commands already queued run (see the module docstring)."""

    def __init__(self, command: str, *, chat: Path | str, home: Path | str,
                 on_failure: Callable[[int, str], None], limit: float = LIMIT,
                 environ: Mapping[str, str] | None = None, on_done: Callable[[int, HookResult], None] | None = None,
                 start_within: float = CLOSE_START_SECONDS) -> None:
        self.command = command
        self.chat = chat
        self.home = home
        self.limit = limit
        self.start_within = start_within
        self.on_failure = on_failure
        self.on_done = on_done
        self.environ = environ
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._start_by: float | None = None  # set by close(): no command starts after it
        self._late: list[tuple[int, str]] = []  # failures that ended after close(), under _lock
        self._thread = threading.Thread(target=self._run, name="after-turn", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<HookRunner {self.command[:40]!r} chat={self.chat} pid={os.getpid()} closed={self._closed}>"

    def submit(self, turn: int) -> None:
        """Queue turn `turn`'s command. After `close()` nothing is taken: said in the log."""
        with self._lock:
            if not self._closed:
                self._queue.put(turn)
                return
        log.warning("%r: turn %d ended after the close; its after-turn command is not run", self, turn)

    def close(self, timeout: float | None = None) -> bool:
        """Take no more commands; those queued run on, in order, each to its end or its
        limit (one still waiting `start_within` s after this call is not started, and is
        reported as a failure). Waits for the last of them at most `timeout` seconds (None:
        until it is done, at most `start_within + limit` and a little); True when all are
        done. Idempotent; the commands go on when the wait ends first."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._start_by = time.monotonic() + self.start_within
                self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def failed_since_close(self) -> list[tuple[int, str]]:
        """`(turn, detail)` of each command that failed after `close()` was called, in order
        (empty before it): what a closing chat may no longer hear as events."""
        with self._lock:
            return list(self._late)

    def _run(self) -> None:
        while True:
            turn = self._queue.get()
            if turn is None:
                return
            if self._start_by is not None and time.monotonic() >= self._start_by:
                result = HookResult(False, f"the after-turn command was not run: the chat closed and it was still "
                                           f"waiting {self.start_within:g} s later")
            else:
                env = hook_env(os.environ if self.environ is None else self.environ, turn, self.chat, self.home)
                result = run_hook(self.command, env, limit=self.limit)
            if not result.ok:
                log.warning("turn %d: %s", turn, result.detail)
                with self._lock:
                    if self._closed:
                        self._late.append((turn, result.detail))
                try:
                    self.on_failure(turn, result.detail)
                except Exception:  # the next command still runs
                    log.exception("the after-turn failure of turn %d was not reported", turn)
            if self.on_done is not None:
                try:
                    self.on_done(turn, result)
                except Exception:  # the next command still runs
                    log.exception("the after-turn result of turn %d was not taken", turn)
