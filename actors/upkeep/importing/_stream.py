"""Reading an export as a stream, never whole (P12; performance review P4).

A 110 MB `conversations.json` was read into memory, parsed once to tell its format and
once more to import it (795 MB at its peak); 400 MB of whitespace in a 408 KB ZIP took
856 MB. Here a JSON list is read in blocks of `CHUNK` bytes and each of its elements (one
conversation) is parsed once, as soon as its text is in, and then dropped: memory holds
one conversation and a block, whatever the file's size. Session logs are read line by
line the same way.

    for conversation in json_list(stream, "conversations.json"): ...   # each element, parsed once
    for line in lines(stream): ...                                      # bytes, without the newline
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from ._types import SourceError

__all__ = ["CHUNK", "json_list", "lines", "Bounded"]

CHUNK = 1 << 20
_NOT_SPACE = re.compile(r"[^ \t\n\r]")


class Bounded:
    """A binary stream refused (`error`, a SourceError) once it holds more than `limit`
    bytes, or at its end when it holds other than `exact`: a ZIP member whose size lies
    (a bomb), a file that grows while read."""

    def __init__(self, raw: BinaryIO, limit: int, too_much: str, exact: int | None = None, short: str = "",
                 error: type[SourceError] = SourceError) -> None:
        self.raw, self.limit, self.too_much, self.exact, self.short, self.error = raw, limit, too_much, exact, short, error
        self.seen = 0

    def read(self, n: int = CHUNK) -> bytes:
        block = self.raw.read(min(n, self.limit - self.seen + 1))
        self.seen += len(block)
        if self.seen > self.limit:
            raise self.error(self.too_much)
        if not block and self.exact is not None and self.seen != self.exact:
            raise self.error(self.short.format(seen=self.seen))
        return block


def lines(stream: BinaryIO, first: bytes = b"") -> Iterator[bytes]:
    """The stream's lines (`first`, then what it reads), each without its newline; a long
    line is gathered in pieces (no quadratic copying)."""
    pending: list[bytes] = []
    block = first or stream.read(CHUNK)
    while block:
        start = 0
        while (newline := block.find(b"\n", start)) >= 0:
            pending.append(block[start:newline])
            yield b"".join(pending)
            pending = []
            start = newline + 1
        if start < len(block):
            pending.append(block[start:])
        block = stream.read(CHUNK)
    if pending:
        yield b"".join(pending)


class _Text:
    """The stream's text from `pos` on, decoded as UTF-8 block by block."""

    def __init__(self, stream: BinaryIO, name: str, first: bytes) -> None:
        self.stream, self.name = stream, name
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof = "", 0, False
        try:
            self.buf = self.decoder.decode(first)
        except UnicodeDecodeError as error:
            raise SourceError(f"{self.name}: not JSON ({error})") from None

    def fill(self, want: int = 0) -> None:
        """Read at least one block, and more until `want` characters are in hand past
        `pos` (or the end); what was read before `pos` is dropped, and the new text is
        joined once (a long value is never copied block after block)."""
        parts, have = [], len(self.buf) - self.pos
        while True:
            block = self.stream.read(CHUNK)
            try:
                text = self.decoder.decode(block, final=not block)
            except UnicodeDecodeError as error:
                raise SourceError(f"{self.name}: not JSON ({error})") from None
            parts.append(text)
            have += len(text)
            self.eof = not block
            if self.eof or have >= want:
                break
        self.buf = self.buf[self.pos:] + "".join(parts)
        self.pos = 0

    def next_char(self) -> str | None:
        """The next character that is not white space (skipped, block by block), or None
        at the end."""
        while True:
            found = _NOT_SPACE.search(self.buf, self.pos)
            if found:
                self.pos = found.start()
                return self.buf[self.pos]
            self.pos = len(self.buf)
            if self.eof:
                return None
            self.fill()

    def value(self, parse) -> Any:
        """The JSON value at `pos`, parsed once its text is in: on a parse error more is
        read until twice as much text is in hand, so a long value is parsed about twice."""
        while True:
            try:
                value, end = parse(self.buf, self.pos)
                cut = end == len(self.buf) and type(value) in (int, float)  # a number at the very end may go on
                if not cut or self.eof:
                    self.pos = end
                    return value
            except json.JSONDecodeError as error:
                if self.eof:
                    raise SourceError(f"{self.name}: not JSON ({error})") from None
            except RecursionError as error:
                raise SourceError(f"{self.name}: not JSON ({error})") from None
            self.fill(2 * (len(self.buf) - self.pos) + CHUNK)


def json_list(stream: BinaryIO, name: str, first: bytes = b"") -> Iterator[Any]:
    """Each element of the JSON list the stream holds (`first`, then what it reads),
    parsed one at a time; SourceError (`NAME: not JSON (…)`) for a file that is not one."""
    text = _Text(stream, name, first)
    parse = json.JSONDecoder().raw_decode
    if text.next_char() != "[":
        raise SourceError(f"{name}: not JSON (a list was expected)")
    text.pos += 1
    if text.next_char() == "]":
        text.pos += 1
    else:
        while True:
            if text.next_char() is None:
                raise SourceError(f"{name}: not JSON (the list is cut short)")
            yield text.value(parse)
            after = text.next_char()
            text.pos += 1
            if after == "]":
                break
            if after != ",":
                raise SourceError(f"{name}: not JSON (',' or ']' expected, not {after!r})")
    if text.next_char() is not None:
        raise SourceError(f"{name}: not JSON (more after the list)")
