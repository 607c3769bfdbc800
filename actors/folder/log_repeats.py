"""A repeated error is counted, not written again (P3): the log files (`run/<name>.log`,
`errors.log`) and the terminal's lines share this small core.

An error's `error_key` is its type and the places its traceback passed through, not its
text: `/f%00 1`, `/f%00 2` … raise the same error at the same line with a different path
in the message, and that is one error told once. `Repeats.note(key)` says what to do with
one more occurrence: tell it whole (the first time), count it silently, or, once
`seconds` have passed since it was last told, tell that it came N more times.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Hashable

__all__ = ["Repeats", "error_key", "REPEAT_SECONDS", "REPEAT_KEYS"]

REPEAT_SECONDS = 60.0
"""A repeated error is told again (as a count) at most once a minute."""
REPEAT_KEYS = 256
"""How many distinct errors are remembered (the least recently seen is forgotten first)."""


def error_key(error: BaseException) -> tuple:
    """What makes two errors the same: the type and every (file, line) of the traceback."""
    places = tuple((frame.filename, frame.lineno) for frame in traceback.extract_tb(error.__traceback__))
    return type(error).__module__, type(error).__qualname__, places


class Repeats:
    """Occurrences of errors by key, thread-safe. `note(key)`:

    - `0`: the first time (or the first since it was forgotten): tell it whole;
    - `None`: again within `seconds` of its last telling: counted, tell nothing;
    - `n > 0`: again after that: tell "n more times" (this one included) and start over.
    """

    def __init__(self, seconds: float = REPEAT_SECONDS, keys: int = REPEAT_KEYS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.keys = keys
        self.clock = clock
        self._lock = threading.Lock()
        self._told: OrderedDict[Hashable, list] = OrderedDict()  # key -> [when last told, count since]

    def __repr__(self) -> str:
        return f"<Repeats {len(self._told)} errors, told again every {self.seconds:g} s>"

    def note(self, key: Hashable) -> int | None:
        now = self.clock()
        with self._lock:
            entry = self._told.get(key)
            if entry is None:
                self._told[key] = [now, 0]
                if len(self._told) > self.keys:
                    self._told.popitem(last=False)
                return 0
            self._told.move_to_end(key)
            entry[1] += 1
            if now - entry[0] < self.seconds:
                return None
            count, entry[:] = entry[1], [now, 0]
            return count
