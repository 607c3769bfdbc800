"""`RemoteSession` against a small aiohttp server that follows docs/WEB.md (a protocol test:
the real server's tests are in test_connect.py). The server runs in its own thread and
loop; the test decides every event it sends, so nothing waits on the clock."""

from __future__ import annotations

import asyncio
import json
import secrets
import io
import socket
import threading

import pytest
from aiohttp import WSCloseCode, web
from terminal_world import running

from everchat.actors.planner.planning import ZoomError
from everchat.frontends.terminal.transcript import Transcript
from everchat.frontends.cli.main import main
from everchat.frontends.connect.remote import (REVOKED, ConnectError, LinkError, RemoteSession, SessionRevoked,
                                           UserMessage, parse_link)
from everchat.transport import schema

from polling import events_until_end

TOKEN = "t0ken-" + "x" * 37
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


class FakeWeb:
    """The API of docs/WEB.md, enough of it for a client: sessions, Origin checks, a ring of
    events with resume, `reset`, revocation (4401). `turn(...)` plays events the test names."""

    def __init__(self) -> None:
        self.run_id = secrets.token_hex(4)
        self.ring: list[dict] = []
        self.sockets: set[web.WebSocketResponse] = set()
        self.sessions: dict[str, str] = {}   # cookie -> session id
        self.requests: list[tuple[str, str, dict]] = []  # method, path, query
        self.sent: list[dict] = []
        self.goals: list[str] = []
        self.assets: dict[str, bytes] = {}
        self.messages = 0
        self.running: int | None = None
        self.reconnect_gate: asyncio.Event | None = None
        self.answer_gate: asyncio.Event | None = None  # set: /api/send answers only once it opens
        self.connected = threading.Condition()
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    # -- running ------------------------------------------------------------------------------

    def __enter__(self) -> "FakeWeb":
        self.thread.start()
        self.port = self.call(self._start())
        self.url = f"http://127.0.0.1:{self.port}/"
        return self

    def __exit__(self, *exc) -> None:
        self.call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _start(self) -> int:
        self.reconnect_gate = asyncio.Event()
        self.reconnect_gate.set()
        app = web.Application(middlewares=[self._checks])
        app.router.add_post("/api/session", self.h_session)
        app.router.add_get("/api/me", self.h_me)
        app.router.add_get("/api/status", self.h_status)
        app.router.add_get("/api/view", self.h_view)
        app.router.add_get("/api/zoom_text", self.h_zoom)
        app.router.add_get("/api/date", self.h_date)
        app.router.add_post("/api/send", self.h_send)
        app.router.add_post("/api/goal", self.h_goal)
        app.router.add_post("/api/stop", self.h_stop)
        app.router.add_post("/api/note", self.h_note)
        app.router.add_post("/api/asset", self.h_asset)
        app.router.add_delete("/api/sessions/{id}", self.h_forget)
        app.router.add_get("/api/events", self.h_events)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    @web.middleware
    async def _checks(self, request, handler):
        self.requests.append((request.method, request.path, dict(request.query)))
        if request.method != "GET" or request.path == "/api/events":
            if request.headers.get("Origin") != f"http://{request.host}":
                return web.json_response({"error": "cross-site request refused"}, status=403)
        if request.path != "/api/session" and request.cookies.get("everchat_session") not in self.sessions:
            return web.json_response({"error": "no session"}, status=401)
        return await handler(request)

    # -- events -----------------------------------------------------------------------------------

    def emit(self, **event) -> None:
        """An event to every page (from any thread)."""
        self.loop.call_soon_threadsafe(self._emit, event)

    def _emit(self, event: dict) -> None:
        event = {"id": len(self.ring) + 1, **event}
        self.ring.append(event)
        for ws in list(self.sockets):
            asyncio.ensure_future(ws.send_str(json.dumps(event)))

    def turn(self, turn: int, *texts: str) -> None:
        for text in texts:
            self.emit(type="text", turn=turn, text=text)
        self.emit(type="ended", turn=turn, reason="done", incomplete=False, detail="", reply=turn + 1)
        self.running = None

    def drop_all(self, code: int = WSCloseCode.GOING_AWAY) -> None:
        async def close() -> None:
            for ws in list(self.sockets):
                await ws.close(code=code)

        self.call(close())

    def hold_reconnects(self) -> None:
        self.call(self._clear())

    async def _clear(self) -> None:
        self.reconnect_gate.clear()

    def let_reconnect(self) -> None:
        self.loop.call_soon_threadsafe(self.reconnect_gate.set)

    def wait_connections(self, count: int) -> None:
        with self.connected:
            assert self.connected.wait_for(lambda: self.connections >= count, 20), "the client did not come back"

    def revoke_all(self) -> None:
        self.sessions.clear()
        self.drop_all(4401)

    # -- handlers ---------------------------------------------------------------------------------

    async def h_session(self, request):
        body = await request.json()
        if body.get("token") != TOKEN:
            return web.json_response({"error": "wrong token"}, status=403)
        cookie = secrets.token_urlsafe(16)
        self.sessions[cookie] = secrets.token_hex(3)
        self.names = [body.get("name")]
        response = web.json_response({"session": {"id": self.sessions[cookie], "name": body.get("name")}})
        response.set_cookie("everchat_session", cookie, httponly=True, samesite="Strict")
        return response

    async def h_me(self, request):
        session = self.sessions[request.cookies["everchat_session"]]
        return web.json_response({"session": {"id": session}, "demo": True, "models": {"reply": "demo"},
                                  "chat": "/fake/chat", "version": "0"})

    async def h_status(self, request):
        return web.json_response({"messages": self.messages, "view_bytes": 100, "view_budget": 131072,
                                  "pending": 0, "failures": 0, "model": "demo", "cache_share": 0.0,
                                  "turn": -1 if self.running is None else self.running,
                                  "running": self.running is not None, "usage": {}, "view_floor": 65536})

    async def h_view(self, request):
        return web.json_response({"lines": [{"first": 0, "count": 1, "text": "user: hi\nthere", "bytes": 20,
                                             "built": True}], "bytes": 20, "ceiling": 131072, "floor": 65536})

    async def h_zoom(self, request):
        if request.query["id"] != "0":
            return web.json_response({"error": f"No line {request.query['id']}+{request.query['n']}."}, status=400)
        return web.json_response({"text": "user: hi"})

    async def h_date(self, request):
        return web.json_response({"date": "2026-12-03 17:00:00 +0000"})

    async def h_send(self, request):
        body = await request.json()
        answer_gate = self.answer_gate
        self.sent.append(body)
        ident, self.messages = self.messages, self.messages + 1
        message = {"id": ident, "kind": "user", "text": body["text"], "date": "2026-12-03T17:00:00Z",
                   "images": body["images"], "incomplete": False}
        self._announce(message)
        if answer_gate is not None:  # the `user` event goes out before the answer
            await answer_gate.wait()
        return web.json_response({"id": ident})

    async def h_goal(self, request):
        """Issue 13: as the real server does, the goal's `set` event, then the message's
        `user` event (announced before the answer), then the answer."""
        body = await request.json()
        answer_gate = self.answer_gate
        self.goals.append(body["text"])
        self._emit({"type": "goal", "event": "set", "goal": body["text"], "turns": 0, "detail": "",
                    "level": "info", "text": f"◎ goal: {body['text']}"})
        ident, self.messages = self.messages, self.messages + 1
        self._announce({"id": ident, "kind": "user", "text": body["text"], "date": "2026-12-03T17:00:00Z",
                        "images": [], "incomplete": False})
        if answer_gate is not None:
            await answer_gate.wait()
        return web.json_response({"id": ident})

    def other_client_sends(self, text: str) -> None:
        """A page's message: the `user` event only (the page posts /api/send itself)."""
        async def send() -> None:
            ident, self.messages = self.messages, self.messages + 1
            self._announce({"id": ident, "kind": "user", "text": text, "date": "", "images": [], "incomplete": False})

        self.call(send())

    def _announce(self, message: dict) -> None:
        """A logged user message: it opens a turn (`user`, `started`) or joins the running one (R36)."""
        if self.running is None:
            self.running = message["id"]
            self._emit({"type": "user", "turn": message["id"], "message": message})
            self._emit({"type": "started", "turn": message["id"]})
        else:
            self._emit({"type": "user", "turn": self.running, "message": message})

    async def h_stop(self, request):
        if self.running is not None:
            self._emit({"type": "ended", "turn": self.running, "reason": "stopped", "incomplete": True, "detail": "",
                        "reply": None})
            self.running = None
        return web.json_response({})

    async def h_note(self, request):
        ident, self.messages = self.messages, self.messages + 1
        return web.json_response({"id": ident})

    async def h_asset(self, request):
        data = await request.read()
        digest = f"{len(self.assets):064x}"
        self.assets[digest] = data
        return web.json_response({"digest": digest})

    async def h_forget(self, request):
        for cookie, ident in list(self.sessions.items()):
            if ident == request.match_info["id"]:
                del self.sessions[cookie]
        return web.json_response({})

    async def h_events(self, request):
        if "after" in request.query:
            await self.reconnect_gate.wait()
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        after = int(request.query.get("after", len(self.ring)))
        await ws.send_str(json.dumps({"type": "hello", "run": self.run_id, "last": len(self.ring)}))
        if request.query.get("run", self.run_id) != self.run_id:
            await ws.send_str(json.dumps({"type": "reset"}))
        else:
            for event in self.ring[after:]:
                await ws.send_str(json.dumps(event))
        self.sockets.add(ws)
        with self.connected:
            self.connections += 1
            self.connected.notify_all()
        try:
            async for message in ws:
                if json.loads(message.data).get("type") == "ping":
                    await ws.send_str(json.dumps({"type": "pong"}))
        finally:
            self.sockets.discard(ws)
        return ws


@pytest.fixture
def server():
    with FakeWeb() as fake:
        yield fake


@pytest.fixture
def remote(server):
    session = RemoteSession.connect(server.url + "#" + TOKEN)
    yield session
    session.close()


# -- the link ------------------------------------------------------------------------------------


def test_a_link_is_http_with_a_token_and_its_repr_hides_the_token():
    link = parse_link("http://127.0.0.1:8765/#secret-token")
    assert (str(link.base), link.secret, link.origin) == ("http://127.0.0.1:8765/", "secret-token",
                                                           "http://127.0.0.1:8765")
    assert "secret-token" not in repr(link)
    assert parse_link("https://chat.example/#pair=abc").pairing
    with pytest.raises(LinkError, match="no #TOKEN"):
        parse_link("http://127.0.0.1:8765/")
    with pytest.raises(LinkError, match="must start with http:// or https://, not ftp:"):
        parse_link("ftp://127.0.0.1/#token")


def test_a_bad_link_is_usage_exit_2_and_an_unreachable_server_one_line_exit_1(capsys, monkeypatch):
    assert main(["connect", "127.0.0.1:8765"]) == 2
    assert main(["connect", "http://127.0.0.1:8765/"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("everchat: connect: ") for line in err)
    with socket.socket() as closed:  # bound, never listening: a connection is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        monkeypatch.setattr("sys.stdin", _Tty())
        assert main(["connect", f"http://127.0.0.1:{port}/#{TOKEN}"]) == 1
    assert capsys.readouterr().err == (f"everchat: connect: cannot reach http://127.0.0.1:{port}: connection refused "
                                       "(is `everchat web` running there?)\n")


def test_the_link_can_stay_out_of_the_process_list(capsys, monkeypatch):
    """Left out of argv, the link comes from EVERCHAT_LINK, else from a prompt without echo."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        monkeypatch.setattr("sys.stdin", _Tty())
        monkeypatch.setenv("EVERCHAT_LINK", f"http://127.0.0.1:{port}/#{TOKEN}")
        assert main(["connect"]) == 1
        assert f"cannot reach http://127.0.0.1:{port}" in capsys.readouterr().err
        monkeypatch.delenv("EVERCHAT_LINK")
        asked = []
        monkeypatch.setattr("getpass.getpass", lambda prompt: asked.append(prompt) or f"http://127.0.0.1:{port}/#{TOKEN}")
        assert main(["connect"]) == 1 and asked == ["The link `everchat web` printed: "]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["connect"]) == 2
    assert "no link" in capsys.readouterr().err


class _Tty:
    def isatty(self) -> bool:
        return True


def test_a_wrong_token_is_the_revoked_line(server):
    with pytest.raises(SessionRevoked, match=f"^{REVOKED}$"):
        RemoteSession.connect(server.url + "#wrong")


# -- the session -----------------------------------------------------------------------------------


def test_r36_send_streams_the_turn_as_schema_events_with_cookie_and_origin(server, remote):
    assert server.names == [f"everchat connect on {socket.gethostname()}"]
    assert remote._cookie not in repr(remote) and TOKEN not in repr(remote) and TOKEN not in repr(remote.link)
    turn = remote.send("Remember amber-42.")
    assert turn == 0
    server.turn(turn, "Noted ", "as message 0.")
    events = events_until_end(remote, turn)  # our own `user` event shows nothing: the terminal showed it
    assert events == [schema.TurnStarted(0), schema.TurnText(0, "Noted "), schema.TurnText(0, "as message 0."),
                      schema.TurnEnded(0, "done", False, "")]
    assert remote.status()["messages"] == 1
    assert remote.view() == "<chat>\n0+1|user: hi there\n</chat>"
    assert remote.zoom(0) == "user: hi"
    with pytest.raises(ZoomError, match=r"^No line 6\+4\.$"):
        remote.zoom(6, 4)
    assert remote.date(0) == "2026-12-03 17:00:00 +0000"
    assert remote.note("a note") == 1


def test_r36_a_message_of_ours_during_a_turn_joins_it_and_another_clients_shows_as_a_user_message(server, remote):
    turn = remote.send("Plan the trip.")
    assert remote.next_event(20) == schema.TurnStarted(turn)
    joined = remote.send("Also book a train.")
    assert remote.next_event(20) == schema.TurnJoined(turn, joined)
    server.other_client_sends("And a hotel, from the browser.")
    assert remote.next_event(20) == UserMessage(turn, 2, "And a hotel, from the browser.")
    server.turn(turn, "Done.")
    assert events_until_end(remote, turn)[-1] == schema.TurnEnded(turn, "done", False, "")
    server.other_client_sends("A new question from the browser.")
    assert remote.next_event(20) == UserMessage(3, 3, "A new question from the browser.")
    assert remote.next_event(20) == schema.TurnStarted(3)


class _Watched(threading.Condition):
    """The session's send condition, telling the test when an event waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait_for(self, predicate, timeout=None):
        if not predicate():
            self.waiting.set()
        return super().wait_for(predicate, timeout)


def test_r36_our_own_message_whose_event_comes_before_the_answer_is_not_shown_twice(server, remote):
    server.answer_gate = server.call(_event())
    remote._sends = watched = _Watched()
    sent: list[int] = []
    sender = threading.Thread(target=lambda: sent.append(remote.send("Hello\r\nthere.")))
    sender.start()
    taken: list = []
    taker = threading.Thread(target=lambda: taken.append(remote.next_event(20)))
    taker.start()
    assert watched.waiting.wait(20)  # the `user` event waits for our send's id
    server.loop.call_soon_threadsafe(server.answer_gate.set)
    sender.join(20)
    taker.join(20)
    assert sent == [0] and taken == [schema.TurnStarted(0)]


def test_r36_our_own_goal_whose_event_comes_before_the_answer_is_not_shown_twice(server, remote):
    """Issue 13: `/goal TEXT` over connect: the `user` event of TEXT's message may come
    before POST /api/goal answers; it is ours, shown once (the terminal showed it as typed)."""
    server.answer_gate = server.call(_event())
    remote._sends = watched = _Watched()
    sent: list[int] = []
    sender = threading.Thread(target=lambda: sent.append(remote.goal("Make the tests pass.")))
    sender.start()
    taken: list = []
    second = threading.Event()

    def take() -> None:
        taken.append(remote.next_event(20))  # the goal's own line
        taken.append(remote.next_event(20))  # the `user` event's: nothing of ours, then `started`
        second.set()

    taker = threading.Thread(target=take)
    taker.start()
    while not (watched.waiting.wait(0.05) or second.is_set()):  # it waits for our id, or it did not
        pass
    server.loop.call_soon_threadsafe(server.answer_gate.set)
    sender.join(20)
    taker.join(20)
    assert server.goals == ["Make the tests pass."]
    assert sent == [0] and taken == [schema.GoalEvent("set", "Make the tests pass.", 0, ""), schema.TurnStarted(0)]


def test_the_terminal_on_a_remote_session_shows_a_goal_once(server, remote):
    """Issue 13: `/goal TEXT` in `everchat connect` shows what the local terminal shows (the
    command, TEXT as the person's message, the goal's line), the message not twice."""
    server.answer_gate = server.call(_event())
    with running(remote) as chat:
        chat.wait_printed("0 messages so far")
        chat.line("/goal Make the tests pass.")
        chat.wait(lambda t: server.running is not None, "the goal's turn starting")
        chat.wait_printed("◎ goal: Make the tests pass.")
        server.loop.call_soon_threadsafe(server.answer_gate.set)
        server.turn(0, "All green.\n")
        chat.wait_printed("All green.")
        chat.line("/quit")
        assert chat.exit_code() == 0
    assert [line for line in chat.terminal.printed if "Make the tests pass." in line] == [
        "› /goal Make the tests pass.", "› Make the tests pass.",
        "◎ goal: Make the tests pass. — working until a check finds it met (/halt drops it)"]


async def _event() -> asyncio.Event:
    return asyncio.Event()


def test_r9_images_are_uploaded_then_sent_by_digest(server, remote, tmp_path):
    image = tmp_path / "cat.png"
    image.write_bytes(PNG)
    remote.send("Look.", [image])
    assert list(server.assets.values()) == [PNG]
    assert server.sent == [{"text": "Look.", "images": list(server.assets)}]


def test_r37_stop_ends_the_running_turn(server, remote):
    turn = remote.send("Tell me a long story.")
    remote.stop()
    assert events_until_end(remote, turn)[-1] == schema.TurnEnded(turn, "stopped", True, "")


def test_a_dropped_socket_resumes_after_the_last_event_without_loss_or_doubling(server, remote):
    turn = remote.send("Count.")
    server.emit(type="text", turn=turn, text="one ")
    assert [remote.next_event(20), remote.next_event(20)] == [schema.TurnStarted(turn), schema.TurnText(turn, "one ")]
    server.hold_reconnects()
    server.drop_all()
    assert remote.next_event(20) == schema.Notice("warning", "the connection to the chat dropped; reconnecting …")
    server.emit(type="text", turn=turn, text="two ")  # while the client is away
    server.let_reconnect()
    server.wait_connections(2)
    server.turn(turn, "three.")
    events = events_until_end(remote, turn)
    assert events == [schema.Notice("info", "reconnected to the chat"), schema.TurnText(turn, "two "),
                      schema.TurnText(turn, "three."), schema.TurnEnded(turn, "done", False, "")]
    resumed = [query for method, path, query in server.requests if path == "/api/events"]
    assert resumed == [{}, {"after": "3", "run": server.run_id}]


def test_a_client_drop_resumes_too(server, remote):
    turn = remote.send("Count.")
    assert remote.next_event(20) == schema.TurnStarted(turn)
    remote.drop()
    server.wait_connections(2)
    server.turn(turn, "on.")
    assert schema.TurnText(turn, "on.") in events_until_end(remote, turn)


def test_a_server_of_another_run_resets_with_a_notice(server, remote):
    server.hold_reconnects()
    server.drop_all()
    assert remote.next_event(20).text.startswith("the connection to the chat dropped")
    server.run_id = "another-run"
    server.let_reconnect()
    assert remote.next_event(20) == schema.Notice("info", "reconnected to the chat")
    notice = remote.next_event(20)
    assert notice.level == "warning" and notice.text.startswith("the server restarted or we were away too long")
    server.emit(type="notice", level="info", text="after the reset")
    assert remote.next_event(20) == schema.Notice("info", "after the reset")


def test_a_revoked_session_ends_the_events_and_every_call_with_one_clear_line(server, remote):
    server.revoke_all()
    with pytest.raises(SessionRevoked, match=f"^{REVOKED}$"):
        remote.next_event(20)
    with pytest.raises(SessionRevoked, match=f"^{REVOKED}$"):
        remote.next_event(0)
    with pytest.raises(SessionRevoked):
        remote.status()


def test_a_forgotten_session_answers_401_and_the_session_is_over(server, remote):
    server.sessions.clear()
    with pytest.raises(SessionRevoked, match=f"^{REVOKED}$"):
        remote.status()
    with pytest.raises(SessionRevoked):
        remote.next_event(20)


def test_closing_forgets_the_session_on_the_server(server):
    session = RemoteSession.connect(server.url + "#" + TOKEN)
    assert len(server.sessions) == 1
    session.close()
    assert server.sessions == {}
    with pytest.raises(ConnectError, match="closed"):
        session.status()


# -- the terminal on it -----------------------------------------------------------------------------


def test_the_terminal_on_a_remote_session_chats_says_compact_is_elsewhere_and_ends_when_revoked(server, remote):
    with running(remote) as chat:
        chat.wait_printed("0 messages so far")
        chat.line("Hello there.")
        chat.wait(lambda t: server.running is not None, "the turn starting")
        server.turn(0, "Hi, ", "from the server.\n")
        chat.wait_printed("Hi, from the server.")
        server.other_client_sends("A browser's question.")
        chat.wait_printed("› A browser's question.")
        chat.line("/compact")
        chat.wait_printed("/compact works only where the chat runs")
        chat.line("/zoom 6 4")
        chat.wait_printed("No line 6+4.")
        server.revoke_all()
        assert chat.exit_code() == 1
        assert isinstance(chat.terminal.ended, SessionRevoked)
    assert [line for line in chat.terminal.printed if line.startswith("›")] == [
        "› Hello there.", "› A browser's question.", "› /compact", "› /zoom 6 4"]


def test_the_transcript_shows_another_clients_message_and_its_join():
    transcript = Transcript()
    transcript.on_event(UserMessage(4, 4, "from a page", ("ab" * 32,)))
    transcript.on_event(schema.TurnStarted(4))
    transcript.on_event(UserMessage(4, 5, "and more"))
    lines = ["".join(text for _, text in line) for line in transcript.take()]
    assert lines == ["› from a page", "  [image abababababab (sent elsewhere)]", "› and more",
                     "↳ message 5 joined the reply in progress"]
