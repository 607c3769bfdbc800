"""What the web server's middlewares and handlers share (docs/WEB.md): the limits, the
application's keys, `Refused`, and the small readers of requests (bodies within their
limit, JSON objects, query numbers). Private to `everchat.frontends.web`."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from aiohttp import web

from everchat.frontends.web.auth import COOKIE, Pairing, SessionStore, WebSession
from everchat.frontends.web.chat import WebChat
from everchat.frontends.web.hub import Hub

__all__ = ["CSP", "JSON_LIMIT", "ASSET_LIMIT", "OPEN_ROUTES", "WRITES", "REVOKED", "STATIC", "WebConfig", "Refused",
           "Close", "CHAT", "HUB", "CONFIG", "STORE", "PAIRING", "POOL", "SOCKETS", "SETTINGS", "SESSION", "UPGRADED",
           "IDLE_SECONDS", "BODY_SECONDS", "is_https",
           "error_answer", "call", "read_body", "read_json", "whole", "loose", "text_of", "digest_of", "session_answer"]

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
JSON_LIMIT = 1 << 20
"""A JSON body is at most 1 MB (the page's message, like the terminal's paste limit)."""
ASSET_LIMIT = 5 << 20
"""R9: an image is at most 5 MB."""
OPEN_ROUTES = frozenset({"/api/session", "/api/pair/redeem"})  # the routes that make a session
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_COOKIE_SECONDS = 400 * 24 * 3600  # as long as browsers keep a cookie
REVOKED = 4401  # the socket close code of a revoked session
IDLE_SECONDS = 15.0
"""P14: a connection sends a whole request head within 15 s of opening, or of its previous
answer (the keep-alive timeout), else the server closes it."""
BODY_SECONDS = 60.0
"""P14: a request's body arrives whole within 60 s (5 MB at about 700 kbit/s), else 408."""
STATIC = Path(__file__).parent / "static"


@dataclass
class WebConfig:
    """How the server runs: Everchat's home (token, sessions), the port it listens on (set
    once it listens, for the Host check), the extra Host names, the token, a clock, and the
    connection timeouts (P14)."""

    home: Path
    token: str
    port: int = 8765
    allow_hosts: tuple[str, ...] = ()
    static: Path = STATIC
    clock: Callable[[], float] = time.time
    workers: int = 8
    sessions: SessionStore | None = field(default=None, repr=False)
    idle_seconds: float = IDLE_SECONDS
    body_seconds: float = BODY_SECONDS


class Refused(Exception):
    """A request the server refuses: its status and a short reason (docs/WEB.md)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Close(NamedTuple):
    """Queued to a socket's writer: close the socket with this code (4401: revoked)."""
    code: int
    message: bytes


CHAT = web.AppKey("chat", WebChat)
HUB = web.AppKey("hub", Hub)
CONFIG = web.AppKey("config", WebConfig)
STORE = web.AppKey("store", SessionStore)
PAIRING = web.AppKey("pairing", Pairing)
POOL = web.AppKey("pool", ThreadPoolExecutor)
SOCKETS = web.AppKey("sockets", dict)
SETTINGS = web.AppKey("settings", object)
SESSION = web.RequestKey("session", WebSession) if hasattr(web, "RequestKey") else "session"
UPGRADED = web.RequestKey("upgraded", web.WebSocketResponse) if hasattr(web, "RequestKey") else "upgraded"
"""Set once a socket's handshake is sent: an error after it closes the socket, never an HTTP
answer written onto it (P9)."""


def is_https(request: web.Request) -> bool:
    """The request came over https through a proxy on this host (X-Forwarded-Proto)."""
    return request.headers.get("X-Forwarded-Proto", "").lower() == "https" and request.remote in ("127.0.0.1", "::1")


def error_answer(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


async def call(request: web.Request, fn, *args):
    """A blocking ask to the chat, in the thread pool."""
    return await asyncio.get_running_loop().run_in_executor(request.app[POOL], fn, *args)


async def read_body(request: web.Request, limit: int, words: str) -> bytes:
    """The request's body, refused with 413 once it passes `limit` bytes, and with 408 when it
    is not all there within the configured seconds (P14: a body declared and never sent)."""
    if request.content_length is not None and request.content_length > limit:
        raise Refused(413, words)
    seconds = request.app[CONFIG].body_seconds
    chunks, size = [], 0
    try:
        async with asyncio.timeout(seconds):
            while True:
                chunk = await request.content.read(64 * 1024)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > limit:
                    raise Refused(413, words)
                chunks.append(chunk)
    except TimeoutError:
        raise Refused(408, f"the request body did not arrive within {seconds:g} s") from None


async def read_json(request: web.Request) -> dict:
    """The body as a JSON object; anything else, a body nested too deeply included (P9), 400."""
    data = await read_body(request, JSON_LIMIT, "a request body is at most 1 MB")
    try:
        value = json.loads(data)
    except RecursionError:
        raise Refused(400, "the body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(value, dict):
        raise Refused(400, "the body is not a JSON object")
    return value


def whole(request: web.Request, name: str, default: int | None = None) -> int | None:
    """A whole-number query argument (None or `default` when absent); 400 otherwise."""
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text, 10)
    except ValueError:
        raise Refused(400, f"{name} must be a whole number, not {text!r}") from None


def loose(text: str | None, default: Any = None) -> Any:
    """A zoom argument: an int when it reads as one, else the text itself, so the zoom
    tool says what is wrong with it in its own words (R35)."""
    if text is None:
        return default
    try:
        return int(text, 10)
    except ValueError:
        return text


def text_of(body: dict, name: str = "text", required: bool = True) -> str:
    value = body.get(name, "" if not required else None)
    if not isinstance(value, str):
        raise Refused(400, f"{name} must be text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(400, f"{name} is not UTF-8 text") from None
    return value


def digest_of(value: Any) -> str:
    if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
        raise Refused(400, "an image is named by its SHA-256 digest (64 hex digits)")
    return value


def session_answer(request: web.Request, cookie: str, session) -> web.Response:
    response = web.json_response({"session": session.public()})
    response.set_cookie(COOKIE, cookie, httponly=True, samesite="Strict", path="/", secure=is_https(request),
                        max_age=_COOKIE_SECONDS)
    return response
