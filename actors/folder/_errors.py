"""The store's small vocabulary of exceptions.

Every exception the log store raises on purpose is a `StoreError`. The subclasses say what
went wrong and whose side it is on: the caller's input (`BadInput`), the chat folder's bytes
(`CorruptRecord`), another process (`ChatLocked`), the path (`NotAChat`), or the store's own
state (`StoreClosed` when we closed it, `StoreBroken` when a write failed from outside,
`ReadOnlyStore` when a read-only store is asked to write).
"""

from __future__ import annotations

__all__ = [
    "StoreError",
    "BadInput",
    "CorruptRecord",
    "ChatLocked",
    "NotAChat",
    "StoreClosed",
    "StoreBroken",
    "ReadOnlyStore",
    "ChatDamaged",
]


class StoreError(Exception):
    """Base class of every error the log store raises on purpose.

    Raised as such when a node is built a second time with another text (R12).
    """


class BadInput(StoreError, ValueError):
    """The caller passed something the store will not log (wrong kind, bad size, unknown
    asset, ...). Raised before anything is written: the chat folder is unchanged."""


class CorruptRecord(StoreError):
    """A file of the chat folder holds something the store did not write (R2): a malformed
    record, a gap or a duplicate id, a record that disagrees with the index. Names the file
    and the byte offset of the first problem. Nothing is truncated or rewritten."""

    def __init__(self, file: str, offset: int, reason: str) -> None:
        self.file = str(file)
        self.offset = offset
        self.reason = reason
        super().__init__(f"{self.file}: byte {offset}: {reason}")


class ChatLocked(StoreError):
    """Another process is the chat's writer (R5). Raised at once by a second writer's
    `ChatStore.open`; names the owner's pid and host as the lock file records them."""

    def __init__(self, path: str, pid: int | None, host: str | None) -> None:
        self.path = str(path)
        self.pid = pid
        self.host = host
        owner = f"pid {pid} on host {host}" if pid is not None else "an unknown process"
        super().__init__(f"chat {self.path} is locked by its writer, {owner}")


class NotAChat(StoreError):
    """The path holds no chat (no `chat.json`, no `main/`) and `create` was not asked."""


class StoreClosed(StoreError):
    """The store was closed by its owner (we closed it); open it again to use it."""


class StoreBroken(StoreError):
    """A write or fsync failed from outside (disk full, I/O error). The store refuses
    further writes; reopening it applies R2 to whatever the failed write left."""


class ReadOnlyStore(StoreError):
    """A store opened with `writer=False` was asked to write (R5: read-only commands never
    write)."""


class ChatDamaged(StoreError):
    """A writer was asked to write after one of its reads found the log damaged (P15): it
    never appends past damage it has seen. Names the damage (file and byte offset); the
    chat needs `everchat check` and a repair before it takes new records."""

    def __init__(self, damage: CorruptRecord) -> None:
        self.damage = damage
        super().__init__(f"{damage}; the chat takes no new records past this damage (see `everchat check`)")
