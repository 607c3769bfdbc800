"""Walking the log: the tail scan at open and the full check (R2, R25, issue 2).

Both walk day files line by line and validate every record the same way. The tail scan
starts where the index's marker stops and fills the index in (writer: on disk, reader: in
memory); `check_chat` starts at the beginning and compares every record with the index.

R2 as applied here: a last line with no newline is torn (a crash mid-write) and skipped; a
line that was torn once and terminated later is skipped when `repairs` lists exactly its
file, offset and length; any other line that is not a valid record, and any gap or
duplicate id, raises CorruptRecord with the file and byte offset.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

from ._daylog import DayLog
from ._errors import CorruptRecord
from ._index import KEY, LOC, MERGE, LogIndex
from ._records import Malformed, parse_message, parse_tree, part_of

__all__ = ["Repair", "KeyGroups", "key_digest", "index_agrees", "scan_main", "scan_tree",
           "check_chat", "MainTail"]


class Repair(NamedTuple):
    """A torn last line (R2): its file (relative to the chat folder), offset and length."""

    file: str
    offset: int
    length: int


def key_digest(key: str) -> bytes:
    """The 16-byte name of an idempotency key in `keys.idx`."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest()


class KeyGroups:
    """Follows keyed appends through the log and reports each one that is whole.

    An append split by R8 is whole when parts 1 ... n of one key follow each other with
    consecutive ids. Parts of an append torn by a crash never complete: their key is not
    registered; at the log's end they are skipped (`scan_main`, P8), so a resend logs the
    text once."""

    def __init__(self) -> None:
        self._group: list | None = None  # [key, first id, parts, parts seen]

    def feed(self, rec: dict, i: int) -> tuple[str, int, int] | None:
        key = rec.get("key")
        if key is None:
            self._group = None
            return None
        k, n = part_of(rec)
        g = self._group
        if k == 1:
            g = self._group = [key, i, n, 1]
        elif g is not None and g[0] == key and g[2] == n and k == g[3] + 1 and i == g[1] + g[3]:
            g[3] += 1
        else:
            self._group = None
            return None
        if g[3] == n:
            self._group = None
            return key, g[1], n
        return None


def _gap(i: int, expected: int) -> str:
    if i < expected:
        return f"duplicate id {i}: ids 0 ... {expected - 1} come before it (R2)"
    return f"gap: id {i} where id {expected} was expected (R2)"


def index_agrees(main: DayLog, tree: DayLog, index: LogIndex) -> bool:
    """Cheap agreement of the index's marker with the log, at open: the files it covered
    are at least as long as it says (else the log lost acknowledged bytes: CorruptRecord),
    and the last message and merge entries point at those records. False: rebuild."""
    marker = index.found
    if marker is None or not index.sizes_agree():
        return False
    for stream, (ordinal, offset) in ((main, marker.main), (tree, marker.tree)):
        if ordinal:
            size = stream.size(ordinal)
            if size is None or size < offset:
                raise CorruptRecord(stream.path(ordinal), size or 0,
                                    f"the log ends before byte {offset}, which the index "
                                    "had covered: acknowledged records are missing")
    try:
        if marker.messages:
            ordinal, length, offset = index.message_loc(marker.messages - 1)
            line = main.read_line(ordinal, offset, length, "the last message")
            if parse_message(line, main.sealed(ordinal, offset))["i"] != marker.messages - 1:
                return False
        if marker.merges:
            t, ordinal, length, offset = index.merge_entry(marker.merges - 1)
            rec = parse_tree(tree.read_line(ordinal, offset, length, "the last merge"),
                             tree.sealed(ordinal, offset))
            if rec[0] != "merge" or rec[2] != t:
                return False
    except (CorruptRecord, Malformed, OSError):
        return False
    return True


class _Records:
    """The lines of a tail scan that hold records, as `(ordinal, offset, line, rel)` from
    `start` on: a last line with no newline is torn (R2), kept in `torn` and passed over,
    as is one that `repairs` lists; `end` is just after the last line read, whichever."""

    def __init__(self, log: DayLog, start: tuple[int, int], repairs: set[Repair]) -> None:
        self.log, self.start, self.repairs = log, start, repairs
        self.torn: list[Repair] = []
        self.end = start

    def __iter__(self):
        log, repairs = self.log, self.repairs
        for ordinal, offset, line, terminated in log.lines_from(self.start):
            rel = log.rel(ordinal)
            self.end = (ordinal, offset + len(line) + terminated)
            if not terminated:
                self.torn.append(Repair(rel, offset, len(line)))
            elif not (repairs and Repair(rel, offset, len(line)) in repairs):
                yield ordinal, offset, line, rel


class MainTail(NamedTuple):
    entries: bytes
    keys: bytes
    torn: list[Repair]  # unterminated last lines (R2)
    next_id: int
    end: tuple[int, int]  # just after the last line scanned
    orphans: list[Repair] = []  # whole lines of a split append the log ends inside (P8)


def scan_main(chat: Path, log: DayLog, start: tuple[int, int], first_id: int,
              repairs: set[Repair]) -> MainTail:
    """Validate the message records from `start` on; their index and key entries.

    P8, all or nothing: the parts of one split message (R8) are one `write`. A log that
    ends inside such a group (parts 1 ... k of n, k < n: a crash or a full disk cut the
    write short, so it was never acknowledged) ends with a torn write, as R2's torn last
    line: its whole lines are reported as `orphans`, skipped, and their ids are the next
    append's, so a retry logs the text once. Only the log's very end is read this way."""
    entries, keys = bytearray(), bytearray()
    next_id, groups = first_id, KeyGroups()
    split: list | None = None  # the split append being read: [entries at its start, its lines]
    records = _Records(log, start, repairs)
    for ordinal, offset, line, rel in records:
        try:
            rec = parse_message(line, log.sealed(ordinal, offset))
        except Malformed as exc:
            raise CorruptRecord(chat / rel, offset, str(exc)) from None
        if rec["i"] != next_id:
            raise CorruptRecord(chat / rel, offset, _gap(rec["i"], next_id))
        k, n = part_of(rec)
        if k == 1:
            split = [len(entries), []] if n > 1 else None
        if split is not None:
            split[1].append(Repair(rel, offset, len(line)))
            if k == n:
                split = None
        entries += LOC.pack(ordinal, len(line), offset)
        whole = groups.feed(rec, next_id)
        if whole is not None:
            keys += KEY.pack(key_digest(whole[0]), whole[1], whole[2])
        next_id += 1
    orphans: list[Repair] = []
    if split is not None:
        at, orphans = split
        del entries[at:]
        next_id -= len(orphans)
    return MainTail(bytes(entries), bytes(keys), records.torn, next_id, records.end, orphans)


def _node_record_at(log: DayLog, loc: tuple[int, int, int]) -> tuple | None:
    ordinal, length, offset = loc
    data = log.pread(ordinal, offset, length + 1)
    if len(data) != length + 1 or not data.endswith(b"\n"):
        return None
    try:
        return parse_tree(data[:-1], log.sealed(ordinal, offset))
    except Malformed:
        return None


def _tree_record(chat: Path, log: DayLog, index: LogIndex, ordinal: int, offset: int,
                 line: bytes, count: int, last_t: int, *, fill: bool) -> tuple:
    """Validate one tree record against the records before it; with `fill`, index it."""
    rel = log.rel(ordinal)
    try:
        rec = parse_tree(line, log.sealed(ordinal, offset))
    except Malformed as exc:
        raise CorruptRecord(chat / rel, offset, str(exc)) from None
    here = (ordinal, offset)
    if rec[0] == "node":
        _, level, i, _ = rec
        if (i + 1) << level > count:
            raise CorruptRecord(chat / rel, offset, f"node({level}, {i}) covers messages "
                                f"up to {((i + 1) << level) - 1}; the log has {count} (R10)")
        loc = (ordinal, len(line), offset)
        slot = index.node_loc(level, i)
        if slot is not None and slot != loc:
            other = _node_record_at(log, slot)
            if other is not None and other[:3] == rec[:3]:
                first, second = sorted([(slot[0], slot[2]), here])
                raise CorruptRecord(chat / log.rel(second[0]), second[1],
                                    f"node({level}, {i}) is built a second time; it was "
                                    f"built at {log.rel(first[0])} byte {first[1]} (R12)")
        if fill:
            index.slots.put(level, i, LOC.pack(*loc))
        elif slot != loc:
            raise CorruptRecord(index.slots.path(level), i * LOC.size,
                                f"the index disagrees with the log about node({level}, {i})"
                                f" at {rel} byte {offset}")
        return rec
    _, pairs, t, _ = rec
    if t < last_t:
        raise CorruptRecord(chat / rel, offset, f"merge record t={t} after t={last_t}: t "
                            "never decreases (R25)")
    if t > count:
        raise CorruptRecord(chat / rel, offset, f"merge record t={t} but the log has "
                            f"{count} messages (R25)")
    for level, i in pairs:
        # A pair is named by its left member (R18); its parent must be built before.
        slot = index.node_loc(level + 1, i // 2)
        if slot is None or (slot[0], slot[2]) > here:
            raise CorruptRecord(chat / rel, offset, f"merge record merges pair [{level}, {i}]"
                                f" before its parent node({level + 1}, {i // 2}) is built"
                                " (R18, R25)")
    if fill:
        index.merges.write(index.merges.count, MERGE.pack(t, ordinal, len(line), offset))
    return rec


def scan_tree(chat: Path, log: DayLog, index: LogIndex, start: tuple[int, int], count: int,
              last_t: int, repairs: set[Repair],
              ) -> tuple[list[Repair], int, int, tuple[int, int]]:
    """Validate the tree records from `start` on and index them. Returns the torn lines,
    the number of records indexed, the last merge t and the position after the last
    line."""
    seen = 0
    records = _Records(log, start, repairs)
    for ordinal, offset, line, _ in records:
        rec = _tree_record(chat, log, index, ordinal, offset, line, count, last_t, fill=True)
        if rec[0] == "merge":
            last_t = rec[2]
        seen += 1
    return records.torn, seen, last_t, records.end


def check_chat(chat: Path, main: DayLog, tree: DayLog, index: LogIndex,
               repairs: set[Repair], stops: tuple = (None, None)) -> dict:
    """Verify every record of the chat in one pass (issue 2: `everchat check`); raise
    CorruptRecord at the first problem, else return counts. `stops` end the walk of each
    stream (a reader checks the log as far as it opened it, not a running writer's
    newest lines)."""
    counts = {"messages": 0, "nodes": 0, "merges": 0, "files": 0, "bytes": 0, "torn": 0,
              "repaired": 0}
    files: set[str] = set()
    groups, keys_seen = KeyGroups(), 0
    assets: dict[str, tuple[str, int, int]] = {}  # digest -> where it is first referenced
    msgs = index.messages
    locs = index.message_locs()
    for rel, ordinal, offset, line in _whole_lines(main, stops[0], counts, files, repairs):
        i = counts["messages"]
        try:
            rec = parse_message(line, main.sealed(ordinal, offset))
        except Malformed as exc:
            raise CorruptRecord(chat / rel, offset, str(exc)) from None
        if rec["i"] != i:
            raise CorruptRecord(chat / rel, offset, _gap(rec["i"], i))
        if i < msgs.count and next(locs) != (ordinal, len(line), offset):
            raise CorruptRecord(msgs.path, i * LOC.size, f"the index disagrees with the log"
                                f" about message {i} at {rel} byte {offset}")
        images = rec.get("images")
        if images:
            for digest in images:
                if digest not in assets:
                    assets[digest] = (rel, offset, i)
        whole = groups.feed(rec, i)
        if whole is not None:
            if keys_seen < index.keys.count:
                entry = KEY.pack(key_digest(whole[0]), whole[1], whole[2])
                if index.keys.read(keys_seen) != entry:
                    raise CorruptRecord(index.keys.path, keys_seen * KEY.size,
                                        f"the key index disagrees with the log about the "
                                        f"append of message {whole[1]}")
            keys_seen += 1
        counts["messages"] = i + 1
    _check_assets(chat, assets)
    counts["assets"] = len(assets)
    if counts["messages"] < msgs.count:
        raise CorruptRecord(msgs.path, counts["messages"] * LOC.size,
                            f"the index knows {msgs.count} messages, the log only "
                            f"{counts['messages']}")
    last_t = 0
    for rel, ordinal, offset, line in _whole_lines(tree, stops[1], counts, files, repairs):
        rec = _tree_record(chat, tree, index, ordinal, offset, line, counts["messages"],
                           last_t, fill=False)
        if rec[0] == "node":
            counts["nodes"] += 1
            continue
        k = counts["merges"]
        if k < index.merges.count and index.merge_entry(k) != (rec[2], ordinal, len(line),
                                                                 offset):
            raise CorruptRecord(index.merges.path, k * MERGE.size, f"the index disagrees "
                                f"with the log about merge record {k} at {rel} byte {offset}")
        last_t = rec[2]
        counts["merges"] = k + 1
    known = sum(1 for spot in index.slots.filled() if stops[1] is None or spot < stops[1])
    if known > counts["nodes"]:
        raise CorruptRecord(index.folder, 0, f"the index knows {known} built nodes, the log only "
                                             f"{counts['nodes']}: acknowledged nodes are missing from tree/")
    if counts["merges"] < index.merges.count:
        raise CorruptRecord(index.merges.path, counts["merges"] * MERGE.size,
                            f"the index knows {index.merges.count} merge records, the log "
                            f"only {counts['merges']}")
    counts["files"] = len(files)
    return counts


def _check_assets(chat: Path, assets: dict[str, tuple[str, int, int]]) -> None:
    """R9: every image a message references is stored, and its bytes hash to its name
    (P13). A reader reads them; the name says which message needs it."""
    for digest, (rel, offset, i) in assets.items():
        path = chat / "assets" / digest
        try:
            with open(path, "rb") as f:
                actual = hashlib.file_digest(f, "sha256").hexdigest()
        except FileNotFoundError:
            raise CorruptRecord(path, 0, f"the image of message {i} ({rel} byte {offset}) is missing") from None
        if actual != digest:
            raise CorruptRecord(path, 0, f"the image of message {i} was changed: its bytes no longer hash to "
                                         "its name (R9)")


def _whole_lines(log: DayLog, stop, counts: dict, files: set, repairs):
    """The complete lines of one log up to `stop`, for `check`: counts every byte, skips
    (and counts) a torn line and a torn span terminated under R2."""
    for ordinal, offset, line, terminated in log.lines_from((0, 0), stop):
        rel = log.rel(ordinal)
        files.add(rel)
        counts["bytes"] += len(line) + terminated
        if not terminated:
            counts["torn"] += 1
            continue
        if repairs and Repair(rel, offset, len(line)) in repairs:
            counts["repaired"] += 1
            continue
        yield rel, ordinal, offset, line
