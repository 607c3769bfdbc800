"""Actors in other processes: ask, tell and publish over ipc and tcp (CURVE), deadlines,
lost peers, backpressure across the gateway, and keys.

A child process (`serve`, started with `python -c`) runs a Node hosting a `probe` and a
`gate` actor and prints its endpoint; the test process runs its own Node. Waits are on
events, child output lines and asks, never on sleeps.
"""

from __future__ import annotations

import os
import queue
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from everchat.transport import (Actor, ActorStopped, AskTimeout, KeyStore, Node, PeerLost, Refused,
                                RemoteError, TransportError, schema)
from everchat.transport.schema import Built, MessageLogged, NodeBuilt, Ping, Pong, StatsReply, StatsRequest

from polling import wait_until

TESTS = Path(__file__).resolve().parent
RELEASE = threading.Event()     # in the child: opened by the `gate` actor


# ---- the child process ----

class RemoteProbe(Actor):
    """The child's probe: echoes pings, records tells and events, misbehaves on request."""

    def __init__(self) -> None:
        super().__init__()
        self.pings: list[str] = []
        self.built: list[int] = []
        self.events: list[int] = []

    def on_ping(self, msg: Ping, delivery):
        self.pings.append(msg.payload.decode())
        if msg.payload == b"boom":
            raise ValueError("boom")
        if msg.payload == b"hang":
            print("hanging", flush=True)
            threading.Event().wait()
        if msg.payload == b"wait":
            RELEASE.wait(10)
        if msg.payload.startswith(b"publish:"):
            assert self.node.wait_subscribed("built", 1, 5.0)
            for i in range(int(msg.payload[8:])):
                self.node.publish("built", NodeBuilt(1, i))
        return Pong(msg.payload)

    def on_built(self, msg: Built, delivery) -> None:
        self.built.append(msg.i)

    def on_message_logged(self, msg: MessageLogged, delivery) -> None:
        self.events.append(msg.i)

    def on_stats_request(self, msg, delivery) -> StatsReply:
        [mine] = [s for s in self.node.statistics() if s.name == self.name]
        return StatsReply([{"pings": self.pings, "built": self.built, "events": self.events,
                            "subscriptions": self.node._remote_subs.get("built", 0), **mine.to_dict()}])


class Gate(Actor):
    def on_ping(self, msg, delivery) -> Pong:
        RELEASE.set()
        return Pong(b"open")


def serve(argv: list[str]) -> None:
    name, bind, config = argv
    node = Node(name, bind=bind, keys=KeyStore(config) if config != "-" else None).start()
    node.host("probe", RemoteProbe)
    node.host("gate", Gate)
    node.subscribe("logged", "probe")
    print(node.endpoint, flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "route":
            node.route(*args)
            print("routed", flush=True)
    node.stop()


class Child:
    """A child process running `serve`; `lines` gets what it prints."""

    def __init__(self, name: str, bind: str, config: Path | None = None) -> None:
        code = "import sys; sys.path.insert(0, sys.argv[1]); import test_transport_remote as t; t.serve(sys.argv[2:])"
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(TESTS), name, bind, str(config or "-")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.endpoint = self.line()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def line(self) -> str:
        return self.lines.get(timeout=20)

    def command(self, text: str) -> str:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.line()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(20)


# ---- fixtures ----

@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("config")


@pytest.fixture(scope="module", params=["ipc", "tcp"])
def peer(request, tmp_path_factory, config):
    """(our node, the child) connected over ipc or tcp; the child's actors are routed."""
    if request.param == "ipc":
        folder = tmp_path_factory.mktemp("ipc")
        child, ours = Child("child", f"ipc://{folder}/child"), Node("parent", bind=f"ipc://{folder}/parent")
    else:
        child = Child("child", "tcp://127.0.0.1:0", config)
        ours = Node("parent", bind="tcp://127.0.0.1:0", keys=KeyStore(config))
    ours.start()
    for name in ("probe", "gate", "nobody"):
        ours.route(name, child.endpoint)
    assert child.command(f"route parent {ours.endpoint}") == "routed"
    yield ours, child
    ours.stop()
    child.stop()


def probe_stats(node: Node) -> dict:
    return node.ask("probe", StatsRequest(), 5.0).actors[0]


class Collector(Actor):
    def __init__(self, got: queue.Queue) -> None:
        super().__init__()
        self.got = got

    def on_node_built(self, msg: NodeBuilt, delivery) -> None:
        self.got.put((self.name, msg.i, delivery.sender, delivery.topic))


# ---- across processes ----

def test_ask_tell_and_errors_work_across_processes(peer):
    node, _ = peer
    assert node.ask("probe", Ping(b"hello"), 5.0) == Pong(b"hello")
    with pytest.raises(RemoteError) as caught:
        node.ask("probe", Ping(b"boom"), 5.0)
    assert (caught.value.kind, caught.value.text) == ("ValueError", "boom")
    before = len(probe_stats(node)["built"])
    for i in range(100):
        node.tell("probe", Built(1, i, "text", "w"))
    assert probe_stats(node)["built"][before:] == list(range(100))
    with pytest.raises(ActorStopped, match="no actor 'nobody' at child"):
        node.ask("nobody", Ping(b"x"), 5.0)


def test_an_event_crosses_once_per_process_and_reaches_each_subscriber(peer):
    node, _ = peer
    got: queue.Queue = queue.Queue()
    for name in ("first", "second"):
        node.host(name, Collector, got)
        node.subscribe("built", name)
    try:
        node.ask("probe", Ping(b"publish:3"), 10.0)
        received = sorted(got.get(timeout=10) for _ in range(6))
        assert received == sorted((name, i, "probe", "built") for name in ("first", "second") for i in range(3))
        assert probe_stats(node)["subscriptions"] == 1     # one copy per process, not per actor
    finally:
        node.stop_actor("first")
        node.stop_actor("second")


def test_our_events_reach_a_subscriber_in_the_other_process(peer):
    node, _ = peer
    assert node.wait_subscribed("logged", 1, 10.0)
    node.publish("logged", MessageLogged(41, 100))
    end = time.monotonic() + 10
    while 41 not in probe_stats(node)["events"]:
        assert time.monotonic() < end, "the event never arrived"


def test_deadlines_hold_across_processes(peer):
    node, _ = peer
    before = probe_stats(node)
    with pytest.raises(AskTimeout):
        node.ask("probe", Ping(b"wait"), 0.2)          # the handler waits for the gate
    with pytest.raises(AskTimeout):
        node.ask("probe", Ping(b"late"), 0.05)         # queued behind it until its deadline passed
    assert node.ask("gate", Ping(b"open"), 5.0) == Pong(b"open")
    after = probe_stats(node)
    assert after["pings"][len(before["pings"]):] == ["wait"]            # "late" was never run
    assert after["dropped_late"] - before["dropped_late"] == 2          # its run, and wait's reply


def test_a_peer_killed_during_an_ask_raises_peer_lost(tmp_path):
    child = Child("doomed", f"ipc://{tmp_path}/doomed")
    outcome: queue.Queue = queue.Queue()
    with Node("survivor") as node:
        node.route("probe", child.endpoint)

        def ask() -> None:
            started = time.monotonic()
            try:
                node.ask("probe", Ping(b"hang"), 20.0)
            except PeerLost as exc:
                outcome.put((exc, time.monotonic() - started))

        thread = threading.Thread(target=ask)
        thread.start()
        assert child.line() == "hanging"
        os.kill(child.proc.pid, signal.SIGKILL)
        thread.join(20)
        exc, waited = outcome.get_nowait()
        assert "dropped while waiting for the reply" in str(exc)
        assert waited < 5
        with pytest.raises(PeerLost, match="no connection to"):
            node.ask("probe", Ping(b"x"), 0.3)
    child.proc.wait(5)


def test_a_tell_to_a_process_that_is_not_there_is_peer_lost(tmp_path):
    with Node("lonely", connect_timeout=0.2) as node:
        node.route("probe", f"ipc://{tmp_path}/nobody-home")
        with pytest.raises(PeerLost, match="no connection to"):
            node.tell("probe", Built(0, 0, "", "w"))


# ---- backpressure through the gateway (two nodes in this process, real ipc sockets) ----

class Slow(Actor):
    mailbox_size = 2

    def __init__(self, gate: threading.Event, seen: queue.Queue) -> None:
        super().__init__()
        self.gate = gate
        self.seen = seen

    def on_ping(self, msg: Ping, delivery) -> Pong:
        if msg.payload == b"wait":
            self.seen.put("waiting")
            self.gate.wait(10)
        return Pong(msg.payload)

    def on_built(self, msg: Built, delivery) -> None:
        self.seen.put(msg.i)


def test_a_full_remote_mailbox_refuses_asks_and_makes_block_tells_wait(tmp_path):
    gate, seen = threading.Event(), queue.Queue()
    with Node("server", bind=f"ipc://{tmp_path}/server") as server, Node("client") as client:
        server.host("slow", Slow, gate, seen)
        client.route("slow", server.endpoint)
        client.tell("slow", Ping(b"wait"))
        assert seen.get(timeout=30) == "waiting"
        for i in range(2):
            client.tell("slow", Built(0, i, "", "w"))
        # the gateway has put both in the mailbox (a loaded machine may take seconds)
        wait_until(lambda: server.statistics()[0].depth >= 2, 60, "both tells in the mailbox")
        with pytest.raises(Refused, match="mailbox full"):
            client.ask("slow", Ping(b"x"), 5.0)
        for i in range(2, 50):
            client.tell("slow", Built(0, i, "", "w"))      # the gateway parks them: nothing is lost
        gate.set()
        assert client.ask("slow", schema.Ping(b"after"), 10.0) == Pong(b"after")
        assert [seen.get(timeout=30) for _ in range(50)] == list(range(50))
        assert server.statistics()[0].refused == 1


# ---- CURVE ----

def stranger_socket(kind: int, endpoint: str, server_key: bytes) -> tuple[zmq.Socket, zmq.Socket]:
    """A raw socket with a key nobody authorized, and a monitor on it."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(kind)
    public, secret = zmq.curve_keypair()
    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = server_key, public, secret
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED)
    sock.connect(endpoint)
    return sock, monitor


def wait_handshake(monitor: zmq.Socket) -> int:
    assert monitor.poll(10_000), "no handshake outcome"
    from zmq.utils.monitor import recv_monitor_message
    return recv_monitor_message(monitor)["event"]


def test_an_unknown_key_gets_nothing_through_in_either_direction(tmp_path, caplog):
    from everchat.transport import _wire as wire
    seen: queue.Queue = queue.Queue()
    got: queue.Queue = queue.Queue()
    with Node("guarded", bind="tcp://127.0.0.1:0", keys=KeyStore(tmp_path / "ours")) as server, \
            Node("friend", keys=KeyStore(tmp_path / "ours")) as friend, \
            Node("stranger", keys=KeyStore(tmp_path / "theirs"), connect_timeout=0.5) as stranger:
        server.host("slow", Slow, threading.Event(), seen)
        address = wire.parse_address(server.endpoint)

        # in: a stranger's requests never reach the actor, its node gives up with PeerLost
        stranger.route("slow", server.endpoint)
        with caplog.at_level("WARNING", logger="everchat.transport"):
            with pytest.raises(PeerLost):
                stranger.tell("slow", Built(0, 0, "", "stranger"))
            dealer, dealer_monitor = stranger_socket(zmq.DEALER, address.requests, address.server_key)
            # Not blocking: once the handshake failed the DEALER has no pipe, and a plain send
            # would wait forever (CI hung here); a frame it could not even queue gets through less.
            try:
                dealer.send(wire.request_frame(wire.TELL, 0, "slow", "raw", None, Built(0, 1, "", "raw")), zmq.NOBLOCK)
            except zmq.Again:
                pass
            assert wait_handshake(dealer_monitor) == zmq.EVENT_HANDSHAKE_FAILED_AUTH

            # out: a stranger's subscription gets no events while a friend's does
            sub, sub_monitor = stranger_socket(zmq.SUB, address.events, address.server_key)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            assert wait_handshake(sub_monitor) == zmq.EVENT_HANDSHAKE_FAILED_AUTH
        friend.host("collector", Collector, got)
        friend.subscribe("built", "collector")
        friend.route("slow", server.endpoint)
        assert server.wait_subscribed("built", 1, 10.0)
        server.publish("built", NodeBuilt(1, 2))
        assert got.get(timeout=10)[1] == 2
        assert sub.poll(100) == 0                                  # the friend's copy came; none here
        assert friend.ask("slow", Ping(b"friend"), 5.0) == Pong(b"friend")
        assert seen.empty()                                        # no Built ever reached the actor
        # Only the friend's ping. The actor's thread counts a message after its reply has
        # left, so the count may trail the answer by a moment (seen in a loaded run).
        end = time.monotonic() + 10
        while server.statistics()[0].handled < 1 and time.monotonic() < end:
            threading.Event().wait(0.01)
        assert server.statistics()[0].handled == 1
        assert server.gateway_statistics().refused >= 3
        stranger_key = stranger._pair.public.decode()
        assert any(f"with unknown key {stranger_key}" in r.getMessage() for r in caplog.records)
        for sock in (dealer, dealer_monitor, sub, sub_monitor):
            sock.close(0)


def test_a_server_without_the_pinned_key_gets_nothing_from_us(tmp_path):
    ctx = zmq.Context.instance()
    impostor = ctx.socket(zmq.ROUTER)
    _, impostor_secret = zmq.curve_keypair()
    impostor.curve_server, impostor.curve_secretkey = True, impostor_secret
    port = impostor.bind_to_random_port("tcp://127.0.0.1")
    pinned, _ = zmq.curve_keypair()                                 # the key the route promises
    with Node("careful", keys=KeyStore(tmp_path / "keys")) as node:
        node.route("bank", f"tcp://127.0.0.1:{port};events={port};key={pinned.decode()}")
        with pytest.raises(PeerLost):
            node.ask("bank", Ping(b"secret"), 0.5)
    assert impostor.poll(100) == 0
    impostor.close(0)


def test_tcp_needs_keys_and_binds_to_localhost_by_default(tmp_path):
    with pytest.raises(TransportError, match="needs CURVE keys"):
        Node("open", bind="tcp://127.0.0.1:0")
    with Node("local", bind="tcp://:0", keys=KeyStore(tmp_path)) as node:
        assert node.endpoint.startswith("tcp://127.0.0.1:")
        assert f";key={node._pair.public.decode()}" in node.endpoint


def test_key_files_are_private_and_stable(tmp_path, caplog):
    keys = KeyStore(tmp_path)
    pair = keys.ensure("proc-a")
    assert keys.ensure("proc-a") == pair
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    for path in (tmp_path / "keys" / "proc-a.key", tmp_path / "keys" / "authorized_keys"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keys.authorized() == {pair.public}
    other, _ = zmq.curve_keypair()
    keys.authorize(other.decode(), "laptop")
    keys.authorize(other, "laptop")                                  # once only
    assert keys.authorized() == {pair.public, other}
    os.chmod(tmp_path / "keys" / "proc-a.key", 0o644)
    with caplog.at_level("WARNING", logger="everchat.transport"):
        assert keys.ensure("proc-a") == pair
    assert stat.S_IMODE((tmp_path / "keys" / "proc-a.key").stat().st_mode) == 0o600
    assert "was readable by others" in caplog.text
    with pytest.raises(TransportError, match="not a z85 CURVE public key"):
        keys.authorize("short")


def test_the_two_process_example_runs():
    example = TESTS.parent / "tools" / "examples" / "two_processes.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("echo from child (pid ") and done.stdout.endswith(": hello, world\n")
