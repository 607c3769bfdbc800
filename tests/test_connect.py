"""`everchat connect` against the real web server (frontends/web, docs/WEB.md): the server's
own app on a real `ChatSession` (the demo model, or the fake model server for slow replies)
in the test's process, a `RemoteSession` on it, and a page stand-in (an aiohttp client with
the page's calls: session, send, live events) beside it. The last test runs `everchat
connect` as a real process in a tmux pane."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import aiohttp
import pytest

from everchat.actors import settings as config
from everchat.actors.session.session import ChatSession
from everchat.frontends.web import WebConfig, load_token, make_app, start_in_thread
from everchat.frontends.connect.remote import REVOKED, RemoteSession, SessionRevoked, UserMessage
from everchat.tools.fakemodel import FakeModelServer, Gate, Latency, Reply, Text
from everchat.transport import schema

from polling import events_until_end
from tmux_world import clean_env, tmux_pane

EVERCHAT = Path(sys.executable).with_name("everchat")


class Web:
    """The real server on a real session, in this process (its own thread and loop)."""

    def __init__(self, home: Path, settings) -> None:
        self.session = ChatSession.open(settings)
        self.token = load_token(home)
        self.app = make_app(self.session, settings, WebConfig(home=home, token=self.token, port=0))
        self.running = start_in_thread(self.app, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.running.port}/"
        self.link = self.url + "#" + self.token

    def close(self) -> None:
        self.running.stop()
        self.session.close()


class Page:
    """A browser's calls (docs/WEB.md), on a loop of its own: it logs in with the token,
    posts like the page and keeps every live frame it receives."""

    def __init__(self, web: Web) -> None:
        self.web = web
        self.origin = web.url.rstrip("/")
        self.frames: list[dict] = []
        self.changed = threading.Condition()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self._open())

    def call(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _open(self) -> None:
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        await self.post("/api/session", {"token": self.web.token, "name": "a test page"})
        self.ws = await self.http.ws_connect(self.web.url + "api/events", headers={"Origin": self.origin})
        hello = json.loads((await self.ws.receive()).data)
        assert hello["type"] == "hello"
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            with self.changed:
                self.frames.append(json.loads(message.data))
                self.changed.notify_all()

    async def post(self, route: str, body: dict) -> dict:
        async with self.http.post(self.web.url + route.lstrip("/"), json=body, headers={"Origin": self.origin}) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    async def request(self, method: str, route: str) -> dict:
        async with self.http.request(method, self.web.url + route.lstrip("/"), headers={"Origin": self.origin}) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    def send(self, text: str) -> int:
        return self.call(self.post("/api/send", {"text": text, "images": []}))["id"]

    def frames_until_end(self, turn: int) -> list[dict]:
        def ended() -> bool:
            return any(f.get("type") == "ended" and f.get("turn") == turn for f in self.frames)

        with self.changed:
            assert self.changed.wait_for(ended, 60), f"the page never saw turn {turn} end: {self.frames}"
            return [frame for frame in self.frames if frame.get("turn") == turn]

    def revoke(self, name: str) -> None:
        sessions = self.call(self.request("GET", "/api/sessions"))["sessions"]
        (ident,) = [session["id"] for session in sessions if session["name"] == name]
        self.call(self.request("DELETE", f"/api/sessions/{ident}"))

    def close(self) -> None:
        async def shut() -> None:
            await self.ws.close()
            await self.http.close()

        self.call(shut())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def demo_settings(home: Path):
    return config.load({"demo": True}, env={}, home=home)


def slow_settings(home: Path, server: FakeModelServer):
    flags = {"reply.provider": "anthropic", "reply.model": "claude-test", "reply.base_url": server.base_url,
             "compaction.provider": "demo"}
    return config.load(flags, env={"ANTHROPIC_API_KEY": "test-key"}, home=home)


@pytest.fixture
def demo_web(tmp_path):
    web = Web(tmp_path, demo_settings(tmp_path))
    yield web
    web.close()


@pytest.fixture
def slow_model():
    with FakeModelServer(latency=Latency(per_chunk=0.02)) as server:
        yield server


@pytest.fixture
def slow_web(tmp_path, slow_model):
    web = Web(tmp_path, slow_settings(tmp_path, slow_model))
    yield web
    web.close()


def as_events(frames: list[dict]) -> list:
    """The page's frames of a turn, as the events connect hands out (its `user` frames aside)."""
    from everchat.frontends.connect.remote import event_of

    return [event_of(frame) for frame in frames if frame["type"] != "user"]


def test_r36_connect_and_a_page_see_the_same_events_of_one_turn(demo_web):
    page = Page(demo_web)
    remote = RemoteSession.connect(demo_web.link)
    try:
        turn = remote.send("Remember that the code word is amber-42.")
        events = events_until_end(remote, turn)
        frames = page.frames_until_end(turn)
        assert events == as_events(frames)
        assert "".join(e.text for e in events if isinstance(e, schema.TurnText)).startswith("Noted as message 0. ")
        assert [f["message"]["text"] for f in frames if f["type"] == "user"] == [
            "Remember that the code word is amber-42."]

        asked = page.send("What is the code word?")  # the page's turn reaches connect too
        events = events_until_end(remote, asked)
        assert events[0] == UserMessage(asked, asked, "What is the code word?")
        (call,) = [e for e in events if isinstance(e, schema.TurnToolCall)]
        assert (call.turn, call.name, json.loads(call.arguments_json)) == (asked, "zoom", {"id": 0, "n": 1})
        assert 'In message 0 you wrote: "Remember that the code word is amber-42."' in "".join(
            e.text for e in events if isinstance(e, schema.TurnText))
        assert remote.zoom(0) == "user: Remember that the code word is amber-42."
        assert remote.status()["messages"] >= 4
        names = [s["name"] for s in page.call(page.request("GET", "/api/sessions"))["sessions"]]
        assert sorted(names) == ["a test page", f"everchat connect on {socket.gethostname()}"]
        remote.close()  # its cookie lived in its memory only: the server forgets the session
        names = [s["name"] for s in page.call(page.request("GET", "/api/sessions"))["sessions"]]
        assert names == ["a test page"]
    finally:
        remote.close()
        page.close()


def test_r36_input_from_connect_joins_the_turn_a_page_started(slow_web, slow_model):
    held = Gate()  # the first reply waits for its first byte until the join is in
    slow_model.script(Reply("Planning the trip.", gate=held), Reply("Noted the train too."))
    page = Page(slow_web)
    remote = RemoteSession.connect(slow_web.link)
    try:
        turn = page.send("Plan the trip.")
        assert remote.next_event(60) == UserMessage(turn, turn, "Plan the trip.")
        assert remote.next_event(60) == schema.TurnStarted(turn)
        joined = remote.send("Also book a train.")
        held.open()
        events = events_until_end(remote, turn)
        assert schema.TurnJoined(turn, joined) in events
        frames = page.frames_until_end(turn)
        assert any(f["type"] == "user" and f["message"]["id"] == joined and f["turn"] == turn for f in frames)
        assert "".join(e.text for e in events if isinstance(e, schema.TurnText)).endswith("Noted the train too.")
    finally:
        remote.close()
        page.close()
    first, second = slow_model.model_calls
    assert "Also book a train." not in str(first.body) and "Also book a train." in str(second.body)


def test_a_reconnect_in_the_middle_of_a_reply_resumes_without_loss_or_doubling(slow_web, slow_model):
    chunks = tuple(f"word{n} " for n in range(120))
    held = Gate()
    slow_model.script(Reply(Text("".join(chunks), chunks=chunks), gate=held))
    page = Page(slow_web)
    remote = RemoteSession.connect(slow_web.link)
    try:
        turn = remote.send("Tell me a long story.")
        assert remote.next_event(60) == schema.TurnStarted(turn)
        away = threading.Event()
        remote.drop(away)  # as the network would
        held.open()
        page.frames_until_end(turn)  # the whole reply streamed while connect was away
        away.set()
        events = events_until_end(remote, turn)
        assert events[:2] == [schema.Notice("warning", "the connection to the chat dropped; reconnecting …"),
                              schema.Notice("info", "reconnected to the chat")]
        texts = [e.text for e in events if isinstance(e, schema.TurnText)]
        assert "".join(texts) == "".join(chunks)  # every piece, each once, in order
    finally:
        remote.close()
        page.close()


def test_a_session_revoked_from_a_page_ends_connect_with_one_clear_line(demo_web):
    page = Page(demo_web)
    remote = RemoteSession.connect(demo_web.link, name="the connect to revoke")
    try:
        page.revoke("the connect to revoke")
        with pytest.raises(SessionRevoked, match=f"^{REVOKED}$"):
            while remote.next_event(60) is not None:
                pass
        with pytest.raises(SessionRevoked, match=f"^{REVOKED}$"):
            remote.status()
    finally:
        remote.close()
        page.close()


def test_r9_an_image_from_connect_is_uploaded_and_a_page_sees_its_digest(demo_web, tmp_path):
    image = tmp_path / "dot.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(64)))
    page = Page(demo_web)
    remote = RemoteSession.connect(demo_web.link)
    try:
        turn = remote.send("What is in this picture?", [image])
        (user,) = [frame for frame in page.frames_until_end(turn) if frame["type"] == "user"]
        (digest,) = user["message"]["images"]
        assert digest == hashlib.sha256(image.read_bytes()).hexdigest()  # R9: assets are named by their SHA-256
    finally:
        remote.close()
        page.close()


def test_a_pairing_link_gives_connect_a_session_once(demo_web):
    page = Page(demo_web)
    try:
        link = page.call(page.post("/api/pair", {}))["link"]
    finally:
        page.close()
    remote = RemoteSession.connect(link)
    try:
        assert remote.note("paired") == 0
    finally:
        remote.close()
    with pytest.raises(SessionRevoked, match="^the pairing code was used or has expired"):
        RemoteSession.connect(link)


def test_a_wrong_token_is_the_same_clear_line(demo_web):
    with pytest.raises(SessionRevoked, match=f"^{REVOKED}$"):
        RemoteSession.connect(demo_web.url + "#" + "A" * 43)


# -- the real command in a real terminal ---------------------------------------------------------------


@pytest.fixture
def pane(tmp_path):
    with tmux_pane(clean_env(tmp_path / "client-home")) as pane:
        yield pane


class WebProcess:
    """`everchat --demo web --no-browser --port 0` as a real process of the test's own."""

    def __init__(self, home: Path, port: int = 0) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("EVERCHAT_")
               and key not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "DISPLAY", "WAYLAND_DISPLAY")}
        env["EVERCHAT_HOME"] = str(home)
        argv = [str(EVERCHAT), "--demo", "web", "--no-browser", "--port", str(port)]
        self.process = subprocess.Popen(argv, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()  # the one link line, once it listens
        assert line.startswith("everchat: the chat is at http://127.0.0.1:"), (line, self.process.stderr.read())
        self.link = line.removeprefix("everchat: the chat is at ").strip()
        self.url, self.token = self.link.split("#")

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.process.stderr.read()


@pytest.fixture
def web_process(tmp_path):
    web = WebProcess(tmp_path / "server-home")
    yield web
    web.stop()


def test_a_restarted_server_is_rejoined_with_a_reset_notice_and_the_chat_goes_on(tmp_path):
    first = WebProcess(tmp_path / "server-home")
    port = int(first.url.rsplit(":", 1)[1].strip("/"))
    remote = RemoteSession.connect(first.link)
    try:
        turn = remote.send("Remember that the code word is amber-42.")
        assert events_until_end(remote, turn)[-1] == schema.TurnEnded(turn, "done", False, "")
        first.stop()
        assert remote.next_event(60) == schema.Notice("warning", "the connection to the chat dropped; reconnecting …")
        second = WebProcess(tmp_path / "server-home", port)  # the same home: the session is still known
        try:
            events = [remote.next_event(60), remote.next_event(60)]
            assert events[0] == schema.Notice("info", "reconnected to the chat")
            assert events[1].text.startswith("the server restarted or we were away too long")
            asked = remote.send("What is the code word?")
            texts = "".join(e.text for e in events_until_end(remote, asked) if isinstance(e, schema.TurnText))
            assert 'In message 0 you wrote: "Remember that the code word is amber-42."' in texts
        finally:
            remote.close()
            second.stop()
    finally:
        remote.close()
        first.stop()


def test_r36_everchat_connect_in_tmux_sends_prints_the_demo_reply_and_ends_when_revoked(web_process, pane, tmp_path):
    pane.start(str(EVERCHAT), "connect", web_process.link)
    screen = pane.wait("mem 0B/128K · demo")
    assert "0 messages so far · /help lists the commands" in screen
    assert web_process.token not in screen
    pane.type("Remember that the code word is amber-42.")
    pane.wait("Noted as message 0.", idle=True)
    pane.type("/zoom 0")
    pane.wait("› /zoom 0\nuser: Remember that the code word is amber-42.")
    pane.type("/compact")
    pane.wait("/compact works only where the chat runs")
    page = Page(web_process)
    try:
        page.revoke(f"everchat connect on {socket.gethostname()}")
    finally:
        page.close()
    screen = pane.wait("[exit 1]")
    assert f"everchat: {REVOKED}" in screen
    assert not (tmp_path / "client-home").exists()  # no chat folder, no keys, nothing written
    assert web_process.stop() == ""  # the server said nothing on stderr: no warning, no error
