"""What the transport tells the device hub about who asks (docs/HANDS.md §5, R39): a tcp
request's Delivery carries its connection's CURVE key; a joined computer's key reaches the
hub only; a revoked key gets no new connection; the enrollment socket takes one message,
with the connection's own key. Real tcp sockets with CURVE."""

from __future__ import annotations

import pytest
import zmq

from everchat.actors.enrollment.actor import EnrollmentServer, JoinRefused, enroll
from everchat.transport import Actor, KeyStore, Node, PeerLost, RemoteError, schema
from polling import wait_until


class WhoAsks(Actor):
    def on_ping(self, msg, delivery):
        return schema.Pong((delivery.peer or "none").encode())


@pytest.fixture
def server(tmp_path):
    keys = KeyStore(tmp_path / "chat-config")
    node = Node("supervisor", bind="tcp://127.0.0.1:0", keys=keys).start()
    node.host("devices", WhoAsks)
    node.host("log_writer", WhoAsks)
    try:
        yield node, keys
    finally:
        node.stop()


def client(tmp_path, server_node, keys, name, authorized_as):
    pair = KeyStore(tmp_path / name).ensure(name)
    if authorized_as:
        keys.authorize(pair.public, authorized_as)
    node = Node(name, pair=pair, connect_timeout=2.0).start()
    for target in ("devices", "log_writer"):
        node.route(target, server_node.endpoint)
    return node, pair


def test_a_tcp_request_carries_the_curve_key_of_its_connection(tmp_path, server):
    node, keys = server
    laptop, pair = client(tmp_path, node, keys, "laptop", "device.laptop")
    try:
        assert laptop.ask("devices", schema.Ping(b""), timeout=5.0) == schema.Pong(pair.public)
    finally:
        laptop.stop()


def test_a_local_request_carries_no_peer(server):
    node, _ = server
    assert node.ask("devices", schema.Ping(b""), timeout=5.0) == schema.Pong(b"none")


def test_a_joined_computers_key_reaches_the_device_hub_only(tmp_path, server):
    node, keys = server
    laptop, _ = client(tmp_path, node, keys, "laptop", "device.laptop")
    ops, ops_pair = client(tmp_path, node, keys, "ops", "ops")
    try:
        with pytest.raises(RemoteError, match="reaches only 'devices', not 'log_writer'"):
            laptop.ask("log_writer", schema.Ping(b""), timeout=5.0)
        assert ops.ask("log_writer", schema.Ping(b""), timeout=5.0) == schema.Pong(ops_pair.public)
    finally:
        laptop.stop()
        ops.stop()


class Heard(Actor):
    """Keeps every event it is given."""

    def __init__(self, heard: list) -> None:
        super().__init__()
        self.heard = heard

    def on_pong(self, msg, delivery):
        self.heard.append(msg.payload)


def test_a_joined_computers_key_cannot_subscribe_to_the_chats_events(tmp_path, server):
    """The attacker's move: laptop's enrolled key subscribes to a topic on the hub's node
    (its events socket carries turn text and job output). The handshake is refused, and
    the refusal counted; an actor key subscribing the same way gets the event."""
    node, keys = server
    laptop, _ = client(tmp_path, node, keys, "laptop", "device.laptop")
    ops, _ = client(tmp_path, node, keys, "ops", "ops")
    stolen, seen = [], []
    try:
        laptop.host("spy", Heard, stolen)
        ops.host("watcher", Heard, seen)
        laptop.subscribe("turn", "spy")
        ops.subscribe("turn", "watcher")
        gateway = node._gateway
        wait_until(lambda: gateway.zap_handler.refused >= 1, 10.0, "the refused handshake")
        assert node.wait_subscribed("turn", 1, timeout=10.0)
        node.publish("turn", schema.Pong(b"secret turn text"))
        wait_until(lambda: seen, 10.0, "the watcher's event")
        assert seen == [b"secret turn text"] and stolen == []
        assert node._remote_subs.get("turn") == 1
    finally:
        laptop.stop()
        ops.stop()


def test_a_key_revoked_while_connected_gets_nothing_more_through(tmp_path, server):
    node, keys = server
    laptop, pair = client(tmp_path, node, keys, "laptop", "device.laptop")
    try:
        assert laptop.ask("devices", schema.Ping(b""), timeout=5.0) == schema.Pong(pair.public)
        keys.revoke(pair.public)
        with pytest.raises(RemoteError, match="no longer authorized") as refused:
            laptop.ask("devices", schema.Ping(b""), timeout=5.0)
        assert refused.value.kind == "PermissionError"
        with pytest.raises(RemoteError, match="no longer authorized"):
            laptop.ask("log_writer", schema.Ping(b""), timeout=5.0)
    finally:
        laptop.stop()


def test_a_revoked_key_gets_no_new_connection(tmp_path, server):
    node, keys = server
    first, pair = client(tmp_path, node, keys, "laptop", "device.laptop")
    try:
        assert first.ask("devices", schema.Ping(b""), timeout=5.0) == schema.Pong(pair.public)
    finally:
        first.stop()
    assert keys.revoke(pair.public) and pair.public not in keys.authorized()
    again = Node("laptop", pair=pair, connect_timeout=1.0).start()
    again.route("devices", node.endpoint)
    try:
        with pytest.raises(PeerLost):
            again.ask("devices", schema.Ping(b""), timeout=3.0)
    finally:
        again.stop()


# ---- the enrollment socket (actors/enrollment/actor.py) --------------------------------------

@pytest.fixture
def enrollment(tmp_path):
    seen = []

    def on_enroll(msg):
        seen.append(msg)
        return schema.DeviceEnrolled(msg.name, "tcp://10.9.9.9:4000;events=4001;key=" + "k" * 40)

    server = EnrollmentServer(KeyStore(tmp_path / "hub").ensure("devices"), "tcp://127.0.0.1:0", on_enroll).start()
    try:
        yield server, seen
    finally:
        server.stop()


def ask_raw(server, pair, msg) -> schema.Message:
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    try:
        sock.curve_serverkey = server.public_key.encode()
        sock.curve_publickey, sock.curve_secretkey = pair.public, pair.secret
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(server.address)
        sock.send(schema.encode(msg))
        assert sock.poll(10_000), "no answer from the enrollment socket"
        return schema.decode(sock.recv())
    finally:
        sock.close(linger=0)
        context.term()


def test_enrollment_takes_the_connections_own_key_and_answers_the_hubs_endpoint_at_the_links_host(tmp_path,
                                                                                                enrollment):
    server, seen = enrollment
    pair = KeyStore(tmp_path / "laptop").ensure("device")
    link = f"{server.address};key={server.public_key};secret=s3cret"
    endpoint = enroll(link, "laptop", pair)
    assert seen == [schema.EnrollDevice("laptop", "s3cret", pair.public.decode())]
    assert endpoint == "tcp://127.0.0.1:4000;events=4001;key=" + "k" * 40


def test_enrollment_refuses_a_key_that_is_not_the_connections_and_any_other_message(tmp_path, enrollment):
    server, seen = enrollment
    pair = KeyStore(tmp_path / "laptop").ensure("device")
    other = KeyStore(tmp_path / "other").ensure("device")
    forged = ask_raw(server, pair, schema.EnrollDevice("laptop", "s3cret", other.public.decode()))
    assert forged == schema.ErrorReply("PermissionError", "the public key in EnrollDevice is not the connection's")
    poll = ask_raw(server, pair, schema.PollJobs("laptop", 1.0, []))
    assert poll.kind == "PermissionError" and "takes EnrollDevice, not PollJobs" in poll.text
    assert seen == []


def test_enrollment_with_a_wrong_server_key_gets_no_answer(tmp_path, enrollment):
    server, _ = enrollment
    pair = KeyStore(tmp_path / "laptop").ensure("device")
    impostor_key = KeyStore(tmp_path / "impostor").ensure("x").public.decode()
    with pytest.raises(JoinRefused, match="no answer"):
        enroll(f"{server.address};key={impostor_key};secret=s3cret", "laptop", pair, timeout=1.0)
