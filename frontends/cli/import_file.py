"""`import FILE`: a UTF-8 text file logged as consecutive `note` messages (R3, R8).

The text is cut exactly as R8 cuts any long text (`split_text`: parts of at most
16,000 bytes, at the last newline or space of the window), but streamed, so a file of
any size is read in blocks. Each part is logged with an idempotency key made of the
file's identity (the SHA-256 of its bytes) and the part's byte offset:

    import:<first 32 hex digits of sha256>:<offset>

so an import that was interrupted (Ctrl-C, a crash, `kill -9`) and run again with the
same file logs every part exactly once: parts already logged are recognised by their
key (ChatStore's key horizon), and the run skips straight past the last part it finds
at the end of the log. The same text imported twice is logged once.

By default the import summarizes as it goes: it opens the chat with its actors (as
`ask` does, taking the lock, R5), logs the parts in batches of `BATCH_PARTS` through
the log writer, and before each batch asks the planner to wait until at most
`BACKLOG` compactions are ready but not handed out (`WaitBacklog`). So each note is
appended while the pool has built the lines before it, R19's fit at each append
finds built parents to merge, the view stays near its budget, and the compaction
contexts stay near the compaction view's 16-32 KB (R21, R27). Before the last part
it waits until the pool is idle, so the last append's fit counts every line at its
built size (R16); at the end it waits until every summary is built, like `ask`.
The view then ends at most the ceiling, or one line (at most ~520 bytes, the last
part's own summary) above it.

`--log-only` is the old offline path: parts are group committed straight into the
store (about 1 MiB per write and fsync, R4), no model call, and their summaries are
left to the next run or `everchat compact`. While unsummarized, each counts as its
placeholder (R16), so no batch fits the view meanwhile, and building them later never
merges it (R19): a big import summarized later leaves the view over its budget until
the next messages fit it, and `compact`'s contexts grow toward the whole view.

Ctrl-C never lands inside a commit (where it could leave the store's state in memory
half updated before the close writes its index): the first one is noted, the parts in
hand are committed, and the import stops there with status 130 (a wait for the pool
ends at once); a second one stops at once.
"""

from __future__ import annotations

import argparse
import codecs
import hashlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from everchat.frontends.cli.commands import (EXIT_INTERRUPTED, EXIT_OK, CommandError, UsageError, open_regular,
                                        open_writer)
from everchat.frontends.cli.progress import Progress

__all__ = ["run_import", "import_summarized", "import_log_only", "Count", "ctrl_c_noted", "identify", "parts_of", "import_key",
           "BATCH_BYTES", "BATCH_PARTS", "BACKLOG"]

BLOCK_BYTES = 1 << 20
BATCH_BYTES = 1 << 20  # --log-only: bytes per group commit
BATCH_PARTS = 16  # summarized: parts per batch (256 KB of 16 KB parts)
BACKLOG = 16  # summarized: a batch waits until at most this many compactions are ready, not handed out
_LOOK_BACK = 256  # messages read back from the end to find where an interrupted import stopped
_WAIT_SECONDS = 3600.0  # one wait for the pool (a real model's 16 compactions take seconds)
_TICK = 0.5  # how often a wait for the pool looks for Ctrl-C and redraws the bar

_NOTED = object()  # what `_wait` returns once Ctrl-C was noted
_STUCK = object()  # what `_wait` returns when its tick says waiting is of no use

_LATER = ("their summaries are built when the chat next runs, or by `everchat compact`; a big import "
          "summarized later leaves the view over its budget until the next messages fit it")


def _open_text(path: Path) -> BinaryIO:
    """`path` opened for reading, refused (UsageError) unless it is a regular file (P17: a
    FIFO would be waited on and /dev/zero read for ever; `open_regular` also opens without
    blocking and looks again, so a FIFO swapped in meanwhile is refused, not waited on).
    A missing file raises FileNotFoundError, which `identify` words as ever."""
    os.stat(path)
    return open_regular(path, "text file")


def identify(path: Path) -> tuple[str, int]:
    """The file's SHA-256 (hex) and size, having checked it is a regular file of UTF-8
    text throughout (UsageError naming the first bad byte otherwise). Nothing is logged
    before this."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    size = 0
    try:
        with _open_text(path) as file:
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
    from everchat.actors.folder import PART_BYTES, split_text

    decoder = codecs.getincrementaldecoder("utf-8")()
    buffer, offset = "", 0
    with _open_text(path) as file:
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
def ctrl_c_noted() -> Iterator[threading.Event]:
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


class Count:
    """What one run did: parts logged now, parts found logged before, the ids it logged."""

    def __init__(self, noun: str = "notes") -> None:
        self.noun = noun
        self.logged = self.known = 0
        self.first: int | None = None
        self.last: int | None = None

    def add(self, id_lists: list[list[int]], before: int) -> None:
        """An append's reply: a part whose ids start before `before` was logged already."""
        for ids in id_lists:
            if ids[0] >= before:
                self.logged += 1
                self.first = ids[0] if self.first is None else self.first
                self.last = ids[-1]
            else:
                self.known += 1

    @property
    def notes(self) -> int:
        return self.logged + self.known

    def said(self, path: Path | str) -> str:
        if self.logged == 0:
            return f"{path} is already imported ({self.known} {self.noun}); nothing logged"
        again = f", {self.known} were logged before" if self.known else ""
        return f"imported {path}: {self.logged} {self.noun}, messages {self.first}-{self.last}{again}"


def _file_items(path: Path, digest: str, resume: int) -> Iterator[tuple[int, dict | None]]:
    """(bytes read so far, the part to log) for each part of the file; None for a part at
    or before `resume`, logged before."""
    for offset, text in parts_of(path):
        done = offset + len(text.encode())
        if offset <= resume:
            yield done, None
        else:
            yield done, {"kind": "note", "text": text, "key": import_key(digest, offset),
                         "meta": {"import": path.name, "offset": offset}}


def _feed(items: Iterable[tuple[int, dict | None]], count: Count, commit: Callable[[list[dict]], None],
          ctrl_c: threading.Event, progress: Progress, extra: Callable[[int], str],
          full: Callable[[list[dict], int], bool]) -> list[dict]:
    """Hand the items (progress so far, a message to log or None for one logged before)
    to `commit` in batches: a batch goes once it is `full(batch, its bytes)` and a new
    item comes. Returns the last batch, uncommitted: the caller commits it (it holds the
    last item). The first Ctrl-C commits the items in hand and raises KeyboardInterrupt."""
    batch: list[dict] = []
    batch_bytes = 0
    for done, item in items:
        if item is None:
            count.known += 1
        else:
            if batch and full(batch, batch_bytes):
                commit(batch)
                batch, batch_bytes = [], 0
            batch.append(item)
            batch_bytes += len(item["text"].encode())
        progress.update(done, extra(len(batch)))
        if ctrl_c.is_set():
            commit(batch)  # the parts in hand, then stop
            raise KeyboardInterrupt
    return batch


def _wait(call: Callable[[], object], ctrl_c: threading.Event, tick: Callable[[], bool] | None = None):
    """`call()` (an ask that may wait long) in a helper thread; its result, or `_NOTED` at
    once when Ctrl-C is noted, or `_STUCK` when `tick` (run every half second meanwhile,
    for the progress bar) returns True. An abandoned ask ends with the session."""
    if ctrl_c.is_set():
        return _NOTED
    outcome: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the caller below, unless it left at Ctrl-C
            outcome["error"] = error
        finally:
            done.set()

    threading.Thread(target=run, name="everchat-import-wait", daemon=True).start()
    while not done.wait(_TICK):
        if ctrl_c.is_set():
            return _NOTED
        if tick is not None and tick():
            return _STUCK
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _log_only(args: argparse.Namespace, path: Path, digest: str, size: int) -> int:
    """The offline path: parts group committed straight into the store, no model call."""
    count = Count()

    def plan(store) -> Iterable[tuple[int, dict | None]]:
        return _file_items(path, digest, _resume_point(store, import_key(digest, 0)[:-1]))

    return import_log_only(args, f"importing {path.name}", size, plan, count, lambda: count.said(path))


def import_log_only(args: argparse.Namespace, label: str, size: int,
                    plan: Callable[[object], Iterable[tuple[int, dict | None]]], count: Count,
                    said: Callable[[], str]) -> int:
    """`--log-only`: `plan(store)`'s messages (as `import_summarized` takes them) group
    committed straight into the store as its writer, about 1 MiB a write and fsync (R4),
    images stored first (R9); no model call, the summaries left to the next run or
    `everchat compact`. `import` and `import-chats` share it; Ctrl-C as above."""
    noun = count.noun
    progress = Progress(label, size)
    with open_writer(args.data_dir) as chat:
        items = plan(chat.store)

        def commit(batch: list[dict]) -> None:
            if not batch:
                return
            before = chat.store.message_count
            appends = [{**item, "images": [chat.store.put_asset(data) for data in item.get("images", ())]}
                       for item in batch]
            id_lists, _ = chat.add_many(appends)
            count.add(id_lists, before)
            # Planning keeps long leaves' lines as their compactions' input; no compaction
            # runs here and it reads them from the log when missing, so a big import must
            # not hold the whole file in memory. (Planning has no public way to say so yet.)
            chat._leaf_lines.clear()

        try:
            with ctrl_c_noted() as ctrl_c:
                commit(_feed(items, count, commit, ctrl_c, progress, lambda in_hand: f"{count.notes + in_hand} {noun}",
                             lambda batch, batch_bytes: batch_bytes >= BATCH_BYTES))
        except KeyboardInterrupt:
            # Anything not committed (after a second Ctrl-C) is read again by the next run.
            progress.finish(progress.done)
            print(f"everchat: import interrupted after {count.notes} {noun}; run the same command "
                  "again to go on where it stopped", file=sys.stderr)
            return EXIT_INTERRUPTED
        progress.finish(size, f"{count.notes} {noun}")
        pending = chat.planner.unbuilt_lines()
    print(said())
    if pending:
        print(f"{pending} summaries are pending (--log-only): {_LATER}")
    return EXIT_OK


def _summarized(args: argparse.Namespace, path: Path, digest: str, size: int) -> int:
    """The default: the chat's actors run, and the pool summarizes while parts are logged."""
    count = Count()

    def plan(store) -> Iterable[tuple[int, dict | None]]:
        return _file_items(path, digest, _resume_point(store, import_key(digest, 0)[:-1]))

    return import_summarized(args, f"importing {path.name}", size, plan, count, lambda: count.said(path))


def import_summarized(args: argparse.Namespace, label: str, size: int,
                      plan: Callable[[object], Iterable[tuple[int, dict | None]]], count: Count,
                      said: Callable[[], str]) -> int:
    """Log `plan(store)`'s messages through the chat's actors while the pool summarizes
    them (R19, R31), with the progress bar and Ctrl-C described above; `import` and
    `import-chats` share it. `plan` gets the chat's store, read-only, opened once the
    session holds the chat, reads it before it returns (the store closes then), and
    returns an iterable (lazy, so a file is never held whole in memory) of (progress out
    of `size`, a message to log as `{"kind", "text", "key", "meta"[, "date"][, "images"]}`
    (images as bytes, stored first, R9), or None
    for one logged before). Every
    message carries a key, so a repeat after a lost log writer logs it once (P4)."""
    from everchat.actors.folder import ChatStore
    from everchat.frontends.cli.ask import drain_notices, open_session
    from everchat.transport import schema

    noun = count.noun
    progress = Progress(label, size, eta=True)
    pending = 0
    logged_all = False
    with open_session(args) as session:
        # Read-only beside the log writer (R5), which holds the lock: nothing is logged
        # by anyone else meanwhile, so what the plan reads stays true.
        with ChatStore.open(session.supervisor.chat, writer=False) as store:
            items = plan(store)  # read the store now; the items are read lazily after it closes

        def extra(in_hand: int = 0) -> str:
            return f"{count.notes + in_hand} {noun}, {pending} summaries pending"

        def look() -> bool:
            """The bar's figures, and failed compactions said as they come (R30); True when
            the pool is stuck on failed calls."""
            nonlocal pending
            status = session.status()
            pending = status["pending"]
            while (event := session.next_event(timeout=0)) is not None:
                if isinstance(event, schema.Notice):
                    progress.say(f"everchat: {event.level}: {event.text}")
            progress.update(progress.done, extra())
            # Nothing runs, yet lines wait: failed calls, tried again only at the next
            # message or while a settle waits (R30). The import must not wait on them.
            return status["planner"]["running"] == 0 and status["pending"] > 0

        def settle(ctrl_c: threading.Event) -> None:
            """Until every summary is built (failed calls retried, R30), or Ctrl-C."""
            def show() -> bool:
                look()
                return False  # session.compact retries failed calls itself

            try:
                if _wait(lambda: session.compact(timeout=_WAIT_SECONDS), ctrl_c, show) is _NOTED:
                    raise KeyboardInterrupt
            except TimeoutError as error:
                drain_notices(session, sys.stderr)
                raise CommandError(f"the notes are logged, but their summaries are not all built: {error}") from None

        def commit(batch: list[dict], ctrl_c: threading.Event) -> None:
            """Wait for the pool's backlog (not after Ctrl-C), then log the batch."""
            nonlocal pending
            if not batch:
                return
            idle = _wait(lambda: session.wait_backlog(BACKLOG, timeout=_WAIT_SECONDS), ctrl_c, look)
            if idle is _STUCK:
                settle(ctrl_c)  # retries them every 10 s (R30) until every line is built
            elif idle is not _NOTED:
                pending = idle.queued
            # The session repeats these when the log writer is lost and runs again (P4):
            # the parts are keyed, so a repeat logs each once and `before` tells them apart.
            before = session.count_messages()
            appends = [schema.Append(kind=item["kind"], text=item["text"], key=item["key"],
                                     images=[session.put_asset(data) for data in item.get("images", ())],
                                     meta=item["meta"], date=item.get("date")) for item in batch]
            count.add(session.append_many(appends, timeout=_WAIT_SECONDS), before)

        try:
            with ctrl_c_noted() as ctrl_c:
                last = _feed(items, count, lambda batch: commit(batch, ctrl_c), ctrl_c, progress,
                             extra, lambda batch, batch_bytes: len(batch) >= BATCH_PARTS)
                if last:
                    # The last part is appended once every line before it is built, so
                    # its fit (R19) counts them at their size and ends within the budget.
                    commit(last[:-1], ctrl_c)
                    settle(ctrl_c)
                    commit(last[-1:], ctrl_c)
                logged_all = True
                look()
                progress.finish(size, extra())
                if pending:
                    print(f"building {pending} pending summar{'y' if pending == 1 else 'ies'} ...", file=sys.stderr)
                settle(ctrl_c)
        except KeyboardInterrupt:
            # Anything not committed (after a second Ctrl-C) is read again by the next run.
            progress.finish(progress.done)
            drain_notices(session, sys.stderr)
            if not logged_all:
                print(f"everchat: import interrupted after {count.notes} {noun}; run the same command "
                      "again to go on where it stopped", file=sys.stderr)
            else:
                print(f"everchat: import interrupted: all {count.notes} {noun} are logged, their summaries "
                      "are not all built; run the same command again (or `everchat compact`) to build them",
                      file=sys.stderr)
            return EXIT_INTERRUPTED
        status = session.status()
        drain_notices(session, sys.stderr)
    print(said())
    print(f"every summary is built: view {status['view_bytes']:,} bytes (budget {status['view_budget']:,}), "
          f"{status['messages']} messages")
    return EXIT_OK


def run_import(args: argparse.Namespace) -> int:
    path: Path = args.file
    digest, size = identify(path)
    if size == 0:
        raise UsageError(f"{path} is empty; nothing to import")
    if getattr(args, "log_only", False):
        from everchat.actors.session.attached import server_info

        if server_info(args.data_dir) is None:
            return _log_only(args, path, digest, size)
        # Issue 10: a server runs the chat and summarizes what is logged; attached, the
        # import logs through it as the default does (the store is the server's, R5).
    return _summarized(args, path, digest, size)
