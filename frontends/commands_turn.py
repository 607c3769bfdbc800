"""`ask MESSAGE [--image PATH]…` and `compact`: one-shot commands over a ChatSession.

`ask` opens the chat with every actor (taking its lock, R5), sends one message (R36),
streams the reply to stdout, shows each tool call on stderr (`· zoom(3, 1)`), then
waits until every summary the chat owes is built, so the next process opens a chat
with nothing pending, and exits. `compact` only waits for the summaries. A failed
compaction (R30) is reported on stderr as it happens; after a turn that did not end
well the status is 1, and 130 after Ctrl-C (the call is stopped, what streamed is
kept, marked incomplete, R37).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from everchat.frontends.commands import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, CommandError, UsageError,
                                         check_compaction_model, check_text, load_settings, open_reader)

__all__ = ["run", "check_images", "open_session", "drain_notices"]

MAX_IMAGE_BYTES = 5 * 1024 * 1024
_PREVIEW = 120


def check_images(paths: list[Path]) -> list[Path]:
    """R9 before anything starts: each image exists, is at most 5 MB and is a PNG,
    JPEG, GIF or WebP by its bytes (UsageError otherwise)."""
    from everchat.actors.store._assets import image_type

    for path in paths:
        try:
            size = path.stat().st_size
            if size > MAX_IMAGE_BYTES:
                raise UsageError(f"{path} is {size:,} bytes; an image is at most 5 MB (R9)")
            with open(path, "rb") as file:
                head = file.read(64)
        except FileNotFoundError:
            raise UsageError(f"{path}: no such image") from None
        except IsADirectoryError:
            raise UsageError(f"{path} is a folder, not an image") from None
        except OSError as error:
            raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
        if image_type(head) is None:
            raise UsageError(f"{path} is not a PNG, JPEG, GIF or WebP image (R9)")
    return paths


def _words(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if type(error).__module__.startswith("everchat.") else f"{type(error).__name__}: {text}"


@contextmanager
def open_session(args: argparse.Namespace) -> Iterator:
    """The chat with its actors, for a command that talks to them (ask, compact, import):
    settings from the flags, the compaction model checked first, `--processes` honoured,
    and any failure one line for the person (CommandError)."""
    from everchat.actors.session import ChatSession

    settings = load_settings(args)
    check_compaction_model(settings)
    try:
        from everchat.frontends.commands import placement_of

        session = ChatSession.open(settings, placement=placement_of(args, settings))
    except Exception as error:  # the edge: a chat that cannot open is one line for the person
        _explain_lock(settings.chat_dir)
        raise CommandError(f"cannot open the chat in {settings.chat_dir}: {_words(error)}") from None
    try:
        yield session
    except (CommandError, BrokenPipeError):  # the reader left (`everchat ask … | head`): the CLI's to handle
        raise
    except Exception as error:  # a lost actor, a timed-out ask: one line, not a traceback
        raise CommandError(f"the chat in {settings.chat_dir} failed: {_words(error)}") from error
    finally:
        session.close()


def _explain_lock(chat: Path) -> None:
    """After a failed open: when another process holds the chat (R5), say who."""
    from everchat.actors.store import ChatLocked
    from everchat.actors.store._lock import WriterLock

    if not (chat / "writer.lock").exists():
        return
    lock = WriterLock(chat)
    try:
        lock.acquire()
    except ChatLocked as error:
        raise CommandError(f"{error}; close that chat first (read-only commands such as `view` "
                           "and `status` work meanwhile)") from None
    except OSError:
        return
    lock.release()


def _call(arguments_json: str) -> str:
    try:
        arguments = json.loads(arguments_json)
    except ValueError:
        return arguments_json[:_PREVIEW]
    if isinstance(arguments, dict):
        return ", ".join(json.dumps(value, ensure_ascii=False) for value in arguments.values())[:_PREVIEW]
    return arguments_json[:_PREVIEW]


def _follow(session, turn: int, out, err) -> tuple[str, bool, str]:
    """Print the turn's events until it ends; returns (reason, incomplete, detail)."""
    from everchat.transport import schema

    at_line_start = True
    while True:
        event = session.next_event(timeout=1.0)
        if event is None:
            continue
        if isinstance(event, schema.Notice):
            err.write(f"everchat: {event.level}: {event.text}\n")
            err.flush()
            continue
        if getattr(event, "turn", turn) != turn:
            continue
        if isinstance(event, schema.TurnText):
            out.write(event.text)
            out.flush()
            at_line_start = event.text.endswith("\n") if event.text else at_line_start
        elif isinstance(event, schema.TurnToolCall):
            err.write(f"· {event.name}({_call(event.arguments_json)})\n")
            err.flush()
        elif isinstance(event, schema.TurnToolResult) and event.is_error:
            err.write(f"  ! {event.preview[:_PREVIEW]}\n")
            err.flush()
        elif isinstance(event, schema.TurnEnded):
            if not at_line_start:
                out.write("\n")
                out.flush()
            return event.reason, event.incomplete, event.detail


def drain_notices(session, err) -> None:
    from everchat.transport import schema

    while (event := session.next_event(timeout=0)) is not None:
        if isinstance(event, schema.Notice):
            err.write(f"everchat: {event.level}: {event.text}\n")
    err.flush()


def ask(args: argparse.Namespace) -> int:
    if not args.message.strip():
        raise UsageError("ask needs a message")
    check_text(args.message, "the message")
    images = check_images(list(args.image))
    out, err = sys.stdout, sys.stderr
    with open_session(args) as session:
        turn = None
        try:
            turn = session.send(args.message, images)
            reason, incomplete, detail = _follow(session, turn, out, err)
        except KeyboardInterrupt:
            if turn is not None:
                session.stop()  # R37: what streamed is logged, marked incomplete
                _follow(session, turn, out, err)
            print("everchat: interrupted; the partial reply is logged, marked incomplete", file=err)
            return EXIT_INTERRUPTED
        if not args.no_wait:
            try:
                session.compact()
            except TimeoutError as error:
                drain_notices(session, err)
                raise CommandError(f"the reply is logged, but its summaries are not all built: {error}") from None
        drain_notices(session, err)
    if reason != "done":
        why = {"stopped": "the turn was stopped", "round_limit": "the turn reached its tool-round limit",
               "error": "the turn failed"}.get(reason, f"the turn ended: {reason}")
        extra = f": {detail}" if detail else ""
        kept = " (the partial reply is logged, marked incomplete)" if incomplete else ""
        print(f"everchat: {why}{extra}{kept}", file=err)
        return EXIT_FAILED
    return EXIT_OK


def compact(args: argparse.Namespace) -> int:
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout is a number of seconds above 0, not {args.timeout:g}")
    with open_reader(args.data_dir):
        pass  # a folder without a chat fails here, clearly, instead of becoming an empty chat
    with open_session(args) as session:
        pending = session.status()["pending"]
        if pending:
            print(f"building {pending} pending summar{'y' if pending == 1 else 'ies'} ...", file=sys.stderr)
        try:
            session.compact(timeout=args.timeout)
        except TimeoutError as error:
            drain_notices(session, sys.stderr)  # R30: the failures that held it up are said
            raise CommandError(f"not every summary is built: {error}") from None
        status = session.status()
        drain_notices(session, sys.stderr)
    print(f"every summary is built: {status['messages']} messages, view {status['view_bytes']} bytes "
          f"({status['failures']} failed calls retried)")
    return EXIT_OK


def run(command: str, args: argparse.Namespace) -> int:
    return ask(args) if command == "ask" else compact(args)
