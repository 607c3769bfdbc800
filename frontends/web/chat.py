"""What the web server reads and does through a `ChatSession`, as the JSON of docs/WEB.md.

Every method blocks (asks to the actors): the server runs them in its thread pool, never
on the event loop. Reads go through the session's retrying reader (`session.memory.reader`,
the same asks the model's zoom tool makes, R35); nothing here opens the chat folder.

`parse_view` and `parse_line` are pure: a rendered view (R14, placeholders R15) as LINEs.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from everchat.actors.tree import PLACEHOLDER, key_of, render_line
from everchat.actors.hands import check_agent_name
from everchat.actors.zoom import ZoomError
from everchat.transport import RemoteError, schema

__all__ = ["WebChat", "parse_view", "parse_line", "message_json", "HISTORY_LIMIT", "REPLY_SCAN"]

HISTORY_LIMIT = 200
"""`GET /api/history` pages at most 200 messages."""
REPLY_SCAN = 256
"""How far back `reply_of` looks for a turn's reply before it answers null."""
_ASK_SECONDS = 30.0
_LINE = re.compile(r"(\d+)\+(\d+)\|(.*)", re.DOTALL)
_KINDS = {"everchat": "assistant"}  # docs/WEB.md names the agent's replies "assistant"; R3's other kinds as they are


def parse_line(line: str) -> dict:
    """One view line `first+count|text` (R14) as a LINE; `built` is false for R15's
    placeholder. `bytes` is R16's size: the line's UTF-8 bytes and its newline."""
    match = _LINE.fullmatch(line)
    if match is None:
        raise ValueError(f"not a view line: {line[:80]!r}")
    text = match[3]
    return {"first": int(match[1]), "count": int(match[2]), "text": text, "bytes": len(line.encode()) + 1,
            "built": text != PLACEHOLDER}


def parse_view(view: str) -> list[dict]:
    """The LINEs of a rendered view (`<chat>`, lines, `</chat>`, R14)."""
    body = view.removeprefix("<chat>\n").removesuffix("</chat>")
    return [parse_line(line) for line in body.splitlines()]


def message_json(record: Any) -> dict:
    """A `MessageRecord` as a MSG: id, kind, text, date, images, incomplete (R37), and
    `part`/`parts` for a long text logged in parts (R8)."""
    meta = record.meta or {}
    out = {"id": record.i, "kind": _KINDS.get(record.kind, record.kind), "text": record.text, "date": record.date,
           "images": list(record.images), "incomplete": bool(meta.get("incomplete"))}
    if isinstance(meta.get("parts"), int) and meta["parts"] > 1:
        out["part"], out["parts"] = meta.get("part"), meta["parts"]
    return out


class WebChat:
    """A `ChatSession` seen from the web server (docs/WEB.md's routes)."""

    def __init__(self, session) -> None:
        self.session = session
        self.reader = session.memory.reader

    def __repr__(self) -> str:
        return f"<WebChat {self.session!r}>"

    # -- reading ---------------------------------------------------------------------

    def count(self) -> int:
        return self.reader.count()

    def message(self, i: int) -> dict:
        """Message `i` as a MSG; a long text logged in parts (R8) whole, from its first."""
        out = message_json(self.reader.message(i))
        parts = out.pop("parts", None)
        part = out.pop("part", None)
        if parts and part in (0, 1):
            texts = [out["text"]]
            for j in range(i + 1, i + parts):
                texts.append(self.reader.message(j).text)
            out["text"] = "".join(texts)
            out["ids"] = list(range(i, i + parts))
        return out

    def history(self, before: int | None, limit: int) -> dict:
        """Up to `limit` messages with id < `before` (default: all), oldest first."""
        total = self.count()
        end = total if before is None else max(0, min(before, total))
        first = max(0, end - limit)
        return {"messages": [message_json(self.reader.message(i)) for i in range(first, end)], "count": total}

    def status(self) -> dict:
        """`ChatSession.status()` and the view's floor (docs/WEB.md's `view_floor`)."""
        figures = self.session.status()
        figures["view_floor"] = figures["planner"]["floor"]
        return figures

    def view(self, which: str) -> dict:
        """The turn view or the compaction view (R21) as LINEs, with their bytes (R16)."""
        state = self.session._ask("planner", schema.PlannerStatus(compaction=which == "compaction"),
                                  timeout=_ASK_SECONDS)
        lines = parse_view(state.view)
        return {"lines": lines, "bytes": sum(line["bytes"] for line in lines),
                "ceiling": state.status["ceiling"], "floor": state.status["floor"]}

    def zoom(self, first: Any, count: Any) -> dict:
        """R35: a line's two halves as LINEs (n >= 2), or the message (n = 1). Wrong
        arguments raise `ZoomError` with the tool's words."""
        text = self.session.memory.zoom(first, count, 1, images=False).text
        if count == 1:
            return {"message": message_json(self.reader.message(first))}
        return {"first": first, "count": count, "halves": [parse_line(line) for line in text.split("\n")]}

    def zoom_text(self, first: Any, count: Any, page: Any) -> str:
        """R35: the zoom tool's own text (an agent's name pages its transcript)."""
        if isinstance(first, str):
            return self.session.memory.transcript(first, page)
        return self.session.memory.zoom(first, count, page, images=False).text

    def date(self, i: Any) -> str:
        return self.session.memory.date(i)

    def memory(self, i: Any) -> dict:
        """The view line that holds message `i` now, and the path of nodes from it down to
        the message's leaf (R10), each as a LINE (the line itself first)."""
        self.session.memory.date(i)  # ZoomError in the tool's words for an id of no message
        for line in parse_view(self.session.view()):
            if line["first"] <= i < line["first"] + line["count"]:
                break
        else:
            raise ZoomError(f"No view line holds message {i} yet.")
        path = [line]
        count = line["count"]
        while count > 1:
            count //= 2
            first = i - i % count
            level = count.bit_length() - 1
            path.append(parse_line(render_line(key_of(level, first // count), self.reader.node(level, first // count))))
        return {"line": line, "path": path}

    def asset(self, digest: str) -> bytes:
        return self.reader.asset(digest)

    def reply_of(self, turn: int) -> int | None:
        """The id of turn `turn`'s last logged reply (kind `everchat`, R37), looked for
        among the newest `REPLY_SCAN` messages after it; None if none."""
        last = self.count() - 1
        for i in range(last, max(turn, last - REPLY_SCAN), -1):
            record = self.reader.message(i)
            if record.kind == "everchat" and (record.meta or {}).get("turn") == turn:
                return i
        return None

    # -- doing -----------------------------------------------------------------------

    def put_asset(self, data: bytes) -> str:
        """R9: store an image once; its digest."""
        return self.session._ask("log_writer", schema.PutAsset(data=data), timeout=_ASK_SECONDS).digest

    def send(self, text: str, digests: list[str]) -> schema.InputLogged:
        """R36: log the person's message; a new turn, or joined to the running one.
        `/agent NAME TASK` starts the agent at once and logs the line without a turn, as the
        terminal's does (P15, `ChatSession.agent`); a name taken is a ValueError (a 400)."""
        agent = _agent_command(text)
        if agent is not None:
            try:
                _, ident = self.session.agent(*agent)
            except RemoteError as error:
                raise ValueError(error.text) from None
            return schema.InputLogged(ids=[ident], turn=-1, joined=False)
        msg = schema.UserInput(text=text, images=list(digests), key=f"input-{uuid.uuid4().hex}")
        return self.session._ask("turn_runner", msg, timeout=self.session.settings.settle_timeout + 2 * _ASK_SECONDS)

    def stop(self, agent: str | None = None) -> None:
        """R37: end the running call; with `agent`, that agent's call and jobs (R38)."""
        if agent:
            self.session.stop_agent(agent)
        else:
            self.session.stop()

    def goal(self, text: str) -> schema.InputLogged:
        """Issue 13: `/goal TEXT` typed on the page (the turn runner keeps the loop)."""
        return self.session.goal(text)

    def goal_status(self) -> dict | None:
        return self.session.goal_status()

    def halt_goal(self) -> None:
        self.session.halt_goal()

    def note(self, text: str) -> int:
        """R3: a note without a turn; its (first) id."""
        return self.session.note(text)


def _agent_command(text: str) -> tuple[str, str] | None:
    """(name, task) of `/agent NAME TASK` typed on the page, else None (R38)."""
    head, _, rest = text.strip().partition(" ")
    if head != "/agent":
        return None
    name, _, task = rest.strip().partition(" ")
    check_agent_name(name)  # a clear ValueError for a bad name, before anything is logged
    if not task.strip():
        raise ValueError("/agent NAME TASK: the task is missing")
    return name, task.strip()
