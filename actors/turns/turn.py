"""The turn core (R34-R37): one turn's requests, its tool loop, and what is logged when.

Pure: no sockets, no threads. `TurnRunner.run` drives one turn through a `TurnIO` (the
actor shell's asks to the log writer and the planner, the model stream, the tools), and
tests drive it with a scripted `TurnIO`. The memory tools (R35) are in `memory_tools`.

A turn for input m (R36):
1. the view is rendered as it stands for the messages before m and settled (`io.settle`:
   every line built, or the settle timeout's fallback lines) **before** m is logged, so m
   is never both in the view and after it;
2. m is logged (`io.begin`); the first request is exactly
   `[tools] [system] [view blocks] [turn header + m]` (R23's marks: the system prompt, the
   last whole view block, the request's last block);
3. each model call streams: text is shown as it comes (`TurnText`), thinking is shown and
   never logged (R6, R48); a tool call is logged as `tool` when it arrives, after the
   reply text before it (`everchat`); each result is logged as `echo` before the next
   request (R37);
4. between calls, messages the person typed meanwhile (`io.joined`, already logged) are
   handed to the call after the tool results; a reply without tool calls also takes them
   in, so nothing typed during a turn waits for another turn;
5. the turn ends when a reply asks for no tools and nothing joined ("done"), on `stop`
   ("stopped"), on a failed call ("error"), or after `tool_rounds` rounds ("round_limit").
   Nothing carries over to the next turn (R37, R50): its request is built afresh.

How partial replies are logged (R37, a stopped or crashed stream): the reply's text is
logged as one `everchat` message when its stretch of text ends (a tool call, the end of
the call). While it streams, the text so far is saved as a *draft* through the log writer
(`io.save_draft`, an fsynced file beside the log, at most every `DRAFT_SECONDS`), under
the key the finished message will have. A stop or a failed call logs what arrived, marked
incomplete; after a crash the log writer logs the draft at its next start, marked
incomplete, under the same key, so a draft whose message was already logged is not logged
twice (the key makes the append idempotent). A crash loses at most the text of the last
`DRAFT_SECONDS`; no message is ever split into many by streaming.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from everchat.actors.tree import LINE_LIMIT
from everchat.actors.zoom import ToolOutcome
from everchat.actors.models import (
    ImageBlock,
    Message,
    ModelError,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from everchat.actors.prompt import Prompt, turn_header, turn_text, view_blocks
from everchat.actors.folder.usage import Tally

__all__ = [
    "DRAFT_SECONDS",
    "INCOMPLETE",
    "Input",
    "ToolOutcome",
    "TurnIO",
    "TurnRunner",
    "incomplete_text",
    "view_lines",
]

DRAFT_SECONDS = 0.1
"""How often a streaming reply's text is saved as a draft: a crash loses at most this much."""

INCOMPLETE = {
    "stopped": "stopped by the person",
    "error": "the model call failed",
    "max_tokens": "cut at the output limit",
    "crashed": "Everchat stopped while it streamed",
}
"""Why a reply is incomplete, as its marker says (R37)."""

PREVIEW_CHARS = 200
DIFF_PREVIEW_CHARS = 4000
"""A write's or an edit's result is its diff: the front ends show that much of it (issue 11)."""


def incomplete_text(text: str, why: str) -> str:
    """R37: the text received so far, with a visible marker the view keeps."""
    return f"{text}\n[incomplete: {INCOMPLETE.get(why, why)}]"


def view_lines(view: str) -> list[str]:
    """The lines of a rendered view (R14), without `<chat>` and `</chat>`."""
    body = view.removeprefix("<chat>\n").removesuffix("</chat>")
    return body.splitlines()


# --- one turn -------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """A message of the person, logged under `ids` (several when R8 split it)."""

    ids: tuple[int, ...]
    text: str
    images: tuple[str, ...] = ()
    origin: str = "person"  # or "report": an agent's `work` message joining the call (R38)


class Settled(Protocol):
    """What `TurnIO.settle` gives (the transport's `SettledView`): the view's text, and how
    many of its lines were not summarized when it stopped waiting."""

    text: str
    unbuilt: int


class TurnIO(Protocol):
    """What a turn does outside itself; the actor shell implements it with asks.

    - `settle()`: R36's view for the messages logged so far, once every line is built
      (or at the settle timeout, with the fallback lines): a `SettledView`.
    - `begin()`: log the turn's own message m; returns it with its ids.
    - `log(kind, text, key, images, meta)`: append one message (idempotent by key).
    - `save_draft(key, text, meta)`: the streaming reply so far (`key` None clears it).
    - `stream(request)`: the model's events; a stop ends the iteration.
    - `tool(name, arguments, key)`: run a tool; `key` is its result's idempotency key
      (a device job's id, R39); `image(digest)`: a stored image as a block.
    - `joined(final)`: messages logged since the last call; with `final`, if there are
      none, the turn is over (atomically: later input starts a fresh turn).
    - `publish(event, **fields)`: the turn event of that type name (`TurnStarted`,
      `TurnText` … `TurnEnded`, `Notice`; the transport's schema) with those fields, sent
      to the front ends; returns it. The core names its events and never builds them: a
      pure core imports nothing of the transport (tests/test_boundaries.py).
    - `stopped()`, `now()` (local time, for the header), `clock()`.
    """

    def settle(self) -> Settled: ...

    def begin(self) -> Input: ...

    def log(self, kind: str, text: str, key: str, images: Sequence[str] = (), meta: dict | None = None) -> list[int]: ...

    def save_draft(self, key: str | None, text: str, meta: dict | None) -> None: ...

    def stream(self, request: Request) -> Iterator[Any]: ...

    def tool(self, name: str, arguments: dict, key: str) -> ToolOutcome: ...

    def image(self, digest: str) -> ImageBlock: ...

    def joined(self, final: bool) -> list[Input]: ...

    def publish(self, event: str, **fields: Any) -> Any: ...

    def stopped(self) -> bool: ...

    def now(self) -> datetime: ...

    def clock(self) -> float: ...


@dataclass
class _Call:
    """What one model call gave."""

    blocks: list = field(default_factory=list)  # the assistant message, in order
    calls: list[ToolCall] = field(default_factory=list)
    stop: Stop | None = None
    ended: str = ""  # "", "stopped", "error"
    detail: str = ""
    incomplete: bool = False


class TurnRunner:
    """Runs turns one at a time over a `TurnIO`. `prompt` is the chat's one `Prompt`
    (R34: byte-identical for every turn and compaction of a run); `tools` answers the
    memory tools and any extra ones (name -> callable(arguments) -> ToolOutcome)."""

    def __init__(self, prompt: Prompt, model: str, *, effort: str | None = None, max_tokens: int = 8192,
                 tool_rounds: int = 50, timeout: float = 600.0,
                 computers: Sequence[str] | Callable[[], Sequence[str]] | None = None) -> None:
        if tool_rounds < 1:
            raise ValueError("tool_rounds is at least 1")
        self.prompt = prompt
        self.model = model
        self.effort = effort
        self.max_tokens = max_tokens
        self.tool_rounds = tool_rounds
        self.timeout = timeout
        self.computers = computers
        self.usage = Tally()  # this run's turns

    def __repr__(self) -> str:
        return f"TurnRunner({self.model}, tool_rounds={self.tool_rounds})"

    def first_message(self, view: str, header: str, message: Input, images: Sequence[ImageBlock] = (),
                      joined: Sequence[tuple[Input, Sequence[ImageBlock]]] = ()) -> Message:
        """R36: `[view blocks] [turn header + m]` as one user message; inputs that arrived
        while the view settled follow m. R23's last mark goes on the last block later."""
        blocks: list = list(view_blocks(view_lines(view)))
        blocks.append(TextBlock(turn_text(header, message.text)))
        blocks += images
        for later, later_images in joined:
            blocks += self.joined_blocks(later, later_images)
        return Message("user", tuple(blocks))

    def joined_blocks(self, message: Input, images: Sequence[ImageBlock]) -> list:
        """R36: a message that arrived while the call worked, as the model reads it."""
        return _joined_blocks(message, images)

    def request(self, messages: Sequence[Message]) -> Request:
        """The call for a conversation so far: one cache mark at its very end (R23),
        besides the system prompt's and the view's."""
        *head, last = messages
        *blocks, tail = last.content
        marked = Message(last.role, (*blocks, replace(tail, cache=True)))
        return Request(model=self.model, system=self.prompt.system, tools=self.prompt.tools,
                       messages=(*head, marked), cache_system=True, max_tokens=self.max_tokens,
                       effort=self.effort, timeout=self.timeout, label="turn")

    def run(self, io: TurnIO) -> Any:
        """One whole turn (R36, R37): settle, log m, the tool loop. Returns its end event
        (also published)."""
        settled = io.settle()
        message = io.begin()
        turn = message.ids[0]
        seq = _Keys(turn)
        io.publish("TurnStarted", turn=turn)
        if settled.unbuilt:
            # The view's budget may not hold every cut message (R36, issue 20): say so.
            io.publish("Notice", level="warning", text=f"{settled.unbuilt} line(s) of the view were not summarized "
                       f"in time; the turn shows their messages cut to {LINE_LIMIT} bytes, newest first as far "
                       f"as the view's budget allows, and the rest as lines to zoom.")
        early = [(later, [io.image(d) for d in later.images]) for later in io.joined(final=False)]
        for later, _ in early:
            io.publish("TurnJoined", turn=turn, message=later.ids[0])
        # R36: the computers joined now, asked afresh for each turn (the devices' hub)
        computers = self.computers() if callable(self.computers) else self.computers
        header = turn_header(io.now(), computers)
        first = self.first_message(settled.text, header, message, [io.image(d) for d in message.images], early)
        messages = [first]
        rounds = 0
        while True:
            call = self._call(io, turn, seq, self.request(messages))
            if call.ended:
                return self._end(io, turn, call.ended, call.incomplete, call.detail, seq, call.calls)
            results = [self._run_tool(io, turn, seq, tool_call) for tool_call in call.calls]
            if call.calls:
                rounds += 1
                if rounds >= self.tool_rounds:
                    detail = (f"The turn stopped after {rounds} tool rounds (the tool_rounds setting); "
                              f"send a message to go on.")
                    return self._end(io, turn, "round_limit", call.incomplete, detail, seq)
            later = io.joined(final=not call.calls)
            if not call.calls and not later:
                return self._end(io, turn, "done", call.incomplete, "", seq)
            blocks: list = list(results)
            for each in later:
                io.publish("TurnJoined", turn=turn, message=each.ids[0])
                blocks += self.joined_blocks(each, [io.image(d) for d in each.images])
            messages.append(Message("assistant", tuple(call.blocks) or (TextBlock("(no reply)"),)))
            messages.append(Message("user", tuple(blocks)))

    # -- one call ---------------------------------------------------------------------

    def _call(self, io: TurnIO, turn: int, seq: "_Keys", request: Request) -> _Call:
        call = _Call()
        text: list[str] = []
        thinking: list[str] = []
        signature = ""
        key = seq.next()
        last_draft = -math.inf
        drafted = False

        def close_thinking() -> None:
            nonlocal thinking, signature
            if thinking or signature:
                call.blocks.append(ThinkingBlock("".join(thinking), signature))
                io.publish("TurnThinkingDone", turn=turn)
            thinking, signature = [], ""

        def flush_text(why: str = "") -> None:
            nonlocal text, key, drafted, last_draft
            body = "".join(text)
            if body.strip():
                call.blocks.append(TextBlock(body))
                meta = {"turn": turn}
                if why:
                    meta["incomplete"] = why
                    body = incomplete_text(body, why)
                io.log("everchat", body, key, meta=meta)
            if drafted:
                io.save_draft(None, "", None)
            text, drafted, last_draft = [], False, -math.inf
            key = seq.next()

        stream = io.stream(request)
        try:
            for event in stream:
                if io.stopped():
                    call.ended = "stopped"
                    break
                if isinstance(event, TextDelta):
                    close_thinking()
                    if not event.text:
                        continue
                    text.append(event.text)
                    now = io.clock()
                    if now - last_draft >= DRAFT_SECONDS:
                        # Saved before it is shown: what the person saw survives a crash.
                        io.save_draft(key, "".join(text), {"turn": turn, "incomplete": "crashed"})
                        last_draft, drafted = now, True
                    io.publish("TurnText", turn=turn, text=event.text)
                elif isinstance(event, ThinkingDelta):
                    if text:
                        flush_text()
                    if event.text:
                        thinking.append(event.text)
                        io.publish("TurnThinking", turn=turn, text=event.text)
                    if event.signature:
                        signature = event.signature
                elif isinstance(event, ToolCall):
                    close_thinking()
                    flush_text()
                    arguments = json.dumps(dict(event.input), ensure_ascii=False, sort_keys=True)
                    io.log("tool", f"{event.name} {arguments}", seq.next(), meta={"turn": turn, "call": event.id})
                    io.publish("TurnToolCall", turn=turn, call_id=event.id, name=event.name,
                               arguments_json=arguments)
                    call.calls.append(event)
                    call.blocks.append(ToolUseBlock(event.id, event.name, dict(event.input)))
                elif isinstance(event, Usage):
                    self.usage.count(event)
                elif isinstance(event, Stop):
                    call.stop = event
            if not call.ended and io.stopped():
                call.ended = "stopped"
        except ModelError as error:
            call.ended, call.detail = "error", f"{type(error).__name__}: {error}"
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # a stopped call closes its HTTP stream
        close_thinking()
        if call.ended:
            call.incomplete = bool("".join(text).strip())
            flush_text(call.ended)
        elif call.stop is not None and call.stop.incomplete:
            call.incomplete = bool("".join(text).strip())
            flush_text("max_tokens")
        else:
            flush_text()
        if call.ended == "stopped" and call.calls:
            call.detail = "Stopped; the tool calls it had asked for were not run."
        return call

    def _run_tool(self, io: TurnIO, turn: int, seq: "_Keys", tool_call: ToolCall) -> ToolResultBlock:
        key = seq.next()
        outcome = io.tool(tool_call.name, dict(tool_call.input), key)
        meta = {"turn": turn, "call": tool_call.id}
        if outcome.is_error:
            meta["error"] = True
        io.log("echo", outcome.text or "(empty)", key, images=outcome.digests, meta=meta)
        shown = DIFF_PREVIEW_CHARS if tool_call.name in ("write", "edit") else PREVIEW_CHARS
        io.publish("TurnToolResult", turn=turn, call_id=tool_call.id, name=tool_call.name,
                   is_error=outcome.is_error, preview=outcome.text[:shown])
        content = (TextBlock(outcome.text or "(empty)"), *outcome.images)
        return ToolResultBlock(tool_call.id, content, outcome.is_error)

    def _end(self, io: TurnIO, turn: int, reason: str, incomplete: bool, detail: str, seq: "_Keys",
             unrun: Sequence[ToolCall] = ()) -> Any:
        for tool_call in unrun:
            # A call logged as `tool` always gets its `echo`, so the log reads whole.
            io.log("echo", "(not run: the turn ended before it)", seq.next(),
                   meta={"turn": turn, "call": tool_call.id, "error": True})
        if reason != "done":
            # Messages typed meanwhile stay logged (the next turn's view holds them); a
            # turn that ends so takes in nothing more.
            io.joined(final=True)
        return io.publish("TurnEnded", turn=turn, reason=reason, incomplete=incomplete, detail=detail)


def _joined_blocks(message: Input, images: Sequence[ImageBlock]) -> list:
    if message.origin == "report":
        head = f"[An agent's report arrived while you worked (message {message.ids[0]}):]\n"
    else:
        head = f"[The person wrote this while you worked (message {message.ids[0]}):]\n"
    return [TextBlock(head + (message.text or "(no text)")), *images]


class _Keys:
    """Idempotency keys of what a turn logs: `turn-<m>-<n>`, unique in the chat."""

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"turn-{self.turn}-{self.n}"
