"""What the snapshot and the restore share: the manifest's name and version, the chunk
size, and the two errors."""

from __future__ import annotations

import re

__all__ = ["MANIFEST_NAME", "BACKUP_FORMAT", "BACKUP_VERSION", "READ_VERSIONS", "MANIFEST_LIMIT", "CHUNK", "HEX64",
           "BackupError", "RestoreRefused"]

MANIFEST_NAME = "everchat-backup.json"
BACKUP_FORMAT = "everchat-backup"
BACKUP_VERSION = 2
"""Version 2 (issue 13) may hold the chat's `goal.json`; version 1 never does."""
READ_VERSIONS = (1, 2)
"""The versions `restore` reads: a version 1 backup is a version 2 one without a goal."""
MANIFEST_LIMIT = 64 << 20  # bytes: a manifest lists names and sums, never this much
CHUNK = 1 << 20
HEX64 = re.compile(r"[0-9a-f]{64}")


class BackupError(Exception):
    """A backup could not be made from this chat: it holds no chat, its view disagrees
    with its merge records (R24), an image it references is missing or changed (R9), the
    ZIP file exists already. Nothing was written (a half-written ZIP is removed)."""


class RestoreRefused(Exception):
    """A restore was refused: the target is not empty, or the ZIP is not a whole, honest
    Everchat backup (see the module docstring), or the restored chat failed its check.
    Raised before the target was touched: it is as it was, and nothing is left beside it."""
