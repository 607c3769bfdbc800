"""A world for the terminal chat's tests: the real prompt_toolkit application on a pipe
input and a recording output, run in its own thread, plus a scripted in-memory session
for the tests of the shell's own logic (the scenarios use the real ChatSession)."""

from __future__ import annotations

import dataclasses
import io
import queue
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prompt_toolkit.data_structures import Size
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.vt100 import Vt100_Output

from everchat.actors.planner.planning import ZoomError
from everchat.frontends.terminal.app import Terminal
from everchat.transport import schema

__all__ = ["ScriptedSession", "Screen", "running", "ANSI"]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[=>78]|\r")

ENTER = "\r"


class Screen(io.StringIO):
    """What the application wrote, escape sequences and all."""

    encoding = "utf-8"

    def text(self) -> str:
        return ANSI.sub("", self.getvalue())


class Running:
    """A terminal running in a thread: `type` keys into it, `wait` for what it shows."""

    def __init__(self, terminal: Terminal, pipe, screen: Screen, thread: threading.Thread, result: dict) -> None:
        self.terminal = terminal
        self.pipe = pipe
        self.screen = screen
        self.thread = thread
        self.result = result

    def type(self, keys: str) -> None:
        self.pipe.send_text(keys)

    def line(self, text: str) -> None:
        self.pipe.send_text(text + ENTER)

    def wait(self, condition: Callable[[Terminal], bool], what: str, timeout: float = 20.0) -> None:
        if not self.terminal.wait_until(condition, timeout):
            raise AssertionError(f"the terminal never showed {what}; it printed:\n" + "\n".join(self.terminal.printed))

    def wait_printed(self, text: str, timeout: float = 20.0) -> int:
        """Wait until a printed line holds `text`; returns that line's index."""
        found: list[int] = []

        def seen(terminal: Terminal) -> bool:
            found[:] = [at for at, line in enumerate(terminal.printed) if text in line][:1]
            return bool(found)

        self.wait(seen, repr(text), timeout)
        return found[0]

    def exit_code(self, timeout: float = 20.0) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the terminal did not quit"
        if "error" in self.result:
            raise self.result["error"]
        return self.result["code"]


@contextmanager
def running(session, columns: int = 100, rows: int = 30) -> Iterator[Running]:
    """The real application on `session`, typed into through a pipe."""
    screen = Screen()
    output = Vt100_Output(screen, lambda: Size(rows=rows, columns=columns))
    with create_pipe_input() as pipe:
        terminal = Terminal(session, input=pipe, output=output)
        result: dict = {}

        def main() -> None:
            try:
                result["code"] = terminal.run()
            except BaseException as error:  # handed to the test thread by exit_code
                result["error"] = error

        thread = threading.Thread(target=main, name="terminal-under-test", daemon=True)
        thread.start()
        run = Running(terminal, pipe, screen, thread, result)
        run.wait(lambda t: t.app.is_running, "its first screen")
        try:
            yield run
        finally:
            if thread.is_alive() and terminal.app.is_running and terminal.app.loop is not None:
                terminal.app.loop.call_soon_threadsafe(lambda: terminal.app.exit(result=0)
                                                       if terminal.app.is_running else None)
            thread.join(20)


class ScriptedSession:
    """An in-memory stand-in with ChatSession's methods. Each `send` plays the next
    script: a list of events (their `turn` is replaced by the message's id), where a `threading.Event` item makes the turn wait for it
    (so a test can type while a reply runs) and `stop` ends the turn as stopped."""

    def __init__(self, *scripts: list) -> None:
        self.scripts = list(scripts)
        self.sent: list[tuple[str, tuple]] = []
        self.notes: list[str] = []
        self.calls: list[str] = []
        self.events: queue.Queue = queue.Queue()
        self.stops = 0
        self.compact_timeouts = 2  # /compact sees this many TimeoutErrors first
        self._stopped = threading.Event()
        self._running: int | None = None
        self.lock = threading.Lock()
        self.overlaps = 0  # calls that overlapped another call (ChatSession wants one at a time)
        self.lose_ends = False  # drop every TurnEnded "done", as a full mailbox would

    @contextmanager
    def _one(self, name: str):
        if not self.lock.acquire(blocking=False):
            self.overlaps += 1
            self.lock.acquire()
        try:
            self.calls.append(name)
            yield
        finally:
            self.lock.release()

    def send(self, text, images=()):
        with self._one("send"):
            message = len(self.sent) + len(self.notes)
            self.sent.append((text, tuple(images)))
            if self._running is not None:
                self.events.put(schema.TurnJoined(self._running, message))
                return message
            script = self.scripts.pop(0) if self.scripts else [schema.TurnText(0, "ok")]
            self._running = message
            self._stopped.clear()
            threading.Thread(target=self._play, args=(message, script), daemon=True).start()
            return message

    def _play(self, turn: int, script: list) -> None:
        self.events.put(schema.TurnStarted(turn))
        for item in script:
            if isinstance(item, threading.Event):
                while not item.wait(0.05):
                    if self._stopped.is_set():
                        break
            if self._stopped.is_set():
                self._running = None
                self.events.put(schema.TurnEnded(turn, "stopped", True, ""))
                return
            if not isinstance(item, threading.Event):
                self.events.put(dataclasses.replace(item, turn=turn))
        self._running = None
        if not self.lose_ends:
            self.events.put(schema.TurnEnded(turn, "done", False, ""))

    def stop(self):
        self.stops += 1
        self._stopped.set()

    def next_event(self, timeout=None):
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def status(self):
        with self._one("status"):
            return {"messages": len(self.sent) + len(self.notes), "view_bytes": 97_312, "view_budget": 128_000,
                    "pending": 3, "failures": 0, "model": "scripted", "cache_share": 0.98, "usage": {},
                    "turn": -1 if self._running is None else self._running, "running": self._running is not None}

    def note(self, text):
        with self._one("note"):
            self.notes.append(text)
            return len(self.sent) + len(self.notes) - 1

    def view(self):
        with self._one("view"):
            return "<chat>\n0+1|user: hi\n</chat>"

    def zoom(self, id, n=1, page=1):
        with self._one("zoom"):
            if id != 0 or n != 1:
                raise ZoomError(f"No line {id}+{n}.")
            return "user: hi"

    def date(self, id):
        with self._one("date"):
            return "2026-12-02 19:00:00 +0000"

    def compact(self, timeout=None):
        with self._one("compact"):
            if self.compact_timeouts:
                self.compact_timeouts -= 1
                raise TimeoutError("summaries still pending")

    def close(self):
        pass
