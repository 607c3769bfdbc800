"""The web page's server (docs/WEB.md): `make_app(session, settings, config)` builds the
aiohttp application; `start_in_thread` runs it on a loop of its own.

Checks run as middlewares in a fixed order (STYLE 13), outermost first:
1. `_errors`: every refusal and failure becomes JSON `{"error": "…"}` with its status (an
   actor that does not answer, or a sessions file that cannot be read: 503; a bug: 500, its
   traceback logged; after a socket's handshake, a bug closes the socket with 1011 instead,
   P9);
2. `_host`: the Host header names this server, else 421 (DNS rebinding);
3. `_session`: every `/api/` route but the two that make a session needs the cookie, else 401;
4. `_origin`: POST, DELETE and the WebSocket upgrade come from this server's own origin, else 403;
then the handler. Every answer, refusals and the socket's handshake included, carries the
security headers (`_headers`, on response prepare). The handlers are in `routes.py` and
`events.py` (the socket); the blocking asks to the chat run in a thread pool (`call`),
never on the event loop. A refused request changes nothing: every check runs before
anything reaches the chat.

P14: a connection that sends no whole request head within `WebConfig.idle_seconds` of opening
(or of its previous answer: the keep-alive timeout) is closed, and a body not all there
within `body_seconds` is answered 408. P5: every server on one home shares its sessions
file (`SessionStore`); `_watch_sessions` closes the sockets of a session another server
revoked.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from aiohttp.http import HttpProcessingError

from everchat.actors.zoom import ZoomError
from everchat.frontends.web import routes
from everchat.frontends.web._context import (ASSET_LIMIT, CHAT, CONFIG, CSP, HUB, OPEN_ROUTES, PAIRING, POOL,
                                             REVOKED, SESSION, SETTINGS, SOCKETS, STORE, UPGRADED, WRITES, Close,
                                             Refused, WebConfig, error_answer, is_https)
from everchat.frontends.web.auth import (COOKIE, Pairing, SessionStore, SessionsUnreadable, host_allowed,
                                         origin_allowed)
from everchat.frontends.web.chat import WebChat
from everchat.frontends.web.events import get_events
from everchat.frontends.web.hub import Hub
from everchat.transport import TransportError

__all__ = ["WebConfig", "make_app", "start_in_thread", "Running", "CSP"]

log = logging.getLogger("everchat.web")

WATCH_SECONDS = 0.5
"""How often the sessions file is checked for sessions another server revoked (P5)."""


class _Malformed(logging.Filter):
    """aiohttp answers a request it cannot parse with 400 and logs the parser's traceback:
    a refusal, not a bug of ours, so it is not logged (P9)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, HttpProcessingError) and 400 <= (error.code or 400) < 500)


_http_log = logging.getLogger("everchat.web.http")
_http_log.addFilter(_Malformed())


# -- middlewares, outermost first ------------------------------------------------------


@web.middleware
async def _errors(request: web.Request, handler):
    try:
        return await handler(request)
    except Refused as refused:
        return error_answer(refused.status, refused.reason)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return error_answer(error.status, (error.reason or "refused").lower())
    except ZoomError as error:
        return error_answer(400, str(error))
    except TransportError as error:
        log.warning("%s %s: the chat did not answer: %s", request.method, request.path, error)
        return error_answer(503, f"the chat did not answer: {error}")
    except SessionsUnreadable as error:
        log.warning("%s", error)
        return error_answer(503, str(error))
    except Exception as error:  # a bug of ours: one line for the page, the traceback in the log
        log.exception("%s %s failed", request.method, request.path)
        upgraded = request.get(UPGRADED)
        if upgraded is not None:  # P9: an HTTP answer written onto the socket would garble it
            await upgraded.close(code=1011, message=b"internal error")
            return upgraded
        return error_answer(500, f"internal error: {type(error).__name__}: {error}")


@web.middleware
async def _host(request: web.Request, handler):
    config = request.app[CONFIG]
    if not host_allowed(request.headers.get("Host"), config.port, config.allow_hosts):
        raise Refused(421, "host not allowed")
    return await handler(request)


@web.middleware
async def _session(request: web.Request, handler):
    if request.path.startswith("/api/") and request.path not in OPEN_ROUTES:
        session = request.app[STORE].find(request.cookies.get(COOKIE))
        if session is None:
            raise Refused(401, "no session")
        request[SESSION] = session
    return await handler(request)


@web.middleware
async def _origin(request: web.Request, handler):
    upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
    if (request.method in WRITES or upgrade) and not origin_allowed(
            request.headers.get("Origin"), request.headers.get("Host"), is_https(request)):
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


# -- the application -------------------------------------------------------------------


def make_app(session, settings, config: WebConfig, *, chat: WebChat | None = None, hub: Hub | None = None
             ) -> web.Application:
    """The web page's application over an open `ChatSession` (docs/WEB.md). Starting it
    starts the event hub; cleaning it up stops the hub and closes every socket (the
    session itself stays open: its owner closes it)."""
    app = web.Application(middlewares=[_errors, _host, _session, _origin], client_max_size=ASSET_LIMIT + 1)
    chat = chat or WebChat(session)
    app[CHAT] = chat
    app[HUB] = hub or Hub(chat)
    app[CONFIG] = config
    app[STORE] = config.sessions or SessionStore(config.home, config.clock)
    app[PAIRING] = Pairing(config.clock)
    app[POOL] = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="everchat-web")
    app[SOCKETS] = defaultdict(set)
    app[SETTINGS] = settings
    app.on_response_prepare.append(_headers)
    app.on_startup.append(_start)
    app.cleanup_ctx.append(_watching)
    app.on_shutdown.append(_close_sockets)
    app.on_cleanup.append(_stop)
    app.router.add_post("/api/session", routes.post_session)
    app.router.add_post("/api/pair/redeem", routes.post_redeem)
    app.router.add_get("/api/me", routes.get_me)
    app.router.add_get("/api/status", routes.get_status)
    app.router.add_get("/api/history", routes.get_history)
    app.router.add_get("/api/view", routes.get_view)
    app.router.add_get("/api/zoom", routes.get_zoom)
    app.router.add_get("/api/zoom_text", routes.get_zoom_text)
    app.router.add_get("/api/memory", routes.get_memory)
    app.router.add_get("/api/date", routes.get_date)
    app.router.add_get("/api/asset/{digest}", routes.get_asset)
    app.router.add_post("/api/asset", routes.post_asset)
    app.router.add_post("/api/send", routes.post_send)
    app.router.add_post("/api/stop", routes.post_stop)
    app.router.add_post("/api/goal", routes.post_goal)
    app.router.add_get("/api/goal", routes.get_goal)
    app.router.add_post("/api/halt", routes.post_halt)
    app.router.add_post("/api/note", routes.post_note)
    app.router.add_post("/api/settings", routes.post_settings)
    app.router.add_get("/api/sessions", routes.get_sessions)
    app.router.add_delete("/api/sessions/{id}", routes.delete_session)
    app.router.add_post("/api/pair", routes.post_pair)
    app.router.add_get("/api/events", get_events)
    app.router.add_get("/api/{rest:.*}", routes.no_route)
    app.router.add_get("/{path:.*}", routes.static)
    return app



async def _start(app: web.Application) -> None:
    app[HUB].start()


async def _watching(app: web.Application):
    task = asyncio.create_task(_watch_sessions(app))
    yield
    task.cancel()


async def _watch_sessions(app: web.Application) -> None:
    """P5: every `WATCH_SECONDS`, close (4401) the sockets of sessions the sessions file no
    longer holds: revoked on another server on this home, or ended by its `--new-token`."""
    store, sockets = app[STORE], app[SOCKETS]
    while True:
        await asyncio.sleep(WATCH_SECONDS)
        if not sockets:
            continue
        try:
            known = {session.id for session in store.sessions()}
        except SessionsUnreadable as error:
            log.warning("%s", error)
            continue
        for public in [p for p in sockets if p not in known]:
            for backlog in list(sockets.pop(public, ())):
                backlog.put_nowait(Close(REVOKED, b"session revoked"))


async def _close_sockets(app: web.Application) -> None:
    for queues in list(app[SOCKETS].values()):
        for queue in list(queues):
            queue.put_nowait(Close(1001, b"server closing"))


async def _stop(app: web.Application) -> None:
    await asyncio.get_running_loop().run_in_executor(None, app[HUB].stop)
    app[POOL].shutdown(wait=False, cancel_futures=True)


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
        try:
            self.loop.run_until_complete(self._runner.cleanup())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()

    async def _start(self) -> None:
        # P14: aiohttp's keep-alive timer also runs from a connection's start and while its
        # head is half sent, so it is the head's timeout too; a body nobody reads (a refusal
        # answered before it) is read and dropped for as long at most.
        idle = self.app[CONFIG].idle_seconds
        self._runner = web.AppRunner(self.app, shutdown_timeout=5.0, handle_signals=False, access_log=None,
                                     keepalive_timeout=idle, lingering_time=idle, logger=_http_log)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            raise
        self.port = self._runner.addresses[0][1]
        self.app[CONFIG].port = self.port

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
