"""P5 (docs/WEB.md, "Who may use it"): the servers on one `EVERCHAT_HOME` share its sessions.
Two real `everchat web` processes (chats A and B, one home): a session made on either
works on both and none drops another's from the file, even when both sign in at once; a
session revoked through one is refused by the other at its next request and its socket
there closes (4401); `--new-token` on a third start ends them on the running ones too."""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import sys
import threading
from contextlib import asynccontextmanager

import aiohttp
import pytest

from cli_world import env  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(300)


class Server:
    def __init__(self, env: dict, chat, *more: str) -> None:
        quiet = {k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "everchat.frontends.cli.main", "--demo", "--data-dir", str(chat), "web", "--no-browser",
             "--port", "0", *more], env=quiet, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.process.stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=120)
        except queue.Empty:
            line = ""
        if " at " not in line:
            self.stop()
            raise AssertionError(f"no link line from `everchat web`: {line!r}; stderr: {self.process.stderr.read()}")
        self.base, self.token = line.split(" at ", 1)[1].strip().split("/#")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()


@pytest.fixture
def servers(env, tmp_path):
    """Start `everchat web` on chat NAME in the one home: `servers(NAME, *flags)`; all stopped after."""
    started: list[Server] = []

    def start(name: str, *more: str) -> Server:
        started.append(Server(env, tmp_path / name, *more))
        return started[-1]

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@asynccontextmanager
async def browser():
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True),
                                     timeout=aiohttp.ClientTimeout(total=60)) as client:
        yield client


async def sign_in(client, server: Server, name: str) -> dict:
    async with client.post(server.base + "/api/session", json={"token": server.token, "name": name},
                           headers={"Origin": server.base}) as response:
        assert response.status == 200, await response.text()
        return (await response.json())["session"]


def cookie_of(client) -> str:
    [cookie] = [c.value for c in client.cookie_jar if c.key == "everchat_session"]
    return cookie


async def me(cookie: str, server: Server) -> int:
    """The status of `GET /api/me` on `server` with this cookie (one jar per server: the
    cookie is the browser's own, whichever port it came from)."""
    async with aiohttp.ClientSession() as client:
        async with client.get(server.base + "/api/me", headers={"Cookie": f"everchat_session={cookie}"}) as response:
            return response.status


def file_sessions(tmp_path) -> list[str]:
    return [s["name"] for s in json.loads((tmp_path / "home" / "web-sessions.json").read_text())["sessions"]]


def test_p5_a_session_made_on_either_server_works_on_both_and_a_revocation_holds_on_both(servers, tmp_path):
    a, b = servers("A"), servers("B")
    assert a.token == b.token  # one home, one token

    async def body():
        async with browser() as x, browser() as y:
            await sign_in(x, a, "X on A")
            y_session = await sign_in(y, b, "Y on B")
            assert file_sessions(tmp_path) == ["X on A", "Y on B"]  # B kept A's session
            for cookie in (cookie_of(x), cookie_of(y)):
                assert [await me(cookie, a), await me(cookie, b)] == [200, 200]
            socket = await y.ws_connect(b.base + "/api/events", headers={"Origin": b.base})
            assert (await socket.receive_json(timeout=60))["type"] == "hello"
            async with x.delete(a.base + f"/api/sessions/{y_session['id']}", headers={"Origin": a.base}) as response:
                assert response.status == 200, await response.text()  # revoked through A
            assert await me(cookie_of(y), b) == 401  # refused on B at once
            assert await me(cookie_of(y), a) == 401
            closing = await socket.receive(timeout=60)
            while closing.type == aiohttp.WSMsgType.TEXT:  # a status event may come first
                closing = await socket.receive(timeout=60)
            assert socket.close_code == 4401  # and its socket on B closes
            assert await me(cookie_of(x), b) == 200
            assert file_sessions(tmp_path) == ["X on A"]

    asyncio.run(asyncio.wait_for(body(), 240))


def test_p5_sign_ins_on_two_servers_at_once_lose_none(servers, tmp_path):
    a, b = servers("A"), servers("B")

    async def body():
        async def one(server: Server, n: int) -> str:
            async with browser() as client:
                await sign_in(client, server, f"page {n}")
                return cookie_of(client)

        cookies = await asyncio.gather(*(one(a if n % 2 else b, n) for n in range(40)))
        assert sorted(file_sessions(tmp_path)) == sorted(f"page {n}" for n in range(40))
        for cookie in cookies:
            assert [await me(cookie, a), await me(cookie, b)] == [200, 200]

    asyncio.run(asyncio.wait_for(body(), 240))


def test_p5_a_new_token_ends_the_sessions_and_the_old_link_on_the_running_servers(servers, tmp_path):
    a = servers("A")

    async def body():
        async with browser() as x:
            await sign_in(x, a, "X on A")
            assert await me(cookie_of(x), a) == 200
            c = servers("C", "--new-token")
            assert c.token != a.token
            assert await me(cookie_of(x), a) == 401
            async with x.post(a.base + "/api/session", json={"token": a.token, "name": "old link"},
                              headers={"Origin": a.base}) as response:
                assert response.status == 403  # A's own link is the old token
            async with x.post(a.base + "/api/session", json={"token": c.token, "name": "new link"},
                              headers={"Origin": a.base}) as response:
                assert response.status == 200

    asyncio.run(asyncio.wait_for(body(), 240))
