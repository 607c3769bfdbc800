"""An actor process (`python -m everchat.actors.supervisor.process`, what `--processes` starts): it
hosts its actor before it registers, so no request meets it without its actor; it logs
to `run/<name>.log`, never to the terminal it shares with the person (P9); a joiner whose
key the chat refuses fails at once (P9).

Every actor process here is real, and so are the sockets; the supervisor is a stand-in
node of the test's own whose registry answers when the test lets it."""

from __future__ import annotations

import os
import queue
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from everchat.actors.supervisor.process import run_actor
from everchat.transport import Actor, KeyStore, Node, PeerLost, TransportError, schema

_SECONDS = 60.0


class _Registry(Actor):
    """The stand-in supervisor's registry: each Register is handed to the test, and
    answered (with no routes) once the test sets `release`."""

    def __init__(self, arrived: queue.Queue, release: threading.Event) -> None:
        super().__init__()
        self.arrived = arrived
        self.release = release

    def on_register(self, msg: schema.Register, delivery) -> schema.Directory:
        self.arrived.put(msg)
        self.release.wait(_SECONDS)
        return schema.Directory(routes={})


class _World:
    """A chat folder with `run/`, the stand-in supervisor bound in it, and the actor
    processes started against it (stopped at the end)."""

    def __init__(self, folder: Path) -> None:
        self.chat = folder / "chat"
        self.run = self.chat / "run"
        self.run.mkdir(parents=True, mode=0o700)
        self.arrived: queue.Queue = queue.Queue()
        self.release = threading.Event()
        self.node = Node("supervisor", bind=f"ipc://{self.run / 'supervisor.sock'}").start()
        self.node.host("supervisor", _Registry, self.arrived, self.release)
        self.processes: list[subprocess.Popen] = []

    def start(self, name: str, *extra: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-m", "everchat.actors.supervisor.process", "--name", name, "--chat", str(self.chat),
             "--supervisor", self.node.endpoint, "--bind", f"ipc://{self.run / (name + '.sock')}", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.processes.append(process)
        return process

    def register(self) -> schema.Register:
        """The next Register that reached the registry (held until `release` is set)."""
        return self.arrived.get(timeout=_SECONDS)

    def close(self) -> None:
        self.release.set()
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
            process.communicate(timeout=_SECONDS)
        self.node.stop()


@pytest.fixture
def world(tmp_path):
    made = _World(tmp_path)
    try:
        yield made
    finally:
        made.close()


# ---- hosted before registered --------------------------------------------------------------


def test_an_actor_process_answers_requests_as_soon_as_it_registers(world):
    """A restarted process binds the ipc path its peers already have, and the supervisor
    tells everyone where it is as soon as it registers: an ask that reaches it then must
    find its actor, not "no actor 'log_writer' at …" (which made peers stop again)."""
    world.start("log_writer")
    register = world.register()  # the process registered; the registry holds its answer
    assert register.name == "log_writer"
    world.node.route("log_writer", register.endpoint)
    reply = world.node.ask("log_writer", schema.CountMessages(), timeout=_SECONDS)
    assert reply == schema.MessageCount(messages=0)


# ---- its log: a file, never the terminal (P9) ---------------------------------------------------


def test_p9_an_actor_that_fails_logs_its_traceback_to_its_file_and_nothing_to_the_terminal(world):
    """The planner asks the log writer as it starts; with no route to one its start fails,
    and pykka logs the traceback. The person's terminal (the process's stderr) shows
    nothing; run/planner.log has the record and its traceback, and only its owner may
    read it (P5)."""
    process = world.start("planner")
    world.register()
    world.release.set()
    out, err = process.communicate(timeout=_SECONDS)
    assert process.returncode == 3  # its actor stopped: the supervisor would restart it
    assert err == ""
    log = world.run / "planner.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    lines = log.read_text().splitlines()
    first = next(n for n, line in enumerate(lines) if "Traceback (most recent call last):" in line)
    assert lines[first] == "  Traceback (most recent call last):"  # under its record, indented
    assert f"planner[{process.pid}] ERROR " in lines[first - 1]
    assert any("'log_writer' is not hosted here and not routed elsewhere" in line for line in lines[first:])
    assert "actor planner stopped; exiting so the supervisor restarts it" in lines[-1]


def test_p9_an_actor_log_is_private_and_capped_whatever_the_umask(tmp_path):
    """A process that logs without end keeps at most its file and one older one, each a
    little over the cap, both 0600 under umask 000."""
    path = tmp_path / "run" / "worker.log"
    path.parent.mkdir()
    script = (
        "import logging, os\n"
        "from everchat.actors.supervisor import process\n"
        "os.umask(0)\n"
        "process.LOG_BYTES = 20_000\n"
        f"assert process.log_to_file(__import__('pathlib').Path({str(path)!r}), 'worker')\n"
        "for n in range(2_000):\n"
        "    logging.getLogger('everchat.test').warning('record %d of a process that logs without end', n)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=_SECONDS)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    older = path.with_name("worker.log.1")
    assert sorted(p.name for p in path.parent.iterdir()) == ["worker.log", "worker.log.1"]
    for each in (path, older):
        assert stat.S_IMODE(each.stat().st_mode) == 0o600
        assert each.stat().st_size <= 20_000 + 200
    assert "record 1999 of a process" in path.read_text().splitlines()[-1]


def test_p9_an_actor_whose_log_cannot_be_written_says_its_errors_in_one_line_each(world):
    """No folder for the log file (a hand-made run, say): the process still runs, and
    its errors reach stderr one line each, with no traceback."""
    process = world.start("planner", "--log", str(world.chat / "missing" / "planner.log"))
    world.register()
    world.release.set()
    _, err = process.communicate(timeout=_SECONDS)
    assert process.returncode == 3
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[0].startswith(f"everchat: warning: planner[{process.pid}]: cannot write its log file ")
    assert all(line.startswith(f"everchat: error: planner[{process.pid}]: ") for line in lines[1:]) and lines[1:]


# ---- a refused key fails at once (P9) ------------------------------------------------------------


def test_p9_a_joiner_whose_key_the_chat_refuses_fails_at_once_naming_the_line_to_add(tmp_path):
    """`everchat actor NAME --join`: the supervisor's CURVE handshake refuses a key it has
    not authorized. The joiner learns it from the handshake itself (it waited out the
    30 s Register before) and says which line to add where; nothing registered."""
    chat_keys = KeyStore(tmp_path / "chat" / "config")
    arrived: queue.Queue = queue.Queue()
    release = threading.Event()
    release.set()
    supervisor = Node("supervisor", bind="tcp://127.0.0.1:0", keys=chat_keys).start()
    try:
        supervisor.host("supervisor", _Registry, arrived, release)
        elsewhere = tmp_path / "elsewhere" / "config"
        with pytest.raises(TransportError) as refused:
            run_actor("compactor.1", tmp_path / "elsewhere" / "none", supervisor.endpoint, "tcp://127.0.0.1:0",
                      None, elsewhere, threading.Event(), "scripted")
    finally:
        supervisor.stop()
    public = KeyStore(elsewhere).load("compactor.1").public.decode()
    assert str(refused.value) == (
        f"the chat refused this actor's key; add the line '{public} compactor.1' to config/keys/authorized_keys "
        "in the chat's folder on its host (no restart needed), then run this command again")
    assert type(refused.value).__name__ == "KeyRefused"
    assert isinstance(refused.value, PeerLost)  # what the CLI turns into one line
    assert arrived.empty()


def test_a_joiner_whose_key_the_chat_authorized_registers(tmp_path):
    chat_keys = KeyStore(tmp_path / "chat" / "config")
    elsewhere = tmp_path / "elsewhere" / "config"
    chat_keys.authorize(KeyStore(elsewhere).ensure("compactor.1").public, "compactor.1")
    arrived: queue.Queue = queue.Queue()
    release = threading.Event()
    release.set()
    stop = threading.Event()
    supervisor = Node("supervisor", bind="tcp://127.0.0.1:0", keys=chat_keys).start()
    try:
        supervisor.host("supervisor", _Registry, arrived, release)
        joiner = threading.Thread(target=run_actor, args=(
            "compactor.1", tmp_path / "elsewhere" / "none", supervisor.endpoint, "tcp://127.0.0.1:0", None,
            elsewhere, stop, "scripted"), daemon=True)
        joiner.start()
        register = arrived.get(timeout=_SECONDS)
        stop.set()
        joiner.join(_SECONDS)
    finally:
        supervisor.stop()
    assert (register.name, register.pid) == ("compactor.1", os.getpid())
    assert not joiner.is_alive()


def test_a_joiner_that_reaches_no_supervisor_says_so_once_its_wait_is_over(tmp_path, monkeypatch):
    """Nothing listens at the address: one wait (not the handshake's and then the
    Register's), then PeerLost naming the address."""
    import socket

    from everchat.actors.supervisor import process as actor_process

    monkeypatch.setattr(actor_process, "_REGISTER_SECONDS", 0.5)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nobody listens there
    key = KeyStore(tmp_path / "nobody" / "config").ensure("supervisor").public.decode()
    with pytest.raises(PeerLost) as lost:
        run_actor("compactor.1", tmp_path / "none", f"tcp://127.0.0.1:{port};events={port};key={key}",
                  "tcp://127.0.0.1:0", None, tmp_path / "elsewhere" / "config", threading.Event(), "scripted")
    assert str(lost.value) == f"compactor.1: no connection to tcp://127.0.0.1:{port} within 0.5 s"
