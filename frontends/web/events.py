"""The live events' socket (docs/WEB.md, "Live events"): `GET /api/events?after=ID&run=RUN`.

Each socket has one writer task fed by a queue: the hub's events (handed over from its
thread with `call_soon_threadsafe`), pongs, and a `Close` (revoked: 4401; server closing:
1001), so frames never interleave and a close comes after what was queued before it."""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import WSMsgType, web

from everchat.frontends.web._context import HUB, SESSION, SOCKETS, Close, whole
from everchat.frontends.web.hub import RING_SIZE

__all__ = ["get_events"]

log = logging.getLogger("everchat.web")


async def get_events(request: web.Request) -> web.WebSocketResponse:
    """The live events (docs/WEB.md): hello, then the kept events after `after` (or a
    reset), then live ones; `{"type": "ping"}` gets a pong."""
    after = whole(request, "after")
    run = request.query.get("run")
    ring = request.app[HUB].ring
    ws = web.WebSocketResponse(heartbeat=30.0)
    await ws.prepare(request)
    session = request[SESSION]
    sockets = request.app[SOCKETS]
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | Close] = asyncio.Queue()
    sockets[session.id].add(queue)

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
        sockets.get(session.id, set()).discard(queue)
        if session.id in sockets and not sockets[session.id]:
            del sockets[session.id]
    return ws


def _is_ping(data: str) -> bool:
    try:
        return json.loads(data) == {"type": "ping"}
    except ValueError:
        return False


async def _write(ws: web.WebSocketResponse, queue: asyncio.Queue) -> None:
    """The socket's one writer: send what the queue holds, in order, until a `Close`; a
    socket too far behind is closed (the page reconnects and resumes from the ring)."""
    try:
        while True:
            item = await queue.get()
            if isinstance(item, Close):
                await ws.close(code=item.code, message=item.message)
                return
            if queue.qsize() > RING_SIZE:
                await ws.close(code=1013, message=b"too far behind; reconnect")
                return
            await ws.send_str(item)
    except (ConnectionError, RuntimeError) as error:  # the socket closed under us
        log.info("a web socket closed while sending: %s", error)
