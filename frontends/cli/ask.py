"""`ask MESSAGE [--image PATH]…` and `compact`: one-shot commands over a ChatSession.

`ask` opens the chat with every actor (taking its lock, R5; or attached to the server that
holds it, issue 10: `start_session`), sends one message (R36),
streams the reply to stdout, shows each tool call on stderr (`· zoom(3, 1)`), then
waits until every summary the chat owes is built, so the next process opens a chat
with nothing pending, and exits. `compact` only waits for the summaries. A failed
compaction (R30) is reported on stderr as it happens, and so is a failed after-turn command
(issue 13), also one that ends while the chat closes; after a turn that did not end
well the status is 1, and 130 after Ctrl-C (the call is stopped, what streamed is
kept, marked incomplete, R37).

Attached, a message sent while another client's turn runs joins that turn (R36): `ask`
then prints that turn's reply from where it joined and exits when that turn ends (its
status is that turn's); Ctrl-C stops that turn, as it would its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from everchat.frontends.cli.commands import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, CommandError, UsageError,
                                         check_compaction_model, check_text, load_settings, open_reader,
                                         open_regular, os_error_words)
from everchat.frontends.cli.edge import first_time, hold_log_lines, say
from everchat.frontends.cli.safe_text import printable

__all__ = ["run", "check_images", "open_session", "start_session", "attach_if_served", "drain_notices", "probe",
           "why_not_open"]

MAX_IMAGE_BYTES = 5 * 1024 * 1024
_PREVIEW = 120


def check_images(paths: list[Path]) -> list[Path]:
    """R9 before anything starts: each image exists, is at most 5 MB and is a PNG,
    JPEG, GIF or WebP by its bytes (UsageError otherwise)."""
    from everchat.actors.folder._assets import image_type

    for path in paths:
        with open_regular(path, "image") as file:  # P17: a FIFO or a device is refused, never read
            size = os.fstat(file.fileno()).st_size
            if size > MAX_IMAGE_BYTES:
                raise UsageError(f"{path} is {size:,} bytes; an image is at most 5 MB (R9)")
            try:
                head = file.read(64)
            except OSError as error:
                raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
        if image_type(head) is None:
            raise UsageError(f"{path} is not a PNG, JPEG, GIF or WebP image (R9)")
    return paths


def _words(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if type(error).__module__.startswith("everchat.") else f"{type(error).__name__}: {text}"


def start_session(settings, placement=None, *, attachable: bool = False, what: str = ""):
    """The session every writing command works through (issue 10): `ChatSession.open`
    (taking the chat's lock, R5), or, when the chat is held by a server of this computer
    (`serve`, the terminal chat, the web page: a supervisor whose run file says it is
    attachable), `ChatSession.attach` to it, said in one line on stderr:
    `everchat: attached to the running chat (pid N)`, which adds that the running chat's
    placement is used when `placement` (`--processes`) asked for another. A chat held by a
    writer that is no server (another `ask`, a `note`) fails as ever, naming it. Every
    failure is a CommandError: `what` (e.g. "cannot open the chat in DIR: ") then why.
    `attachable`: whether this session is a server others may attach to."""
    from everchat.actors.session.attached import server_info
    from everchat.actors.session.session import ChatSession
    from everchat.actors.folder import ChatLocked

    chat = settings.chat_dir
    try:
        check_compaction_model(settings)
    except CommandError as error:
        if server_info(chat) is None:  # a running server summarizes with its own models
            raise
        return _attach(settings, placement, what, error)
    probe(chat)
    with hold_log_lines() as held:  # an actor failing at its start is said once, in the line below
        try:
            session = ChatSession.open(settings, placement=placement, attachable=attachable)
        except ChatLocked as error:  # R5: held by a server (attach to it) or by another writer
            locked = error
        except Exception as error:  # the edge: a chat that cannot open is one line for the person
            details = f" ({held.details})" if held.details else ""
            raise CommandError(f"{what}{why_not_open(chat, error)}{details}") from None
        else:
            locked = None
    held.say()
    return session if locked is None else _attach(settings, placement, what, locked)


def _attach(settings, placement, what: str, cause: Exception):
    """`start_session`'s second way: attach to the server holding the chat, or fail with
    why it could not be opened (`cause`) when no server of this computer holds it."""
    session = attach_if_served(settings, placement, what)
    if session is not None:
        return session
    if isinstance(cause, CommandError):
        raise cause
    raise CommandError(f"{what}{why_not_open(settings.chat_dir, cause)}") from None


def attach_if_served(settings, placement=None, what: str = ""):
    """The session attached to the server running the chat (issue 10), its one line said
    on stderr; None when no server of this computer runs it (`NotAttachable`). A server
    that answered and then failed us is a CommandError."""
    from everchat.actors.session.attached import NotAttachable
    from everchat.actors.session.session import ChatSession

    try:
        session = ChatSession.attach(settings.chat_dir, settings)
    except NotAttachable:
        return None
    except Exception as error:
        raise CommandError(f"{what}attaching to the running chat failed: {_words(error)}") from None
    line = f"everchat: attached to the running chat (pid {session.server_pid})"
    if placement is not None and placement.mode != session.placement_mode:
        line += f"; its own placement ({session.placement_mode}) is used, not --processes"
    say(line)
    return session


@contextmanager
def open_session(args: argparse.Namespace) -> Iterator:
    """The chat with its actors, for a command that talks to them (ask, compact, import,
    note): settings from the flags, `--processes` honoured, attached to the running chat
    when a server holds it (`start_session`), and any failure one line for the person
    (CommandError). Closing an attached session leaves the chat running."""
    from everchat.frontends.cli.commands import placement_of

    settings = load_settings(args)
    session = start_session(settings, placement_of(args, settings),
                            what=f"cannot open the chat in {settings.chat_dir}: ")
    try:
        yield session
    except (CommandError, BrokenPipeError):  # the reader left (`everchat ask … | head`): the CLI's to handle
        raise
    except Exception as error:  # a lost actor, a timed-out ask: one line, not a traceback
        raise CommandError(f"the chat in {settings.chat_dir} failed: {_words(error)}") from error
    finally:
        session.close()
        drain_notices(session, sys.stderr)  # issue 13: the after-turn commands the close waited for


@contextmanager
def _quiet_store() -> Iterator:
    """The store's warnings (an index rebuilt, a torn line skipped) are said by the chat's
    own open; a look before it must not say them twice. Used before any actor runs."""
    import logging

    store_log = logging.getLogger("everchat.store")
    before = store_log.disabled
    store_log.disabled = True
    try:
        yield
    finally:
        store_log.disabled = before


def _folder_fault(chat: Path) -> str | None:
    """What is wrong with the chat folder itself, as a reader sees it (R5: no lock, no byte
    written): a CorruptRecord names the file and the byte offset. None when it opens, or
    when there is no chat yet (the session makes one)."""
    from everchat.actors.session.local import Chat
    from everchat.actors.folder import NotAChat, StoreError

    try:
        with _quiet_store():
            Chat.open(chat, writer=False).close()
    except NotAChat:
        return None
    except StoreError as error:
        return str(error)
    except OSError as error:
        return os_error_words(error)
    return None


def probe(chat: Path) -> None:
    """P10: before any actor starts, a chat folder that a reader cannot open is named in
    one line (the file and the byte offset), instead of an actor failing to start and
    the command saying only that an actor stopped."""
    fault = _folder_fault(chat)
    if fault is not None:
        raise CommandError(f"cannot open the chat in {chat}: {fault}")


def _draft_fault(chat: Path) -> str | None:
    """A draft (R37) the log writer cannot read stops it at its start (P2)."""
    from everchat.actors.folder.drafts import DRAFT_NAME, load_draft

    path = chat / DRAFT_NAME
    try:
        load_draft(chat)
    except UnicodeDecodeError:
        return f"{path}: not JSON text; not a draft Everchat can read (move it aside to open the chat)"
    except json.JSONDecodeError as error:
        return (f"{path}: byte {error.pos}: not valid JSON; not a draft Everchat can read "
                "(move it aside to open the chat)")
    except ValueError as error:
        return f"{error} (move it aside to open the chat)"
    except OSError as error:
        return os_error_words(error)
    return None


def why_not_open(chat: Path, error: BaseException) -> str:
    """Why the chat's actors did not start, in words: the folder's own damage first (an
    actor that failed at its start is only `ActorStopped` or a timeout to us), then a
    draft that cannot be read, then another process holding the lock (R5), else the
    error itself."""
    from everchat.actors.folder import ChatLocked, StoreError

    if isinstance(error, ChatLocked):
        _explain_lock(chat)  # held by another process: who, and what to do meanwhile
    if isinstance(error, StoreError):  # the store's own words already name the file
        return _words(error)
    fault = _folder_fault(chat) or _draft_fault(chat)
    if fault is not None:
        return fault
    _explain_lock(chat)
    return _words(error)


def _explain_lock(chat: Path) -> None:
    """After a failed open: when another process holds the chat (R5), say who. A lock this
    process still holds (its own failed log writer, P2) is not another's: nothing to say."""
    import socket

    from everchat.actors.folder import ChatLocked
    from everchat.actors.folder._lock import WriterLock

    if not (chat / "writer.lock").exists():
        return
    lock = WriterLock(chat)
    try:
        lock.acquire()
    except ChatLocked as error:
        if error.pid == os.getpid() and error.host in (None, socket.gethostname()):
            return
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
            _notice(event, err)
            continue
        if isinstance(event, schema.AfterTurnFailed):  # issue 13: apart from the reply
            _after_turn_failed(event, err)
            continue
        if isinstance(event, schema.JobOutput):
            if event.caller == "main":  # R39: the turn's shell output as it comes, beside the tool line
                err.write("".join(printable(f"  │ {row}") + "\n" for row in event.text.rstrip("\n").split("\n")))
                err.flush()
            continue
        if getattr(event, "turn", turn) != turn:
            continue
        if isinstance(event, schema.TurnText):
            out.write(printable(event.text))  # P20: a reply cannot drive the terminal
            out.flush()
            at_line_start = event.text.endswith("\n") if event.text else at_line_start
        elif isinstance(event, schema.TurnToolCall):
            err.write(printable(f"· {event.name}({_call(event.arguments_json)})") + "\n")
            err.flush()
        elif isinstance(event, schema.TurnToolResult) and event.is_error:
            err.write(printable(f"  ! {event.preview[:_PREVIEW]}") + "\n")
            err.flush()
        elif isinstance(event, schema.TurnEnded):
            if not at_line_start:
                out.write("\n")
                out.flush()
            return event.reason, event.incomplete, event.detail


def _notice(event, err) -> None:
    """A session notice as one line, said once (the same warning may come as a log record too)."""
    line = printable(f"everchat: {event.level}: {event.text}").replace("\n", " ")
    if first_time(line):
        err.write(line + "\n")
        err.flush()


def _after_turn_failed(event, err) -> None:
    """A failed after-turn command (issue 13) as the turn runner's log line says it
    (actors/turns/after_turn.py), `everchat: warning: turn N: …`: said once, whether that log
    line reached this stderr too (the single placement) or not (`--processes`)."""
    from everchat.transport import schema

    _notice(schema.Notice("warning", f"turn {event.turn}: {event.detail}"), err)


def drain_notices(session, err) -> None:
    """Say the notices and after-turn failures still queued (also after `session.close()`,
    whose after-turn failures come then)."""
    from everchat.transport import schema

    while (event := session.next_event(timeout=0)) is not None:
        if isinstance(event, schema.Notice):
            _notice(event, err)
        elif isinstance(event, schema.AfterTurnFailed):
            _after_turn_failed(event, err)
    err.flush()


def ask(args: argparse.Namespace) -> int:
    if not args.message.strip():
        raise UsageError("ask needs a message")
    check_text(args.message, "the message")
    images = check_images(list(args.image))
    out, err = sys.stdout, sys.stderr
    if getattr(args, "goal", False):
        if images:
            raise UsageError("ask --goal takes no images")
        return _ask_goal(args, out, err)
    with open_session(args) as session:
        turn = None
        try:
            logged = session.send_input(args.message, images)
            # R36: sent while a turn runs (another client's, when attached), it joined
            # that turn: its reply is that turn's, and it ends when that turn ends.
            turn = logged.turn if logged.joined else logged.ids[0]
            reason, incomplete, detail = _follow(session, turn, out, err)
        except KeyboardInterrupt:
            if turn is not None:
                session.stop()  # R37: what streamed is logged, marked incomplete
                _follow(session, turn, out, err)
            print("everchat: interrupted; the partial reply is logged, marked incomplete", file=err)
            return EXIT_INTERRUPTED
        if not args.no_wait:
            try:
                session.settle_since(turn)  # P18: its own turn's lines, not a backlog before it
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


def _ask_goal(args: argparse.Namespace, out, err) -> int:
    """`ask --goal MESSAGE` (issue 13): MESSAGE becomes the goal; every turn's reply is
    printed, the goal's lines go to stderr, until the goal is met (0), paused or dropped (1)."""
    from everchat.frontends.terminal.transcript import goal_line
    from everchat.transport import schema

    with open_session(args) as session:
        first = None
        try:
            logged = session.goal(args.message)
            first = logged.turn if logged.joined else logged.ids[0]
            at_line_start = True
            while True:
                event = session.next_event(timeout=1.0)
                if event is None:
                    continue
                if isinstance(event, schema.Notice):
                    _notice(event, err)
                elif isinstance(event, schema.AfterTurnFailed):
                    _after_turn_failed(event, err)
                elif isinstance(event, schema.TurnText):
                    out.write(printable(event.text))
                    out.flush()
                    at_line_start = event.text.endswith("\n") if event.text else at_line_start
                elif isinstance(event, schema.TurnToolCall):
                    err.write(printable(f"· {event.name}({_call(event.arguments_json)})") + "\n")
                elif isinstance(event, schema.TurnEnded) and not at_line_start:
                    out.write("\n")
                    at_line_start = True
                elif isinstance(event, schema.GoalEvent):
                    if not at_line_start:
                        out.write("\n")
                        at_line_start = True
                    err.write(printable(goal_line(event)[1]) + "\n")
                    if event.event in ("met", "paused", "halted"):
                        break
                out.flush()
                err.flush()
        except KeyboardInterrupt:
            if first is not None:
                session.halt_goal()
                session.stop()  # R37: what streamed is logged, marked incomplete
            print("everchat: interrupted; the goal is dropped, the partial reply is logged", file=err)
            return EXIT_INTERRUPTED
        if not args.no_wait and first is not None:
            try:
                session.settle_since(first)
            except TimeoutError as error:
                drain_notices(session, err)
                raise CommandError(f"the replies are logged, but their summaries are not all built: {error}") from None
        drain_notices(session, err)
    return EXIT_OK if event.event == "met" else EXIT_FAILED


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
