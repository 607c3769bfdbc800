"""The event hub (docs/WEB.md, "Live events"): the session's turn events as the page's JSON
events, numbered per run, kept in a ring of the last 20,000 (and at most 4 MB of them, P4)
for resume, and fanned out to every socket.

`EventRing` is the pure core: `publish` numbers an event and hands it to every subscriber;
`subscribe(after, run, deliver)` answers, under the same lock, the kept events after `after`
(or None: the page must reset), so a resuming page misses none and sees none twice.

`Hub` is the shell: one thread reads `ChatSession.next_event` and publishes what
`translate` makes of each event; another polls the status figures every 0.5 s while a
socket listens and publishes `status` when they change. Neither prints: a failure is
logged and becomes a `notice` event.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections import deque
from typing import Any, Callable

from everchat.frontends.terminal.transcript import after_turn_line, goal_line
from everchat.transport import schema

__all__ = ["EventRing", "Hub", "RING_SIZE", "RING_BYTES", "STATUS_SECONDS", "translate"]

RING_SIZE = 20_000
RING_BYTES = 4 << 20
"""P4: the ring keeps at most 4 MB of events (their JSON's UTF-8 bytes): a shell's output
(64 KB a chunk) pushes old events out instead of filling memory; a page resuming from an
event pushed out gets a reset and reloads its history."""
STATUS_SECONDS = 0.5
_ANNOUNCED = 4096  # message ids already announced as `user` events (sent here, then started)

log = logging.getLogger("everchat.web")

Deliver = Callable[[int, str], None]


class EventRing:
    """Events numbered 1, 2, 3 … in this run, the last `size` kept (and no more than
    `max_bytes` of them, P4), handed to subscribers."""

    def __init__(self, size: int = RING_SIZE, run: str | None = None, max_bytes: int = RING_BYTES) -> None:
        self.run = run or secrets.token_hex(8)
        self._ring: deque[tuple[int, str, int]] = deque()
        self._size = size
        self._max_bytes = max_bytes
        self._bytes = 0
        self._last = 0
        self._subscribers: dict[int, Deliver] = {}
        self._tokens = 0
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)  # signalled when subscribers come and go
        self._turn_from: int | None = None  # the id before the running turn's first event
        self._user_event: dict[int, int] = {}  # turn -> id of its opening message's `user` event

    def __repr__(self) -> str:
        return f"<EventRing run={self.run} last={self._last} subscribers={len(self._subscribers)}>"

    @property
    def kept(self) -> tuple[int, int]:
        """(events, bytes) the ring holds now."""
        with self._lock:
            return len(self._ring), self._bytes

    @property
    def last(self) -> int:
        with self._lock:
            return self._last

    @property
    def listening(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def publish(self, event: dict) -> int:
        """Number `event`, keep it, hand it (as JSON text) to every subscriber; its id."""
        with self._lock:
            self._last += 1
            text = json.dumps({"id": self._last, **event}, ensure_ascii=False)
            size = len(text.encode())
            self._ring.append((self._last, text, size))
            self._bytes += size
            while len(self._ring) > self._size or (self._bytes > self._max_bytes and len(self._ring) > 1):
                self._bytes -= self._ring.popleft()[2]
            self._follow_turn(event)
            for deliver in list(self._subscribers.values()):
                deliver(self._last, text)
            return self._last

    def subscribe(self, deliver: Deliver, after: int | None = None, run: str | None = None
                  ) -> tuple[int, list[str] | None, int]:
        """Start handing events to `deliver(id, text)`. Returns (token for `unsubscribe`,
        the kept events after `after` as JSON texts, or None when the page must reset, and
        the last id so far). No `after`: the running turn's events from its start (the last id
        before it returned as the last), else live events only. A `run` other
        than this one, an `after` before the ring or past the last id: reset."""
        with self._lock:
            self._tokens += 1
            token = self._tokens
            self._subscribers[token] = deliver
            self.changed.notify_all()
            if after is None:
                # A new page during a reply gets the running turn from its start, so it shows
                # the whole reply, not the part streamed after it came.
                start = self._turn_from
                first = self._ring[0][0] if self._ring else self._last + 1
                if start is None or start + 1 < first:
                    return token, [], self._last
                return token, [text for i, text, _ in self._ring if i > start], start
            if run != self.run or after > self._last or after < 0:
                return token, None, self._last
            first = self._ring[0][0] if self._ring else self._last + 1
            if after + 1 < first:
                return token, None, self._last  # fell out of the ring
            return token, [text for i, text, _ in self._ring if i > after], self._last

    def _follow_turn(self, event: dict) -> None:
        """Keep where the running turn began (under the lock): its opening message's `user`
        event when it came, else its `started` event; none once it ended."""
        kind = event.get("type")
        if kind == "user" and event.get("turn") == event.get("message", {}).get("id"):
            self._user_event = {event["turn"]: self._last}  # the newest opening message only
        elif kind == "started":
            self._turn_from = self._user_event.get(event["turn"], self._last) - 1
        elif kind == "ended":
            self._turn_from = None

    def unsubscribe(self, token: int) -> None:
        with self._lock:
            self._subscribers.pop(token, None)
            self.changed.notify_all()

    def wait_listening(self, stop: threading.Event, timeout: float) -> bool:
        """Wait (at most `timeout`) until someone listens; True if someone does."""
        with self._lock:
            if not self._subscribers and not stop.is_set():
                self.changed.wait(timeout)
            return bool(self._subscribers)


def translate(event: Any, message: Callable[[int], dict], reply: Callable[[int], int | None]) -> list[dict]:
    """The page's events for one session event (docs/WEB.md's table). `message(i)` reads a
    MSG; `reply(turn)` finds the id of the turn's logged reply (None if none). TurnStarted
    and TurnJoined (R36) also announce the user's message as a `user` event, first."""
    if isinstance(event, schema.TurnStarted):
        return [{"type": "user", "turn": event.turn, "message": message(event.turn)},
                {"type": "started", "turn": event.turn}]
    if isinstance(event, schema.TurnJoined):
        return [{"type": "user", "turn": event.turn, "message": message(event.message)}]
    if isinstance(event, schema.TurnText):
        return [{"type": "text", "turn": event.turn, "text": event.text}]
    if isinstance(event, schema.TurnThinking):
        return [{"type": "thinking", "turn": event.turn, "text": event.text}]
    if isinstance(event, schema.TurnThinkingDone):
        return [{"type": "thinking_done", "turn": event.turn}]
    if isinstance(event, schema.TurnToolCall):
        return [{"type": "tool_call", "turn": event.turn, "call_id": event.call_id, "name": event.name,
                 "arguments": event.arguments_json}]
    if isinstance(event, schema.TurnToolResult):
        return [{"type": "tool_result", "turn": event.turn, "call_id": event.call_id, "name": event.name,
                 "is_error": event.is_error, "preview": event.preview}]
    if isinstance(event, schema.TurnEnded):
        return [{"type": "ended", "turn": event.turn, "reason": event.reason, "incomplete": event.incomplete,
                 "detail": event.detail, "reply": reply(event.turn)}]
    if isinstance(event, schema.Notice):
        return [{"type": "notice", "level": event.level, "text": event.text}]
    if isinstance(event, schema.AgentEvent):
        return [{"type": "agent", "name": event.name, "state": event.state, "text": event.text}]
    if isinstance(event, schema.GoalEvent):  # issue 13: the line as the terminal shows it
        level, text = goal_line(event)
        return [{"type": "goal", "event": event.event, "goal": event.goal, "turns": event.turns,
                 "detail": event.detail, "level": level, "text": text}]
    if isinstance(event, schema.AfterTurnFailed):
        return [{"type": "after_turn", "turn": event.turn, "detail": event.detail, "text": after_turn_line(event)}]
    if isinstance(event, schema.JobOutput):
        return [{"type": "output", "job": event.job, "caller": event.caller, "text": event.text}]
    return []


class Hub:
    """The shell around `EventRing`: the session's events and status, on two threads.

    `chat` is a `WebChat` (frontends/web/chat.py): `session.next_event`, `message`,
    `reply_of`, `status`. Start with `start()`, end with `stop()` (joins both threads)."""

    def __init__(self, chat, ring: EventRing | None = None, status_seconds: float = STATUS_SECONDS) -> None:
        self.chat = chat
        self.ring = ring or EventRing()
        self.status_seconds = status_seconds
        self._stop = threading.Event()
        self._announced: deque[int] = deque(maxlen=_ANNOUNCED)
        self._announce_lock = threading.Lock()
        self._threads = [threading.Thread(target=self._events, name="everchat-web-events", daemon=True),
                         threading.Thread(target=self._status, name="everchat-web-status", daemon=True)]

    def __repr__(self) -> str:
        return f"<Hub {self.ring!r}>"

    def start(self) -> "Hub":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self.ring.changed:
            self.ring.changed.notify_all()
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=10)

    def announce(self, turn: int, message: dict) -> None:
        """A `user` event for a message logged here (POST /api/send), at once; the same
        message's TurnStarted or TurnJoined later announces it no more (R36)."""
        if self._first_announcement(message["id"]):
            self.ring.publish({"type": "user", "turn": turn, "message": message})

    def _first_announcement(self, i: int) -> bool:
        with self._announce_lock:
            if i in self._announced:
                return False
            self._announced.append(i)
            return True

    def _events(self) -> None:
        """Thread: every session event, in order, as page events."""
        while not self._stop.is_set():
            event = self.chat.session.next_event(timeout=0.2)
            if event is None:
                continue
            try:
                for page_event in translate(event, self.chat.message, self.chat.reply_of):
                    if page_event["type"] == "user" and not self._first_announcement(page_event["message"]["id"]):
                        continue
                    self.ring.publish(page_event)
            except Exception as error:  # a read failed: the page hears of it; the log keeps all
                log.warning("%r: could not pass on %s: %s", self, type(event).__name__, error, exc_info=True)
                self.ring.publish({"type": "notice", "level": "warning",
                                   "text": f"an event ({type(event).__name__}) could not be shown: {error}"})

    def _status(self) -> None:
        """Thread: the status figures every `status_seconds` while someone listens."""
        last = None
        while not self._stop.is_set():
            if not self.ring.wait_listening(self._stop, timeout=1.0):
                continue
            try:
                figures = self.chat.status()
            except Exception as error:  # the chat is closing or an actor is lost: try again later
                log.info("%r: status failed: %s", self, error)
                figures = None
            if figures is not None and figures != last:
                last = figures
                self.ring.publish({"type": "status", **figures})
            self._stop.wait(self.status_seconds)
