"""The on-disk index: where each record lives, so reads by id never scan (issue 2).

Files in `index/` (all derived from the log, rebuilt from it when missing or wrong):

- `messages.idx`: entry i (16 bytes, `<IIQ`: day ordinal, line length, offset) locates
  message i in `main/`. Append-only in effect: entry i is only ever written with the same
  value.
- `nodes-LL.idx`: one per tree level; slot i (16 bytes, same layout) locates node(LL, i) in
  `tree/`; all zero means "not built". A slot is written once, after its record is fsynced
  (R12), so `node(l, i)` is one `pread` of the slot and one of the record.
- `merges.idx`: entry k (24 bytes, `<QIIQ`: t, ordinal, length, offset) locates the k-th
  merge record (R25); t never decreases, so the records after a given t are a binary search
  away.
- `keys.idx`: entry k (32 bytes, `<16sQI4x`: blake2b-128 of the key, first id, id count)
  for the k-th keyed append that reached the log whole; the store reads its tail to
  recognise resent appends (see `KEY_HORIZON` in `_store`).
- `covered.json`: `{"v": 1, "messages": T, "merges": M, "keys": K, "main": [ordinal,
  offset], "tree": [ordinal, offset]}`, written atomically at checkpoints after fsyncing the
  files above: those entries are durable and the log up to those positions is indexed.
  Opening scans only the log past these positions (the tail) and fills in what is missing.

The index files are not fsynced per append (the log is; R4 is about the log): a crash can
lose index entries past the last checkpoint, never the records, and the tail scan at the
next open writes them again. A read-only store never writes here; it keeps tail entries
in memory (`overlay`).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from . import _crash
from ._files import atomic_write, read_small

__all__ = ["LOC", "MERGE", "KEY", "INDEX_VERSION", "Marker", "Table", "LogIndex"]

LOC = struct.Struct("<IIQ")
MERGE = struct.Struct("<QIIQ")
KEY = struct.Struct("<16sQI4x")
INDEX_VERSION = 1
_ZERO_LOC = bytes(LOC.size)


class Marker(NamedTuple):
    """What the index covers: entry counts and the log positions they reach."""

    messages: int = 0
    merges: int = 0
    keys: int = 0
    main: tuple[int, int] = (0, 0)
    tree: tuple[int, int] = (0, 0)

    def to_json(self) -> bytes:
        return json.dumps({"v": INDEX_VERSION, "messages": self.messages,
                           "merges": self.merges, "keys": self.keys,
                           "main": list(self.main), "tree": list(self.tree)}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Marker | None:
        """The marker, or None when it is not one this version wrote (then: rebuild)."""
        try:
            raw = json.loads(data)
            if raw.get("v") != INDEX_VERSION:
                return None
            counts = [raw[k] for k in ("messages", "merges", "keys")]
            spots = [tuple(raw[k]) for k in ("main", "tree")]
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        nats = counts + [x for spot in spots for x in spot]
        if any(type(x) is not int or x < 0 for x in nats) or any(len(s) != 2 for s in spots):
            return None
        return cls(*counts, *spots)


class Table:
    """A file of fixed-width entries; entry k lives at byte k * width.

    Entries below `trusted` come from disk; a read-only table keeps newer entries in memory
    (`overlay`), a writable one writes them with `pwrite` (same value, same place: writing
    an entry twice is harmless, which is what makes the crash repair idempotent)."""

    def __init__(self, path: Path, width: int, *, writable: bool, trusted: int,
                 on_disk: bool) -> None:
        self.path = path
        self.width = width
        self.writable = writable
        self.trusted = trusted
        self.count = trusted
        self.overlay = bytearray()
        self.dirty = False
        self.fd: int | None = None
        if writable:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        elif on_disk:
            try:
                self.fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                self.fd = None

    def disk_size(self) -> int:
        return os.fstat(self.fd).st_size if self.fd is not None else 0

    def read(self, k: int, n: int = 1) -> bytes:
        """Entries k ... k+n-1 (all below `count`) as bytes."""
        w = self.width
        if self.writable or k + n <= self.trusted:
            data = os.pread(self.fd, n * w, k * w)
            if len(data) != n * w:
                raise OSError(f"{self.path} ends before entry {k + n - 1}")
            return data
        if k >= self.trusted:
            lo = (k - self.trusted) * w
            return bytes(self.overlay[lo:lo + n * w])
        return self.read(k, self.trusted - k) + self.read(self.trusted, k + n - self.trusted)

    def write(self, k: int, data: bytes) -> None:
        """Write entries from k on (k <= count) and make `count` their end."""
        n = len(data) // self.width
        if self.writable:
            os.pwrite(self.fd, data, k * self.width)
            self.dirty = True
        else:
            if k != self.count:
                raise ValueError("a read-only table only grows at its end")
            self.overlay += data
        self.count = k + n

    def sync(self) -> None:
        if self.dirty:
            os.fsync(self.fd)
            self.dirty = False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _Slots:
    """Per-level node slot files (R10, R12): slot i of `nodes-LL.idx` locates node(LL, i)."""

    def __init__(self, folder: Path, *, writable: bool, on_disk: bool) -> None:
        self.folder = folder
        self.writable = writable
        self.on_disk = on_disk
        self.fds: dict[int, int] = {}
        self.overlay: dict[tuple[int, int], bytes] = {}
        self.dirty: set[int] = set()

    def path(self, level: int) -> Path:
        return self.folder / f"nodes-{level:02d}.idx"

    def _fd(self, level: int, *, create: bool = False) -> int | None:
        """The level's slot file; a writer creates it on its first slot, not on a read."""
        fd = self.fds.get(level)
        if fd is None and (self.on_disk or self.writable):
            flags = os.O_RDWR | os.O_CREAT if create else (
                os.O_RDWR if self.writable else os.O_RDONLY)
            try:
                fd = self.fds[level] = os.open(self.path(level), flags, 0o600)
            except FileNotFoundError:
                return None
        return fd

    def get(self, level: int, i: int) -> bytes | None:
        got = self.overlay.get((level, i))
        if got is not None:
            return got
        fd = self._fd(level)
        if fd is None:
            return None
        data = os.pread(fd, LOC.size, i * LOC.size)
        return None if len(data) != LOC.size or data == _ZERO_LOC else data

    def put(self, level: int, i: int, packed: bytes) -> None:
        if self.writable:
            os.pwrite(self._fd(level, create=True), packed, i * LOC.size)
            self.dirty.add(level)
        else:
            self.overlay[(level, i)] = packed

    def filled(self) -> Iterator[tuple[int, int]]:
        """The log position `(ordinal, offset)` of every filled slot, on disk and in memory
        (for `check`: the index may know no node the log lacks)."""
        for level in range(64):
            if self.on_disk or self.writable:
                try:
                    with open(self.path(level), "rb") as f:
                        data = f.read()
                except FileNotFoundError:
                    data = b""
                for k in range(0, len(data) - LOC.size + 1, LOC.size):
                    entry = data[k:k + LOC.size]
                    if entry != _ZERO_LOC and (level, k // LOC.size) not in self.overlay:
                        ordinal, _, offset = LOC.unpack(entry)
                        yield ordinal, offset
        for entry in self.overlay.values():
            ordinal, _, offset = LOC.unpack(entry)
            yield ordinal, offset

    def count(self) -> int:
        """How many slots are filled (built nodes), on disk and in memory, without a
        Python step per slot: a filled slot's line length (its second field) is never 0."""
        total = len(self.overlay)
        for level in range(64):
            if not (self.on_disk or self.writable):
                break
            try:
                with open(self.path(level), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            lengths = memoryview(data)[:len(data) - len(data) % LOC.size].cast("I")[1::4].tolist()
            total += len(lengths) - lengths.count(0)
            total -= sum(1 for lv, i in self.overlay if lv == level and i < len(lengths) and lengths[i])
        return total

    def sync(self) -> None:
        for level in sorted(self.dirty):
            os.fsync(self.fds[level])
        self.dirty.clear()

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class LogIndex:
    """The index of one chat folder (see the module docstring for the files)."""

    def __init__(self, chat: Path, *, writable: bool) -> None:
        self.folder = chat / "index"
        self.writable = writable
        marker = None
        if self.folder.is_dir():
            data = read_small(self.folder / "covered.json")
            marker = Marker.from_json(data) if data is not None else None
        #: The marker found at open (None: no usable index, everything is rebuilt).
        self.found = marker
        self._open(marker or Marker(), on_disk=marker is not None)

    def _open(self, marker: Marker, *, on_disk: bool) -> None:
        if self.writable and not on_disk:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder.mkdir(mode=0o700)
        kw = {"writable": self.writable, "on_disk": on_disk}
        self.messages = Table(self.folder / "messages.idx", LOC.size,
                              trusted=marker.messages, **kw)
        self.merges = Table(self.folder / "merges.idx", MERGE.size,
                            trusted=marker.merges, **kw)
        self.keys = Table(self.folder / "keys.idx", KEY.size, trusted=marker.keys, **kw)
        self.slots = _Slots(self.folder, **kw)
        self.start = marker

    def sizes_agree(self) -> bool:
        """Do the files hold at least the entries the marker promises?"""
        return all(t.fd is not None and t.disk_size() >= t.trusted * t.width
                   for t in (self.messages, self.merges, self.keys) if t.trusted)

    def reset(self) -> None:
        """Forget the on-disk index (it disagrees with the log): start from nothing."""
        self.close()
        self.found = None
        self._open(Marker(), on_disk=False)

    # -- entries ----------------------------------------------------------------------

    def message_loc(self, i: int) -> tuple[int, int, int]:
        return LOC.unpack(self.messages.read(i))

    def message_locs(self) -> Iterator[tuple[int, int, int]]:
        """The locations of messages 0, 1, ... in order, read in large chunks."""
        count, chunk = self.messages.count, 4096
        for k in range(0, count, chunk):
            yield from LOC.iter_unpack(self.messages.read(k, min(chunk, count - k)))

    def node_loc(self, level: int, i: int) -> tuple[int, int, int] | None:
        packed = self.slots.get(level, i)
        return None if packed is None else LOC.unpack(packed)

    def merge_entry(self, k: int) -> tuple[int, int, int, int]:
        return MERGE.unpack(self.merges.read(k))

    def first_merge_after(self, after_t: int) -> int:
        """The number of the first merge record with t > after_t (binary search)."""
        lo, hi = 0, self.merges.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.merge_entry(mid)[0] > after_t:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def key_entries(self, last: int) -> list[tuple[bytes, int, int]]:
        """The last `last` key entries, oldest first."""
        k = max(0, self.keys.count - last)
        data = self.keys.read(k, self.keys.count - k) if self.keys.count > k else b""
        return list(KEY.iter_unpack(data))

    # -- durability -------------------------------------------------------------------

    def checkpoint(self, main: tuple[int, int], tree: tuple[int, int]) -> None:
        """fsync the entries, then record what they cover (writer only)."""
        for table in (self.messages, self.merges, self.keys):
            table.sync()
        self.slots.sync()
        marker = Marker(self.messages.count, self.merges.count, self.keys.count, main, tree)
        atomic_write(self.folder / "covered.json", marker.to_json(), sync_dir=False)
        _crash.hit("index")

    def close(self) -> None:
        for table in (self.messages, self.merges, self.keys):
            table.close()
        self.slots.close()
