"""`everchat web` and `serve --web` as real processes (docs/WEB.md, "Running"): the link
line names the real port, the link's token gets a session, SIGINT and SIGTERM end it
cleanly and release the chat's lock (R5); wrong hosts and a taken port are one line."""

from __future__ import annotations

import asyncio
import queue
import signal
import socket
import subprocess
import sys
import threading

import aiohttp
import pytest

from cli_world import env, everchat  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(300)


def start(env: dict, *args: str) -> subprocess.Popen:
    quiet = {k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    return subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", "--demo", *args], env=quiet,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def first_line(process: subprocess.Popen, timeout: float = 120.0) -> str:
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        process.kill()
        raise AssertionError(f"no link line; stderr: {process.stderr.read()}") from None


async def me(link: str) -> dict:
    base, token = link.split("/#")
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        async with client.post(base + "/api/session", json={"token": token, "name": "cli test"},
                               headers={"Origin": base}) as response:
            assert response.status == 200
        async with client.get(base + "/api/me") as response:
            assert response.status == 200
            return await response.json()


@pytest.mark.parametrize("command", [("web",), ("serve", "--web")])
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_web_prints_its_link_serves_the_token_and_stops_cleanly(env, tmp_path, command, stop):
    process = start(env, *command, "--no-browser", "--port", "0")
    try:
        line = first_line(process)
        assert line.startswith("everchat: the chat is at http://127.0.0.1:") and "/#" in line
        link = line.split(" at ", 1)[1].strip()
        assert not link.split("/#")[0].endswith(":0")
        token = (tmp_path / "home" / "web-token").read_text().strip()
        assert link.endswith("/#" + token)
        answer = asyncio.run(asyncio.wait_for(me(link), 60))
        assert answer["demo"] is True and answer["chat"] == str(tmp_path / "home" / "chat")
        assert answer["session"]["name"] == "cli test"
        process.send_signal(stop)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert not (tmp_path / "home" / "chat" / "run" / "supervisor.json").exists()
    noted = everchat(env, "note", "the lock is free")  # R5: a writer can take the chat again
    assert noted.returncode == 0, noted.stderr


def test_new_token_replaces_the_token_and_ends_every_session(env, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "web-token").write_text("old-token\n")
    (home / "web-sessions.json").write_text('{"version": 1, "sessions": [{"id": "a1", "hash": "00", "name": "x", '
                                            '"created": "2026-01-01T00:00:00Z", "last_seen": "2026-01-01T00:00:00Z"}]}')
    process = start(env, "web", "--no-browser", "--port", "0", "--new-token")
    try:
        line = first_line(process)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    token = (home / "web-token").read_text().strip()
    assert token != "old-token" and line.strip().endswith("/#" + token)
    assert '"sessions": []' in (home / "web-sessions.json").read_text()


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_an_every_interface_host_is_refused_without_allow_host(env, tmp_path, host):
    done = everchat(env, "--demo", "web", "--no-browser", "--host", host)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"everchat: --host {host} listens on every interface")
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "home").exists()


def test_a_port_in_use_is_one_line_and_the_chat_is_released(env, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = everchat(env, "--demo", "web", "--no-browser", "--port", str(port))
    assert done.returncode == 1
    assert done.stderr == (f"everchat: cannot listen on 127.0.0.1:{port}: the port is in use "
                           "(--port picks another)\n")
    assert everchat(env, "note", "free again").returncode == 0
