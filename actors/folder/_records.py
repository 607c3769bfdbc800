"""Records: what one line of a day file holds, how it is written and how it is checked.

Message records (R1) are `{"i", "kind", "text", "size", "date"}` with optional `key`,
`images` and `meta`; node records are `{"l", "i", "text", "size"}`; merge records (R25) are
`{"merge": [[l, i], ...], "t": T, "open": bool}`, each merged pair named by its left
member `(l, i)`, i even, as R18 names pairs. Lines are compact JSON with
`ensure_ascii=False`, one object a line, ended by one `\\n`.

Every record this version writes ends with its checksum (P3): the last field is
`"crc":"xxxxxxxx"`, eight lowercase hex digits of the CRC-32 of the line's bytes before
`,"crc"`. So a record changed on disk (a bit flipped, a letter edited in place) no longer
matches, and reads, opens and `check` say so with the file and offset. Records of chats
from before (chat format version 1) have none; `chat.json` says from where on every
record must carry one (`_chat.py`).

This module is pure: it turns values into line bytes and line bytes back into values,
raising `Malformed` (a reason, no position) for anything the store would not have written.
The caller adds the file and offset (`CorruptRecord`).
"""

from __future__ import annotations

import json
import re
import zlib
from json.encoder import encode_basestring
from dataclasses import dataclass
from typing import Any

from ._errors import BadInput

__all__ = [
    "KINDS",
    "PART_BYTES",
    "ECHO_KEEP_CHARS",
    "NODE_BYTES",
    "MAX_TEXT_BYTES",
    "MAX_LEVEL",
    "MessageRecord",
    "Malformed",
    "clip_echo",
    "split_text",
    "utf8_size",
    "check_meta",
    "check_work_head",
    "RESERVED_META",
    "encode_message",
    "encode_node",
    "encode_merge",
    "parse_message",
    "parse_tree",
    "part_of",
    "seal",
    "unseal",
]

#: R3: the six kinds, exactly.
KINDS = frozenset(("user", "everchat", "tool", "echo", "work", "note"))
#: R8: a logged record's text is at most this many UTF-8 bytes.
PART_BYTES = 16_000
#: R7: an echo longer than twice this many characters keeps this many at each end.
ECHO_KEEP_CHARS = 15_000
#: R10/R29: a node's text is 1 ... 512 UTF-8 bytes.
NODE_BYTES = 512
#: Anything that would log more than this (after R7) is refused as absurd (BadInput).
MAX_TEXT_BYTES = 8 * 1024 * 1024
#: Highest tree level the store accepts: node(l, i) covers 2**l messages, ids fit 63 bits.
MAX_LEVEL = 62
#: Meta fields the store sets itself (R7, R8); callers may not use them.
RESERVED_META = ("part", "parts", "cut")

_HEX64 = re.compile(r"[0-9a-f]{64}")
_CLIP_MARKER = re.compile(r"\n\[([1-9][0-9]*) characters cut\]\n")
_WORK_HEAD = re.compile(r"\[[A-Za-z][^\]\n]*\]")
_quote = encode_basestring  # a JSON string literal, non-ASCII kept as is
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_MESSAGE_FIELDS = frozenset(("i", "kind", "text", "size", "date", "key", "images", "meta"))
_NODE_FIELDS = frozenset(("l", "i", "text", "size"))
_MERGE_FIELDS = frozenset(("merge", "t", "open"))


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One logged message (R1): its permanent id `i` (R2), kind (R3), text, the text's UTF-8
    size, the local date and time it was logged (ISO 8601 with offset), the idempotency key it
    was appended with, its image digests (R9) and its meta (R7/R8 parts, caller fields)."""

    i: int
    kind: str
    text: str
    size: int
    date: str
    key: str | None = None
    images: tuple[str, ...] = ()
    meta: dict | None = None

    @property
    def line(self) -> str:
        """The message's line `kind: text` (R11, R28)."""
        return f"{self.kind}: {self.text}"


class Malformed(Exception):
    """A line is not a record the store writes; the argument says why."""


def utf8_size(text: str) -> int:
    """UTF-8 size of `text`; lone surrogates raise UnicodeEncodeError."""
    return len(text.encode("utf-8"))


def clip_echo(text: str) -> tuple[str, int]:
    """R7: an echo over 30,000 characters keeps its first and last 15,000 characters with
    one marker line between them saying how many characters were cut.

    A text already in that form (a device clips a shell's output as it streams, never
    holding all of it) is kept as it is: clipping twice would replace the true count with
    the marker's own length. Returns the text to log and the number of characters cut (0
    when kept whole)."""
    keep = ECHO_KEEP_CHARS
    if len(text) <= 2 * keep:
        return text, 0
    marker = _CLIP_MARKER.match(text, keep)
    if marker is not None and len(text) - marker.end() == keep:
        return text, int(marker.group(1))
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n[{cut} characters cut]\n{text[-keep:]}", cut


def split_text(text: str, limit: int = PART_BYTES) -> list[str]:
    """R8: split `text` into consecutive parts of at most `limit` UTF-8 bytes whose
    concatenation is `text`, cutting only at character boundaries.

    A part ends just after the last newline of its window, else after the last space, else
    at the last character boundary before the limit. A newline or space only counts when it
    lies in the second half of the window, so every part but the last holds at least half
    the limit (minus at most 3 bytes): a stray early newline cannot multiply the parts."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return [text]
    parts: list[str] = []
    start, total, half = 0, len(data), limit // 2
    while total - start > limit:
        end = start + limit
        cut = data.rfind(b"\n", start + half, end)
        if cut < 0:
            cut = data.rfind(b" ", start + half, end)
        if cut >= 0:
            cut += 1
        else:
            cut = end
            while data[cut] & 0xC0 == 0x80:  # a continuation byte: back up to a boundary
                cut -= 1
        parts.append(data[start:cut].decode("utf-8"))
        start = cut
    parts.append(data[start:].decode("utf-8"))
    return parts


def _check_json_tree(value: Any, where: str) -> None:
    """Meta must come back from JSON equal: str keys, finite numbers, lists not tuples."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise BadInput(f"{where}: keys must be strings, got {k!r}")
            _check_json_tree(v, where)
    elif isinstance(value, list):
        for v in value:
            _check_json_tree(v, where)
    elif value is None or isinstance(value, (str, bool, int, float)):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadInput(f"{where}: a string holds a lone surrogate") from None
    else:
        raise BadInput(f"{where}: {type(value).__name__} is not a JSON value")


def check_meta(meta: Any) -> dict | None:
    """Validate a caller's `meta` (a JSON object, none of the reserved fields)."""
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise BadInput(f"meta must be a dict, got {type(meta).__name__}")
    _check_json_tree(meta, "meta")
    clash = [k for k in RESERVED_META if k in meta]
    if clash:
        raise BadInput(f"meta fields {clash} are set by the store (R7, R8)")
    try:
        _encode(meta)
    except ValueError as exc:
        raise BadInput(f"meta is not valid JSON: {exc}") from None
    return meta


def check_work_head(kind: str, text: str) -> None:
    """R3: a `work` message is an agent's report and starts with `[Name]`."""
    if kind == "work" and not _WORK_HEAD.match(text):
        raise BadInput("a work message must start with [Name] (R3)")


def encode_message(i: int, kind: str, text: str, size: int, date: str,
                   key: str | None, images: tuple[str, ...], meta: dict | None) -> bytes:
    """One message line (R1), newline included: the bytes `json.dumps(record,
    ensure_ascii=False, separators=(",", ":"))` gives, built without a dict (the append
    path's hot spot), sealed with its checksum (P3)."""
    line = (f'{{"i":{i},"kind":{_quote(kind)},"text":{_quote(text)},"size":{size},'
            f'"date":{_quote(date)}')
    if key is not None:
        line += f',"key":{_quote(key)}'
    if images:
        line += ',"images":[' + ",".join(map(_quote, images)) + "]"
    if meta is not None:
        line += ',"meta":' + _encode(meta)
    return seal(line.encode("utf-8"))


def encode_node(level: int, i: int, text: str, size: int) -> bytes:
    """One node line (R1, R10), newline and checksum included."""
    return seal(_encode({"l": level, "i": i, "text": text, "size": size})[:-1].encode("utf-8"))


def encode_merge(merges: list[tuple[int, int]], t: int, is_open: bool) -> bytes:
    """One merge line (R25), newline and checksum included."""
    rec = {"merge": [[lv, i] for lv, i in merges], "t": t, "open": is_open}
    return seal(_encode(rec)[:-1].encode("utf-8"))


_decode = json.JSONDecoder().decode
_CRC_HEAD = b',"crc":"'
_HEX = frozenset(b"0123456789abcdef")


def seal(body: bytes) -> bytes:
    """The record line (newline included) of a JSON object's bytes without their closing
    brace: the checksum field last, over the bytes before it (P3)."""
    return body + b',"crc":"%08x"}\n' % zlib.crc32(body)


def unseal(line: bytes, required: bool) -> bytes:
    """A line (without its newline) with its checksum checked and removed, ready to parse.
    A line without one is returned as it is, unless `required` (Malformed)."""
    if line[-18:-10] == _CRC_HEAD and line[-2:] == b'"}' and len(line) > 19:
        digits = line[-10:-2]
        if not _HEX.issuperset(digits):
            raise Malformed(f"the checksum {digits!r} is not 8 hex digits (P3)")
        body = line[:-18]
        if zlib.crc32(body) != int(digits, 16):
            raise Malformed("the checksum does not match: the record's bytes changed after they were written (P3)")
        return body + b"}"
    if required:
        raise Malformed("the record has no checksum; every record from here on carries one (P3)")
    return line


def _load(line: bytes) -> dict:
    try:
        rec = _decode(line.decode("utf-8"))
    except RecursionError:
        raise Malformed("not valid JSON: nested too deep") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise Malformed(f"not valid JSON: {exc}") from None
    if type(rec) is not dict:
        raise Malformed("not a JSON object")
    return rec


def _nat(rec: dict, field: str) -> int:
    value = rec.get(field)
    if type(value) is not int or value < 0:
        raise Malformed(f"field {field!r} must be a natural number, got {value!r}")
    return value


def _sized_text(rec: dict, low: int, high: int) -> str:
    text, size = rec.get("text"), rec.get("size")
    if type(text) is not str:
        raise Malformed("field 'text' must be a string")
    if type(size) is not int:
        raise Malformed("field 'size' must be an integer")
    try:
        actual = utf8_size(text)
    except UnicodeEncodeError:
        raise Malformed("text holds a lone surrogate") from None
    if size != actual:
        raise Malformed(f"size {size} but the text has {actual} UTF-8 bytes")
    if not low <= size <= high:
        raise Malformed(f"text of {size} bytes is outside {low} ... {high}")
    return text


def parse_message(line: bytes, sealed: bool = False) -> dict:
    """Parse and fully validate one message line (without its newline); with `sealed` it
    must carry its checksum (P3)."""
    rec = _load(unseal(line, sealed))
    extra = rec.keys() - _MESSAGE_FIELDS
    if extra:
        raise Malformed(f"unknown fields {sorted(extra)}")
    _nat(rec, "i")
    if rec.get("kind") not in KINDS:
        raise Malformed(f"kind {rec.get('kind')!r} is not one of the six kinds (R3)")
    _sized_text(rec, 0, PART_BYTES)
    date = rec.get("date")
    if type(date) is not str or not date:
        raise Malformed("field 'date' must be a non-empty string")
    key = rec.get("key")
    if key is not None and type(key) is not str:
        raise Malformed("field 'key' must be a string")
    images = rec.get("images")
    if images is not None and (type(images) is not list or not all(
            type(d) is str and _HEX64.fullmatch(d) for d in images)):
        raise Malformed("field 'images' must be a list of sha256 hex digests (R9)")
    meta = rec.get("meta")
    if meta is not None and type(meta) is not dict:
        raise Malformed("field 'meta' must be an object")
    if part_of(rec) is None:
        raise Malformed("meta 'part'/'parts' must be 1 <= part <= parts")
    return rec


def part_of(rec: dict) -> tuple[int, int] | None:
    """(k, n): the record is part k of n of one append (R8); (1, 1) when not split; None
    when the meta fields are inconsistent."""
    meta = rec.get("meta")
    if not meta or "parts" not in meta:
        return (1, 1) if not meta or "part" not in meta else None
    k, n = meta.get("part"), meta["parts"]
    if type(k) is not int or type(n) is not int or not 1 <= k <= n:
        return None
    return k, n


def parse_tree(line: bytes, sealed: bool = False) -> tuple:
    """Parse and validate one tree line: ("node", l, i, text) or ("merge", pairs, t, open);
    with `sealed` it must carry its checksum (P3)."""
    rec = _load(unseal(line, sealed))
    if "merge" in rec:
        if rec.keys() != _MERGE_FIELDS:
            raise Malformed(f"a merge record has exactly the fields {sorted(_MERGE_FIELDS)}")
        pairs = rec["merge"]
        if type(pairs) is not list:
            raise Malformed("field 'merge' must be a list of [l, i] pairs")
        out = []
        for pair in pairs:
            if (type(pair) is not list or len(pair) != 2 or type(pair[0]) is not int
                    or type(pair[1]) is not int or not 0 <= pair[0] < MAX_LEVEL
                    or pair[1] < 0 or pair[1] % 2):
                raise Malformed(f"merge pair {pair!r} is not a pair's left member "
                                "[l >= 0, even i >= 0] (R18, R25)")
            out.append((pair[0], pair[1]))
        t = _nat(rec, "t")
        if type(rec["open"]) is not bool:
            raise Malformed("field 'open' must be true or false")
        return ("merge", out, t, rec["open"])
    if rec.keys() != _NODE_FIELDS:
        raise Malformed(f"a node record has exactly the fields {sorted(_NODE_FIELDS)}")
    level, i = _nat(rec, "l"), _nat(rec, "i")
    if level > MAX_LEVEL:
        raise Malformed(f"level {level} is above {MAX_LEVEL}")
    text = _sized_text(rec, 1, NODE_BYTES)
    return ("node", level, i, text)
