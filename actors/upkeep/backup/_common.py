"""What the snapshot and the restore share: the manifest's name and version, the chunk
size, the names a backup holds, and the two errors."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from everchat.actors.turns.goals import GOAL_NAME
from everchat.actors.folder import CVIEW_NAME, VIEW_NAME
from everchat.actors.folder._transcripts import _NAME as _AGENT
from everchat.actors.folder._transcripts import TRANSCRIPT_FILE
from everchat.transport._keys import _NAME as _KEY

__all__ = ["MANIFEST_NAME", "BACKUP_FORMAT", "BACKUP_VERSION", "READ_VERSIONS", "MANIFEST_LIMIT", "CHUNK", "HEX64",
           "BackupError", "RestoreRefused", "backup_name", "is_key_file", "remove_stale"]

MANIFEST_NAME = "everchat-backup.json"
BACKUP_FORMAT = "everchat-backup"
BACKUP_VERSION = 2
"""Version 2 (issue 13) may hold the chat's `goal.json`; version 1 never does."""
READ_VERSIONS = (1, 2)
"""The versions `restore` reads: a version 1 backup is a version 2 one without a goal."""
MANIFEST_LIMIT = 64 << 20  # bytes: a manifest lists names and sums, never this much
CHUNK = 1 << 20
HEX64 = re.compile(r"[0-9a-f]{64}")

_DAY_FILE = re.compile(r"(main|tree)/\d{4}-\d{2}-\d{2}\.jsonl")
_ASSET = re.compile(r"assets/[0-9a-f]{64}")
_TOP_FILES = frozenset({"chat.json", "repairs.json", VIEW_NAME, CVIEW_NAME, "usage.json", GOAL_NAME})
_CONFIG_FILES = frozenset({"config/devices.json", "config/ports.json"})
_AGENT_FILES = frozenset({TRANSCRIPT_FILE, "repairs.json"})


def is_key_file(name: str) -> bool:
    """`config/keys/authorized_keys` or `config/keys/NAME.key` (transport.KeyStore's
    layout): only a backup made `with_keys` holds them."""
    parts = name.split("/")
    return (len(parts) == 3 and parts[:2] == ["config", "keys"]
            and (parts[2] == "authorized_keys" or (parts[2].endswith(".key") and bool(_KEY.fullmatch(parts[2][:-4])))))


def backup_name(name: str, *, with_keys: bool, version: int = BACKUP_VERSION) -> bool:
    """A name `snapshot` writes into a backup of that kind (P8), and so the only names
    `restore` accepts: a day file, an image, an agent's transcript and its repairs.json
    (R38: `agents/NAME/`), the devices and ports books, the CURVE keys only `with_keys`,
    the chat's own top files (`goal.json` from version 2 on). Never a lock, `run/`,
    `index/`, `draft.json`, `damaged/`, and no other file of `config/` or `agents/`: a ZIP
    that plants one (an attacker's key in authorized_keys, a run file naming another
    process, a draft the next writer would log as a reply) is refused, whatever its sums."""
    if name in _TOP_FILES:
        return name != GOAL_NAME or version >= 2
    if _DAY_FILE.fullmatch(name) or _ASSET.fullmatch(name) or name in _CONFIG_FILES:
        return True
    if is_key_file(name):
        return with_keys
    parts = name.split("/")
    return len(parts) == 3 and parts[0] == "agents" and bool(_AGENT.fullmatch(parts[1])) and parts[2] in _AGENT_FILES


def _dead(pid: int) -> bool:
    """Whether no process has this pid (one that exists, ours or another user's, is alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def remove_stale(folder: Path, prefix: str, *, folders: bool) -> list[Path]:
    """P11: remove what a killed run of this command left in `folder`: the entries named
    `prefix` + PID (+ `-` and anything, for folders) whose process is gone. A file (a
    half-written ZIP) or a folder (a restore's whole copy of the chat) of the right kind
    only, never through a symlink; a live process's is left alone. The ones removed."""
    gone = []
    try:
        names = os.listdir(folder)
    except OSError:
        return gone
    for name in names:
        rest = name[len(prefix):] if name.startswith(prefix) else ""
        pid = rest.split("-", 1)[0] if folders else rest
        if not pid.isdigit() or (folders and "-" not in rest) or not _dead(int(pid)):
            continue
        path = folder / name
        if path.is_symlink() or not (path.is_dir() if folders else path.is_file()):
            continue
        if folders:
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        gone.append(path)
    return gone


class BackupError(Exception):
    """A backup could not be made from this chat: it holds no chat, its view disagrees
    with its merge records (R24), an image it references is missing or changed (R9), the
    ZIP file exists already. Nothing was written (a half-written ZIP is removed)."""


class RestoreRefused(Exception):
    """A restore was refused: the target is not empty, or the ZIP is not a whole, honest
    Everchat backup (see the module docstring), or the restored chat failed its check.
    Raised before the target was touched: it is as it was, and nothing is left beside it."""
