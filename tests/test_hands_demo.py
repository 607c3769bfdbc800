"""Issue 11's demo, for real (R36, R39): `everchat --demo serve --tcp` runs the chat, a second
computer joins with the one command `everchat device add` printed (a process with its own
`$EVERCHAT_HOME`), and `everchat --demo ask 'run `…` on NAME'`, attached to the running
server, answers with what the command printed there. Every process is ours and is ended."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from polling import wait_until

WAIT = 60.0


def _env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "EVERCHAT_CONFIG")}
    env["EVERCHAT_HOME"] = str(home)
    return env


def _cli(home: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *argv], env=_env(home),
                          capture_output=True, text=True, timeout=WAIT)


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _start(processes: list, home: Path, log: Path, *argv: str) -> subprocess.Popen:
    home.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", *argv], env=_env(home),
                                   stdout=out, stderr=subprocess.STDOUT)
    processes.append(process)
    return process


def _serve(processes: list, home: Path, log: Path) -> subprocess.Popen:
    serve = _start(processes, home, log, "--demo", "serve", "--tcp")
    wait_until(lambda: "serving" in log.read_text() or serve.poll() is not None, WAIT, "serve --tcp up")
    assert serve.poll() is None, log.read_text()
    return serve


def _online(server_home: Path, name: str = "laptop") -> bool:
    listed = _cli(server_home, "devices")
    return any(line.split()[:2] == [name, "online"] for line in listed.stdout.splitlines())


def _join(processes: list, tmp_path: Path, server_home: Path, laptop_home: Path) -> subprocess.Popen:
    """`everchat device add laptop` on the chat's side, its printed command on the other."""
    added = _cli(server_home, "device", "add", "laptop")
    assert added.returncode == 0, added.stderr
    argv = shlex.split(added.stdout.splitlines()[0])
    assert argv[:3] == ["everchat", "device", "join"] and argv[4:] == ["--name", "laptop"]
    join = _start(processes, laptop_home, tmp_path / "join.log", *argv[1:])
    wait_until(lambda: join.poll() is not None or _online(server_home), WAIT, "laptop online")
    assert join.poll() is None, (tmp_path / "join.log").read_text()
    return join


def test_r39_the_demo_runs_a_command_on_a_joined_computer_and_answers_with_its_output(tmp_path, processes):
    server_home, laptop_home = tmp_path / "server", tmp_path / "laptop"
    _serve(processes, server_home, tmp_path / "serve.log")
    _join(processes, tmp_path, server_home, laptop_home)

    asked = _cli(server_home, "--demo", "ask", "run `uname -n && pwd` on laptop")
    assert asked.returncode == 0, asked.stderr
    assert "attached to the running chat" in asked.stderr
    work = laptop_home / "work" / "main"  # the joined computer's own work folder ran it
    assert str(work) in asked.stdout and os.uname().nodename in asked.stdout
    assert "[exit 0]" in asked.stdout
    assert f"  │ {work}" in asked.stderr  # its output streamed beside the tool line as it came
    # the call and its result are in the chat's log like any tool step (R37)
    view = _cli(server_home, "view").stdout
    assert 'shell {"command": "uname -n && pwd", "device": "laptop"}' in view


def test_r39_a_joined_computer_reconnects_by_itself_when_the_server_is_started_again(tmp_path, processes):
    """`serve --tcp` listens again where it listened (config/ports.json), so the joined
    computer dials the address it was given and is online again without a new link."""
    server_home, laptop_home = tmp_path / "server", tmp_path / "laptop"
    first = _serve(processes, server_home, tmp_path / "serve-1.log")
    join = _join(processes, tmp_path, server_home, laptop_home)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=WAIT) == 0
    assert not _online(server_home)

    _serve(processes, server_home, tmp_path / "serve-2.log")
    wait_until(lambda: join.poll() is not None or _online(server_home), WAIT, "laptop online again")
    assert join.poll() is None, (tmp_path / "join.log").read_text()
    asked = _cli(server_home, "--demo", "ask", "run `pwd` on laptop")
    assert asked.returncode == 0, asked.stderr
    assert str(laptop_home / "work" / "main") in asked.stdout


def test_r39_a_computer_joins_the_web_pages_server_started_with_tcp(tmp_path, processes):
    """Issue 11: the web page's server is a server other computers can join too, with
    `everchat web --tcp`; the page's chat then runs commands on the joined computer."""
    server_home, laptop_home = tmp_path / "server", tmp_path / "laptop"
    log = tmp_path / "web.log"
    web = _start(processes, server_home, log, "--demo", "web", "--tcp", "--no-browser", "--port", "0")
    wait_until(lambda: "the chat is at" in log.read_text() or web.poll() is not None, WAIT, "web --tcp up")
    assert web.poll() is None, log.read_text()
    _join(processes, tmp_path, server_home, laptop_home)
    asked = _cli(server_home, "--demo", "ask", "run `pwd` on laptop")
    assert asked.returncode == 0, asked.stderr
    assert "attached to the running chat" in asked.stderr and str(laptop_home / "work" / "main") in asked.stdout
