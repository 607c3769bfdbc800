"""P14 (docs/WEB.md, "Limits"): idle and half-sent connections are closed. A connection that
sends nothing, one whose request head stops half-way and one kept alive after its answer
are closed by the server within about the idle timeout (never before it); a body declared
and not sent is answered 408 within about the body timeout. The server answers others
meanwhile. Raw sockets, a real server with short timeouts; times as ratios to them."""

from __future__ import annotations

import asyncio

import pytest

from everchat.actors.settings import load

from web_world import run, served

pytestmark = pytest.mark.timeout(180)

IDLE = 1.0
BODY = 1.5
SLACK = 5.0  # a loaded machine: closed within SLACK times the timeout


@pytest.fixture
def quick(tmp_path):
    yield from served(tmp_path, load({"demo": True}, env={}, home=tmp_path / "home"),
                      idle_seconds=IDLE, body_seconds=BODY)


async def opened(web, head: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", web.running.port)
    at = asyncio.get_running_loop().time()
    if head:
        writer.write(head.replace(b"HOST", f"127.0.0.1:{web.running.port}".encode()))
        await writer.drain()
    return reader, writer, at


async def closed(reader: asyncio.StreamReader, limit: float) -> tuple[float, bytes]:
    """When the server closed the connection (its end of file), and what it sent before."""
    data = b""
    try:
        async with asyncio.timeout(limit):
            while chunk := await reader.read(65536):
                data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"not closed by the server within {limit} s; it sent {data[:200]!r}") from None
    return asyncio.get_running_loop().time(), data


async def page(web) -> int:
    async with web.client() as client, client.get(web.base + "/") as response:
        await response.read()
        return response.status


def test_p14_a_silent_connection_and_a_half_sent_head_are_closed_within_the_idle_timeout(quick):
    async def body():
        silent = await opened(quick)
        half = await opened(quick, b"GET / HTTP/1.1\r\nHost: HOST\r\nX-Slow: ")
        assert await page(quick) == 200  # the server answers others meanwhile
        for reader, writer, at in (silent, half):
            when, data = await closed(reader, SLACK * IDLE + 10)
            assert data == b""  # closed, nothing answered
            assert 0.9 * IDLE <= when - at <= SLACK * IDLE, when - at
            writer.close()

    run(body())


def test_p14_a_kept_alive_connection_is_closed_the_idle_timeout_after_its_answer(quick):
    async def body():
        reader, writer, _ = await opened(quick, b"GET / HTTP/1.1\r\nHost: HOST\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        assert head.startswith(b"HTTP/1.1 200")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        await asyncio.wait_for(reader.readexactly(length), 60)
        answered = asyncio.get_running_loop().time()
        when, data = await closed(reader, SLACK * IDLE + 10)
        assert data == b"" and 0.9 * IDLE <= when - answered <= SLACK * IDLE, when - answered
        writer.close()

    run(body())


def test_p14_a_body_declared_and_not_sent_is_answered_408_within_the_body_timeout(quick):
    async def body():
        async with quick.client() as client:
            await quick.sign_in(client)
            cookie = "; ".join(f"{c.key}={c.value}" for c in client.cookie_jar)
            reader, writer, at = await opened(quick, (
                "POST /api/note HTTP/1.1\r\nHost: HOST\r\nOrigin: " + quick.origin + "\r\nCookie: " + cookie +
                "\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{").encode())
            async with client.post(quick.base + "/api/note", json={"text": "meanwhile"},
                                   headers={"Origin": quick.origin}) as response:
                assert response.status == 200  # the server answers others meanwhile
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), SLACK * BODY + 10)
            answered = asyncio.get_running_loop().time()
            assert head.startswith(b"HTTP/1.1 408"), head
            assert 0.9 * BODY <= answered - at <= SLACK * BODY, answered - at
            when, data = await closed(reader, SLACK * (BODY + IDLE) + 10)
            assert b'{"error": "the request body did not arrive within 1.5 s"}' in data
            assert when - at <= SLACK * (BODY + IDLE)  # and the connection ends after it
            writer.close()
            async with client.get(quick.base + "/api/history") as response:
                texts = [m["text"] for m in (await response.json())["messages"]]
            assert texts.count("meanwhile") == 1 and "{" not in texts

    run(body())
