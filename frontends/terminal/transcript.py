"""The terminal chat's pure core: the transcript and the status bar (the slash
commands are in `slash`).

Nothing here touches a terminal or a socket. `Transcript` turns a turn's events
(R36, R37) into lines: lines that are finished go to the terminal's scrollback
(`take`), the rest stays in a live block above the input (`live`) — the thinking
streams dimmed there and folds into one line when done (it is shown, never logged:
R6, R48). `status_text` writes the status
bar, e.g. ``mem 97K/128K · summarizing 3 · demo · cache 98%``.

A line is a tuple of prompt_toolkit-style `(style, text)` fragments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prompt_toolkit.utils import get_cwidth

from everchat.frontends.cli.safe_text import printable

__all__ = [
    "Line",
    "Transcript",
    "plain",
    "short_size",
    "status_lines",
    "status_text",
    "tool_line",
]

Line = tuple[tuple[str, str], ...]

THINKING_ROWS = 6
"""The live thinking shows its last rows only: it is a glimpse, folded when done."""

LOGGED_ROWS = 4
"""Rows shown of each message from the log when the chat opens."""


def plain(line: Line) -> str:
    """A line's text without its styles."""
    return "".join(text for _, text in line)


# ---- the status bar ---------------------------------------------------------------------------


def short_size(size: int | None) -> str:
    """Bytes for the status bar: 812B, 9.7K, 97K, 1.2M (K = 1,000, as the view's budget)."""
    if size is None:
        return "?"
    if size < 1000:
        return f"{size}B"
    if size < 10_000:
        return f"{size / 1000:.1f}K"
    if size < 1_000_000:
        return f"{size // 1000}K"
    return f"{size / 1_000_000:.1f}M"


def status_text(status: Mapping[str, Any], extra: tuple[str, ...] = ()) -> str:
    """`mem 97K/128K · summarizing 3 · demo · cache 98%`, plus the terminal's own `extra`.

    `status` is `ChatSession.status()`: view_bytes and view_budget (R16, R19's
    ceiling), pending summaries, failed compactions (R30: never silent), the reply
    model, the share of prompt tokens read from the cache.
    """
    parts = []
    if status:
        parts.append(f"mem {short_size(status.get('view_bytes'))}/{short_size(status.get('view_budget'))}")
        pending = status.get("pending") or 0
        if not isinstance(pending, int):
            pending = len(pending)
        if pending:
            parts.append(f"summarizing {pending}")
        failures = status.get("failures") or 0
        if not isinstance(failures, int):
            failures = len(failures)
        if failures:
            parts.append(f"{failures} failed")
        if status.get("model"):
            parts.append(str(status["model"]))
        share = status.get("cache_share")
        if share is not None:
            parts.append(f"cache {round(100 * share)}%")
    parts.extend(extra)
    return " · ".join(parts)


def status_lines(status: Mapping[str, Any]) -> list[str]:
    """/status and /memory: the session's status in words."""
    planner = status.get("planner") or {}
    usage = status.get("usage") or {}
    lines = [f"messages: {status.get('messages', '?')}"]
    lines.append(f"view: {status.get('view_bytes', '?')} bytes in {planner.get('view_lines', '?')} lines "
                 f"(R19: merges past {status.get('view_budget', '?')}, down to {planner.get('floor', '?')})")
    lines.append(f"summaries: {status.get('pending', 0)} pending, {planner.get('running', 0)} being written, "
                 f"{status.get('failures', 0)} failed calls this run")
    share = status.get("cache_share")
    cache = f" · {round(100 * share)}% of prompt tokens read from the cache" if share is not None else ""
    lines.append(f"model: {status.get('model', '?')}{cache}")
    if usage:
        lines.append("tokens: " + ", ".join(f"{key.replace('_', ' ')} {value:,}" for key, value in usage.items()))
    return lines


# ---- the transcript ---------------------------------------------------------------------------


def tool_line(name: str, arguments_json: str) -> str:
    """One tool call on one line: `zoom(id=40, n=8)`."""
    try:
        arguments = json.loads(arguments_json) if arguments_json else {}
    except ValueError:
        return f"{name}({arguments_json})"
    if isinstance(arguments, dict):
        inner = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items())
    else:
        inner = json.dumps(arguments, ensure_ascii=False)
    return f"{name}({inner})"


def goal_line(event: Any) -> tuple[str, str]:
    """Issue 13: (level, text) of a `GoalEvent`, for the terminal and the page alike."""
    turns = f"{event.turns} turn{'s' if event.turns != 1 else ''}"
    if event.event == "set":
        return "info", f"◎ goal: {event.goal} — working until a check finds it met (/halt drops it)"
    if event.event == "continuing":
        said = f" (the check: {event.detail})" if event.detail else ""
        return "info", f"◎ The goal isn't met yet: keep working.{said} [{turns} so far]"
    if event.event == "met":
        return "info", f"◎ Goal met. ({event.goal}, {turns})"
    if event.event == "paused":
        return "warning", (f"◎ the goal is paused: {event.detail or 'it waits for you'} — send a message to go on, "
                           f"or /halt to drop it ({event.goal})")
    if event.event == "resumed":
        why = f" {event.detail}" if event.detail else ""
        return "info", f"◎ the goal goes on{why}: {event.goal}"
    if event.event == "halted":
        return "info", f"◎ Goal dropped. ({event.goal})"
    return "info", f"◎ goal {event.event}: {event.detail or event.goal}"


def after_turn_line(event: Any) -> str:
    """Issue 13: a failed after-turn command's line."""
    return f"✗ after turn {event.turn}: {event.detail}"


def _visible(line: Line) -> Line:
    """A line's fragments with their controls made visible; a `\r` that ended a row of
    `\r\n` text is dropped (the row's end is the newline)."""
    return tuple((style, printable(text.removesuffix("\r"))) for style, text in line)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fit(text: str, width: int) -> str:
    """`text` cut to `width` terminal columns (wide characters count two), marked with …."""
    if get_cwidth(text) <= width:
        return text
    used, out = 1, []
    for char in text:
        used += get_cwidth(char)
        if used > width:
            break
        out.append(char)
    return "".join(out) + "…"


def _rows(text: str, width: int) -> list[str]:
    """`text` as the terminal shows it: split at newlines, wrapped at `width` characters."""
    rows = []
    for line in text.split("\n"):
        rows.extend(line[at:at + width] for at in range(0, max(len(line), 1), width))
    return rows


@dataclass
class _Tool:
    name: str
    call: str


class Transcript:
    """The chat as the terminal shows it, built from turn events (R36, R37).

    Finished lines queue up for the scrollback (`take`); what is still being
    written is the live block (`live`). One turn runs at a time; input that
    joins it (R36) shows as a user line in the middle of its reply.
    """

    def __init__(self, width: int = 80) -> None:
        self.width = width
        self.turn: int | None = None
        self.running = False
        self._out: list[Line] = []
        self._thinking = ""
        self._text = ""  # the reply's unfinished last line
        self._tools: dict[str, _Tool] = {}

    # -- what the terminal reads ------------------------------------------------------------

    def take(self) -> list[Line]:
        """Lines finished since the last call, for the scrollback, oldest first; their
        control characters made visible (P20: stored text never drives the terminal)."""
        out, self._out = self._out, []
        return [_visible(line) for line in out]

    def live(self, rows: int = 8) -> list[Line]:
        """What is still being written: the thinking (dimmed, its last rows), tool calls
        waiting for their result, the reply's unfinished line."""
        lines: list[Line] = []
        if self._thinking:
            shown = min(rows, THINKING_ROWS)
            lines.extend((("class:thinking", row),) for row in _rows(self._thinking, self.width)[-shown:])
        for tool in self._tools.values():
            lines.append((("class:tool", _fit(f"⚙ {tool.call} …", self.width)),))
        if self._text:
            lines.extend((("class:reply", row),) for row in _rows(self._text, self.width)[-rows:])
        return [_visible(line) for line in lines]

    # -- what the terminal writes -------------------------------------------------------------

    def user(self, text: str, images: tuple[str, ...] = ()) -> None:
        """The person's message, as sent (it joins the running turn if there is one)."""
        self._flush_text()  # a joining message never splits a reply's line
        for at, row in enumerate(text.split("\n")):
            self._out.append((("class:user.prompt", "› " if at == 0 else "  "), ("class:user", row)))
        for image in images:
            self._out.append((("class:info", f"  [image {image}]"),))

    def logged(self, message: int, text: str) -> None:
        """A message from the log (`zoom(id, 1)`'s `kind: text`), as the chat opens: its
        first rows; tool calls as calls; tool results left out."""
        kind, _, body = text.partition(": ")
        rows = body.split("\n")
        shown = "\n".join(rows[:LOGGED_ROWS]) + (f" … (/zoom {message} for all)" if len(rows) > LOGGED_ROWS else "")
        if kind == "user":
            self.user(shown)
        elif kind == "everchat":
            self.info(shown, "class:reply")
        elif kind == "tool":
            name, _, arguments = body.partition(" ")
            self.info(_fit("⚙ " + tool_line(name, arguments), self.width), "class:tool")
        elif kind != "echo":
            self.info(f"{kind}: {shown}")

    def info(self, text: str, style: str = "class:info") -> None:
        for row in text.split("\n"):
            self._out.append(((style, row),))

    def error(self, text: str) -> None:
        self.info(text, "class:error")

    # -- events ------------------------------------------------------------------------------

    def on_event(self, event: Any) -> None:
        """Apply one turn event (the msgpack types the turn runner publishes)."""
        handler = getattr(self, "_on_" + type(event).__name__, None)
        if handler is None:
            raise TypeError(f"the transcript has no use for {type(event).__name__}")
        handler(event)

    def _begin(self, turn: int) -> None:
        if not self.running or self.turn != turn:
            self.turn, self.running = turn, True

    def _on_TurnStarted(self, event) -> None:
        self._finish_live()
        self.turn, self.running = event.turn, True

    def _on_TurnThinking(self, event) -> None:
        self._begin(event.turn)
        self._thinking += event.text

    def _on_TurnThinkingDone(self, event) -> None:
        self._begin(event.turn)
        self._fold_thinking()

    def _on_TurnText(self, event) -> None:
        self._begin(event.turn)
        self._fold_thinking()
        self._text += event.text
        *done, self._text = self._text.split("\n")
        for row in done:
            self._out.append((("class:reply", row),))

    def _on_TurnToolCall(self, event) -> None:
        self._begin(event.turn)
        self._fold_thinking()
        self._flush_text()
        self._tools[event.call_id] = _Tool(event.name, tool_line(event.name, event.arguments_json))

    def _on_TurnToolResult(self, event) -> None:
        self._begin(event.turn)
        tool = self._tools.pop(event.call_id, None)
        call = tool.call if tool else f"{event.name}(…)"
        preview = _one_line(event.preview)
        if event.is_error:
            self._out.append((("class:tool.error", _fit(f"✗ {call} → {preview}", self.width)),))
        elif event.name in ("write", "edit"):
            self._diff(call, event.preview)
        else:
            self._out.append((("class:tool", _fit(f"⚙ {call} → {preview}", self.width)),))

    _DIFF_ROWS = 40

    def _diff(self, call: str, text: str) -> None:
        """Issue 11: a write or an edit shows its diff, added lines green, removed red."""
        head, *rows = text.split("\n")
        self._out.append((("class:tool", _fit(f"⚙ {call} → {head}", self.width)),))
        for row in rows[:self._DIFF_ROWS]:
            style = ("class:diff.add" if row.startswith("+") and not row.startswith("+++")
                     else "class:diff.remove" if row.startswith("-") and not row.startswith("---") else "class:tool")
            self._out.append(((style, _fit(f"  {row}", self.width)),))
        if len(rows) > self._DIFF_ROWS:
            self._out.append((("class:tool", f"  … {len(rows) - self._DIFF_ROWS} more lines: /zoom shows them"),))

    def _on_TurnJoined(self, event) -> None:
        self._begin(event.turn)
        self.info(f"↳ message {event.message} joined the reply in progress")

    def _on_UserMessage(self, event) -> None:
        """Another client's message (`everchat connect`: a page typed it), shown as a user's;
        one that joined the running reply says so (R36)."""
        self.user(event.text, tuple(f"{digest[:12]} (sent elsewhere)" for digest in event.images))
        if event.turn != event.message:
            self._on_TurnJoined(event)

    def _on_TurnEnded(self, event) -> None:
        self._finish_live()
        self.running = False
        detail = f": {event.detail}" if event.detail else ""
        if event.reason == "stopped":
            self.info("⏹ stopped — the reply so far is kept, marked incomplete", "class:warning")
        elif event.reason == "error":
            kept = " (the reply so far is kept, marked incomplete)" if event.incomplete else ""
            self.info(f"✗ the reply failed{detail}{kept}", "class:error")
        elif event.reason == "round_limit":
            self.info(f"⏹ the turn reached its limit of tool rounds{detail}", "class:warning")
        elif event.incomplete:
            self.info(f"(the reply is incomplete{detail})", "class:warning")

    def lost_end(self) -> None:
        """The turn is over by the turn runner's word but its `TurnEnded` never came (turn
        events are hints, dropped when a mailbox is full): close the live block anyway."""
        self._finish_live()
        self.running = False
        self.info("(the end of this reply was lost on the way; the log has it all: /zoom shows it)", "class:warning")

    def _on_AgentEvent(self, event) -> None:
        """R38: an agent's news, one dim line; its end in the state's colour (the report
        itself arrives in the chat as a `work` message)."""
        style = {"failed": "class:error", "stopped": "class:warning"}.get(event.state, "class:tool")
        self.info(_fit(f"◆ [{event.name}] {event.state}: {_one_line(event.text)}", self.width), style)

    def _on_JobOutput(self, event) -> None:
        """R39: a shell command of the chat's own turn prints as it runs (an agent's show in
        its transcript); each line dim under the tool's line."""
        if event.caller != "main":
            return
        for row in event.text.rstrip("\n").split("\n"):
            self._out.append((("class:tool", _fit(f"  │ {row}", self.width)),))

    def _on_GoalEvent(self, event) -> None:
        """Issue 13: the goal's news, one line apart from the replies."""
        level, text = goal_line(event)
        self.info(_fit(text, self.width) if event.event != "continuing" else text,
                  {"warning": "class:warning", "error": "class:error"}.get(level, "class:tool"))

    def _on_AfterTurnFailed(self, event) -> None:
        """Issue 13: a failed after-turn command, apart from the reply (which stays saved)."""
        self.info(after_turn_line(event), "class:error")

    def _on_Notice(self, event) -> None:
        style = {"error": "class:error", "warning": "class:warning"}.get(event.level, "class:info")
        self.info(f"! {event.text}", style)

    # -- folding ---------------------------------------------------------------------------------

    def _fold_thinking(self) -> None:
        """The thinking shrinks to one dim line once the model is done with it."""
        if self._thinking:
            words = len(self._thinking.split())
            self._out.append((("class:thinking", f"▸ thought for {words} word{'s' if words != 1 else ''}"),))
            self._thinking = ""

    def _flush_text(self) -> None:
        if self._text:
            self._out.append((("class:reply", self._text),))
            self._text = ""

    def _finish_live(self) -> None:
        self._fold_thinking()
        self._flush_text()
        for tool in self._tools.values():
            self._out.append((("class:tool", _fit(f"⚙ {tool.call} (no result)", self.width)),))
        self._tools.clear()
