"""`note TEXT` (or `note -`: the text from stdin): log one memory from before the chat as a `note` message (R3).
`repair`: rebuild what is derived from the log (actors/upkeep/repair.py).

The note is logged and planned as the chat's one writer (R5); a note longer than
16,000 bytes becomes several consecutive notes (R8). Its summary, when it needs
one, is built when the chat next runs (or by `everchat compact`).
"""

from __future__ import annotations

import argparse
import sys

from everchat.frontends.cli.commands import EXIT_OK, CommandError, UsageError, check_text, open_writer, os_error_words

__all__ = ["note", "repair", "describe_ids"]


def describe_ids(ids: list[int]) -> str:
    return f"message {ids[0]}" if len(ids) == 1 else f"messages {ids[0]}-{ids[-1]}"


def _logged_but(ids: list[int], cause: BaseException) -> CommandError:
    """P7: the note is in the log, only the view was not saved; a retry would log it twice."""
    words = os_error_words(cause) if isinstance(cause, OSError) else str(cause)
    return CommandError(f"logged as {describe_ids(ids)}, but saving the view failed: {words}; the next open "
                        "recovers it (do not retry, it would log the note twice)")


def note(args: argparse.Namespace) -> int:
    from everchat.actors.folder import BadInput, StoreError

    try:
        text = sys.stdin.read() if args.text == "-" else args.text
    except UnicodeDecodeError as error:
        raise UsageError(f"the note on stdin is not UTF-8 text (byte {error.start}); nothing was logged") from None
    if not text.strip():
        raise UsageError("a note needs some text")
    check_text(text, "the note")  # before the folder is touched: a refused note makes no chat
    if _noted_by_server(args, text):
        return EXIT_OK
    with open_writer(args.data_dir) as chat:
        before = chat.store.message_count
        try:
            ids, _ = chat.add("note", text)
        except BadInput as error:
            raise UsageError(str(error)) from None
        except (StoreError, OSError) as error:
            from everchat.actors.session.local import LoggedButUnsaved

            if isinstance(error, LoggedButUnsaved):  # P7: the store says what was logged
                raise _logged_but(error.ids, error.cause) from None
            after = chat.store.message_count
            if after > before:  # logged, then something the store did not wrap failed
                raise _logged_but(list(range(before, after)), error) from None
            raise
    print(f"logged {describe_ids(ids)}")
    return EXIT_OK


def _noted_by_server(args: argparse.Namespace, text: str) -> bool:
    """Issue 10: while a server of this computer runs the chat (`serve`, the terminal chat),
    the note is logged through it, attached (R5: the server keeps the lock), and printed
    as ever; False when no server runs it (the note is then logged as the chat's writer)."""
    import uuid

    from everchat.actors.session.attached import server_info
    from everchat.frontends.cli.commands import load_settings
    from everchat.frontends.cli.ask import attach_if_served
    from everchat.transport import TransportError, schema

    if server_info(args.data_dir) is None:
        return False
    session = attach_if_served(load_settings(args))
    if session is None:  # it stopped meanwhile
        return False
    try:
        # Keyed: repeated after a lost log writer (P4), the note is still logged once.
        item = schema.Append(kind="note", text=text, key=f"note-{uuid.uuid4().hex}", images=[], meta=None)
        ids = session.append_many([item])[0]
    except TransportError as error:
        raise CommandError(f"the running chat did not log the note: {error}") from None
    finally:
        session.close()
    print(f"logged {describe_ids(ids)}")
    return True


def repair(args: argparse.Namespace) -> int:
    """Prints each thing it did; damage of the log itself is the one line of a failure."""
    from everchat.actors.upkeep.repair import repair_chat
    from everchat.actors.folder import NotAChat, StoreError
    from everchat.frontends.cli.commands import _store_error

    if not (args.data_dir / "chat.json").exists() and not (args.data_dir / "main").is_dir():
        raise _store_error(NotAChat(str(args.data_dir)), args.data_dir)
    try:
        report = repair_chat(args.data_dir)
    except StoreError as error:
        raise _store_error(error, args.data_dir) from None
    except OSError as error:
        raise CommandError(f"cannot repair the chat in {args.data_dir}: {os_error_words(error)}") from None
    for line in report["done"]:
        print(line)
    if report["damage"]:
        raise CommandError(f"{report['damage']}; the log itself is damaged there, which no repair rewrites (R4): "
                           "the chat reads up to it and takes no new records")
    print("the chat is whole: `everchat check` passes")
    return EXIT_OK
