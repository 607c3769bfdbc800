"""Malformed requests get a 4xx and leave no traceback (P3, P9; docs/WEB.md, "Refusals"): a
NUL in the path (from any page, without a session), `/app.js/`, JSON nested 100,000 deep, a
deeply nested socket frame, requests aiohttp cannot parse. A bug after a socket's handshake
closes the socket (1011), never an HTTP answer written onto it. The server runs as `everchat
web` runs it: its log records go to the person's terminal and to `errors.log` in the home."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from everchat.actors.settings import load
from everchat.frontends.cli.edge import person_logging
from everchat.frontends.web import events

from web_world import run, served

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def logged(tmp_path, monkeypatch):
    """The web world with `everchat web`'s logging: `errors.log` in its home."""
    home = tmp_path / "home"
    monkeypatch.setenv("EVERCHAT_HOME", str(home))
    with person_logging("everchat web"):
        yield from served(tmp_path, load({"demo": True}, env={}, home=home))


def errors_log(web) -> bytes:
    path = web.home / "logs" / "errors.log"
    return path.read_bytes() if path.exists() else b""


async def raw(web, request: bytes) -> bytes:
    """`request` sent as it is on a socket of its own; the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", web.running.port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()


def test_p3_a_nul_in_the_path_is_404_without_a_traceback_even_in_a_flood(logged, capsys):
    async def body():
        async with aiohttp.ClientSession() as stranger:  # no session, no Origin: any page can send these
            for path in ("/%00", "/app.js%00.html", "/static%00/app.js"):
                async with stranger.get(logged.base + path) as response:
                    assert response.status == 404 and await response.json() == {"error": "not found"}, path
            gate = asyncio.Semaphore(16)

            async def one(n: int) -> int:
                async with gate, stranger.get(logged.base + f"/f%00{n}") as response:
                    await response.read()
                    return response.status

            assert set(await asyncio.gather(*(one(n) for n in range(300)))) == {404}

    run(body())
    assert errors_log(logged) == b""
    assert "error" not in capsys.readouterr().err


def test_a_page_file_with_a_trailing_slash_is_not_found(logged):
    async def body():
        async with aiohttp.ClientSession() as stranger:
            async with stranger.get(logged.base + "/app.js/") as response:
                assert response.status == 404 and await response.json() == {"error": "not found"}
            async with stranger.get(logged.base + "/app.js") as response:
                assert response.status == 200

    run(body())


def test_p9_json_nested_too_deeply_is_400_and_changes_nothing(logged, capsys):
    async def body():
        async with logged.client() as client:
            await logged.sign_in(client)
            before = logged.folder()
            for route, data in (("/api/note", "[" * 100_000), ("/api/send", '{"a":' * 50_000),
                                ("/api/settings", '{"reply_model":' + "[" * 100_000)):
                async with client.post(logged.base + route, data=data, headers={
                        "Origin": logged.origin, "Content-Type": "application/json"}) as response:
                    assert response.status == 400, route
                    assert await response.json() == {"error": "the body is nested too deeply"}
            assert logged.folder() == before

    run(body())
    assert errors_log(logged) == b""
    assert "error" not in capsys.readouterr().err


def test_p9_a_deeply_nested_socket_frame_is_ignored_and_the_socket_keeps_answering(logged, capsys):
    async def body():
        async with logged.client() as client:
            await logged.sign_in(client)
            ws = await client.ws_connect(logged.base + "/api/events", headers={"Origin": logged.origin})
            assert (await ws.receive_json(timeout=30))["type"] == "hello"
            await ws.send_str("[" * 200_000)
            await ws.send_str('{"type": "ping"}')
            while (frame := await ws.receive_json(timeout=30))["type"] != "pong":
                assert frame["type"] == "status", frame  # only the status may come first
            await ws.close()

    run(body())
    assert errors_log(logged) == b""
    assert "error" not in capsys.readouterr().err


def test_p9_a_bug_after_the_handshake_closes_the_socket_and_writes_no_http_answer_on_it(logged, monkeypatch):
    def broken(data: str) -> bool:
        raise RuntimeError("a bug in the socket's handler")

    monkeypatch.setattr(events, "_is_ping", broken)

    async def body():
        async with logged.client() as client:
            await logged.sign_in(client)
            ws = await client.ws_connect(logged.base + "/api/events", headers={"Origin": logged.origin})
            assert (await ws.receive_json(timeout=30))["type"] == "hello"
            await ws.send_str(json.dumps({"type": "ping"}))
            closing = await ws.receive(timeout=30)
            while closing.type == aiohttp.WSMsgType.TEXT:  # a status event may come first
                closing = await ws.receive(timeout=30)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), closing
            assert ws.close_code == 1011 and ws.exception() is None  # a clean close, no garbled frame

    run(body())
    log = errors_log(logged).decode()
    assert log.count("RuntimeError: a bug in the socket's handler") == 1 and "Traceback" in log


@pytest.mark.parametrize("request_bytes", [
    b"GET / HTTP/1.1\r\nHost: HOST\r\nno colon here\r\n\r\n",
    b"G\x00T / HTTP/1.1\r\nHost: HOST\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: HOST\r\nX-Long: " + b"a" * 20_000 + b"\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: HOST\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: HOST\r\nContent-Length: -1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
], ids=["no colon", "nul in the method", "header too long", "version", "negative length", "bad chunk"])
def test_p9_a_request_aiohttp_cannot_parse_is_a_4xx_without_a_traceback(logged, capsys, request_bytes):
    host = f"127.0.0.1:{logged.running.port}".encode()
    answer = run(raw(logged, request_bytes.replace(b"HOST", host)))
    status = int(answer.split(b" ", 2)[1])
    assert 400 <= status < 500, answer[:200]
    assert errors_log(logged) == b""
    assert "error" not in capsys.readouterr().err
