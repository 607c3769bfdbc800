"""Agents' transcripts (R38): `agents/NAME/transcript.jsonl`, one per agent, append only.

What an agent does is logged here, not in the chat: its task and the tells it gets
(`user`), its replies (`everchat`), tool calls (`tool`), results (`echo`, clipped by R7),
and the bookkeeping the agents actor recovers from: `state` (a run began: `working`),
`work` (the report outbox: the exact `[NAME] …` text and the key it is appended to main
with, written before that append) and `reported` (that append is done).

The records follow the log's rules (R2, R4, P3): one `write` and one `fsync` per record
before it is acknowledged; a new folder or file also fsyncs the folder that holds it; each
line ends with `"crc":"xxxxxxxx"`, the CRC-32 of the bytes before it, as `main/`'s records;
any damaged record is a loud `CorruptRecord` naming the file and byte offset; a torn
**last** line (a crash mid-write) is reported, skipped, listed in the folder's
`repairs.json` and terminated with a newline before the next append. Appends are
idempotent by key: the same key answers the ids it got, and writes nothing.

The file is versioned (STYLE 11): its first line is the header
`{"transcript":1,"agent":"NAME","crc":…}`; records follow as
`{"i","kind","text","size","date","key"?,"meta"?,"crc"}`, `i` counting from 0 without gaps.

Only the log writer writes here (R5): it holds a `Transcripts(chat, writer=True)` beside
its `ChatStore`. Readers (`everchat agents`, `everchat zoom NAME` with no chat running)
open `Transcripts(chat, writer=False)`, which never writes a byte, not even to repair.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ._errors import BadInput, CorruptRecord, ReadOnlyStore, StoreError
from ._files import atomic_write, fsync_dir, read_small, write_all
from ._records import MAX_TEXT_BYTES, Malformed, check_meta, clip_echo, seal, split_text, unseal, utf8_size
from ._scan import Repair

__all__ = [
    "AGENTS_DIR",
    "NoTranscript",
    "TRANSCRIPT_FILE",
    "TRANSCRIPT_KINDS",
    "TRANSCRIPT_PAGE_BYTES",
    "TRANSCRIPT_VERSION",
    "TranscriptRecord",
    "Transcripts",
    "arm_transcript_crash",
]

log = logging.getLogger("everchat.store")

AGENTS_DIR = "agents"
TRANSCRIPT_FILE = "transcript.jsonl"
TRANSCRIPT_VERSION = 1
TRANSCRIPT_KINDS = frozenset(("user", "everchat", "tool", "echo", "work", "reported", "state"))
"""The kinds a transcript holds: R3's that an agent's call makes, the report outbox
(`work`, the text the chat gets), and the agents actor's `reported` and `state`."""
TRANSCRIPT_PAGE_BYTES = 16_000
"""R35: zoom("Name") returns the transcript in pages of 16,000 bytes."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")  # R38, as actors/hands.NAME_PATTERN (no import: the store is pure)
_REPAIRS = "repairs.json"
_FIELDS = frozenset(("i", "kind", "text", "size", "date", "key", "meta"))
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

CRASH_STATUS = 86
_crash: tuple[str, int] | None = None
_crash_counts: dict[str, int] = {}


def arm_transcript_crash(kind: str, k: int) -> None:
    """Test only, like `_crash.arm`: end this process (`os._exit(86)`, as a kill -9 would)
    right after its k-th transcript record of `kind` is written and fsynced. Nothing but a
    test's Python reaches it."""
    global _crash
    if kind not in TRANSCRIPT_KINDS or k < 1:
        raise ValueError(f"a transcript crash point is a kind of {sorted(TRANSCRIPT_KINDS)} and a count from 1")
    _crash = (kind, k)
    _crash_counts.clear()


def _hit(kind: str) -> None:
    _crash_counts[kind] = _crash_counts.get(kind, 0) + 1
    if _crash is not None and _crash == (kind, _crash_counts[kind]):
        os._exit(CRASH_STATUS)


class NoTranscript(StoreError, LookupError):
    """No agent of that name has a transcript in this chat."""


@dataclass(frozen=True, slots=True)
class TranscriptRecord:
    """One record of an agent's transcript: its number `i` (from 0), kind, text, the
    local date and time it was logged, its idempotency key and meta."""

    i: int
    kind: str
    text: str
    date: str
    key: str | None = None
    meta: dict | None = None

    @property
    def line(self) -> str:
        """How zoom("Name") renders it (R35): `i kind: text`."""
        return f"{self.i} {self.kind}: {self.text}"

    def to_dict(self) -> dict:
        return {"i": self.i, "kind": self.kind, "text": self.text, "date": self.date, "key": self.key,
                "meta": self.meta}


class _Log:
    """One agent's file as read so far: its records, keys and end."""

    def __init__(self, path: Path, records: list[TranscriptRecord], end: int, torn: Repair | None,
                 repaired: set[int]) -> None:
        self.path = path
        self.records = records
        self.keys = {r.key: r.i for r in records if r.key is not None}
        self.end = end
        self.torn = torn  # a torn last line not yet terminated
        self.repaired = repaired
        self.headed = bool(records) or end > 0 and torn is None  # the header is on disk


def _header(agent: str) -> bytes:
    return seal(_encode({"transcript": TRANSCRIPT_VERSION, "agent": agent})[:-1].encode("utf-8"))


def _parse(line: bytes, i: int) -> TranscriptRecord:
    try:
        rec = json.loads(unseal(line, True).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise Malformed(f"not valid JSON: {error}") from None
    if type(rec) is not dict:
        raise Malformed("not a JSON object")
    extra = rec.keys() - _FIELDS
    if extra:
        raise Malformed(f"unknown fields {sorted(extra)}")
    if rec.get("i") != i or type(rec.get("i")) is not int:
        raise Malformed(f"record number {rec.get('i')!r} where {i} was due (R2: no gaps, no duplicates)")
    if rec.get("kind") not in TRANSCRIPT_KINDS:
        raise Malformed(f"kind {rec.get('kind')!r} is not a transcript's")
    text, size = rec.get("text"), rec.get("size")
    if type(text) is not str or type(size) is not int or utf8_size(text) != size:
        raise Malformed("field 'text' must be a string of 'size' UTF-8 bytes")
    date, key, meta = rec.get("date"), rec.get("key"), rec.get("meta")
    if type(date) is not str or not date:
        raise Malformed("field 'date' must be a non-empty string")
    if key is not None and type(key) is not str:
        raise Malformed("field 'key' must be a string")
    if meta is not None and type(meta) is not dict:
        raise Malformed("field 'meta' must be an object")
    return TranscriptRecord(i, rec["kind"], text, date, key, meta)


class Transcripts:
    """The transcripts of one chat folder. `writer=True` only inside the log writer, which
    holds the chat's lock (R5); a reader never writes. Not thread safe: one thread uses it."""

    def __init__(self, chat: str | os.PathLike, *, writer: bool,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.chat = Path(chat)
        self.folder = self.chat / AGENTS_DIR
        self.writer = writer
        self._clock = clock or (lambda: datetime.now().astimezone())
        self._logs: dict[str, _Log] = {}
        #: The torn last lines (R2) found so far: file relative to the chat, offset, length.
        self.repairs: list[Repair] = []

    def __repr__(self) -> str:
        return f"Transcripts({str(self.folder)!r}, {'writer' if self.writer else 'reader'})"

    # -- reading ---------------------------------------------------------------------

    def names(self) -> list[str]:
        """The agents with a transcript, sorted."""
        try:
            entries = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(n for n in entries if _NAME.fullmatch(n) and (self.folder / n / TRANSCRIPT_FILE).is_file())

    def records(self, agent: str, first: int = 0) -> list[TranscriptRecord]:
        """Agent `agent`'s records from number `first` on; NoTranscript when it has none."""
        return self._log(agent).records[max(first, 0):]

    def page(self, agent: str, page: int = 1) -> tuple[str, int]:
        """R35: page `page` (from 1) of the transcript rendered `i kind: text` per record,
        and how many pages there are. Pages hold at most 16,000 bytes, cut after a line
        where one ends in the second half of the page, else between characters."""
        text = "\n".join(record.line for record in self._log(agent).records) or "(nothing logged yet)"
        pages = split_text(text, TRANSCRIPT_PAGE_BYTES)
        if type(page) is not int or not 1 <= page <= len(pages):
            raise BadInput(f"{agent}'s transcript has {len(pages)} page{'s' if len(pages) > 1 else ''}, "
                           f"not page {page!r}")
        return pages[page - 1], len(pages)

    def _log(self, agent: str) -> _Log:
        known = self._logs.get(agent)
        if known is not None:
            return known
        if not isinstance(agent, str) or not _NAME.fullmatch(agent):
            raise NoTranscript(f"no agent named {agent!r}")
        path = self.folder / agent / TRANSCRIPT_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise NoTranscript(f"no agent named {agent!r}") from None
        loaded = self._scan(agent, path, data)
        self._logs[agent] = loaded
        return loaded

    def _scan(self, agent: str, path: Path, data: bytes) -> _Log:
        rel = str(path.relative_to(self.chat))
        repaired = _load_repairs(path.parent)
        records: list[TranscriptRecord] = []
        torn = None
        offset = 0
        first = True
        while offset < len(data):
            stop = data.find(b"\n", offset)
            if stop < 0:  # R2: a torn last line, reported and skipped
                torn = Repair(rel, offset, len(data) - offset)
                self.repairs.append(torn)
                log.warning("%s: byte %d: a torn last line of %d bytes (a crash mid-write) is skipped", rel,
                            offset, torn.length)
                break
            line = data[offset:stop]
            if offset in repaired:
                pass  # a torn line a writer terminated (listed in repairs.json)
            elif first:
                if line + b"\n" != _header(agent):
                    raise CorruptRecord(rel, offset, f"not a version {TRANSCRIPT_VERSION} transcript header "
                                                     f"for {agent!r}")
                first = False
            else:
                try:
                    records.append(_parse(line, len(records)))
                except Malformed as error:
                    raise CorruptRecord(rel, offset, str(error)) from None
            offset = stop + 1
        made = _Log(path, records, len(data), torn, repaired)
        made.headed = not first  # an empty file or a torn header: written before the next record
        return made

    # -- writing ---------------------------------------------------------------------

    def append(self, agent: str, kind: str, text: str, key: str, meta: dict | None = None) -> list[int]:
        """Log one record (R4: one write and one fsync before it returns) and return its
        number as `[i]`; a key already logged returns that record's number and writes
        nothing. An `echo` over 30,000 characters is clipped (R7)."""
        if not self.writer:
            raise ReadOnlyStore(f"{self} is read-only (R5)")
        if not isinstance(agent, str) or not _NAME.fullmatch(agent):
            raise BadInput(f"{agent!r} is not an agent's name (R38)")
        if kind not in TRANSCRIPT_KINDS:
            raise BadInput(f"kind {kind!r} is not a transcript's ({', '.join(sorted(TRANSCRIPT_KINDS))})")
        if not isinstance(key, str) or not key:
            raise BadInput("a transcript record needs its idempotency key")
        meta = check_meta(meta)
        try:
            known = self._log(agent)
        except NoTranscript:
            known = self._create(agent)
        if key in known.keys:
            return [known.keys[key]]
        cut = 0
        if kind == "echo":
            text, cut = clip_echo(text)
        try:
            size = utf8_size(text)
        except UnicodeEncodeError:
            raise BadInput("the text holds a lone surrogate") from None
        if size > MAX_TEXT_BYTES:
            raise BadInput(f"a transcript record of {size} bytes is over {MAX_TEXT_BYTES}")
        if cut:
            meta = {**(meta or {}), "cut": cut}
        i = len(known.records)
        date = self._clock().isoformat(timespec="seconds")
        rec = {"i": i, "kind": kind, "text": text, "size": size, "date": date, "key": key}
        if meta is not None:
            rec["meta"] = meta
        line = seal(_encode(rec)[:-1].encode("utf-8"))
        if known.torn is not None:  # R2: listed, then terminated, before the next record
            known.repaired.add(known.torn.offset)
            atomic_write(known.path.parent / _REPAIRS, json.dumps(sorted(known.repaired)).encode())
            line = b"\n" + line
            known.torn = None
        if not known.headed:
            line = line[:1] + _header(agent) + line[1:] if line[:1] == b"\n" else _header(agent) + line
            known.headed = True
        self._write(known, line)
        known.records.append(TranscriptRecord(i, kind, text, date, key, meta))
        known.keys[key] = i
        _hit(kind)
        return [i]

    def _create(self, agent: str) -> _Log:
        """The agent's folder and file, each fsynced into its parent (R4)."""
        if not self.folder.is_dir():
            self.folder.mkdir(mode=0o700, exist_ok=True)
            fsync_dir(self.chat)
        folder = self.folder / agent
        if not folder.is_dir():
            folder.mkdir(mode=0o700, exist_ok=True)
            fsync_dir(self.folder)
        path = folder / TRANSCRIPT_FILE
        made = _Log(path, [], 0, None, set())
        self._write(made, _header(agent), create=True)
        made.headed = True
        fsync_dir(folder)
        self._logs[agent] = made
        return made

    @staticmethod
    def _write(known: _Log, data: bytes, create: bool = False) -> None:
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(known.path, flags, 0o600)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        known.end += len(data)


def _load_repairs(folder: Path) -> set[int]:
    data = read_small(folder / _REPAIRS)
    if data is None:
        return set()
    try:
        offsets = json.loads(data)
    except ValueError:
        raise CorruptRecord(str(folder / _REPAIRS), 0, "not valid JSON") from None
    if type(offsets) is not list or not all(type(o) is int and o >= 0 for o in offsets):
        raise CorruptRecord(str(folder / _REPAIRS), 0, "not a list of byte offsets")
    return set(offsets)
