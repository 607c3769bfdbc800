"""The memory tools (R35): `zoom(id, n)`, `zoom(id, 1)` with images and pages,
`zoom("Name")` and `date(id)`, with a clear error for each wrong argument.

`MemoryTools` runs over any `MemoryReader` (message count, messages, tree nodes, assets):
the turn runner's and a session's asks to the log writer. The turn runner hands the
model's tool calls to `call(name, arguments)`; front ends call `zoom`, `date` and
`transcript`, which raise `ZoomError` with the same words. This is R35's one
implementation: the CLI's `zoom` and `date` (through `Planning.zoom`), the terminal's
`/zoom` (through the session) and the model's tool all run it, so all say the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from everchat.actors.tree import children, key_of, node_of, render_line
from everchat.actors.models import ImageBlock

__all__ = ["MemoryReader", "MemoryTools", "ToolOutcome", "ZoomError", "ZOOM_PAGE_BYTES", "media_type"]

ZOOM_PAGE_BYTES = 16_000
"""R35: `zoom(id, 1)` returns a message in pages of 16,000 bytes."""


class ZoomError(ValueError):
    """A `zoom` or `date` call with arguments that name no line (R35)."""


def media_type(data: bytes) -> str:
    """The image type of stored bytes (R9 checked them when they were stored)."""
    from everchat.actors.folder._assets import image_type

    kind = image_type(data)
    if kind is None:
        raise ValueError("a stored asset is not an image")
    return f"image/{kind}"


class MemoryReader(Protocol):
    """What `MemoryTools` reads: the message count, messages, tree nodes, assets."""

    def count(self) -> int: ...

    def message(self, i: int) -> Any: ...  # .kind, .text, .date, .images

    def node(self, l: int, i: int) -> str | None: ...  # noqa: E741

    def asset(self, digest: str) -> bytes: ...


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's answer: text (logged as `echo`), images (sent to the model; `digests` are
    logged with the echo), and whether it is an error the model should read as one."""

    text: str
    is_error: bool = False
    images: tuple[ImageBlock, ...] = ()
    digests: tuple[str, ...] = ()


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class MemoryTools:
    """R35's `zoom` and `date` over a reader, with a clear error for each wrong argument.

    `agents` maps an agent's name to a callable `(page) -> str` for its transcript; no
    agents exist yet, so by default every name is "no agent named X".
    """

    def __init__(self, reader: MemoryReader, agents: Callable[[str, int], str] | None = None) -> None:
        self.reader = reader
        self.agents = agents

    # the tools as the model calls them: a dict of arguments -> ToolOutcome

    def call(self, name: str, arguments: dict) -> ToolOutcome:
        try:
            if name == "zoom":
                return self._zoom_call(arguments)
            if name == "date":
                unknown = sorted(set(arguments) - {"id"})
                if unknown:
                    raise ZoomError(f"date takes only id, not {', '.join(map(repr, unknown))}.")
                if "id" not in arguments:
                    raise ZoomError("date needs id: the message's id, e.g. date(12).")
                return ToolOutcome(self.date(arguments["id"]))
        except ZoomError as error:
            return ToolOutcome(str(error), is_error=True)
        return ToolOutcome(f"No tool called {name!r}.", is_error=True)

    def _zoom_call(self, arguments: dict) -> ToolOutcome:
        unknown = sorted(set(arguments) - {"id", "n", "page", "name"})
        if unknown:
            raise ZoomError(f"zoom takes id, n and page, or name; not {', '.join(map(repr, unknown))}.")
        page = arguments.get("page", 1)
        target = arguments.get("name")
        first = arguments.get("id")
        if isinstance(first, str) and target is None:
            target, first = first, None  # zoom("Name") with the name where the id goes
        if target is not None:
            if first is not None or "n" in arguments:
                raise ZoomError("zoom takes either id and n, or name, not both.")
            return ToolOutcome(self.transcript(target, page))
        if first is None:
            raise ZoomError("zoom needs id and n (e.g. zoom(0, 8), zoom(12, 1)), or an agent's name.")
        return self.zoom(first, arguments.get("n", 1), page)

    # the same as plain methods, raising ZoomError (the session's zoom and date)

    def zoom(self, first: Any, count: Any = 1, page: Any = 1, *, images: bool = True) -> ToolOutcome:
        """R35: zoom(id, n >= 2) gives the two child lines (R14, placeholder when unbuilt);
        zoom(id, 1) gives `kind: text` whole with its images, in pages of 16,000 bytes.
        `images=False` leaves the image bytes unread (the text names them all the same):
        a front end that prints the text has no use for them."""
        if not _whole(first):
            raise ZoomError(f"id must be a whole number, not {first!r}.")
        if not _whole(count):
            raise ZoomError(f"n must be a whole number (a power of two), not {count!r}.")
        if not _whole(page):
            raise ZoomError(f"page must be a whole number, not {page!r}.")
        messages = self.reader.count()
        line = f"No line {first}+{count}."
        if count < 1 or count & (count - 1):
            raise ZoomError(f"{line} n must be a power of two: 1, 2, 4, 8 …")
        if first < 0 or first % count:
            raise ZoomError(f"{line} id must be a multiple of n, at least 0.")
        if first + count > messages:
            raise ZoomError(f"{line} The chat has {_held(messages)}.")
        if count >= 2:
            if page != 1:
                raise ZoomError(f"Line {first}+{count} has one page, not page {page}.")
            up = key_of(count.bit_length() - 1, first // count)
            lines = []
            for half in children(up):
                lines.append(render_line(half, self._node(half)))
            return ToolOutcome("\n".join(lines))
        record = self.reader.message(first)
        pages = _pages(f"{record.kind}: {record.text}")
        if not 1 <= page <= len(pages):
            plural = "s" if len(pages) > 1 else ""
            raise ZoomError(f"Message {first} has {len(pages)} page{plural}, not page {page}.")
        text = pages[page - 1]
        blocks: list[ImageBlock] = []
        digests = tuple(record.images)
        if digests:
            text += "\n" + "\n".join(f"[image {digest}]" for digest in digests)
            for digest in digests if images else ():
                data = self.reader.asset(digest)
                blocks.append(ImageBlock(data, media_type(data)))
        if page < len(pages):
            text += f"\n(page {page} of {len(pages)}: zoom({first}, 1, page={page + 1}) for the rest)"
        return ToolOutcome(text, images=tuple(blocks), digests=digests)

    def _node(self, key: int) -> str | None:
        return self.reader.node(*node_of(key))

    def date(self, message: Any) -> str:
        """R35: the local date and time message `id` was logged."""
        if not _whole(message):
            raise ZoomError(f"id must be a whole number, not {message!r}.")
        messages = self.reader.count()
        if not 0 <= message < messages:
            raise ZoomError(f"No message {message}: the chat has {_held(messages)}.")
        return self.reader.message(message).date

    def transcript(self, agent: Any, page: Any = 1) -> str:
        """R35: zoom("Name"), an agent's transcript, paged."""
        if not isinstance(agent, str) or not agent:
            raise ZoomError(f"an agent's name is text, not {agent!r}.")
        if not _whole(page) or page < 1:
            raise ZoomError(f"page must be a whole number from 1, not {page!r}.")
        if self.agents is None:
            raise ZoomError(f"No agent named {agent!r}: this chat has no agents yet.")
        return self.agents(agent, page)


def _held(messages: int) -> str:
    """What a chat of `messages` messages holds, for the errors: "6 messages (ids 0 to 5)"."""
    if messages == 0:
        return "no messages yet"
    if messages == 1:
        return "1 message (id 0)"
    return f"{messages} messages (ids 0 to {messages - 1})"


def _pages(text: str) -> list[str]:
    """R35: a message's line in pages of at most 16,000 bytes, cut between characters."""
    body = text.encode()
    pages = []
    begin = 0
    while True:
        stop = min(len(body), begin + ZOOM_PAGE_BYTES)
        while stop < len(body) and (body[stop] & 0xC0) == 0x80:
            stop -= 1  # never cut inside a character
        pages.append(body[begin:stop].decode())
        if stop >= len(body):
            return pages
        begin = stop
