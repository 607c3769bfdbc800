"""`RemoteSession`: the terminal's `ChatSession`, over a running `everchat web` (docs/WEB.md).

    session = RemoteSession.connect("http://127.0.0.1:8765/#TOKEN")
    turn = session.send("Remember amber-42.")         # POST /api/send (R36: joins a running turn)
    while (event := session.next_event(timeout=60)) is not None:
        ...                                           # the same `transport.schema` events
    session.close()

The session holds no chat folder and no keys. It trades the link's token (or a `#pair=CODE`)
for a session cookie, as a page does (`POST /api/session`, name `everchat connect on
HOST`); the cookie stays in this object's memory (never written, never printed, never in a
repr) and the token is dropped once traded. Every POST, DELETE and the WebSocket upgrade
carry `Origin` equal to the link's own origin, which is what the server checks.

One background thread runs an asyncio loop with an `aiohttp.ClientSession`: the HTTP calls
(each method submits one and waits for it) and the live events (`GET /api/events`, a
WebSocket). The events become the `transport.schema` objects `ChatSession.next_event` hands
out (`started` -> `TurnStarted`, `text` -> `TurnText`, …, `notice` -> `Notice`). After a
drop the socket reconnects with `after=LAST&run=RUN`, and events already seen are skipped,
so none is lost or doubled; a `reset` (the server restarted, or we were away past its ring)
becomes a `Notice`. A `user` event (a message from any client) becomes a `UserMessage`
for a message another client sent, a `TurnJoined` for one of ours that joined a running
turn (R36), and nothing for one of ours that opened a turn (the terminal showed it as it
was typed).

Any 401 (an HTTP answer, or the socket closed with 4401) ends the session: `next_event`
and every call raise `SessionRevoked` ("the session was revoked or the token is wrong").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from everchat.actors.planner.planning import ZoomError
from everchat.frontends.connect.wire import (Link, LinkError, UserMessage, event_of, one_line, parse_link,
                                                 same_lines)
from everchat.transport import schema

__all__ = ["ConnectError", "Link", "LinkError", "RemoteSession", "SessionRevoked", "UserMessage", "event_of", "parse_link"]

log = logging.getLogger("everchat.connect")

REVOKED = "the session was revoked or the token is wrong"
"""The one line a client says when the server no longer knows its session."""

CALL_SECONDS = 30.0
"""How long an ordinary request may take."""

SEND_SECONDS = 600.0
"""A send that opens a turn waits for its view to settle before it is logged (R36)."""

RECONNECT_SECONDS = (0.1, 5.0)
"""The live socket's reconnect delay: first, and at most (doubling in between)."""

HEARTBEAT_SECONDS = 20.0
"""WebSocket pings: a connection that stops answering counts as dropped."""

CLOSE_REVOKED = 4401
COOKIE = "everchat_session"


class ConnectError(Exception):
    """The server could not be reached, or refused a request; the text says which, in words."""


class SessionRevoked(ConnectError):
    """The server answered 401 (or closed the live socket with 4401): the session was revoked
    or never existed. Raised by every call from then on, `next_event` included."""

    def __init__(self, text: str = REVOKED) -> None:
        super().__init__(text)


class _Ended:
    """A queue item: the session is over; `next_event` raises `error` (and keeps raising)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class RemoteSession:
    """A chat served by `everchat web`, with `ChatSession`'s methods (those the terminal
    uses). Methods are safe from any one thread at a time; `stop` from any other too."""

    def __init__(self, link: Link, name: str | None = None) -> None:
        self.link = link
        self.name = name or f"everchat connect on {socket.gethostname()}"
        self.me: dict = {}
        self._cookie: str | None = None
        self._run: str | None = None
        self._last = 0               # the id of the last event taken from the socket
        self._hello: dict = {}
        self._events: queue.Queue = queue.Queue()
        self._sends = threading.Condition()
        self._inflight: list[str] = []   # texts being sent (their `user` events wait for the id)
        self._own: set[int] = set()      # ids of the messages this session sent
        self._closed = False
        self._ended: Exception | None = None
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._away: threading.Event | None = None  # `drop`'s: reconnect once it is set
        self._listener: asyncio.Task | None = None
        self._http: aiohttp.ClientSession | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="everchat-connect", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<RemoteSession {self.link.base} run={self._run} last={self._last}>"

    @classmethod
    def connect(cls, link: str | Link, *, name: str | None = None) -> "RemoteSession":
        """Trade the link's secret for a session, read `/api/me`, open the live socket (its
        `hello` received), so no event sent after this returns is missed. `LinkError` for
        a link that is no link, `SessionRevoked` for a refused token, `ConnectError` for a
        server that cannot be reached."""
        parsed = link if isinstance(link, Link) else parse_link(link)
        session = cls(parsed, name)
        try:
            session._call(session._open(), CALL_SECONDS)
        except BaseException:
            session.close()
            raise
        return session

    # -- the loop thread -----------------------------------------------------------------------

    def _call(self, coro, timeout: float) -> Any:
        """Run `coro` on the session's loop; its result, or its exception, here."""
        if self._closed:
            coro.close()
            raise ConnectError("the connection is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise ConnectError(f"{self.link.origin} did not answer within {timeout:g} s") from None

    async def _open(self) -> None:
        self._http = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                           timeout=aiohttp.ClientTimeout(total=None, sock_connect=CALL_SECONDS))
        route = "/api/pair/redeem" if self.link.pairing else "/api/session"
        field = "code" if self.link.pairing else "token"
        _, response = await self._request("POST", route, payload={field: self.link.secret, "name": self.name},
                                          raw=True)
        morsel = response.cookies.get(COOKIE)
        if morsel is None or not morsel.value:
            raise ConnectError(f"{self.link.origin} gave no session cookie: is it `everchat web`?")
        self._cookie = morsel.value
        self.link = Link(self.link.base, "", self.link.pairing)  # the secret is spent: forget it
        self.me = await self._request("GET", "/api/me")
        ready = self._loop.create_future()
        self._listener = asyncio.create_task(self._listen(ready))
        await ready

    def _headers(self, writes: bool) -> dict[str, str]:
        headers = {"Origin": self.link.origin} if writes else {}
        if self._cookie:
            headers["Cookie"] = f"{COOKIE}={self._cookie}"
        return headers

    async def _request(self, method: str, route: str, *, params: dict | None = None, payload: Any = None,
                       data: bytes | None = None, timeout: float = CALL_SECONDS, raw: bool = False) -> Any:
        """One API call; its JSON answer. 401: the session is over (`SessionRevoked`), any
        other refusal: `ConnectError` with the server's own reason; `ZoomError` for a 400
        of zoom and date (the tool's words, R35)."""
        assert self._http is not None
        if self._ended is not None:
            raise self._ended
        url = self.link.base.with_path(route)
        try:
            async with self._http.request(method, url, params=params, json=payload, data=data,
                                          headers=self._headers(method != "GET"),
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                body = await response.read()
        except asyncio.TimeoutError:
            raise ConnectError(f"{self.link.origin} did not answer {method} {route} within {timeout:g} s") from None
        except aiohttp.ClientConnectorError as error:
            reason = os.strerror(error.os_error.errno) if error.os_error.errno else str(error.os_error)
            raise ConnectError(f"cannot reach {self.link.origin}: {reason.lower()} (is `everchat web` running "
                               "there?)") from None
        except aiohttp.ClientError as error:
            raise ConnectError(f"{method} {route} at {self.link.origin} failed: {error}") from None
        try:
            answer = json.loads(body) if body else {}
        except ValueError:
            answer = {"error": f"not JSON ({response.content_type})"}
        if response.status < 400:
            return (answer, response) if raw else answer
        reason = answer.get("error") if isinstance(answer, dict) else None
        reason = str(reason or response.reason or "refused")
        if response.status == 403 and route == "/api/pair/redeem" and "cross-site" not in reason:
            raise SessionRevoked("the pairing code was used or has expired: make a new one on the page")
        if response.status == 401 or (response.status == 403 and route == "/api/session" and "cross-site" not in reason):
            self._end(SessionRevoked())
            raise self._ended
        if response.status == 421:
            raise ConnectError(f"{self.link.origin} does not answer to the name {self.link.base.host} (421 {reason}): "
                               f"start it with --allow-host {self.link.base.host}, or use 127.0.0.1 on its host")
        if response.status == 400 and route in ("/api/zoom_text", "/api/date"):
            raise ZoomError(reason)
        raise ConnectError(f"{route}: {reason} ({response.status})")

    # -- the live events -------------------------------------------------------------------------

    async def _listen(self, ready: asyncio.Future) -> None:
        """The live socket, reconnected after each drop with `after=LAST&run=RUN` (WEB.md)."""
        delay = RECONNECT_SECONDS[0]
        dropped = False
        while not self._closed:
            params = {} if self._run is None else {"after": str(self._last), "run": self._run}
            url = self.link.base.with_path("/api/events").with_scheme("wss" if self.link.base.scheme == "https" else "ws")
            code = None
            try:
                async with self._http.ws_connect(url, params=params, headers=self._headers(True),
                                                 heartbeat=HEARTBEAT_SECONDS, autoping=True) as ws:
                    self._socket = ws
                    async for message in ws:
                        if message.type != aiohttp.WSMsgType.TEXT:
                            break
                        frame = json.loads(message.data)
                        if frame.get("type") == "hello":
                            self._hello = frame
                            if self._run is None:
                                self._run, self._last = str(frame["run"]), int(frame["last"])
                            if not ready.done():
                                ready.set_result(None)
                            if dropped:
                                dropped = False
                                self._events.put(schema.Notice("info", "reconnected to the chat"))
                            delay = RECONNECT_SECONDS[0]
                        else:
                            self._frame(frame)
                    code = ws.close_code
            except aiohttp.WSServerHandshakeError as error:
                if error.status in (401, 403, 421):  # refused for good: the session ends, in words
                    failure = SessionRevoked() if error.status == 401 else ConnectError(
                        f"the live events at {self.link.origin} were refused ({error.status} {error.message})")
                    self._end(failure)
                    if not ready.done():
                        ready.set_exception(failure)
                    return
                if not ready.done():
                    ready.set_exception(ConnectError(f"the live events at {self.link.origin} were refused: "
                                                     f"{error.status} {error.message}"))
                    return
                log.info("%s: the live socket was refused (%s); trying again", self, error.status)
            except (aiohttp.ClientError, OSError, ValueError) as error:
                if not ready.done():
                    ready.set_exception(ConnectError(f"cannot reach the live events at {self.link.origin}: {error}"))
                    return
                log.info("%s: the live socket dropped: %s", self, error)
            finally:
                self._socket = None
            if code == CLOSE_REVOKED:
                self._end(SessionRevoked())
                return
            if self._closed:
                return
            if not ready.done():
                ready.set_exception(ConnectError(f"{self.link.origin} closed the live events at once ({code})"))
                return
            if not dropped:
                dropped = True
                self._events.put(schema.Notice("warning", "the connection to the chat dropped; reconnecting …"))
            await asyncio.sleep(delay)  # a reconnect's backoff (the server may be restarting)
            if self._away is not None:  # a test keeps us away until it says
                away, self._away = self._away, None
                await asyncio.to_thread(away.wait)
            delay = min(delay * 2, RECONNECT_SECONDS[1])

    def _frame(self, frame: dict) -> None:
        """One server frame (on the loop): events in id order, each once."""
        kind = frame.get("type")
        if kind == "reset":
            self._run, self._last = str(self._hello.get("run")), int(self._hello.get("last", 0))
            self._events.put(schema.Notice("warning", "the server restarted or we were away too long: some live "
                                                      "events were missed (the log has everything; /zoom reads it)"))
            return
        if kind == "pong":
            return
        if "id" not in frame:
            log.info("%s: a frame without an id: %r", self, kind)
            return
        if int(frame["id"]) <= self._last:
            return  # seen before the drop
        self._last = int(frame["id"])
        if kind == "user":
            self._events.put(frame)  # sorted out by `next_event`, which can wait for our own ids
        else:
            try:
                event = event_of(frame)
            except (KeyError, TypeError, ValueError) as error:
                event = schema.Notice("warning", f"an event the server sent could not be read ({kind}: {error})")
            if event is not None:
                self._events.put(event)

    def _end(self, error: Exception) -> None:
        if self._ended is None:
            self._ended = error
            self._events.put(_Ended(error))

    def drop(self, away: threading.Event | None = None) -> None:
        """Close the live socket as a network drop would; it reconnects and resumes (once
        `away` is set, when given: the events meanwhile come from the server's ring). For tests."""
        async def close() -> None:
            self._away = away
            if self._socket is not None:
                await self._socket.close()

        self._call(close(), CALL_SECONDS)

    # -- ChatSession's methods ------------------------------------------------------------------

    def next_event(self, timeout: float | None = None) -> Any:
        """The next event, in order; None after `timeout` seconds. `SessionRevoked` once the
        server ended the session (and from then on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = self._events.get(timeout=left)
            except queue.Empty:
                return None
            if isinstance(item, _Ended):
                self._events.put(item)
                raise item.error
            if isinstance(item, dict):
                item = self._user(item)
                if item is None:
                    continue
            return item

    def _user(self, frame: dict) -> Any:
        """A `user` frame: ours opened a turn (None: already shown), ours joined one
        (`TurnJoined`, R36), or another client's (`UserMessage`)."""
        message = frame.get("message") or {}
        ident, turn, text = int(message["id"]), int(frame["turn"]), str(message.get("text") or "")
        logged = same_lines(text)

        def settled() -> bool:  # the first part of a long message (R8) starts the text sent
            return ident in self._own or not any(same_lines(sent).startswith(logged) for sent in self._inflight)

        with self._sends:  # one of our sends whose text this is may not have its id yet
            self._sends.wait_for(settled, SEND_SECONDS)
            ours = ident in self._own
        if ours:
            return schema.TurnJoined(turn, ident) if turn != ident else None
        return UserMessage(turn, ident, text, tuple(str(digest) for digest in message.get("images") or ()))

    def send(self, text: str, images: Sequence[Path] = ()) -> int:
        """R36: the message (its images uploaded first, R9); its id once logged. It joins a
        running turn, or opens one (the server waits for its view to settle first)."""
        digests = [self._call(self._request("POST", "/api/asset", data=Path(path).read_bytes()), CALL_SECONDS)["digest"]
                   for path in images]
        return self._send_own("/api/send", text, {"text": text, "images": digests})

    def _send_own(self, route: str, text: str, payload: dict) -> int:
        """POST a message of ours (`/api/send`, `/api/goal`); its id. While it is on its way
        its text is in flight: its `user` event, which the server sends before it answers,
        waits for the id and is then known as ours (`_user`), never shown a second time."""
        with self._sends:
            self._inflight.append(text)
        try:
            answer = self._call(self._request("POST", route, payload=payload, timeout=SEND_SECONDS),
                                SEND_SECONDS + CALL_SECONDS)
            ident = int(answer["id"])
            with self._sends:
                self._own.add(ident)
            return ident
        finally:
            with self._sends:
                self._inflight.remove(text)
                self._sends.notify_all()

    def agent(self, name: str, task: str) -> tuple[schema.AgentAccepted, int]:
        """P15: `/agent NAME TASK` on the server's chat, as its page sends it: the server
        starts the agent at once and logs the line. Its answer is the line's id only, so
        the state is "accepted" (working, or queued behind others)."""
        from everchat.actors.prompt.tasks import agent_command

        text = agent_command(name, task)
        ident = self._send_own("/api/send", text, {"text": text, "images": []})
        return schema.AgentAccepted(name=name, state="accepted", detail=""), ident

    def stop(self) -> None:
        """R37: end the running reply (kept, marked incomplete). No turn: nothing happens."""
        self._call(self._request("POST", "/api/stop", payload={}), CALL_SECONDS)

    def status(self) -> dict:
        """`ChatSession.status()` as the server reads it (plus `view_floor`)."""
        return self._call(self._request("GET", "/api/status"), CALL_SECONDS)

    def view(self) -> str:
        """The view the next turn starts from, as `ChatSession.view` writes it (R14, R15)."""
        answer = self._call(self._request("GET", "/api/view", params={"which": "turn"}), CALL_SECONDS)
        lines = "".join(f"{line['first']}+{line['count']}|{one_line(str(line['text']))}\n" for line in answer["lines"])
        return "<chat>\n" + lines + "</chat>"

    def zoom(self, id: int | str, n: int = 1, page: int = 1) -> str:
        """R35: the zoom tool's own text; `ZoomError` with its words for wrong arguments."""
        params = {"id": str(id), "n": str(n), "page": str(page)}
        return str(self._call(self._request("GET", "/api/zoom_text", params=params), CALL_SECONDS)["text"])

    def date(self, id: int) -> str:
        """R35: when message `id` was written (`ZoomError` if there is none)."""
        return str(self._call(self._request("GET", "/api/date", params={"id": str(id)}), CALL_SECONDS)["date"])

    def goal(self, text: str) -> int:
        """Issue 13: `/goal TEXT` on the server's chat; the id of TEXT's message (sent as
        `send` sends: its `user` event is ours, the terminal showed TEXT as it was typed)."""
        return self._send_own("/api/goal", text, {"text": text})

    def goal_status(self) -> dict | None:
        """Issue 13: the chat's goal, or None."""
        return self._call(self._request("GET", "/api/goal"), CALL_SECONDS)["goal"]

    def halt_goal(self) -> None:
        """Issue 13: /halt."""
        self._call(self._request("POST", "/api/halt", payload={}), CALL_SECONDS)

    def note(self, text: str) -> int:
        """A note without a turn (R3); its id."""
        return int(self._call(self._request("POST", "/api/note", payload={"text": text}), CALL_SECONDS)["id"])

    def close(self) -> None:
        """Leave: the server forgets this session (its cookie was never kept anywhere), the
        socket closes, the loop's thread ends. Idempotent."""
        if self._closed:
            return
        try:
            if self._cookie and self._ended is None:
                ident = (self.me.get("session") or {}).get("id")
                if ident:
                    self._call(self._request("DELETE", f"/api/sessions/{ident}"), 5.0)
        except ConnectError as error:  # the server may be gone already; the session then expires there
            log.info("%s: could not end the session on the server: %s", self, error)
        self._closed = True
        self._cookie = None

        async def shut() -> None:
            if self._listener is not None:
                self._listener.cancel()
                try:
                    await self._listener
                except (asyncio.CancelledError, Exception) as error:  # the listener's end, whatever it was
                    log.debug("%s: listener ended: %r", self, error)
            if self._http is not None:
                await self._http.close()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(CALL_SECONDS)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CALL_SECONDS)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> "RemoteSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
