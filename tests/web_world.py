"""What the web server's tests share: a demo chat served on 127.0.0.1 (any free port) by the
real aiohttp app over a real ChatSession, a clock the test moves, and a client that signs in
like the page does."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path

import aiohttp
import pytest

from everchat.actors.settings import load
from everchat.actors.session.session import ChatSession
from everchat.frontends.web import WebConfig, load_token, make_app, start_in_thread

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")
"""A 1x1 PNG."""


INDEX = '<!doctype html><title>Everchat</title><script type="module" src="app.js"></script>\n'


class Clock:
    """A clock the test moves (pairing codes, last_seen); starts at the real time."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self, home: Path, session, settings, running, token: str, clock: Clock) -> None:
        self.home = home
        self.session = session
        self.settings = settings
        self.running = running
        self.token = token
        self.clock = clock
        self.base = f"http://127.0.0.1:{running.port}"
        self.origin = self.base
        self.chat = settings.chat_dir

    def client(self) -> aiohttp.ClientSession:
        """A client with its own cookie jar (IP hosts allowed, like a browser's)."""
        return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True),
                                     timeout=aiohttp.ClientTimeout(total=60))

    async def sign_in(self, client: aiohttp.ClientSession, name: str = "test page") -> dict:
        async with client.post(self.base + "/api/session", json={"token": self.token, "name": name},
                               headers={"Origin": self.origin}) as response:
            assert response.status == 200, await response.text()
            return (await response.json())["session"]

    def folder(self) -> dict[str, str]:
        """Every file of the chat folder and the SHA-256 of its bytes."""
        return {str(path.relative_to(self.chat)): hashlib.sha256(path.read_bytes()).hexdigest()
                for path in sorted(self.chat.rglob("*")) if path.is_file()}


def run(coro, timeout: float = 90.0):
    """Run a test's coroutine on a fresh loop, bounded."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until(ws, predicate, seen: list | None = None, timeout: float = 60.0) -> dict:
    """Read frames until one satisfies `predicate` (collected into `seen`); it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, f"no matching event; saw {seen}"
        frame = await ws.receive_json(timeout=left)
        if seen is not None:
            seen.append(frame)
        if predicate(frame):
            return frame


@pytest.fixture
def web(tmp_path):
    home = tmp_path / "home"
    yield from served(tmp_path, load({"demo": True}, env={}, home=home))


def served(tmp_path, settings, **config):
    """The `web` fixture's world over `settings` (their home in `tmp_path`), as a generator
    a fixture yields from; `config`: WebConfig fields to change (the timeouts)."""
    home = Path(settings.home)
    clock = Clock()
    token = load_token(home)
    session = ChatSession.open(settings)
    try:
        session.status()  # every actor answers: what they write as they start is written
        static = tmp_path / "static"  # the page's files are another branch's: a stand-in
        static.mkdir()
        (static / "index.html").write_text(INDEX)
        (static / "app.js").write_text("export const ready = true;\n")
        config = WebConfig(home=home, token=token, port=0, clock=clock, workers=4, static=static, **config)
        app = make_app(session, settings, config)
        running = start_in_thread(app, "127.0.0.1", 0)
    except BaseException:
        session.close()
        raise
    try:
        yield World(home, session, settings, running, token, clock)
    finally:
        running.stop()
        session.close()


# --- the page's Settings (POST /api/settings, GET /api/me) ---------------------------------

SETTINGS_SAVED = "Saved. The new models apply when `everchat web` starts again."
"""What the page says after saving settings."""


def config_path(web) -> Path:
    return web.home / "config.toml"


def config_bytes(web) -> bytes | None:
    """config.toml's bytes, None while there is none: a refusal must leave them as they were."""
    path = config_path(web)
    return path.read_bytes() if path.exists() else None


async def post_settings(web, client, body, headers=None) -> tuple[int, str]:
    """POST /api/settings with `body` (JSON unless bytes or text), from the page's own origin
    unless `headers` says otherwise: the status and the answer's text."""
    headers = {"Origin": web.origin} if headers is None else headers
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    async with client.post(web.base + "/api/settings", data=data,
                           headers=dict(headers, **{"Content-Type": "application/json"})) as response:
        return response.status, await response.text()


async def me(web, client) -> dict:
    async with client.get(web.base + "/api/me") as response:
        assert response.status == 200, await response.text()
        return await response.json()
