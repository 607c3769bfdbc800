"""`ChatStore`: the log store of one chat folder, the pure core of the log writer actor.

Plain Python, no threads: the log writer actor calls it from one thread (R5: one process,
one writer). Every append is one `write` and one `fsync` before it returns (R4).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable
from datetime import date, datetime
from pathlib import Path
from typing import Any

from . import _assets, _crash, _views
from ._chat import (foreign_entries, is_chat, load_repairs, make_layout, read_chat_json, save_repairs,
                    seal_from)
from ._cut import LogCut
from ._daylog import DayLog
from ._errors import (BadInput, ChatDamaged, CorruptRecord, NotAChat, ReadOnlyStore, StoreBroken,
                      StoreClosed, StoreError)
from ._files import remove_stale_temps, set_aside
from ._index import KEY, LOC, MERGE, LogIndex
from ._lock import WriterLock
from ._prepare import Prepared, check_node, check_node_id, prepare_message
from ._records import (MAX_LEVEL, MessageRecord, encode_merge, encode_message, encode_node,
                       parse_message, parse_tree)
from ._scan import Repair, check_chat, index_agrees, key_digest, scan_main, scan_tree

__all__ = ["ChatStore"]

log = logging.getLogger("everchat.store")


def _default_clock() -> datetime:
    return datetime.now().astimezone()


def _owner_only(path: Path) -> None:
    """P5: the chat is its owner's alone. Everything the store makes is 0700/0600 whatever
    the umask; a chat folder made by an older Everchat (0755 under umask 022) is closed to
    others by its first writer, which keeps every file in it out of their reach."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(path, mode & 0o700)


class ChatStore:
    """The log of one chat folder: messages, tree nodes, merge records, views, assets.

    Open with `ChatStore.open`. A writer holds the folder's OS lock (R5) until `close`; a
    reader (`writer=False`) never takes it and never writes a byte, also not to repair.
    """

    #: A checkpoint of the index (see `_index`) follows once this many log bytes were
    #: appended since the last one, and at `close`. It bounds the tail an open after a
    #: crash has to scan.
    CHECKPOINT_BYTES = 2 * 1024 * 1024
    #: Key idempotency horizon: an append whose key is among the last KEY_HORIZON keyed
    #: appends of the chat (across close, reopen and crashes) is recognised and not logged
    #: again; an older key is forgotten and its resend is logged anew.
    KEY_HORIZON = 65_536

    def __init__(self, path: Path, writer: bool, clock: Callable[[], datetime]) -> None:
        self.path = path
        #: Warnings go to the debug level: a look before writing (P11) must not say twice
        #: what the writer that follows says.
        self.quiet = False
        self.writer = writer
        self._clock = clock
        self._lock = WriterLock(path) if writer else None
        self._main = DayLog(path, "main")
        self._tree = DayLog(path, "tree")
        self._index: LogIndex | None = None
        self._closed = False
        self._broken: BaseException | None = None
        #: The first damage a read found in the log (P3, P15): no write goes past it.
        self._damage: CorruptRecord | None = None
        self._healed = False  # the index was rebuilt once after a read disagreed with it
        self._count = 0
        self._last_t = 0
        self._since_checkpoint = 0
        self._keys: dict[bytes, tuple[int, int]] | None = None
        self._repairs: set[Repair] = set()
        #: Where a reader's view of the log ends (check stops there); None: at the end.
        self._stops: tuple = (None, None)
        #: The torn last lines (R2) this open found and skipped (and, as the writer,
        #: terminated): `Repair(file, offset, length)`, file relative to the chat folder.
        self.repairs: list[Repair] = []
        #: The whole lines of a split message the log ended inside (P8): skipped like the
        #: torn line after them, and remembered in repairs.json (they need no newline).
        self.orphans: list[Repair] = []

    @classmethod
    def open(cls, path: str | os.PathLike, *, create: bool = False, writer: bool = True,
             clock: Callable[[], datetime] | None = None, quiet: bool = False) -> ChatStore:
        """Open the chat folder at `path`.

        `writer=True` takes the OS lock at once (R5) or raises ChatLocked naming the owner.
        `create=True` makes a missing folder layout (writers only); without it a folder
        that holds no chat raises NotAChat. `clock` returns an aware local datetime for
        record dates and day files (default: now). Opening scans only the log past the
        index's last checkpoint (O(tail), not O(history)); a torn last line is reported,
        skipped and (writer) terminated (R2); any other bad record in that tail raises
        CorruptRecord. `check` verifies the whole log."""
        path = Path(path)
        if create and not writer:
            raise BadInput("create=True needs writer=True (R5: readers never write)")
        store = cls(path, writer, clock or _default_clock)
        store.quiet = quiet
        try:
            store._open(create)
        except BaseException:
            store._release()
            raise
        return store

    def __repr__(self) -> str:
        role = "writer" if self.writer else "reader"
        state = "closed" if self._closed else f"T={self._count}"
        return (f"<ChatStore {self.path} {role} pid={os.getpid()} "
                f"host={socket.gethostname()} {state}>")

    def __enter__(self) -> ChatStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- opening -------------------------------------------------------------------------

    def _open(self, create: bool) -> None:
        path = self.path
        if not is_chat(path):
            if not create:
                raise NotAChat(f"{path} holds no chat (open it with create=True to make one)")
            if path.exists() and not path.is_dir():
                raise NotAChat(f"{path} is not a folder")
            others = foreign_entries(path)
            if others:
                # `--data-dir ~` by mistake must not scatter a chat among someone's files.
                raise NotAChat(f"{path} holds other files ({', '.join(others[:3])}{' …' if len(others) > 3 else ''}) "
                               "and no chat: a new chat needs an empty or new folder")
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self._lock is not None:
            self._lock.acquire()
            _owner_only(path)
            make_layout(path, self._now())
            for folder in (path, path / "index"):
                remove_stale_temps(folder)
        info = read_chat_json(path)
        if info is not None and info.get("sealed_from"):
            self._main.sealed_from = info["sealed_from"]["main"]
            self._tree.sealed_from = info["sealed_from"]["tree"]
        self._repairs = load_repairs(path)
        self._index = index = LogIndex(path, writable=self.writer)
        rebuilt = not index_agrees(self._main, self._tree, index)
        if rebuilt:
            if index.found is not None:
                self.warn("%s: the index disagrees with the log; rebuilding it", self.path)
            index.reset()
        start = index.start
        tail = scan_main(path, self._main, start.main, start.messages, self._repairs)
        index.messages.write(start.messages, tail.entries)
        index.keys.write(start.keys, tail.keys)
        self._count = tail.next_id
        self._last_t = index.merge_entry(start.merges - 1)[0] if start.merges else 0
        torn, seen, self._last_t, tree_end = scan_tree(path, self._tree, index, start.tree,
                                                       self._count, self._last_t,
                                                       self._repairs)
        if not self.writer:
            self._stops = (tail.end, tree_end)
        self.repairs = tail.torn + torn
        self.orphans = tail.orphans
        for r in self.repairs:
            self.warn("%s: %s byte %d: torn last line of %d bytes (a crash mid-write) "
                      "skipped (R2)", self.path, r.file, r.offset, r.length)
        if self.orphans:
            first = self.orphans[0]
            self.warn("%s: %s byte %d: %d part(s) of a split message whose write a crash cut short "
                      "(never acknowledged) skipped; their ids are the next message's (P8)",
                      self.path, first.file, first.offset, len(self.orphans))
        if self.writer:
            self._terminate_torn()
            self._main.open_tail()
            self._tree.open_tail()
            if self._main.sealed_from is None:
                # A chat from before checksums: every record from here on carries one (P3).
                info = seal_from(path, info, self._main.position, self._tree.position, self._now())
                self._main.sealed_from = info["sealed_from"]["main"]
                self._tree.sealed_from = info["sealed_from"]["tree"]
            if rebuilt or tail.entries or seen or self.repairs or self.orphans:
                self._checkpoint()

    def _terminate_torn(self) -> None:
        """R2: remember each torn span, then end it with a newline (in that order, so a
        crash in between leaves a remembered span that is still torn, which is fine)."""
        new = [r for r in self.repairs + self.orphans if r not in self._repairs]
        if new:
            save_repairs(self.path, new, self._now())
            self._repairs.update(new)
        for r in self.repairs:
            stream = self._main if r.file.startswith("main/") else self._tree
            stream.terminate(date.fromisoformat(r.file[-16:-6]).toordinal())

    def warn(self, text: str, *args) -> None:
        """A warning about the chat folder (debug level while `quiet`)."""
        log.log(logging.DEBUG if self.quiet else logging.WARNING, text, *args)

    # -- state checks ---------------------------------------------------------------------

    def _usable(self) -> LogIndex:
        if self._closed:
            raise StoreClosed(f"{self} is closed")
        return self._index

    def _writable(self) -> LogIndex:
        index = self._usable()
        if not self.writer:
            raise ReadOnlyStore(f"{self} was opened read-only (R5)")
        if self._broken is not None:
            raise StoreBroken(f"{self}: an earlier write failed ({self._broken}); reopen "
                              "the chat to recover") from self._broken
        if self._damage is not None:
            raise ChatDamaged(self._damage)
        return index

    def _now(self) -> datetime:
        now = self._clock()
        if not isinstance(now, datetime):
            raise StoreError(f"the clock returned {now!r}, not a datetime")
        return now if now.tzinfo is not None else now.astimezone()

    # -- messages -------------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        """T: the number of messages; ids run 0 ... T-1 (R2)."""
        self._usable()
        return self._count

    def append_message(self, kind: str, text: str, *, key: str | None = None,
                       images: Iterable[str] = (), meta: dict | None = None, date: str | None = None) -> list[int]:
        """Log one message and return its ids (several when R8 splits it).

        R3 kind; an echo over 30,000 characters is clipped by R7, then any text over
        16,000 UTF-8 bytes is split by R8 into consecutive records (meta `part`/`parts`);
        the key and meta go on every part, the images on the first. A key already logged
        (within KEY_HORIZON) returns the ids it got and writes nothing. One write and one
        fsync before returning (R4). `date` (an ISO date and time with its timezone) is the
        record's date instead of now, for a message said before it is logged (an import);
        the day file is still the day of logging, so ids stay in file order (R1, R2)."""
        return self.append_messages([(kind, text, key, images, meta, date)])[0]

    def append_messages(self, items: Iterable[Any]) -> list[list[int]]:
        """Group commit: log many messages with one write and one fsync, acknowledged
        together (R4). Each item is a dict with the arguments of `append_message` or a tuple
        `(kind, text[, key[, images[, meta[, date]]]])`. Validation comes first: one bad item
        raises BadInput and nothing is written. Returns the ids of each item."""
        index = self._writable()
        prepared = [prepare_message(self.path, item) for item in items]
        results: list[list[int] | None] = [None] * len(prepared)
        in_batch: dict[str, int] = {}
        fresh: list[int] = []
        for n, p in enumerate(prepared):
            if p.key is not None:
                if p.key in in_batch:
                    continue
                known = self._lookup_key(p.key)
                if known is not None:
                    results[n] = known
                    continue
                in_batch[p.key] = n
            fresh.append(n)
        if fresh:
            self._write_messages(index, prepared, fresh, results)
        for n, p in enumerate(prepared):
            if results[n] is None:
                results[n] = list(results[in_batch[p.key]])
        return results

    def _write_messages(self, index: LogIndex, prepared: list[Prepared], fresh: list[int],
                        results: list) -> None:
        now = self._now()
        stamp = now.isoformat(timespec="seconds")
        day = max(now.date().toordinal(), self._main.ordinal)
        lines, rel, keys = [], [], []
        i, at = self._count, 0
        for n in fresh:
            p = prepared[n]
            first = i
            for k, (text, size) in enumerate(zip(p.parts, p.sizes)):
                line = encode_message(i, p.kind, text, size, p.date or stamp, p.key,
                                      p.images if k == 0 else (), p.metas[k])
                lines.append(line)
                rel.append((len(line) - 1, at))
                at += len(line)
                i += 1
            results[n] = list(range(first, i))
            if p.key is not None:
                keys.append((key_digest(p.key), first, i - first))
        data = b"".join(lines)
        try:
            offset = self._main.append(day, data)
            _crash.hit("message")
            index.messages.write(self._count, b"".join(
                LOC.pack(day, length, offset + r) for length, r in rel))
            if keys:
                index.keys.write(index.keys.count, b"".join(KEY.pack(*k) for k in keys))
        except OSError as exc:
            self._broken = exc
            raise StoreBroken(f"{self}: writing messages failed: {exc}") from exc
        self._count = i
        if self._keys is not None:
            for digest, first, count in keys:
                self._remember_key(digest, first, count)
        self._wrote(len(data))

    def _lookup_key(self, key: str) -> list[int] | None:
        if self._keys is None:
            self._keys = {d: (f, c) for d, f, c in self._index.key_entries(self.KEY_HORIZON)}
        hit = self._keys.get(key_digest(key))
        if hit is None:
            return None
        first, count = hit
        if first + count > self._count or self.message(first).key != key:
            return None  # a digest collision: not this key after all
        return list(range(first, first + count))

    def _remember_key(self, digest: bytes, first: int, count: int) -> None:
        keys = self._keys
        keys.pop(digest, None)
        keys[digest] = (first, count)
        if len(keys) > 2 * self.KEY_HORIZON:
            self._keys = dict(list(keys.items())[-self.KEY_HORIZON:])

    def message(self, i: int) -> MessageRecord:
        """Message i, read by id through the index (one pread for the entry, one for the
        record; no scan), its checksum checked (P3)."""
        self._usable()
        if type(i) is not int or not 0 <= i < self._count:
            raise BadInput(f"no message {i!r}: the chat has ids 0 ... {self._count - 1}")
        rec = self._read(lambda: self._message_record(i))
        return MessageRecord(i, rec["kind"], rec["text"], rec["size"], rec["date"],
                             rec.get("key"), tuple(rec.get("images", ())), rec.get("meta"))

    def _message_record(self, i: int) -> dict:
        ordinal, length, offset = self._index.message_loc(i)
        rec = self._main.read_record(parse_message, ordinal, offset, length, f"message {i}")
        if rec["i"] != i:
            raise CorruptRecord(self._main.path(ordinal), offset,
                                f"the index puts message {i} here but the record is id "
                                f"{rec['i']} (run check)")
        return rec

    def _read(self, read: Callable[[], Any]) -> Any:
        """A read through the index. When the log and the index disagree, the index (derived)
        is rebuilt from the log once, which also walks and checks every record, and the read
        is tried again (P14: a damaged index heals, the writer's on disk, a reader's in
        memory). Damage of the log itself is remembered: no write goes past it (P15)."""
        try:
            return read()
        except CorruptRecord as first:
            if self._healed:
                raise self._damaged(first) from None
            self.warn("%s: %s; rebuilding the index from the log", self.path, first)
            self._healed = True
            try:
                self._rebuild()
                return read()
            except CorruptRecord as again:
                raise self._damaged(again) from None

    def _damaged(self, error: CorruptRecord) -> CorruptRecord:
        if self._damage is None:
            self._damage = error
        return error
    def message_line(self, i: int) -> str:
        """Message i's line `kind: text` (R11, R28)."""
        return self.message(i).line

    # -- the tree -------------------------------------------------------------------------

    def append_nodes(self, nodes: Iterable[tuple[int, int, str]]) -> int:
        """Log built nodes `(l, i, text)` with one write and one fsync (R4, R12). A node
        built before with the same text is ignored; with another text: StoreError, and
        nothing of the batch is written. Texts are 1 ... 512 UTF-8 bytes (R10, R29), and a
        node covers only logged messages. Returns how many nodes were written."""
        index = self._writable()
        fresh: dict[tuple[int, int], tuple[str, int]] = {}
        for item in nodes:
            level, i, text, size = check_node(item, self._count)
            old = fresh[(level, i)][0] if (level, i) in fresh else self.node(level, i)
            if old is not None:
                if old != text:
                    raise StoreError(f"node({level}, {i}) is already built with another "
                                     "text; a node is built once (R12)")
                continue
            fresh[(level, i)] = (text, size)
        if not fresh:
            return 0
        lines = [encode_node(level, i, text, size)
                 for (level, i), (text, size) in fresh.items()]
        data = b"".join(lines)
        day = max(self._now().date().toordinal(), self._tree.ordinal)
        try:
            at = self._tree.append(day, data)
            _crash.hit("node")
            for (level, i), line in zip(fresh, lines):
                index.slots.put(level, i, LOC.pack(day, len(line) - 1, at))
                at += len(line)
        except OSError as exc:
            self._broken = exc
            raise StoreBroken(f"{self}: writing nodes failed: {exc}") from exc
        self._wrote(len(data))
        return len(fresh)

    def node(self, level: int, i: int) -> str | None:
        """The text of node(l, i), or None when it is not built (R10). One pread of its
        index slot, one of its record: no scan."""
        index = self._usable()
        check_node_id(level, i)
        loc = index.node_loc(level, i)
        if loc is None:
            return None
        return self._read(lambda: self._node_text(level, i))

    @property
    def node_count(self) -> int:
        """How many nodes are built (node records in `tree/`), from the index's slots."""
        return self._usable().slots.count()

    def _node_text(self, level: int, i: int) -> str | None:
        loc = self._index.node_loc(level, i)
        if loc is None:
            return None
        ordinal, length, offset = loc
        rec = self._tree.read_record(parse_tree, ordinal, offset, length, f"node({level}, {i})")
        if rec[:3] != ("node", level, i):
            raise CorruptRecord(self._tree.path(ordinal), offset, f"the index puts "
                                f"node({level}, {i}) here but the record differs (run check)")
        return rec[3]

    def append_merge(self, merges: Iterable[tuple[int, int]], t: int, open: bool) -> None:
        """Log one merge record `{"merge": [[l, i] ...], "t": T, "open": bool}` (R25): the
        pairs a batch merged, in order, each named as R18 names a pair, by its left member
        `(l, i)` with i even, with one write and one fsync (R4). Every pair's parent
        `(l + 1, i / 2)` must be built (R18); t never decreases and is at most the message
        count."""
        index = self._writable()
        pairs = []
        for pair in merges:
            try:
                level, i = pair
            except (TypeError, ValueError):
                raise BadInput(f"a merge is an (l, i) pair, got {pair!r:.80}") from None
            check_node_id(level, i)
            if i % 2 or level >= MAX_LEVEL or index.node_loc(level + 1, i // 2) is None:
                raise BadInput(f"[{level}, {i}] is not the left member of a pair with a built "
                               "parent; only built parents merge (R18)")
            pairs.append((level, i))
        if type(t) is not int or not self._last_t <= t <= self._count:
            raise BadInput(f"t={t!r} must be an int in {self._last_t} ... {self._count} "
                           "(t never decreases, R25)")
        if type(open) is not bool:
            raise BadInput(f"open must be a bool, got {open!r}")
        line = encode_merge(pairs, t, open)
        day = max(self._now().date().toordinal(), self._tree.ordinal)
        try:
            offset = self._tree.append(day, line)
            _crash.hit("merge")
            index.merges.write(index.merges.count, MERGE.pack(t, day, len(line) - 1, offset))
        except OSError as exc:
            self._broken = exc
            raise StoreBroken(f"{self}: writing a merge record failed: {exc}") from exc
        self._last_t = t
        self._wrote(len(line))

    @property
    def merge_count(self) -> int:
        """How many merge records the chat holds (R25)."""
        return self._usable().merges.count

    def logged_keys(self, keys: Iterable[str]) -> set[str]:
        """Which of `keys` an append of the chat carried, whenever it was logged (past the
        key horizon too), read from the key index alone (`keys.idx`: the blake2b-128 of
        every keyed append's key, 32 bytes an entry): no record is read, so it costs 32
        bytes a keyed message, not a read and parse of each (performance review P3)."""
        wanted = {key_digest(key): key for key in keys}
        table, found, step = self._usable().keys, set(), 1 << 15
        for first in range(0, table.count, step):
            data = table.read(first, min(step, table.count - first))
            for at in range(0, len(data), KEY.size):
                key = wanted.get(data[at:at + 16])
                if key is not None:
                    found.add(key)
        return found

    def first_merge_after(self, t: int) -> int:
        """The number of the first merge record with a t above `t` (a binary search)."""
        return self._usable().first_merge_after(t)

    def merge_records(self, after_t: int = -1, *, first: int | None = None,
                      ) -> list[tuple[list[tuple[int, int]], int, bool]]:
        """The merge records in log order (R24, R25): those with t > after_t (a binary
        search in the merge index), or, with `first`, those from the first-th record on;
        then one pread per record returned."""
        return [record[:3] for record in self.merge_records_at(after_t, first=first)]

    def merge_records_at(self, after_t: int = -1, *, first: int | None = None) -> list[tuple]:
        """`merge_records` with each record's place: `(merges, t, open, file, offset)`, so a
        record that does not fold can be named (R2: the file and the byte offset)."""
        self._usable()
        return self._read(lambda: self._merge_records_at(after_t, first))

    def _merge_records_at(self, after_t: int, first: int | None) -> list[tuple]:
        index = self._index
        if first is None:
            first = index.first_merge_after(after_t)
        elif type(first) is not int or not 0 <= first <= index.merges.count:
            raise BadInput(f"no merge record {first!r}: the chat has {index.merges.count}")
        count = index.merges.count - first
        out = []
        if count <= 0:
            return out
        for t, ordinal, length, offset in MERGE.iter_unpack(index.merges.read(first, count)):
            rec = self._tree.read_record(parse_tree, ordinal, offset, length, "a merge record")
            if rec[0] != "merge" or rec[2] != t:
                raise CorruptRecord(self._tree.path(ordinal), offset, "the index puts a "
                                    f"merge record with t={t} here; the log differs")
            out.append((rec[1], rec[2], rec[3], self._tree.path(ordinal), offset))
        return out

    # -- views and assets -------------------------------------------------------------------

    def save_views(self, view: dict, cview: dict) -> None:
        """Save `view.json` and `compaction-view.json` atomically (R4, R22)."""
        self._writable()
        _views.save_views(self.path, view, cview)

    def load_views(self) -> tuple[dict | None, dict | None]:
        """(view, compaction view) as saved; None for a missing file (R24). An unreadable
        `view.json` raises CorruptRecord; an unreadable compaction view is derived data
        (R24: it restarts as the view fitted down): it is reported, a writer sets it aside
        in `damaged/`, and it loads as None (P14)."""
        self._usable()
        view, cview, damage = _views.load_views(self.path)
        if damage is not None:
            if self.writer and self._broken is None:
                moved = set_aside(self.path, _views.CVIEW_NAME)
                log.warning("%s: %s; it is rebuilt from the view, the damaged file kept as %s",
                            self.path, damage, moved.relative_to(self.path))
            else:
                self.warn("%s: %s; the view fitted down stands in for it (R24)", self.path, damage)
        return view, cview

    def save_fold(self, fold: dict) -> None:
        """Save the fold checkpoint (`index/fold.json`, derived; see actors/planner/view_check.py)."""
        self._writable()
        _views.save_fold(self.path, fold)

    def load_fold(self) -> dict | None:
        """The fold checkpoint as saved; None when missing or unreadable (it is derived)."""
        self._usable()
        return _views.load_fold(self.path)

    def put_asset(self, data: bytes) -> str:
        """Store an image once under `assets/<sha256>` and return the digest (R9)."""
        self._writable()
        return _assets.put_asset(self.path, data)

    def asset(self, digest: str) -> bytes:
        """The bytes of a stored image (R9)."""
        self._usable()
        return _assets.read_asset(self.path, digest)

    def cut(self, messages: int, merges: int) -> LogCut:
        """A consistent cut of the log at `messages` messages and `merges` merge records,
        for a copy taken without the lock (`actors/upkeep/backup/`; see `_cut`). Both counts are
        at most what this open found; the cut streams the day files as they are now."""
        index = self._usable()
        if type(messages) is not int or not 0 <= messages <= self._count:
            raise BadInput(f"a cut at {messages!r} messages; the chat has {self._count}")
        if type(merges) is not int or not 0 <= merges <= index.merges.count:
            raise BadInput(f"a cut at {merges!r} merge records; the chat has {index.merges.count}")
        end = (0, 0)
        if messages:
            ordinal, length, offset = index.message_loc(messages - 1)
            end = (ordinal, offset + length + 1)
        return LogCut(self.path, self._main, self._tree, messages, merges, end, self._repairs)

    # -- whole-chat operations --------------------------------------------------------------

    def check(self) -> dict:
        """Verify every record of the chat in one pass: ids 0 ... T-1 without gap or
        duplicate (R2), valid records and kinds (R1, R3), sizes, node texts (R10), merge
        records (R25), and that the index agrees with the log. Raises CorruptRecord at the
        first problem; returns counts (messages, nodes, merges, files, bytes, torn,
        repaired)."""
        index = self._usable()
        return check_chat(self.path, self._main, self._tree, index, self._repairs,
                          self._stops)

    def rebuild_index(self) -> None:
        """Throw the index away and rebuild it from the log (writer only): the repair when
        `check` reports that the index disagrees with the log."""
        self._writable()
        self._rebuild()

    def _rebuild(self) -> None:
        """Rebuild the index from the whole log: a writer's on disk, a reader's in memory
        (it never writes). Walks and checks every record (CorruptRecord at damage)."""
        index = self._index
        before = (self._count, sum(1 for _ in index.slots.filled()), index.merges.count)
        index.reset()
        tail = scan_main(self.path, self._main, (0, 0), 0, self._repairs)
        index.messages.write(0, tail.entries)
        index.keys.write(0, tail.keys)
        _, seen, last_t, _ = scan_tree(self.path, self._tree, index, (0, 0), tail.next_id, 0, self._repairs)
        after = (tail.next_id, seen - index.merges.count, index.merges.count)
        # The index only ever knows acknowledged records: a log that now holds fewer lost
        # some (a damaged last newline makes a whole record look torn, R2).
        for what, old, new, log in (("messages", before[0], after[0], self._main),
                                    ("nodes", before[1], after[1], self._tree),
                                    ("merge records", before[2], after[2], self._tree)):
            if new < old:
                days = log.days()
                at = log.path(days[-1]) if days else log.folder
                raise CorruptRecord(at, 0, f"the log holds {new} {what}, the index knew {old}: "
                                           "acknowledged records are missing or damaged")
        self._last_t = last_t
        self._count = tail.next_id if self.writer else self._count
        self._keys = None
        if self.writer:
            self._checkpoint()

    def _wrote(self, nbytes: int) -> None:
        """Count appended bytes; checkpoint the index when enough have passed. The records
        are acknowledged already: a failed checkpoint is logged, never raised (the index is
        derived; the next open only scans a longer tail)."""
        self._since_checkpoint += nbytes
        if self._since_checkpoint >= self.CHECKPOINT_BYTES:
            try:
                self._index.checkpoint(self._main.position, self._tree.position)
            except OSError:
                log.warning("%s: checkpointing the index failed; the next open scans a "
                            "longer tail", self, exc_info=True)
            self._since_checkpoint = 0

    def _checkpoint(self) -> None:
        try:
            self._index.checkpoint(self._main.position, self._tree.position)
        except OSError as exc:
            self._broken = exc
            raise StoreBroken(f"{self}: checkpointing the index failed: {exc}") from exc
        self._since_checkpoint = 0

    def close(self) -> None:
        """Checkpoint the index (writer), close every file and drop the lock. Idempotent."""
        if self._closed:
            return
        try:
            if self.writer and self._broken is None and self._since_checkpoint:
                self._checkpoint()
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        if self._index is not None:
            self._index.close()
        self._main.close()
        self._tree.close()
        if self._lock is not None:
            self._lock.release()

    def _abandon(self) -> None:
        """For tests: drop every file and the lock as `kill -9` would, without the
        checkpoint `close` makes."""
        self._release()
