"""What the device tests share (docs/HANDS.md §5, R39): the device hub hosted in the test's
own node bound on tcp with the chat's keys (as `everchat serve --tcp` hosts it), each
device a separate `everchat device join` process with its own `$EVERCHAT_HOME`, joined
with the command `everchat device add` printed, and an enrolled computer's key in the
test's hands (`rogue`: what a stolen laptop can do). Every process started here is killed
in the fixtures."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from polling import wait_until

from everchat.actors.enrollment.actor import enroll
from everchat.actors.devices.actor import DevicesActor
from everchat.transport import Actor, KeyStore, Node, schema

WAIT = 60.0


def everchat(*argv: str, home: Path, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, EVERCHAT_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *argv], env=env, capture_output=True,
                          text=True, timeout=WAIT, **kwargs)


class Hub:
    """The chat's side: a node named "supervisor" on tcp hosting the device hub, and the
    run file that tells the CLI where it is."""

    def __init__(self, home: Path, **options) -> None:
        self.home = home
        self.chat = home / "chat"
        self.node: Node | None = None
        self.actor: DevicesActor | None = None
        self.options = options              # DevicesActor's (offline_seconds, keep_seconds)
        self.threads: list[threading.Thread] = []
        self.port = 0

    def start(self) -> Hub:
        (self.chat / "run").mkdir(parents=True, exist_ok=True)
        keys = KeyStore(self.chat / "config")
        self.node = Node("supervisor", bind=f"tcp://127.0.0.1:{self.port}", keys=keys).start()
        self.port = int(self.node.endpoint.split(";")[0].rpartition(":")[2])
        self.node.host("devices", DevicesActor, home=self.home, chat=self.chat, **self.options)
        self.actor = self.node._mailboxes["devices"].actor     # read only: what the hub keeps
        info = {"version": 1, "pid": os.getpid(), "host": socket.gethostname(), "endpoint": self.node.endpoint,
                "placement": "single", "transport": "tcp", "attachable": True}
        (self.chat / "run" / "supervisor.json").write_text(json.dumps(info))
        return self

    def stop(self) -> None:
        """Stop the node; an ask still waiting in a test's thread ends with it (joined)."""
        if self.node is not None:
            self.node.stop()
            self.node = None
        for thread in self.threads:
            thread.join(WAIT)
        self.threads = [thread for thread in self.threads if thread.is_alive()]
        assert not self.threads, "a RunJob thread outlived the hub's node"

    def row(self, name: str) -> dict | None:
        rows = self.node.ask("devices", schema.ListDevices(), timeout=5.0).devices
        return next((row for row in rows if row["name"] == name), None)

    def run(self, job: str, command: str, device: str = "laptop", caller: str = "main") -> schema.JobResult:
        return self.node.ask("devices", schema.RunJob(job, device, "shell", {"command": command}, caller, 0.0),
                             timeout=WAIT)

    def run_in_background(self, job: str, command: str, device: str = "laptop") -> dict:
        """RunJob from a thread of its own; the dict gets "result" or "error", and "at"
        (time.time() when the answer came). `stop()` ends and joins every such thread."""
        box: dict = {}

        def ask() -> None:
            try:
                box["result"] = self.run(job, command, device)
            except Exception as error:  # the test reads it
                box["error"] = error
            box["at"] = time.time()

        thread = threading.Thread(target=ask, name=f"test-run-{job}", daemon=True)
        thread.start()
        self.threads.append(thread)
        box["thread"] = thread
        return box


class Devices:
    """`everchat device join` processes; all killed at the end."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []
        self.groups: list[Path] = []         # pid files of job shells (each leads its group)

    def join(self, home: Path, link: str, name: str = "laptop") -> subprocess.Popen:
        env = dict(os.environ, EVERCHAT_HOME=str(home))
        home.mkdir(parents=True, exist_ok=True)
        log = open(home / f"join-{len(self.processes)}.log", "w")
        process = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", "device", "join", link,
                                    "--name", name], env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.processes.append(process)
        return process

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=WAIT)
        for pid_file in self.groups:
            try:
                os.killpg(int(pid_file.read_text().split()[0]), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass


@pytest.fixture
def hub(tmp_path):
    hub = Hub(tmp_path / "server")
    try:
        yield hub.start()
    finally:            # also when start() failed half-way: no node's threads outlive the test
        hub.stop()


@pytest.fixture
def devices():
    devices = Devices()
    try:
        yield devices
    finally:
        devices.close()


def add(hub: Hub, name: str = "laptop") -> str:
    """`everchat device add NAME`: its one printed command's link."""
    done = everchat("device", "add", name, "--data-dir", str(hub.chat), home=hub.home)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    argv = shlex.split(line)
    assert argv[:3] == ["everchat", "device", "join"] and argv[4:] == ["--name", name]
    return argv[3]


def joined(hub: Hub, devices: Devices, home: Path, name: str = "laptop") -> tuple[str, subprocess.Popen]:
    link = add(hub, name)
    process = devices.join(home, link, name)
    wait_until(lambda: (hub.row(name) or {}).get("online") or process.poll() is not None, WAIT, f"{name} online")
    assert process.poll() is None, (home / "join-0.log").read_text()
    return link, process


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []




def rogue(hub: Hub, folder: Path, name: str = "laptop2") -> Node:
    """A computer enrolled as `name` the way `device join` enrolls (its own key, the link
    `device add` makes), driven by the test: the moves of a stolen laptop or a leaked key."""
    link = hub.node.ask("devices", schema.AddDevice(name, 0.0), timeout=WAIT).link
    pair = KeyStore(folder).ensure("device")
    node = Node(f"device.{name}", pair=pair, connect_timeout=5.0).start()
    node.route("devices", enroll(link, name, pair))
    return node


class Listener(Actor):
    """Gathers the hub's JobOutput events (topic "device")."""

    def __init__(self, seen: list) -> None:
        super().__init__()
        self.seen = seen

    def on_job_output(self, msg, delivery) -> None:
        self.seen.append(msg)


def listen(hub: Hub) -> list:
    """The JobOutput events the hub publishes from now on."""
    seen: list = []
    hub.node.host("listener", Listener, seen)
    hub.node.subscribe("device", "listener")
    return seen
