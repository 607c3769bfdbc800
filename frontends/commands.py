"""What every one-shot command shares: exit statuses, the two errors, opening a chat.

Exceptions from the actors become words here and only here (the CLI prints
`everchat: <message>` and exits with the error's status).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
    from everchat.actors.config import ConfigError, load

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
    from everchat.actors.store import MAX_TEXT_BYTES

    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise UsageError(f"{what} is not UTF-8 text (character {error.start}); nothing was logged") from None
    if size > MAX_TEXT_BYTES:
        raise UsageError(f"{what} is {size:,} bytes; one message is at most {MAX_TEXT_BYTES:,} bytes "
                         "(for more, `everchat import FILE`); nothing was logged")
    return text


def _store_error(error: Exception, path: Path) -> CommandError:
    from everchat.actors.store import ChatLocked, NotAChat

    if isinstance(error, NotAChat) and "holds other files" in str(error):
        return CommandError(f"{error} (pick another folder with --data-dir)")
    if isinstance(error, NotAChat):
        return CommandError(f"{path} holds no chat (start one with `everchat`, `everchat note` "
                            "or `everchat import`, or pick another folder with --data-dir)")
    if isinstance(error, ChatLocked):
        return CommandError(f"{error}; close that chat first (read-only commands such as "
                            "`view` and `status` work meanwhile)")
    return CommandError(str(error))


@contextmanager
def open_reader(path: Path) -> Iterator:
    """The chat at `path` opened read-only (R5): no lock, no byte written, also not to
    repair; a folder without a chat fails with a clear message."""
    from everchat.actors.chat import Chat
    from everchat.actors.store import StoreError

    try:
        chat = Chat.open(path, writer=False)
    except StoreError as error:
        raise _store_error(error, path) from None
    with chat:
        try:
            yield chat
        except StoreError as error:
            raise _store_error(error, path) from None


@contextmanager
def open_writer(path: Path) -> Iterator:
    """The chat at `path` opened as its one writer (R5), made when missing."""
    from everchat.actors.chat import Chat
    from everchat.actors.store import StoreError

    try:
        chat = Chat.open(path, create=True)
    except StoreError as error:
        raise _store_error(error, path) from None
    with chat:
        try:
            yield chat
        except StoreError as error:
            raise _store_error(error, path) from None


def placement_of(args: argparse.Namespace, settings):
    """`--processes`: every actor in its own process; else None (all in this one)."""
    if not getattr(args, "processes", False):
        return None
    from everchat.actors.supervisor import Placement

    return Placement("processes", workers=settings.compaction_jobs)
