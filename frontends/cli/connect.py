"""`everchat connect 'URL#TOKEN'`: the terminal chat on a chat that `everchat web` serves.

No chat folder and no keys here: `RemoteSession` (frontends/connect/remote.py) trades the
link's token for a session and carries every call over the server's HTTP API and live
events (docs/WEB.md). A link that is no link is bad usage (exit 2, nothing sent); a
server that cannot be reached or a refused token is one line and exit 1.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from everchat.frontends.cli.commands import CommandError, UsageError

__all__ = ["run_connect"]


def run_connect(args: argparse.Namespace) -> int:
    from everchat.frontends.terminal.app import run
    from everchat.frontends.connect.remote import ConnectError, LinkError, RemoteSession, parse_link

    try:
        link = parse_link(_link_text(args.link))
    except LinkError as error:
        raise UsageError(f"connect: {error}") from None
    if not sys.stdin.isatty():
        raise UsageError("the terminal chat needs a terminal; `everchat connect` runs in one")
    try:
        session = RemoteSession.connect(link)
    except ConnectError as error:
        raise CommandError(f"connect: {error}") from None
    model = (session.me.get("models") or {}).get("reply") or "?"
    chat = session.me.get("chat") or ""
    title = f"Everchat · {model} · connected to {link.base.host}:{link.base.port}" + (f" ({chat})" if chat else "")
    return run(session=session, title=title)


def _link_text(given: str | None) -> str:
    """The link: the argument, else `EVERCHAT_LINK`, else asked for without echo. The two
    last keep the token out of the process list, where any local user could read it."""
    if given is not None:
        return given
    if os.environ.get("EVERCHAT_LINK"):
        return os.environ["EVERCHAT_LINK"]
    if not sys.stdin.isatty():
        raise UsageError("connect: no link: give the link `everchat web` printed, or set EVERCHAT_LINK")
    try:
        return getpass.getpass("The link `everchat web` printed: ").strip()
    except EOFError:
        raise UsageError("connect: no link given") from None
