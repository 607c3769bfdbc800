"""A progress bar on stderr for long one-shot commands (`import`, `import-chats`), with an ETA.

On a terminal it redraws one line (`\\r`) at most ten times a second; elsewhere (a
pipe, a log file) it writes a line each time the whole percentage changes, so a log
stays short and a reader sees steady progress.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from everchat.frontends.cli.safe_text import printable

__all__ = ["Progress", "human_bytes"]


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _duration(seconds: int) -> str:
    """`45s`, `2m05s`, `1h02m`."""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """`update(done)` as work advances, `finish()` at the end; sizes in bytes."""

    WIDTH = 24

    def __init__(self, label: str, total: int, stream: TextIO | None = None, *, eta: bool = False,
                 clock=time.monotonic) -> None:
        """With `eta`, the line also says how long the rest should take at the pace so
        far (`ETA 2m05s`), once there is a pace; `clock` is for tests."""
        self.label = label
        self.eta = eta
        self._clock = clock
        self._started = clock()
        self.total = max(total, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown_percent = -1
        self._shown_at = 0.0
        self._width = 0
        self.done = 0  # the last `done` given

    def _line(self, done: int, extra: str) -> str:
        percent = min(100, done * 100 // self.total)
        filled = self.WIDTH * percent // 100
        bar = "#" * filled + "." * (self.WIDTH - filled)
        tail = f" {extra}" if extra else ""
        if self.eta and 0 < done < self.total:
            spent = self._clock() - self._started
            left = round(spent * (self.total - done) / done)
            tail = f" ETA {_duration(left)}{tail}"
        return f"{self.label} [{bar}] {percent:3d}% {human_bytes(done)} of {human_bytes(self.total)}{tail}"

    def update(self, done: int, extra: str = "") -> None:
        self.done = done
        percent = min(100, done * 100 // self.total)
        if self.tty:
            now = time.monotonic()
            if now - self._shown_at < 0.1 and percent < 100:
                return
            self._shown_at = now
            line = self._line(done, extra)
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            if percent == self._shown_percent:
                return
            self.stream.write(self._line(done, extra) + "\n")
        self._shown_percent = percent
        self.stream.flush()

    def say(self, text: str) -> None:
        """A line of its own (a warning) above the bar, which is drawn again next time."""
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(printable(text) + "\n")  # P20: words from a file or a model cannot drive the terminal
        self.stream.flush()
        self._shown_at = 0.0

    def finish(self, done: int, extra: str = "") -> None:
        """The last state, always shown on a terminal (then a newline); elsewhere only
        when its percentage was not shown yet."""
        self._shown_at = 0.0
        self.update(done, extra)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
