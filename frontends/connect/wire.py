"""`everchat connect`'s pure part: the link it is given and the frames it receives
(docs/WEB.md). No sockets here; `remote.RemoteSession` does the talking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yarl import URL

from everchat.transport import schema

__all__ = ["Link", "LinkError", "UserMessage", "event_of", "one_line", "parse_link", "same_lines"]


class LinkError(ValueError):
    """The link is not `http(s)://HOST:PORT/#TOKEN` (or `#pair=CODE`): bad usage."""


@dataclass(frozen=True, slots=True)
class UserMessage:
    """Event: another client (a page, another `connect`) sent message `message`, which
    opened turn `turn` (`turn == message`) or joined it (R36). `images`: the digests."""

    turn: int
    message: int
    text: str
    images: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Link:
    """A parsed `URL#TOKEN`: the server's base URL and the secret, which `repr` hides."""

    base: URL
    secret: str
    pairing: bool

    def __repr__(self) -> str:
        return f"Link({self.base}, {'pair code' if self.pairing else 'token'} hidden)"

    @property
    def origin(self) -> str:
        return str(self.base.origin())


def parse_link(link: str) -> Link:
    """`http://HOST:PORT/#TOKEN` (or `…/#pair=CODE`) -> `Link`; `LinkError` in words otherwise.
    The words never repeat the secret."""
    try:
        url = URL(link.strip())
    except (ValueError, TypeError) as error:
        raise LinkError(f"not a link: {error}") from None
    if url.scheme not in ("http", "https"):
        raise LinkError(f"the link must start with http:// or https://, not {url.scheme + ':' if url.scheme else '(nothing)'}"
                        " (copy the line `everchat web` printed)")
    if not url.host:
        raise LinkError("the link names no host (copy the line `everchat web` printed)")
    secret = url.fragment
    pairing = secret.startswith("pair=")
    if pairing:
        secret = secret.removeprefix("pair=")
    if not secret:
        raise LinkError("the link has no #TOKEN at its end: use the whole link `everchat web` printed, "
                        "quoted ('http://HOST:PORT/#TOKEN')")
    return Link(url.with_fragment(None).with_query(None).with_path("/"), secret, pairing)


_EVENTS = {
    "started": lambda e: schema.TurnStarted(int(e["turn"])),
    "text": lambda e: schema.TurnText(int(e["turn"]), str(e["text"])),
    "thinking": lambda e: schema.TurnThinking(int(e["turn"]), str(e["text"])),
    "thinking_done": lambda e: schema.TurnThinkingDone(int(e["turn"])),
    "tool_call": lambda e: schema.TurnToolCall(int(e["turn"]), str(e["call_id"]), str(e["name"]),
                                               str(e.get("arguments") or "")),
    "tool_result": lambda e: schema.TurnToolResult(int(e["turn"]), str(e["call_id"]), str(e["name"]),
                                                   bool(e["is_error"]), str(e.get("preview") or "")),
    "ended": lambda e: schema.TurnEnded(int(e["turn"]), str(e["reason"]), bool(e.get("incomplete")),
                                        str(e.get("detail") or "")),
    "notice": lambda e: schema.Notice(str(e.get("level") or "info"), str(e.get("text") or "")),
    "goal": lambda e: schema.GoalEvent(str(e["event"]), str(e.get("goal") or ""), int(e.get("turns") or 0),
                                       str(e.get("detail") or "")),
    "after_turn": lambda e: schema.AfterTurnFailed(int(e["turn"]), str(e.get("detail") or "")),
}


def event_of(frame: dict) -> Any:
    """The `transport.schema` event of one WebSocket frame (not `user`, which needs the
    session's own sends); None for a type the terminal has no use for (`status`)."""
    make = _EVENTS.get(frame.get("type"))
    return make(frame) if make else None


def one_line(text: str) -> str:
    """R14: a view line's CR LF, CR and LF each become one space."""
    return text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def same_lines(text: str) -> str:
    """`text` with every CR LF and CR as LF, for comparing a sent text with its logged one."""
    return text.replace("\r\n", "\n").replace("\r", "\n")
