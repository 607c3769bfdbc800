"""What every one-shot command shares: exit statuses, the two errors, opening a chat.

Exceptions from the actors become words here and only here (the CLI prints
`everchat: <message>` and exits with the error's status).
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERRUPTED",
    "CommandError",
    "UsageError",
    "load_settings",
    "open_reader",
    "open_writer",
    "parse_id",
    "check_text",
    "check_compaction_model",
    "placement_of",
    "os_error_words",
    "regular_file",
    "open_regular",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CommandError(Exception):
    """A command that could not do its work; the message is for people. Exit status 1."""

    status = EXIT_FAILED


class UsageError(CommandError):
    """Wrong arguments: raised before anything was changed. Exit status 2."""

    status = EXIT_USAGE


def load_settings(args: argparse.Namespace):
    """The settings from the flags on the command line, the environment and the config
    file (flag > env > file > default); the chat folder is `--data-dir`."""
    from everchat.actors.settings import ConfigError, load

    try:
        return load(args)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def check_compaction_model(settings) -> None:
    """Before a chat opens: the compaction model can start (its key is set). Its workers
    would otherwise fail to start and be restarted again and again while every summary,
    and so `ask` and `compact`, waited for good. (A reply model without its key is the
    turn's error, told when a message is sent.)"""
    from everchat.actors.models import ModelError

    try:
        settings.compaction.connect()
    except ModelError as error:
        raise CommandError(f"the compaction model cannot start: {error}") from None


def parse_id(text: str, what: str = "ID") -> int:
    """A message id given on the command line: a natural number."""
    try:
        value = int(text, 10)
    except (TypeError, ValueError):
        raise UsageError(f"{what} is a message id (a whole number), not {text!r}") from None
    if value < 0:
        raise UsageError(f"{what} is a message id (0 or more), not {value}")
    return value


def check_text(text: str, what: str) -> str:
    """A text from the command line, checked before any folder is touched: UTF-8 (a byte
    that is not arrives from the shell as a lone surrogate) and at most the store's 8 MB
    for one message (R8 then splits it into messages of 16,000 bytes)."""
    from everchat.actors.folder import MAX_TEXT_BYTES

    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise UsageError(f"{what} is not UTF-8 text (character {error.start}); nothing was logged") from None
    if size > MAX_TEXT_BYTES:
        raise UsageError(f"{what} is {size:,} bytes; one message is at most {MAX_TEXT_BYTES:,} bytes "
                         "(for more, `everchat import FILE`); nothing was logged")
    return text


_TEMPORARY = re.compile(r"^\.(.+)\.tmp\.\d+$")  # atomic_write's `.<name>.tmp.<pid>`


def _named(filename) -> Path | None:
    """The file an OSError is about; a temporary file is named as the file it replaces."""
    if filename is None:
        return None
    path = Path(os.fsdecode(filename))
    temporary = _TEMPORARY.match(path.name)
    return path.with_name(temporary[1]) if temporary else path


def os_error_words(error: OSError) -> str:
    """An OSError as words for the person: the file it is about, then the cause
    (`/c/writer.lock is a folder, not a file`, `/x is a file, not a folder`,
    `/c/chat.json: No space left on device`)."""
    path = _named(error.filename2 if error.filename2 is not None and error.errno in (errno.EPERM, errno.EACCES)
                  else error.filename)
    cause = error.strerror or str(error) or type(error).__name__
    if path is None:
        return cause
    if error.errno == errno.EISDIR:
        return f"{path} is a folder, not a file"
    if error.errno == errno.ENOTDIR:
        for above in (path, *path.parents):
            if os.path.lexists(above) and not above.is_dir():
                return f"{above} is a file, not a folder"
    return f"{path}: {cause}"


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(path: Path, mode: int, what: str) -> UsageError:
    kind = next((words for test, words in _KINDS if test(mode)), "not a regular file")
    article = "an" if what[:1].lower() in "aeiou" else "a"
    return UsageError(f"{path} is {kind}, not {article} {what}")


def _read_error(path: Path, error: OSError, what: str) -> UsageError:
    if isinstance(error, FileNotFoundError):
        return UsageError(f"{path}: no such {what}")
    return UsageError(f"cannot read {path}: {error.strerror or error}")


def regular_file(path: Path, what: str) -> Path:
    """`path` when it names a regular file (a symlink to one is fine); otherwise a
    UsageError in words: `PATH: no such image`, `PATH is a folder, not an image`, `PATH is
    a named pipe (FIFO), not a text file`. Checked before anything is opened: a FIFO or a
    device (/dev/zero) as an input would hang or never end (P17). `what` is the noun the
    command expects ("image", "text file")."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise _read_error(path, error, what) from None
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode, what)
    return path


def open_regular(path: Path, what: str) -> BinaryIO:
    """`path` opened for reading in binary, after `regular_file`'s check, and checked again
    on the open file: it is opened without blocking (a FIFO swapped in meanwhile cannot
    hang the open) and refused unless it is still a regular file."""
    regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise _read_error(path, error, what) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _store_error(error: Exception, path: Path) -> CommandError:
    from everchat.actors.folder import ChatLocked, CorruptRecord, NotAChat

    if isinstance(error, NotAChat) and "holds other files" in str(error):
        return CommandError(f"{error} (pick another folder with --data-dir)")
    if isinstance(error, NotAChat):
        return CommandError(f"{path} holds no chat (start one with `everchat`, `everchat note` "
                            "or `everchat import`, or pick another folder with --data-dir)")
    if isinstance(error, ChatLocked):
        return CommandError(f"{error}; close that chat first (read-only commands such as "
                            "`view` and `status` work meanwhile)")
    if isinstance(error, CorruptRecord) and _derived(Path(error.file)):
        return CommandError(f"{error} (it is rebuilt from the log: run `everchat repair`)")
    return CommandError(str(error))


def _derived(file: Path) -> bool:
    """Files a repair rebuilds from the log or sets aside (actors/upkeep/repair.py)."""
    return file.name in ("view.json", "compaction-view.json", "draft.json") or file.parent.name == "index"


@contextmanager
def open_reader(path: Path) -> Iterator:
    """The chat at `path` opened read-only (R5): no lock, no byte written, also not to
    repair; a folder without a chat fails with a clear message."""
    from everchat.actors.session.local import Chat
    from everchat.actors.folder import StoreError

    try:
        chat = Chat.open(path, writer=False)
    except StoreError as error:
        raise _store_error(error, path) from None
    except OSError as error:
        raise CommandError(f"cannot open the chat in {path}: {os_error_words(error)}") from None
    with chat:
        try:
            yield chat
        except StoreError as error:
            raise _store_error(error, path) from None
        except BrokenPipeError:  # the reader of our output left (`status | head`): the CLI ends quietly
            raise
        except OSError as error:
            raise CommandError(f"cannot read the chat in {path}: {os_error_words(error)}") from None


@contextmanager
def open_writer(path: Path) -> Iterator:
    """The chat at `path` opened as its one writer (R5), made when missing."""
    from everchat.actors.session.local import Chat
    from everchat.actors.folder import StoreError

    try:
        chat = Chat.open(path, create=True)
    except StoreError as error:
        raise _store_error(error, path) from None
    except OSError as error:  # the folder or a file of it cannot be made, opened or written
        raise CommandError(f"cannot open the chat in {path}: {os_error_words(error)}") from None
    with chat:
        try:
            yield chat
        except StoreError as error:
            raise _store_error(error, path) from None
        except BrokenPipeError:  # as in open_reader
            raise
        except OSError as error:
            raise CommandError(f"writing to the chat in {path} failed: {os_error_words(error)}") from None


def placement_of(args: argparse.Namespace, settings):
    """`--processes`: every actor in its own process; else None (all in this one)."""
    if not getattr(args, "processes", False):
        return None
    from everchat.actors.supervisor.actor import Placement

    return Placement("processes", workers=settings.compaction_jobs)
