"""The snapshot: a consistent cut of a chat into a ZIP, taken without the lock (see the
package docstring)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from everchat.actors.turns.goals import GOAL_NAME, Goal
from everchat.actors.tree import PlannerError, refold
from everchat.actors.folder import CVIEW_NAME, VIEW_NAME, ChatStore, CorruptRecord, view_bytes
from everchat.actors.folder._files import fsync_dir, read_small
from everchat.actors.planner.view_check import check_view_shape

from ._common import BACKUP_FORMAT, BACKUP_VERSION, CHUNK, MANIFEST_NAME, BackupError, backup_name, remove_stale

__all__ = ["snapshot"]

log = logging.getLogger("everchat.backup")

_VIEW_TRIES = 100
_PAIR_SECONDS = 2.0  # how long a view whose compaction view lags is read again
_PAIR_PAUSE = 0.01


def _t_of(data: bytes | None) -> object:
    try:
        return json.loads(data).get("t") if data is not None else None
    except (ValueError, AttributeError):
        return None  # not a view: `_json` and `check_view_shape` say why, later


def _views_at_one_moment(chat: Path) -> tuple[bytes | None, bytes | None]:
    """`view.json` and `compaction-view.json` as one save left them: the compaction view
    is read between two reads of the view that agree (each file is replaced atomically,
    R4, the view first). A compaction view of another t than the view's is the writer
    between its two renames: both are read again until they match, so the backup holds
    the compaction view of its own cut. A crash between the renames leaves them so for
    good; after `_PAIR_SECONDS` they are taken as they are, and the restored chat refits
    the compaction view from the view, as the original does (R24)."""
    deadline = time.monotonic() + _PAIR_SECONDS
    for _ in range(_VIEW_TRIES):
        first = read_small(chat / VIEW_NAME)
        cview = read_small(chat / CVIEW_NAME)
        if read_small(chat / VIEW_NAME) != first:
            continue
        if first is None or cview is None or _t_of(first) == _t_of(cview) or time.monotonic() >= deadline:
            return first, cview
        time.sleep(_PAIR_PAUSE)
    raise BackupError(f"{chat / VIEW_NAME} changed at each of {_VIEW_TRIES} reads; try again")


def _json(data: bytes, where: Path) -> dict:
    try:
        value = json.loads(data)
    except ValueError as error:
        raise BackupError(f"{where} is not valid JSON ({error}): run `everchat check`") from None
    if not isinstance(value, dict):
        raise BackupError(f"{where} is not a JSON object: run `everchat check`")
    return value


def _cut_of(store: ChatStore, view: dict | None) -> tuple[int, int, dict | None]:
    """(T, K, the refolded view) of the cut: the saved view's message count and merge
    records (R24); the view refolded from those K records by the production fold, which
    must equal the live one. No view (lost, R24): the whole log, no view in the backup."""
    if view is None:
        return store.message_count, store.merge_count, None
    where = str(store.path / VIEW_NAME)
    try:
        check_view_shape(view, where)
    except CorruptRecord as error:
        raise BackupError(f"{error}: run `everchat repair`") from None
    t = view["t"]
    k = view.get("merges")
    if k is None:  # a version 1 view is placed by its t alone (R24)
        k = store.first_merge_after(t)
    if t > store.message_count or k > store.merge_count:
        raise BackupError(f"{where} covers {t} messages and {k} merge records; the log holds "
                          f"{store.message_count} and {store.merge_count}: run `everchat check`")
    records = store.merge_records(first=0)[:k]
    try:
        t_fold, lines, still_open = refold(records)
    except PlannerError as error:
        raise BackupError(f"the merge records in {store.path / 'tree'} do not fold (R24): {error}") from None
    if t_fold > t or (t_fold < t and still_open):
        raise BackupError(f"{where} disagrees with its merge records (R24): run `everchat check`")
    refolded = {"version": 2, "t": t, "open": still_open,
                "view": [list(pair) for pair in lines] + [[0, leaf] for leaf in range(t_fold, t)],
                "merges": k}
    if refolded["view"] != view["view"] or refolded["open"] != view["open"]:
        raise BackupError(f"{where} disagrees with the view refolded from the merge records (R24): "
                          "run `everchat check`, then `everchat repair`")
    return t, k, refolded


def _whole_or_saved(chat: Path, store: ChatStore, view_data: bytes | None, t: int, k: int):
    """(messages, merge records, the cut) the backup holds (issue 20).

    The whole log as this open found it, when no view was saved while the cut was taken
    (`view.json` still holds the bytes read first): the chat is at rest, or a crash left
    messages or merge records after its saved view. The backup then holds what the folder
    holds, with the view as saved, and the restored chat recovers (R24: records after the
    view folded into it, messages after them planned) exactly as the original does, so
    both show the same view. Had the cut stopped at the saved view, those records would be
    lost to the backup and its view would be an older one.

    A view saved meanwhile means the chat runs, and its planner may have built nodes of
    messages it planned after the view read first: the cut is then that first view, T
    messages and the K merge records it folds, which a planner saved as one state."""
    cut = store.cut(store.message_count, store.merge_count)  # measures tree/ now: nothing later goes in
    if read_small(chat / VIEW_NAME) == view_data:
        return store.message_count, store.merge_count, cut
    return t, k, store.cut(t, k)


class _Writer:
    """Members streamed into the ZIP, each with its size and SHA-256 for the manifest."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        self.files: list[dict] = []
        self.stamp = time.localtime()[:6]

    def add(self, name: str, chunks) -> None:
        info = zipfile.ZipInfo(name, self.stamp)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (stat.S_IFREG | 0o600) << 16
        digest, size = hashlib.sha256(), 0
        with self.zf.open(info, "w", force_zip64=True) as out:
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        self.files.append({"name": name, "size": size, "sha256": digest.hexdigest()})


def _file_chunks(path: Path, length: int | None = None) -> Iterator[bytes]:
    """The bytes of a file (its first `length`), a block at a time."""
    with open(path, "rb") as f:
        left = length
        while left is None or left > 0:
            chunk = f.read(CHUNK if left is None else min(CHUNK, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk


def _asset_chunks(chat: Path, digest: str) -> Iterator[bytes]:
    """An image's bytes, checked against its name as they stream (R9)."""
    path = chat / "assets" / digest
    check = hashlib.sha256()
    try:
        for chunk in _file_chunks(path):
            check.update(chunk)
            yield chunk
    except FileNotFoundError:
        raise BackupError(f"{path}: an image a message references is missing (R9): run `everchat check`") from None
    if check.hexdigest() != digest:
        raise BackupError(f"{path}: the image's bytes no longer hash to its name (R9): run `everchat check`")


def _complete_lines(path: Path, size: int) -> int:
    """How many of a file's first `size` bytes are complete lines (up to its last newline)."""
    with open(path, "rb") as f:
        end = size
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            block = f.read(end - start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                return start + newline + 1
            end = start
    return 0


def _agents_at_the_cut(agents: list[tuple[Path, int]], messages: int) -> list[tuple[Path, int]]:
    """R38 at the cut: each transcript ends before the first `reported` record of a report
    logged as message `messages` or later (past the cut), so the restored chat's agents
    find that report unreported in their outbox and log it once, by its key. A folder's
    `repairs.json` gets, as its length, its transcript's copied length (see
    `_transcript_repairs`)."""
    cut: dict[Path, int] = {}
    out = []
    for path, length in agents:
        if path.name == "transcript.jsonl":
            length = _before_late_report(path, length, messages)
            cut[path.parent] = length
        out.append((path, length))
    return [(path, cut.get(path.parent, 0) if path.name == "repairs.json" else length) for path, length in out]


def _before_late_report(path: Path, length: int, messages: int) -> int:
    with open(path, "rb") as f:
        data = f.read(length)
    position = 0
    for line in data.splitlines(keepends=True):
        try:
            record = json.loads(line)
        except ValueError:
            record = None  # a torn line a writer terminated: copied as it is
        if isinstance(record, dict) and record.get("kind") == "reported":
            ids = (record.get("meta") or {}).get("ids") or []
            if any(isinstance(i, int) and i >= messages for i in ids):
                return position
        position += len(line)
    return length


def _transcript_repairs(path: Path, length: int) -> bytes:
    """A transcript's `repairs.json` (torn lines' offsets) with only the offsets the copied
    transcript holds: a later record at a listed offset would be skipped as torn."""
    try:
        offsets = json.loads(read_small(path) or b"[]")
    except ValueError as error:
        raise BackupError(f"{path} is not valid JSON ({error}): run `everchat check`") from None
    if not isinstance(offsets, list):
        raise BackupError(f"{path} is not a list of offsets: run `everchat check`")
    return json.dumps(sorted(o for o in offsets if isinstance(o, int) and o < length)).encode()


def _regular_files(folder: Path) -> Iterator[Path]:
    """Regular files under `folder`, sorted, not following symlinks; no temporary files."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            if ".tmp." in name or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            yield path


def _chat_json(chat: Path, cut) -> bytes | None:
    """chat.json with `sealed_from` moved to the cut's tree (P3); byte for byte when
    nothing moves."""
    data = read_small(chat / "chat.json")
    if data is None:
        return None
    info = _json(data, chat / "chat.json")
    spots = info.get("sealed_from")
    if not isinstance(spots, dict) or "tree" not in spots or "main" not in spots:
        return data
    main = tuple(spots["main"])
    if main > cut.main_end and cut.main_end != (0, 0):
        main = cut.main_end
    tree = cut.tree_position(tuple(spots["tree"]))
    if [list(main), list(tree)] == [list(spots["main"]), list(spots["tree"])]:
        return data
    info["sealed_from"] = {"main": list(main), "tree": list(tree)}
    return (json.dumps(info) + "\n").encode()


def _repairs_json(chat: Path, cut) -> bytes | None:
    """repairs.json with only the spans the cut copied (R2), each as it was listed."""
    data = read_small(chat / "repairs.json")
    if data is None:
        return None
    raw = _json(data, chat / "repairs.json")
    kept = {(r.file, r.offset, r.length) for r in cut.kept_repairs()}
    entries = [r for r in raw.get("repairs", []) if (r.get("file"), r.get("offset"), r.get("length")) in kept]
    if not entries:
        return None
    if len(entries) == len(raw.get("repairs", [])):
        return data
    return (json.dumps({**raw, "repairs": entries}, indent=1) + "\n").encode()


def _goal_bytes(chat: Path) -> tuple[bytes, str] | None:
    """`goal.json` as the log writer last replaced it (atomically, R4: one read sees one
    save), with the goal's state; None when the chat has no goal. A file that is not a
    goal is left out and said (the chat reads it as no goal too): it never stops a backup.
    The goal is the chat's latest, which may be newer than the cut (a goal set after the
    saved view: its message is left for the next backup, the goal comes back paused)."""
    data = read_small(chat / GOAL_NAME)
    if data is None:
        return None
    try:
        goal = Goal.from_record(json.loads(data), str(chat / GOAL_NAME))
    except (ValueError, RecursionError) as error:
        log.warning("%s is not a goal (%s): left out of the backup", chat / GOAL_NAME, error)
        return None
    return data, goal.state


def snapshot(chat: str | os.PathLike, zip_path: str | os.PathLike, *, with_keys: bool = False) -> dict:
    """Back the chat folder `chat` up into a new ZIP file `zip_path`, while it runs or not,
    without its lock (R5): see the module docstring for what goes in. Returns the manifest.
    BackupError (or the store's CorruptRecord) when it cannot; no ZIP is left then."""
    chat, zip_path = Path(chat), Path(zip_path)
    if zip_path.exists() or zip_path.is_symlink():
        raise BackupError(f"{zip_path} exists already; a backup never replaces a file")
    # The transcripts are measured before the view is read, so they hold nothing written
    # after the cut was chosen. They may still be a little newer than the cut: an agent's
    # report logged to main/ but not yet planned is past the cut (R38: the agents' recovery
    # must find its report in main/ by its key, not trust its transcript alone).
    agents = [(path, _complete_lines(path, path.stat().st_size)) for path in _regular_files(chat / "agents")
              if backup_name(path.relative_to(chat).as_posix(), with_keys=with_keys)]
    view_data, cview_data = _views_at_one_moment(chat)
    store = ChatStore.open(chat, writer=False, quiet=True)
    try:
        view = _json(view_data, chat / VIEW_NAME) if view_data is not None else None
        view_messages, view_merges, refolded = _cut_of(store, view)
        messages, merges, cut = _whole_or_saved(chat, store, view_data, view_messages, view_merges)
        log_messages = store.message_count
        for stale in remove_stale(zip_path.parent, f".{zip_path.name}.tmp.", folders=False):
            log.warning("removed %s, a half-written ZIP a killed backup left (P11)", stale)
        tmp = zip_path.with_name(f".{zip_path.name}.tmp.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
                out = _Writer(zf)
                for rel, chunks in cut.main_files():
                    out.add(rel, chunks)
                for rel, chunks in cut.tree_files():
                    out.add(rel, chunks)
                for name, data in (("chat.json", _chat_json(chat, cut)), ("repairs.json", _repairs_json(chat, cut))):
                    if data is not None:
                        out.add(name, [data])
                if refolded is not None:
                    out.add(VIEW_NAME, [view_bytes(VIEW_NAME, refolded)])
                    cview = _json(cview_data, chat / CVIEW_NAME) if cview_data is not None else None
                    if cview is not None and cview.get("t") == view_messages:
                        out.add(CVIEW_NAME, [cview_data])
                for digest in sorted(cut.images):
                    out.add(f"assets/{digest}", _asset_chunks(chat, digest))
                for path, length in _agents_at_the_cut(agents, messages):
                    if path.name == "repairs.json":
                        out.add(path.relative_to(chat).as_posix(), [_transcript_repairs(path, length)])
                    else:
                        out.add(path.relative_to(chat).as_posix(), _file_chunks(path, length))
                if (chat / "usage.json").is_file():
                    out.add("usage.json", [read_small(chat / "usage.json") or b""])
                goal = _goal_bytes(chat)
                if goal is not None:
                    out.add(GOAL_NAME, [goal[0]])
                for path in _regular_files(chat / "config"):
                    rel = path.relative_to(chat).as_posix()
                    if backup_name(rel, with_keys=with_keys):  # P8: what a restore of this kind accepts
                        out.add(rel, _file_chunks(path))
                manifest = {"format": BACKUP_FORMAT, "version": BACKUP_VERSION,
                            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "messages": messages, "merges": merges, "nodes": cut.nodes,
                            "view": {"messages": view_messages, "merges": view_merges},
                            "assets": len(cut.images), "log_messages": log_messages,
                            "with_keys": with_keys, "goal": goal[1] if goal else None, "files": out.files}
                out.add(MANIFEST_NAME, [json.dumps(manifest, indent=1).encode() + b"\n"])
                out.files.pop()
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.rename(tmp, zip_path)
            fsync_dir(zip_path.parent)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    finally:
        store.close()
    return manifest
