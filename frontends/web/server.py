"""The web page's server (docs/WEB.md): `make_app(session, settings, config)` builds the
aiohttp application; `start_in_thread` runs it on a loop of its own.

Checks run as middlewares in a fixed order (STYLE 13), outermost first:
1. `_errors`: every refusal and failure becomes JSON `{"error": "…"}` with its status;
2. `_host`: the Host header names this server, else 421 (DNS rebinding);
3. `_session`: every `/api/` route but the two that make a session needs the cookie, else 401;
4. `_origin`: POST, DELETE and the WebSocket upgrade come from this server's own origin, else 403;
then the handler. Every answer, refusals and the socket's handshake included, carries the
security headers (`_headers`, on response prepare). Handlers are small: the blocking asks
to the chat run in a thread pool (`_call`), never on the event loop. A refused request
changes nothing: every check runs before anything reaches the chat.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import mimetypes
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from aiohttp import WSMsgType, web

from everchat.actors.memory_tools import ZoomError, media_type
from everchat.frontends.web.auth import (COOKIE, Pairing, SessionStore, host_allowed, iso, origin_allowed,
                                         token_matches)
from everchat.frontends.web.chat import HISTORY_LIMIT, WebChat
from everchat.frontends.web.hub import RING_SIZE, Hub
from everchat.transport import RemoteError, TransportError

__all__ = ["WebConfig", "make_app", "start_in_thread", "Running", "CSP", "JSON_LIMIT", "ASSET_LIMIT"]

log = logging.getLogger("everchat.web")

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
JSON_LIMIT = 1 << 20
"""A JSON body is at most 1 MB (the page's message, like the terminal's paste limit)."""
ASSET_LIMIT = 5 << 20
"""R9: an image is at most 5 MB."""
_OPEN_ROUTES = frozenset({"/api/session", "/api/pair/redeem"})  # the routes that make a session
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_COOKIE_SECONDS = 400 * 24 * 3600  # as long as browsers keep a cookie
_REVOKED = 4401  # the socket close code of a revoked session
_STATIC = Path(__file__).parent / "static"


@dataclass
class WebConfig:
    """How the server runs: Everchat's home (token, sessions), the port it listens on (set
    once it listens, for the Host check), the extra Host names, the token, a clock."""

    home: Path
    token: str
    port: int = 8765
    allow_hosts: tuple[str, ...] = ()
    static: Path = _STATIC
    clock: Callable[[], float] = time.time
    workers: int = 8
    sessions: SessionStore | None = field(default=None, repr=False)


class Refused(Exception):
    """A request the server refuses: its status and a short reason (docs/WEB.md)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


_CHAT = web.AppKey("chat", WebChat)
_HUB = web.AppKey("hub", Hub)
_CONFIG = web.AppKey("config", WebConfig)
_STORE = web.AppKey("store", SessionStore)
_PAIRING = web.AppKey("pairing", Pairing)
_POOL = web.AppKey("pool", ThreadPoolExecutor)
_SOCKETS = web.AppKey("sockets", dict)
_SETTINGS = web.AppKey("settings", object)


def _https(request: web.Request) -> bool:
    """The request came over https through a proxy on this host (X-Forwarded-Proto)."""
    return request.headers.get("X-Forwarded-Proto", "").lower() == "https" and request.remote in ("127.0.0.1", "::1")


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


# -- middlewares, outermost first ------------------------------------------------------


@web.middleware
async def _errors(request: web.Request, handler):
    try:
        return await handler(request)
    except Refused as refused:
        return _error(refused.status, refused.reason)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return _error(error.status, (error.reason or "refused").lower())
    except ZoomError as error:
        return _error(400, str(error))
    except TransportError as error:
        log.warning("%s %s: the chat did not answer: %s", request.method, request.path, error)
        return _error(503, f"the chat did not answer: {error}")


@web.middleware
async def _host(request: web.Request, handler):
    config = request.app[_CONFIG]
    if not host_allowed(request.headers.get("Host"), config.port, config.allow_hosts):
        raise Refused(421, "host not allowed")
    return await handler(request)


@web.middleware
async def _session(request: web.Request, handler):
    if request.path.startswith("/api/") and request.path not in _OPEN_ROUTES:
        session = request.app[_STORE].find(request.cookies.get(COOKIE))
        if session is None:
            raise Refused(401, "no session")
        request["session"] = session
    return await handler(request)


@web.middleware
async def _origin(request: web.Request, handler):
    upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
    if (request.method in _WRITES or upgrade) and not origin_allowed(
            request.headers.get("Origin"), request.headers.get("Host"), _https(request)):
        raise Refused(403, "cross-site request refused")
    return await handler(request)


async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer: the CSP and its friends; `/api/` answers are never cached (the image
    route says otherwise for itself). No CORS header, ever."""
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    if request.path.startswith("/api/") and "Cache-Control" not in response.headers:
        response.headers["Cache-Control"] = "no-store"


# -- helpers ---------------------------------------------------------------------------


async def _call(request: web.Request, fn, *args):
    """A blocking ask to the chat, in the thread pool."""
    return await asyncio.get_running_loop().run_in_executor(request.app[_POOL], fn, *args)


async def _body(request: web.Request, limit: int, words: str) -> bytes:
    """The request's body, refused with 413 once it passes `limit` bytes."""
    if request.content_length is not None and request.content_length > limit:
        raise Refused(413, words)
    chunks, size = [], 0
    while True:
        chunk = await request.content.read(64 * 1024)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise Refused(413, words)
        chunks.append(chunk)


async def _json(request: web.Request) -> dict:
    data = await _body(request, JSON_LIMIT, "a request body is at most 1 MB")
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(value, dict):
        raise Refused(400, "the body is not a JSON object")
    return value


def _whole(request: web.Request, name: str, default: int | None = None) -> int | None:
    """A whole-number query argument (None or `default` when absent); 400 otherwise."""
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text, 10)
    except ValueError:
        raise Refused(400, f"{name} must be a whole number, not {text!r}") from None


def _loose(text: str | None, default: Any = None) -> Any:
    """A zoom argument: an int when it reads as one, else the text itself, so the zoom
    tool says what is wrong with it in its own words (R35)."""
    if text is None:
        return default
    try:
        return int(text, 10)
    except ValueError:
        return text


def _text(body: dict, name: str = "text", required: bool = True) -> str:
    value = body.get(name, "" if not required else None)
    if not isinstance(value, str):
        raise Refused(400, f"{name} must be text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(400, f"{name} is not UTF-8 text") from None
    return value


def _digest(value: Any) -> str:
    if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
        raise Refused(400, "an image is named by its SHA-256 digest (64 hex digits)")
    return value


def _session_answer(request: web.Request, cookie: str, session) -> web.Response:
    response = web.json_response({"session": session.public()})
    response.set_cookie(COOKIE, cookie, httponly=True, samesite="Strict", path="/", secure=_https(request),
                        max_age=_COOKIE_SECONDS)
    return response


# -- routes ----------------------------------------------------------------------------


async def post_session(request: web.Request) -> web.Response:
    """Trade the token (from the link's fragment) for a session and its cookie."""
    body = await _json(request)
    if not token_matches(body.get("token"), request.app[_CONFIG].token):
        raise Refused(403, "wrong token")
    cookie, session = request.app[_STORE].create(body.get("name") or "")
    return _session_answer(request, cookie, session)


async def post_redeem(request: web.Request) -> web.Response:
    """Trade a pairing code (single use, 10 minutes) for a session."""
    body = await _json(request)
    if not request.app[_PAIRING].redeem(body.get("code")):
        raise Refused(403, "pairing code used or expired")
    cookie, session = request.app[_STORE].create(body.get("name") or "")
    return _session_answer(request, cookie, session)


async def get_me(request: web.Request) -> web.Response:
    settings = request.app[_SETTINGS]
    chat = request.app[_CHAT]
    folder = getattr(getattr(chat.session, "supervisor", None), "chat", None) or settings.chat_dir
    return web.json_response({
        "session": request["session"].public(),
        "demo": settings.reply.provider == "demo",
        "models": {"reply": settings.reply.model, "summary": settings.compaction.model,
                   "effort": settings.reply.effort},
        "chat": str(folder),
        "version": _version(),
    })


async def get_status(request: web.Request) -> web.Response:
    return web.json_response(await _call(request, request.app[_CHAT].status))


async def get_history(request: web.Request) -> web.Response:
    """A page of the log (never the whole chat): up to `limit` messages before `before`."""
    before = _whole(request, "before")
    limit = _whole(request, "limit", 50)
    if not 1 <= limit <= HISTORY_LIMIT:
        raise Refused(400, f"limit is 1 to {HISTORY_LIMIT}, not {limit}")
    if before is not None and before < 0:
        raise Refused(400, f"before is a message id (0 or more), not {before}")
    return web.json_response(await _call(request, request.app[_CHAT].history, before, limit))


async def get_view(request: web.Request) -> web.Response:
    """The view (R14, R15) or the compaction view (R21), as lines."""
    which = request.query.get("which", "turn")
    if which not in ("turn", "compaction"):
        raise Refused(400, f"which is turn or compaction, not {which!r}")
    return web.json_response(await _call(request, request.app[_CHAT].view, which))


async def get_zoom(request: web.Request) -> web.Response:
    """R35: a line's two halves, or a message whole."""
    first = _loose(request.query.get("id"))
    if first is None:
        raise Refused(400, "zoom needs id and n (e.g. id=0&n=8)")
    count = _loose(request.query.get("n"), 1)
    return web.json_response(await _call(request, request.app[_CHAT].zoom, first, count))


async def get_zoom_text(request: web.Request) -> web.Response:
    """R35: the zoom tool's own text, for `connect`'s /zoom."""
    first = _loose(request.query.get("id"))
    if first is None:
        raise Refused(400, "zoom needs id (and n), or an agent's name")
    count = _loose(request.query.get("n"), 1)
    page = _loose(request.query.get("page"), 1)
    return web.json_response({"text": await _call(request, request.app[_CHAT].zoom_text, first, count, page)})


async def get_memory(request: web.Request) -> web.Response:
    """Where message ID is in memory now: its view line and the nodes down to it."""
    first = _loose(request.query.get("id"))
    if first is None:
        raise Refused(400, "memory needs id")
    return web.json_response(await _call(request, request.app[_CHAT].memory, first))


async def get_date(request: web.Request) -> web.Response:
    """R35: the date tool's words."""
    first = _loose(request.query.get("id"))
    if first is None:
        raise Refused(400, "date needs id")
    return web.json_response({"date": await _call(request, request.app[_CHAT].date, first)})


async def get_asset(request: web.Request) -> web.Response:
    """R9: a stored image, cached for good (its name is its digest)."""
    digest = request.match_info["digest"]
    try:
        _digest(digest)
        data = await _call(request, request.app[_CHAT].asset, digest)
    except (Refused, RemoteError):
        raise Refused(404, "no such image") from None
    try:
        kind = media_type(data)
    except ValueError:
        raise Refused(404, "no such image") from None
    return web.Response(body=data, content_type=kind,
                        headers={"Cache-Control": "private, max-age=31536000, immutable"})


async def post_asset(request: web.Request) -> web.Response:
    """R9: store an image (PNG, JPEG, GIF, WebP by its bytes, at most 5 MB) once."""
    from everchat.actors.store._assets import image_type

    data = await _body(request, ASSET_LIMIT, "an image is at most 5 MB (R9)")
    if image_type(data) is None:
        raise Refused(400, "not a PNG, JPEG, GIF or WebP image (R9)")
    try:
        digest = await _call(request, request.app[_CHAT].put_asset, data)
    except RemoteError as error:
        raise Refused(400, error.text) from None
    return web.json_response({"digest": digest})


async def post_send(request: web.Request) -> web.Response:
    """R36: the person's message; starts a turn or joins the running one."""
    body = await _json(request)
    text = _text(body)
    images = body.get("images", [])
    if not isinstance(images, list):
        raise Refused(400, "images is a list of digests")
    digests = [_digest(d) for d in images]
    if not text.strip() and not digests:
        raise Refused(400, "an empty message")
    chat = request.app[_CHAT]
    for digest in digests:  # a digest of no stored image would fail the turn: refuse it now
        try:
            await _call(request, chat.asset, digest)
        except RemoteError:
            raise Refused(400, f"no image {digest} (post it to /api/asset first)") from None
    try:
        logged = await _call(request, chat.send, text, digests)
    except RemoteError as error:
        if error.kind == "BadInput":
            raise Refused(400, error.text) from None
        raise
    message = await _call(request, chat.message, logged.ids[0])
    request.app[_HUB].announce(logged.turn if logged.turn >= 0 else logged.ids[0], message)
    return web.json_response({"id": logged.ids[0]})


async def post_stop(request: web.Request) -> web.Response:
    """R37: end the running call; what streamed is kept, marked incomplete."""
    await _call(request, request.app[_CHAT].stop)
    return web.json_response({})


async def post_note(request: web.Request) -> web.Response:
    """R3: a note, logged without a turn."""
    text = _text(await _json(request))
    if not text.strip():
        raise Refused(400, "an empty note")
    try:
        i = await _call(request, request.app[_CHAT].note, text)
    except RemoteError as error:
        if error.kind == "BadInput":
            raise Refused(400, error.text) from None
        raise
    return web.json_response({"id": i})


async def get_sessions(request: web.Request) -> web.Response:
    mine = request["session"].id
    return web.json_response({"sessions": [dict(s.public(), current=s.id == mine)
                                           for s in request.app[_STORE].sessions()]})


async def delete_session(request: web.Request) -> web.Response:
    """Revoke a session: its entry goes, its sockets close at once (4401)."""
    public = request.match_info["id"]
    if not request.app[_STORE].revoke(public):
        raise Refused(404, "no such session")
    for ws in list(request.app[_SOCKETS].pop(public, ())):
        await ws.close(code=_REVOKED, message=b"session revoked")
    return web.json_response({})


async def post_pair(request: web.Request) -> web.Response:
    """A single-use pairing link (10 minutes) and its QR code (segno)."""
    import segno

    code, expires = request.app[_PAIRING].make()
    scheme = "https" if _https(request) else "http"
    link = f"{scheme}://{request.headers['Host']}/#pair={code}"
    svg = io.BytesIO()
    segno.make(link, error="m").save(svg, kind="svg", xmldecl=False, scale=4, border=2)
    return web.json_response({"link": link, "expires": iso(expires), "qr_svg": svg.getvalue().decode()})


async def get_events(request: web.Request) -> web.WebSocketResponse:
    """The live events (docs/WEB.md): hello, then the kept events after `after` (or a
    reset), then live ones; `{"type": "ping"}` gets a pong."""
    after = _whole(request, "after")
    run = request.query.get("run")
    ring = request.app[_HUB].ring
    ws = web.WebSocketResponse(heartbeat=30.0)
    await ws.prepare(request)
    session = request["session"]
    sockets = request.app[_SOCKETS]
    sockets[session.id].add(ws)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def deliver(_id: int, text: str) -> None:  # on the hub's thread, under the ring's lock
        try:
            loop.call_soon_threadsafe(queue.put_nowait, text)
        except RuntimeError:  # the loop is closed: the socket is gone with it
            pass

    token, kept, last = ring.subscribe(deliver, after, run)
    writer = asyncio.create_task(_write(ws, queue))
    try:
        # No await since `subscribe`: what the hub delivers meanwhile waits in the loop's
        # callbacks, so it queues behind the hello and the kept events (none lost or repeated).
        queue.put_nowait(json.dumps({"type": "hello", "run": ring.run, "last": last}))
        for text in [json.dumps({"type": "reset"})] if kept is None else kept:
            queue.put_nowait(text)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT and _is_ping(msg.data):
                queue.put_nowait(json.dumps({"type": "pong"}))
    finally:
        ring.unsubscribe(token)
        writer.cancel()
        sockets.get(session.id, set()).discard(ws)
        if session.id in sockets and not sockets[session.id]:
            del sockets[session.id]
    return ws


def _is_ping(data: str) -> bool:
    try:
        return json.loads(data) == {"type": "ping"}
    except ValueError:
        return False


async def _write(ws: web.WebSocketResponse, queue: asyncio.Queue) -> None:
    """Send what the queue holds, in order; a socket too far behind is closed (the page
    reconnects and resumes from the ring)."""
    try:
        while True:
            text = await queue.get()
            if queue.qsize() > RING_SIZE:
                await ws.close(code=1013, message=b"too far behind; reconnect")
                return
            await ws.send_str(text)
    except (ConnectionError, RuntimeError) as error:  # the socket closed under us
        log.info("a web socket closed while sending: %s", error)


async def static(request: web.Request) -> web.StreamResponse:
    """The page's files (frontends/web/static/); index.html for `/`."""
    root = request.app[_CONFIG].static.resolve()
    name = request.match_info.get("path") or "index.html"
    path = (root / name).resolve()
    if root not in path.parents or not path.is_file():
        raise Refused(404, "not found")
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if path.suffix in (".js", ".mjs"):
        kind = "text/javascript"
    return web.FileResponse(path, headers={"Content-Type": kind})


# -- the application -------------------------------------------------------------------


def make_app(session, settings, config: WebConfig, *, chat: WebChat | None = None, hub: Hub | None = None
             ) -> web.Application:
    """The web page's application over an open `ChatSession` (docs/WEB.md). Starting it
    starts the event hub; cleaning it up stops the hub and closes every socket (the
    session itself stays open: its owner closes it)."""
    app = web.Application(middlewares=[_errors, _host, _session, _origin], client_max_size=ASSET_LIMIT + 1)
    chat = chat or WebChat(session)
    app[_CHAT] = chat
    app[_HUB] = hub or Hub(chat)
    app[_CONFIG] = config
    app[_STORE] = config.sessions or SessionStore(config.home, config.clock)
    app[_PAIRING] = Pairing(config.clock)
    app[_POOL] = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="everchat-web")
    app[_SOCKETS] = defaultdict(set)
    app[_SETTINGS] = settings
    app.on_response_prepare.append(_headers)
    app.on_startup.append(_start)
    app.on_shutdown.append(_close_sockets)
    app.on_cleanup.append(_stop)
    app.router.add_post("/api/session", post_session)
    app.router.add_post("/api/pair/redeem", post_redeem)
    app.router.add_get("/api/me", get_me)
    app.router.add_get("/api/status", get_status)
    app.router.add_get("/api/history", get_history)
    app.router.add_get("/api/view", get_view)
    app.router.add_get("/api/zoom", get_zoom)
    app.router.add_get("/api/zoom_text", get_zoom_text)
    app.router.add_get("/api/memory", get_memory)
    app.router.add_get("/api/date", get_date)
    app.router.add_get("/api/asset/{digest}", get_asset)
    app.router.add_post("/api/asset", post_asset)
    app.router.add_post("/api/send", post_send)
    app.router.add_post("/api/stop", post_stop)
    app.router.add_post("/api/note", post_note)
    app.router.add_get("/api/sessions", get_sessions)
    app.router.add_delete("/api/sessions/{id}", delete_session)
    app.router.add_post("/api/pair", post_pair)
    app.router.add_get("/api/events", get_events)
    app.router.add_get("/api/{rest:.*}", _no_route)
    app.router.add_get("/{path:.*}", static)
    return app


async def _no_route(request: web.Request) -> web.Response:
    raise Refused(404, "not found")


async def _start(app: web.Application) -> None:
    app[_HUB].start()


async def _close_sockets(app: web.Application) -> None:
    for sockets in list(app[_SOCKETS].values()):
        for ws in list(sockets):
            await ws.close(code=1001, message=b"server closing")


async def _stop(app: web.Application) -> None:
    await asyncio.get_running_loop().run_in_executor(None, app[_HUB].stop)
    app[_POOL].shutdown(wait=False, cancel_futures=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("everchat")
    except PackageNotFoundError:
        return "unknown"


# -- running it ------------------------------------------------------------------------


class Running:
    """An application served on its own thread and loop; `port` is where it listens."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="everchat-web-server", daemon=True)

    def __repr__(self) -> str:
        return f"<Running web server http://{self.host}:{self.port}>"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._start())
        except BaseException as error:  # told to the starter, which raises it
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self._runner.cleanup())
        self.loop.close()

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app, shutdown_timeout=5.0, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            raise
        self.port = self._runner.addresses[0][1]
        self.app[_CONFIG].port = self.port

    def start(self) -> "Running":
        """Listen, or raise what stopped it (OSError: the port is in use)."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Close every socket, stop the hub and the loop; the session stays open."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)


def start_in_thread(app: web.Application, host: str = "127.0.0.1", port: int = 8765) -> Running:
    """Serve `app` on host:port (0: any free port, then `Running.port`) on a thread."""
    return Running(app, host, port).start()
