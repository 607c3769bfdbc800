"""`import FILE`: a UTF-8 text file logged as consecutive `note` messages (R3, R8).

The text is cut exactly as R8 cuts any long text (`split_text`: parts of at most
16,000 bytes, at the last newline or space of the window), but streamed, so a file of
any size is read in blocks. Each part is logged with an idempotency key made of the
file's identity (the SHA-256 of its bytes) and the part's byte offset:

    import:<first 32 hex digits of sha256>:<offset>

so an import that was interrupted (Ctrl-C, a crash, `kill -9`) and run again with the
same file logs every part exactly once: parts already logged are recognised by their
key (ChatStore's key horizon), and the run skips straight past the last part it finds
at the end of the log. The same text imported twice is logged once. Parts are group
committed, about 1 MiB per write and fsync (R4). Their summaries are built when the
chat next runs, or by `everchat compact`.

Ctrl-C never lands inside a commit (where it could leave the store's state in memory
half updated before the close writes its index): the first one is noted, the parts in
hand are committed, and the import stops there with status 130; a second one stops at
once.
"""

from __future__ import annotations

import argparse
import codecs
import hashlib
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from everchat.frontends.commands import EXIT_OK, UsageError, open_writer
from everchat.frontends.progress import Progress

__all__ = ["run_import", "identify", "parts_of", "import_key"]

BLOCK_BYTES = 1 << 20
BATCH_BYTES = 1 << 20
_LOOK_BACK = 256  # messages read back from the end to find where an interrupted import stopped


def identify(path: Path) -> tuple[str, int]:
    """The file's SHA-256 (hex) and size, having checked it is UTF-8 throughout
    (UsageError naming the first bad byte otherwise). Nothing is logged before this."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    size = 0
    try:
        with open(path, "rb") as file:
            while block := file.read(BLOCK_BYTES):
                digest.update(block)
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as error:
                    at = size - len(decoder.getstate()[0]) + error.start
                    raise UsageError(f"{path} is not UTF-8 text (byte {max(at, 0)}); nothing was imported") from None
                size += len(block)
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                raise UsageError(f"{path} ends inside a UTF-8 character; nothing was imported") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder, not a text file") from None
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    return digest.hexdigest(), size


def parts_of(path: Path) -> Iterator[tuple[int, str]]:
    """(byte offset, text) of each part, exactly `split_text(whole file)` (R8).

    R8's cut of a part depends only on the 16,000 bytes from its start, so a buffer
    holding more than that yields the same first parts as the whole text would; the
    last part of a buffer waits for more text."""
    from everchat.actors.store import PART_BYTES, split_text

    decoder = codecs.getincrementaldecoder("utf-8")()
    buffer, offset = "", 0
    with open(path, "rb") as file:
        while True:
            block = file.read(BLOCK_BYTES)
            buffer += decoder.decode(block, final=not block)
            if len(buffer.encode()) > PART_BYTES:
                *ready, buffer = split_text(buffer)
                for text in ready:
                    yield offset, text
                    offset += len(text.encode())
            if not block:
                break
    if buffer:
        yield offset, buffer


def import_key(digest: str, offset: int) -> str:
    return f"import:{digest[:32]}:{offset}"


def _resume_point(store, prefix: str) -> int:
    """The offset of the last part of this file among the chat's latest messages, or -1.

    One import logs its parts in order while it holds the lock, so every part before
    that one is logged too; this also covers parts older than the store's key horizon."""
    last = store.message_count - 1
    for i in range(last, max(-1, last - _LOOK_BACK), -1):
        key = store.message(i).key
        if key and key.startswith(prefix):
            return int(key[len(prefix):])
    return -1


@contextmanager
def _ctrl_c_noted() -> Iterator[threading.Event]:
    """While inside: the first SIGINT sets the event instead of raising KeyboardInterrupt
    (a second raises it). Outside the main thread nothing changes (no signal there)."""
    noted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(signum, frame) -> None:
        if noted.is_set():
            raise KeyboardInterrupt
        noted.set()

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def run_import(args: argparse.Namespace) -> int:
    path: Path = args.file
    digest, size = identify(path)
    if size == 0:
        raise UsageError(f"{path} is empty; nothing to import")
    prefix = import_key(digest, 0)[:-1]
    label = f"importing {path.name}"
    logged = known = 0
    first = last = None
    with open_writer(args.data_dir) as chat:
        resume = _resume_point(chat.store, prefix)
        progress = Progress(label, size)
        batch: list[dict] = []
        batch_bytes = 0

        def commit() -> None:
            nonlocal logged, known, first, last, batch_bytes
            if not batch:
                return
            before = chat.store.message_count
            id_lists, _ = chat.add_many(batch)
            for ids in id_lists:
                if ids[0] >= before:
                    logged += 1
                    first = ids[0] if first is None else first
                    last = ids[-1]
                else:
                    known += 1
            batch.clear()
            batch_bytes = 0
            # Planning keeps long leaves' lines as their compactions' input; no compaction
            # runs here and it reads them from the log when missing, so a big import must
            # not hold the whole file in memory. (Planning has no public way to say so yet.)
            chat._leaf_lines.clear()

        done = 0
        try:
            with _ctrl_c_noted() as ctrl_c:
                for offset, text in parts_of(path):
                    done = offset + len(text.encode())
                    if offset <= resume:
                        known += 1
                    else:
                        batch.append({"kind": "note", "text": text, "key": import_key(digest, offset),
                                      "meta": {"import": path.name, "offset": offset}})
                        batch_bytes += done - offset
                        if batch_bytes >= BATCH_BYTES:
                            commit()
                    progress.update(done, f"{logged + known + len(batch)} notes")
                    if ctrl_c.is_set():
                        commit()  # the parts in hand, then stop
                        raise KeyboardInterrupt
                commit()
        except KeyboardInterrupt:
            # Anything not committed (after a second Ctrl-C) is read again by the next run.
            progress.finish(done)
            print(f"everchat: import interrupted after {logged + known} notes; run the same command "
                  "again to go on where it stopped", file=sys.stderr)
            return 130
        progress.finish(size, f"{logged + known} notes")
        pending = chat.planner.unbuilt_lines()
    if logged == 0:
        print(f"{path} is already imported ({known} notes); nothing logged")
    else:
        again = f", {known} were logged before" if known else ""
        print(f"imported {path}: {logged} notes, messages {first}-{last}{again}")
    if pending:
        print(f"{pending} summaries are pending: they are built when the chat next runs, or by `everchat compact`")
    return EXIT_OK
