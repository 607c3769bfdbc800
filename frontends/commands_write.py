"""`note TEXT` (or `note -`: the text from stdin): log one memory from before the chat as a `note` message (R3).

The note is logged and planned as the chat's one writer (R5); a note longer than
16,000 bytes becomes several consecutive notes (R8). Its summary, when it needs
one, is built when the chat next runs (or by `everchat compact`).
"""

from __future__ import annotations

import argparse
import sys

from everchat.frontends.commands import EXIT_OK, UsageError, check_text, open_writer

__all__ = ["note", "describe_ids"]


def describe_ids(ids: list[int]) -> str:
    return f"message {ids[0]}" if len(ids) == 1 else f"messages {ids[0]}-{ids[-1]}"


def note(args: argparse.Namespace) -> int:
    from everchat.actors.store import BadInput

    try:
        text = sys.stdin.read() if args.text == "-" else args.text
    except UnicodeDecodeError as error:
        raise UsageError(f"the note on stdin is not UTF-8 text (byte {error.start}); nothing was logged") from None
    if not text.strip():
        raise UsageError("a note needs some text")
    check_text(text, "the note")  # before the folder is touched: a refused note makes no chat
    with open_writer(args.data_dir) as chat:
        try:
            ids, _ = chat.add("note", text)
        except BadInput as error:
            raise UsageError(str(error)) from None
    print(f"logged {describe_ids(ids)}")
    return EXIT_OK
