"""`everchat backup` and `everchat restore`: a chat folder into one ZIP and back (R1-R5).

**The snapshot is a cut, taken without the lock.** The log is append-only and every
record is fsynced before it is acknowledged (R4), so a reader can copy a consistent chat
while its writer goes on (R5: readers never lock, never write). The cut is the moment the
planner last saved its view: `view.json` says how many messages T it covers and how many
merge records K it folds (R22, R24). The backup holds

- `main/` up to the end of message T-1, byte for byte (a prefix: every offset stays true);
- `tree/` with every node of messages < T and the first K merge records, nothing else
  (`store.cut`, actors/store/_cut.py);
- `view.json` **refolded** from those K records with the production fold (R24) and written
  as the planner writes it, after checking that the live file agrees; the compaction view
  when it belongs to the same T (else it is left out: R24, it restarts as the view fitted);
- `chat.json` and `repairs.json`, their positions moved to match the copied tree;
- the images (R9) the messages < T reference, each checked against its name;
- the agents' transcripts (`agents/`) as complete lines up to their size at the cut;
- `usage.json` and `config/` (devices, settings), but never `config/keys/` (the CURVE
  secret keys) unless `with_keys`;
- `everchat-backup.json`, the manifest: counts, and each member's size and SHA-256.

Never in it: the locks, `run/` (sockets, run file, actor logs), `index/` (derived: the
restored chat's first open rebuilds it), `draft.json` (a reply past the cut), `damaged/`,
temporary files, anything outside the chat folder. Messages logged after the saved view
(a running chat's newest, not yet planned) are left for the next backup: the manifest's
`log_messages` says how many the log held.

**A restore writes nothing it has not checked.** `restore` refuses a target that is not an
empty or missing folder, and a ZIP with absolute or `..` names, symlinks or other special
members, duplicate names, names a backup never holds (a lock, `run/`, `index/`, a draft:
whatever its sums say), members the manifest does not list (or listed ones missing), a
member larger than the manifest says or than the space left (a zip bomb: members are
read in chunks and the read stops past the declared size), or a wrong sum. It extracts
into a temporary folder beside the target, runs the same check as `everchat check`
(every record, the view against every merge record, R24), compares the counts with the
manifest, and only then renames the folder into place. On any failure it removes the
temporary folder: the target is as it was.

    manifest = snapshot(chat_dir, "chat.zip")                  # while the chat runs or not
    report = restore("chat.zip", new_dir)                       # RestoreRefused: nothing written
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from everchat.actors.memory import PlannerError, refold
from everchat.actors.store import (CVIEW_NAME, VIEW_NAME, ChatStore, CorruptRecord, StoreError,
                                   view_bytes)
from everchat.actors.store._files import fsync_dir, read_small
from everchat.actors.view_check import check_view_shape

__all__ = ["snapshot", "restore", "read_manifest", "BackupError", "RestoreRefused", "MANIFEST_NAME",
           "BACKUP_FORMAT", "BACKUP_VERSION"]

MANIFEST_NAME = "everchat-backup.json"
BACKUP_FORMAT = "everchat-backup"
BACKUP_VERSION = 1
MANIFEST_LIMIT = 64 << 20  # bytes: a manifest lists names and sums, never this much
CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")
_VIEW_TRIES = 100


class BackupError(Exception):
    """A backup could not be made from this chat: it holds no chat, its view disagrees
    with its merge records (R24), an image it references is missing or changed (R9), the
    ZIP file exists already. Nothing was written (a half-written ZIP is removed)."""


class RestoreRefused(Exception):
    """A restore was refused: the target is not empty, or the ZIP is not a whole, honest
    Everchat backup (see the module docstring), or the restored chat failed its check.
    Raised before the target was touched: it is as it was, and nothing is left beside it."""


# -- the snapshot ---------------------------------------------------------------------------


def _views_at_one_moment(chat: Path) -> tuple[bytes | None, bytes | None]:
    """`view.json` and `compaction-view.json` as one save left them: the compaction view
    is read between two reads of the view that agree (each file is replaced atomically,
    R4, the view first)."""
    for _ in range(_VIEW_TRIES):
        first = read_small(chat / VIEW_NAME)
        cview = read_small(chat / CVIEW_NAME)
        if read_small(chat / VIEW_NAME) == first:
            return first, cview
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


def snapshot(chat: str | os.PathLike, zip_path: str | os.PathLike, *, with_keys: bool = False) -> dict:
    """Back the chat folder `chat` up into a new ZIP file `zip_path`, while it runs or not,
    without its lock (R5): see the module docstring for what goes in. Returns the manifest.
    BackupError (or the store's CorruptRecord) when it cannot; no ZIP is left then."""
    chat, zip_path = Path(chat), Path(zip_path)
    if zip_path.exists() or zip_path.is_symlink():
        raise BackupError(f"{zip_path} exists already; a backup never replaces a file")
    view_data, cview_data = _views_at_one_moment(chat)
    store = ChatStore.open(chat, writer=False, quiet=True)
    try:
        view = _json(view_data, chat / VIEW_NAME) if view_data is not None else None
        messages, merges, refolded = _cut_of(store, view)
        cut = store.cut(messages, merges)
        log_messages = store.message_count
        agents = [(path, _complete_lines(path, path.stat().st_size)) for path in _regular_files(chat / "agents")]
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
                    if cview is not None and cview.get("t") == messages:
                        out.add(CVIEW_NAME, [cview_data])
                for digest in sorted(cut.images):
                    out.add(f"assets/{digest}", _asset_chunks(chat, digest))
                for path, length in agents:
                    out.add(path.relative_to(chat).as_posix(), _file_chunks(path, length))
                if (chat / "usage.json").is_file():
                    out.add("usage.json", [read_small(chat / "usage.json") or b""])
                for path in _regular_files(chat / "config"):
                    rel = path.relative_to(chat)
                    if rel.parts[1] == "keys" and not with_keys:
                        continue
                    out.add(rel.as_posix(), _file_chunks(path))
                manifest = {"format": BACKUP_FORMAT, "version": BACKUP_VERSION,
                            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "messages": messages, "merges": merges, "nodes": cut.nodes,
                            "assets": len(cut.images), "log_messages": log_messages,
                            "with_keys": with_keys, "files": out.files}
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


# -- the restore ----------------------------------------------------------------------------


def _safe_name(name: str) -> bool:
    """A relative path of plain parts: no absolute path, no drive, no `..`, `.` or empty
    part, no backslash, no NUL (zip-slip)."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name or re.match(r"^[A-Za-z]:", name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


_DAY_FILE = re.compile(r"(main|tree)/\d{4}-\d{2}-\d{2}\.jsonl")
_ASSET = re.compile(r"assets/[0-9a-f]{64}")
_TOP_FILES = frozenset({"chat.json", "repairs.json", VIEW_NAME, CVIEW_NAME, "usage.json"})


def _backup_name(name: str) -> bool:
    """A name `snapshot` writes: a day file, an image, an agent's or a config file, or one
    of the chat's own top files. Never a lock, `run/`, `index/`, `draft.json` or
    `damaged/`: a ZIP that plants one (a draft the next writer would log as a reply, a run
    file naming another process) is refused, whatever its sums say."""
    return (name in _TOP_FILES or bool(_DAY_FILE.fullmatch(name)) or bool(_ASSET.fullmatch(name))
            or name.startswith(("agents/", "config/")))


def _bounded_read(zf: zipfile.ZipFile, info: zipfile.ZipInfo, declared: int) -> Iterator[bytes]:
    """A member's inflated bytes in chunks; refused as soon as they pass `declared` (a zip
    bomb never inflates further than one chunk past it)."""
    seen = 0
    try:
        with zf.open(info) as src:
            while True:
                chunk = src.read(min(CHUNK, declared - seen + 1))
                if not chunk:
                    return
                seen += len(chunk)
                if seen > declared:
                    raise RestoreRefused(f"{info.filename} inflates past the {declared} bytes the manifest "
                                         "declares (a zip bomb?)")
                yield chunk
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        raise RestoreRefused(f"{info.filename} is damaged in the ZIP: {error}") from None


def read_manifest(zf: zipfile.ZipFile) -> dict:
    """The manifest of an opened backup ZIP, with every member checked against it (names,
    kinds, duplicates, sizes); RestoreRefused for anything else. Reads no member but the
    manifest."""
    infos = zf.infolist()
    names = [info.filename for info in infos]
    for info in infos:
        if not _safe_name(info.filename):
            raise RestoreRefused(f"the ZIP holds a member named {info.filename!r}, outside the chat folder")
        if info.filename != MANIFEST_NAME and not _backup_name(info.filename):
            raise RestoreRefused(f"the ZIP holds {info.filename}, which is no part of a backup")
        kind = stat.S_IFMT(info.external_attr >> 16)  # 0: the ZIP says no type (a plain file)
        if info.is_dir() or kind not in (0, stat.S_IFREG):
            raise RestoreRefused(f"the ZIP's member {info.filename} is not a regular file (a symlink, "
                                 "a folder or a device)")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise RestoreRefused(f"the ZIP holds {twice[0]} twice")
    if MANIFEST_NAME not in names:
        raise RestoreRefused(f"the ZIP holds no {MANIFEST_NAME}: not an Everchat backup")
    info = zf.getinfo(MANIFEST_NAME)
    if info.file_size > MANIFEST_LIMIT:
        raise RestoreRefused(f"{MANIFEST_NAME} declares {info.file_size} bytes, over {MANIFEST_LIMIT}")
    data = b"".join(_bounded_read(zf, info, info.file_size))
    try:
        manifest = json.loads(data)
        files = manifest["files"]
        ok = (manifest["format"] == BACKUP_FORMAT and type(files) is list
              and all(type(manifest[k]) is int and manifest[k] >= 0 for k in ("messages", "merges", "nodes")))
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise RestoreRefused(f"{MANIFEST_NAME} is not an Everchat backup's manifest")
    if manifest.get("version") != BACKUP_VERSION:
        raise RestoreRefused(f"a backup of version {manifest.get('version')!r}; this Everchat restores "
                             f"version {BACKUP_VERSION}")
    listed: dict[str, tuple[int, str]] = {}
    for entry in files:
        try:
            name, size, digest = entry["name"], entry["size"], entry["sha256"]
        except (KeyError, TypeError):
            raise RestoreRefused(f"{MANIFEST_NAME} lists a file without name, size and sha256") from None
        if (type(name) is not str or not _safe_name(name) or name == MANIFEST_NAME or type(size) is not int
                or size < 0 or type(digest) is not str or not _HEX64.fullmatch(digest) or name in listed):
            raise RestoreRefused(f"{MANIFEST_NAME} lists {str(name)[:80]!r} wrongly")
        listed[name] = (size, digest)
    for name in names:
        if name != MANIFEST_NAME and name not in listed:
            raise RestoreRefused(f"the ZIP holds {name}, which the manifest does not list")
    for name, (size, _) in listed.items():
        if name not in names:
            raise RestoreRefused(f"the manifest lists {name}, which the ZIP does not hold")
        if zf.getinfo(name).file_size != size:
            raise RestoreRefused(f"{name} is {zf.getinfo(name).file_size} bytes in the ZIP, "
                                 f"{size} in the manifest")
    manifest["listed"] = listed
    return manifest


def _free_space(path: Path) -> int:
    for above in (path, *path.parents):
        if above.is_dir():
            return shutil.disk_usage(above).free
    return 0


def _refuse_target(target: Path) -> None:
    if target.is_symlink():
        raise RestoreRefused(f"{target} is a symlink; restore into a new folder")
    if target.exists():
        if not target.is_dir():
            raise RestoreRefused(f"{target} is a file; restore into a new or empty folder")
        if any(target.iterdir()):
            raise RestoreRefused(f"{target} is not empty; restore into a new or empty folder")


def _extract(zf: zipfile.ZipFile, manifest: dict, into: Path) -> None:
    """Every member into `into`, each checked against the manifest's size and sum as it
    streams (never past the size), folders 0700 and files 0600 (P5)."""
    for name in ("main", "tree", "assets"):
        (into / name).mkdir(mode=0o700, exist_ok=True)
    for name, (size, digest) in manifest["listed"].items():
        dest = into.joinpath(*name.split("/"))
        for folder in reversed(dest.parents):
            if len(folder.parts) > len(into.parts) and not folder.is_dir():
                folder.mkdir(mode=0o700)
        check = hashlib.sha256()
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            for chunk in _bounded_read(zf, zf.getinfo(name), size):
                check.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if check.hexdigest() != digest:
            raise RestoreRefused(f"{name}: its SHA-256 is not the manifest's; the backup was changed or damaged")


def _check_restored(folder: Path, manifest: dict) -> dict:
    """`everchat check`'s own code path on the restored chat (every record, the images,
    the view against every merge record, R2, R9, R24), then its counts against the
    manifest's."""
    from everchat.actors.chat import Chat

    try:
        with Chat.open(folder, writer=False) as chat:
            report = chat.check()
    except (StoreError, PlannerError, OSError) as error:
        raise RestoreRefused(f"the restored chat fails its check: {error}") from None
    for what in ("messages", "merges", "nodes"):
        if report[what] != manifest[what]:
            raise RestoreRefused(f"the restored chat holds {report[what]} {what}, the manifest "
                                 f"{manifest[what]}")
    return report


def restore(zip_path: str | os.PathLike, target: str | os.PathLike, *, limit: int | None = None) -> dict:
    """Restore a backup ZIP into `target`, a missing or empty folder: see the module
    docstring. `limit` caps the bytes the members may inflate to together (default: the
    free space where the target goes). Returns the check's report with the manifest's
    figures; RestoreRefused, with nothing written, when anything is wrong."""
    zip_path, target = Path(zip_path), Path(target)
    _refuse_target(target)
    try:
        zf = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as error:
        raise RestoreRefused(f"{zip_path} is not a readable ZIP: {error}") from None
    with zf:
        manifest = read_manifest(zf)
        total = sum(size for size, _ in manifest["listed"].values())
        room = _free_space(target.parent) if limit is None else limit
        if total > room:
            raise RestoreRefused(f"the backup inflates to {total:,} bytes; only {room:,} may be written there")
        made = _make_parents(target.parent)
        tmp = None
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.restore-", dir=target.parent))
            _extract(zf, manifest, tmp)
            fsync_dir(tmp)
            report = _check_restored(tmp, manifest)
            _refuse_target(target)
            os.rename(tmp, target)
            fsync_dir(target.parent)
        except BaseException:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            for folder in reversed(made):
                try:
                    folder.rmdir()
                except OSError:
                    pass
            raise
    figures = {k: manifest[k] for k in ("messages", "merges", "nodes", "assets", "with_keys") if k in manifest}
    return {**report, "backup": figures, "files": len(manifest["listed"])}


def _make_parents(folder: Path) -> list[Path]:
    """Make the missing folders above the target (0700); the ones made, outermost first."""
    missing = [above for above in (folder, *folder.parents) if not above.exists()]
    for above in reversed(missing):
        above.mkdir(mode=0o700)
    return list(reversed(missing))
