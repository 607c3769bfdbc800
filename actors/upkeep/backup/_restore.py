"""The restore: a backup ZIP checked member by member, extracted beside the target, checked
as `everchat check` checks, renamed into place; refused with nothing written otherwise (see
the package docstring)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from everchat.actors.turns.goals import GOAL_NAME, load_goal, restored, save_goal
from everchat.actors.tree import PlannerError
from everchat.actors.folder import CVIEW_NAME, VIEW_NAME, CorruptRecord, StoreError
from everchat.actors.folder._files import fsync_dir

from ._common import (BACKUP_FORMAT, BACKUP_VERSION, CHUNK, HEX64, MANIFEST_LIMIT, MANIFEST_NAME, READ_VERSIONS,
                      RestoreRefused, backup_name, is_key_file, remove_stale)

__all__ = ["restore", "read_manifest"]

log = logging.getLogger("everchat.backup")


def _safe_name(name: str) -> bool:
    """A relative path of plain parts: no absolute path, no drive, no `..`, `.` or empty
    part, no backslash, no NUL (zip-slip)."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name or re.match(r"^[A-Za-z]:", name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


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
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as error:
        # a bad CRC or stream, a compression method zipfile cannot read, an encrypted member
        raise RestoreRefused(f"{info.filename} is damaged in the ZIP or cannot be read: {error}") from None


def read_manifest(zf: zipfile.ZipFile) -> dict:
    """The manifest of an opened backup ZIP, with every member checked against it (names,
    kinds, duplicates, sizes); RestoreRefused for anything else. Reads no member but the
    manifest."""
    infos = zf.infolist()
    names = [info.filename for info in infos]
    for info in infos:
        if not _safe_name(info.filename):
            raise RestoreRefused(f"the ZIP holds a member named {info.filename!r}, outside the chat folder")
        if info.filename != MANIFEST_NAME and not backup_name(info.filename, with_keys=True):
            raise RestoreRefused(f"the ZIP holds {info.filename}, which is no part of a backup")
        if info.flag_bits & 0x1:
            raise RestoreRefused(f"the ZIP's member {info.filename} is encrypted; a backup never is")
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
    if manifest.get("version") not in READ_VERSIONS:
        raise RestoreRefused(f"a backup of version {manifest.get('version')!r}; this Everchat restores "
                             f"versions {READ_VERSIONS[0]} to {BACKUP_VERSION}")
    if manifest["version"] < 2 and GOAL_NAME in names:
        raise RestoreRefused(f"the ZIP holds {GOAL_NAME}, which is no part of a version 1 backup")
    with_keys = manifest.get("with_keys", False)
    if type(with_keys) is not bool:
        raise RestoreRefused(f"{MANIFEST_NAME} says with_keys {with_keys!r}, not true or false")
    for name in names:  # P8: only what a backup of this kind writes
        if name != MANIFEST_NAME and not with_keys and is_key_file(name):
            raise RestoreRefused(f"the ZIP holds {name}, which a backup made without --with-keys never holds "
                                 "(a planted key would be authorized)")
        if name != MANIFEST_NAME and not backup_name(name, with_keys=with_keys, version=manifest["version"]):
            raise RestoreRefused(f"the ZIP holds {name}, which is no part of a backup")
    listed: dict[str, tuple[int, str]] = {}
    for entry in files:
        try:
            name, size, digest = entry["name"], entry["size"], entry["sha256"]
        except (KeyError, TypeError):
            raise RestoreRefused(f"{MANIFEST_NAME} lists a file without name, size and sha256") from None
        if (type(name) is not str or not _safe_name(name) or name == MANIFEST_NAME or type(size) is not int
                or size < 0 or type(digest) is not str or not HEX64.fullmatch(digest) or name in listed):
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
    from everchat.actors.session.local import Chat

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


def _pause_goal(folder: Path) -> dict | None:
    """The goal the backup carried, paused (`goals.restored`: a restored chat never starts
    working by itself), written back atomically (R4) before the folder goes into place; its
    record, or None when the backup had no goal. One that is not a goal is refused."""
    try:
        goal = load_goal(folder)
    except CorruptRecord as error:
        raise RestoreRefused(f"{GOAL_NAME} in the backup is not a goal: {error.reason}") from None
    if goal is None:
        return None
    goal = restored(goal)
    save_goal(folder, goal)  # R4's atomic replace, 0600 (P5)
    return goal.to_record()


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
        for stale in remove_stale(target.parent, f".{target.name}.restore-", folders=True):
            log.warning("removed %s, the copy a killed restore left (P11)", stale)
        tmp = None
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.restore-{os.getpid()}-", dir=target.parent))
            _extract(zf, manifest, tmp)
            fsync_dir(tmp)
            report = _check_restored(tmp, manifest)
            report["goal"] = _pause_goal(tmp)
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
