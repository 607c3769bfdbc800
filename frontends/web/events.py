"""The live events' socket (docs/WEB.md, "Live events"): `GET /api/events?after=ID&run=RUN`.

Each socket has one writer (the handler's task) fed by a `Backlog`: the hub's events (handed
over from its thread with `call_soon_threadsafe`), pongs, and a `Close` (revoked: 4401; server
closing: 1001; a bug: 1011), so frames never interleave and a close comes after what was
queued before it. A reader task answers pings. A
socket further behind than the ring keeps (in events or in bytes, P4) is closed with 1013:
the page reconnects and resumes, or gets a reset."""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import WSMsgType, web

from everchat.frontends.web._context import HUB, SESSION, SOCKETS, UPGRADED, Close, whole
from everchat.frontends.web.hub import RING_BYTES, RING_SIZE

__all__ = ["get_events", "Backlog"]

log = logging.getLogger("everchat.web")

_PING = 64
"""A frame longer than this is no ping: it is ignored unparsed (P9: a deeply nested frame)."""
_GONE = Close(1006, b"")  # queued by the reader when the page closed or went: nothing to send


class Backlog:
    """What waits for one socket's writer (on the loop's thread). When it holds more than
    the ring keeps (RING_SIZE events or RING_BYTES of them, P4), what it holds is dropped
    and a close (1013) queued in its place: a socket too slow for a shell's output never
    makes the server hold the output again. After a close, nothing more is queued."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | Close] = asyncio.Queue()
        self.bytes = 0
        self._closing = False

    def __repr__(self) -> str:
        return f"<Backlog {self._queue.qsize()} frames, {self.bytes} bytes>"

    def put_nowait(self, item: str | Close) -> None:
        if self._closing or item is _GONE:
            return
        if isinstance(item, Close):
            self._closing = True
        else:
            self.bytes += len(item.encode())
        self._queue.put_nowait(item)
        if self._queue.qsize() > RING_SIZE or self.bytes > RING_BYTES:
            while not self._queue.empty():
                self._queue.get_nowait()
            self.bytes = 0
            self._closing = True
            self._queue.put_nowait(Close(1013, b"too far behind; reconnect"))

    def end(self) -> None:
        """The page is gone: the writer stops after what it takes before this."""
        self._queue.put_nowait(_GONE)

    async def get(self) -> str | Close:
        item = await self._queue.get()
        if isinstance(item, str):
            self.bytes -= len(item.encode())
        return item


async def get_events(request: web.Request) -> web.WebSocketResponse:
    """The live events (docs/WEB.md): hello, then the kept events after `after` (or a
    reset), then live ones; `{"type": "ping"}` gets a pong, any other frame is ignored.

    This task writes; a second one (`_read`) reads. A close is sent by the writer once the
    reader has stopped: aiohttp, closed from one task while another waits in `receive`,
    drops the connection without waiting for the page's answer, which the page then sees
    as 1006 instead of the code sent (4401, 1013, 1001)."""
    after = whole(request, "after")
    run = request.query.get("run")
    ring = request.app[HUB].ring
    ws = web.WebSocketResponse(heartbeat=30.0)
    await ws.prepare(request)
    request[UPGRADED] = ws
    session = request[SESSION]
    sockets = request.app[SOCKETS]
    loop = asyncio.get_running_loop()
    backlog = Backlog()
    sockets[session.id].add(backlog)

    def deliver(_id: int, text: str) -> None:  # on the hub's thread, under the ring's lock
        try:
            loop.call_soon_threadsafe(backlog.put_nowait, text)
        except RuntimeError:  # the loop is closed: the socket is gone with it
            pass

    token, kept, last = ring.subscribe(deliver, after, run)
    # No await since `subscribe`: what the hub delivers meanwhile waits in the loop's
    # callbacks, so it queues behind the hello and the kept events (none lost or repeated).
    backlog.put_nowait(json.dumps({"type": "hello", "run": ring.run, "last": last}))
    for text in [json.dumps({"type": "reset"})] if kept is None else kept:
        backlog.put_nowait(text)
    reader = asyncio.create_task(_read(ws, backlog))
    try:
        await _write(ws, backlog, reader)
    finally:
        ring.unsubscribe(token)
        reader.cancel()
        sockets.get(session.id, set()).discard(backlog)
        if session.id in sockets and not sockets[session.id]:
            del sockets[session.id]
    return ws


def _is_ping(data: str) -> bool:
    if len(data) > _PING:
        return False
    try:
        return json.loads(data) == {"type": "ping"}
    except ValueError:
        return False


async def _read(ws: web.WebSocketResponse, backlog: Backlog) -> None:
    """The page's frames: a ping gets a pong. Ends when the page closes or goes (the writer
    is told), or with a close (1011) if a bug of ours breaks it (P9)."""
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT and _is_ping(msg.data):
                backlog.put_nowait(json.dumps({"type": "pong"}))
    except asyncio.CancelledError:
        raise
    except Exception:  # a bug of ours: logged, and the socket closes, never garbled
        log.exception("the live events' socket failed while reading")
        backlog.put_nowait(Close(1011, b"internal error"))
    finally:
        backlog.end()


async def _write(ws: web.WebSocketResponse, backlog: Backlog, reader: asyncio.Task) -> None:
    """The socket's one writer: send what the backlog holds, in order, until a `Close` (a
    socket too far behind gets 1013: the page reconnects and resumes from the ring) or
    until the page is gone."""
    try:
        while True:
            item = await backlog.get()
            if item is _GONE:
                return
            if isinstance(item, Close):
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                await ws.close(code=item.code, message=item.message)
                return
            await ws.send_str(item)
    except (ConnectionError, RuntimeError) as error:  # the socket closed under us
        log.info("a web socket closed while sending: %s", error)
