"""ChatSession: what every front end and one-shot command holds (R35-R37).

    session = ChatSession.open(settings)            # starts every actor, takes the chat's lock
    turn = session.send("Remember amber-42.")       # R36: returns the user message's id
    while (event := session.next_event(timeout=60)) is not None:
        ...                                         # TurnText, TurnToolCall, …, TurnEnded
        if isinstance(event, schema.TurnEnded) and event.turn == turn:
            break
    session.close()

A session runs the supervisor (single process by default, or a `Placement`) and hosts a
small listener actor in the supervisor's node that subscribes to the turn runner's events
(topic "turn") and to failed compactions (topic "failed", turned into `Notice`s, R30);
`next_event` hands them out in order. Everything else is an ask to an actor: `send` and
`stop` to the turn runner, `note` to the log writer, `status` and `view` to the planner,
`zoom` and `date` read through the log writer (`turns.MemoryTools`, the same code the
model's tools run).

Events (all in `transport.schema`, `turn` = the id of the user message that opened it):
`TurnStarted(turn)`, `TurnText(turn, text)`, `TurnThinking(turn, text)`,
`TurnThinkingDone(turn)`, `TurnToolCall(turn, call_id, name, arguments_json)`,
`TurnToolResult(turn, call_id, name, is_error, preview)`, `TurnJoined(turn, message)`,
`TurnEnded(turn, reason, incomplete, detail)` with reason "done" | "stopped" | "error" |
"round_limit", and `Notice(level, text)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from everchat.transport import schema

__all__ = ["ChatSession", "TurnEvent"]

TurnEvent = (schema.TurnStarted | schema.TurnText | schema.TurnThinking | schema.TurnThinkingDone
             | schema.TurnToolCall | schema.TurnToolResult | schema.TurnJoined | schema.TurnEnded | schema.Notice)


class ChatSession:
    """One open chat with its actors running. Methods are safe to call from any one thread
    at a time (a front end's loop); `stop` may be called from another thread (Ctrl-C)."""

    @classmethod
    def open(cls, settings, *, placement=None, extra_tools=(), chat: str | Path | None = None) -> "ChatSession":
        """Start the supervisor and every actor, the turn runner included (single process
        by default). The log writer takes the chat folder's lock (R5): a second session on
        the same folder fails with `ChatLocked` naming the owner. `chat` defaults to
        `settings.home / "chat"`. `extra_tools`: `(ToolSpec, handler)` pairs offered to the
        model after the memory tools (benchmarks, devices); `handler(input: dict) -> str`
        runs in the turn runner's thread (single placement only)."""
        raise NotImplementedError

    def send(self, text: str, images: Sequence[Path] = ()) -> int:
        """R36: the person's message. Returns its id once it is logged. While a turn runs,
        the message is logged at once and handed to the call between tool calls; otherwise
        a fresh turn starts: its view is rendered (and settled, up to `settle_timeout`)
        before the message is logged, so this may wait that long."""
        raise NotImplementedError

    def stop(self) -> None:
        """/stop, Ctrl-C: end the running call. What was streamed is kept, logged marked
        incomplete (R37); the chat is ready for the next input. No turn: nothing happens."""
        raise NotImplementedError

    def next_event(self, timeout: float | None = None) -> TurnEvent | None:
        """The next turn event or notice, in order; None after `timeout` seconds."""
        raise NotImplementedError

    def status(self) -> dict:
        """messages, view_bytes, view_budget, pending (unbuilt lines), failures (compaction
        calls failed this run), model, cache_share (cache reads / prompt tokens), usage."""
        raise NotImplementedError

    def note(self, text: str) -> int:
        """Log a `note` (a memory from before the chat, R3); returns its (first) id."""
        raise NotImplementedError

    def view(self) -> str:
        """The view as it stands (R14, placeholders for unbuilt lines, R15)."""
        raise NotImplementedError

    def zoom(self, id: int | str, n: int = 1, page: int = 1) -> str:
        """R35: zoom(id, n), zoom(id, 1) (the message whole, paged), zoom("Name") (an
        agent's transcript). Wrong arguments raise `ZoomError` with the tool's words."""
        raise NotImplementedError

    def date(self, id: int) -> str:
        """R35: the local date and time message `id` was logged (`ZoomError` if none)."""
        raise NotImplementedError

    def compact(self, timeout: float | None = None) -> None:
        """Wait until every pending summary is built (TimeoutError after `timeout`)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop every actor and release the chat's lock. Idempotent."""
        raise NotImplementedError

    def __enter__(self) -> "ChatSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
