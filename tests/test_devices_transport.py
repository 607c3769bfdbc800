"""What the transport tells the device hub about who asks (docs/HANDS.md §5, R39): a tcp
request's Delivery carries its connection's CURVE key; a joined computer's key reaches the
hub only; a revoked key gets no new connection. Real tcp sockets with CURVE."""

from __future__ import annotations

import pytest

from everchat.transport import Actor, KeyStore, Node, PeerLost, Refused, schema


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
        with pytest.raises(Refused, match="reaches only 'devices'"):
            laptop.ask("log_writer", schema.Ping(b""), timeout=5.0)
        assert ops.ask("log_writer", schema.Ping(b""), timeout=5.0) == schema.Pong(ops_pair.public)
    finally:
        laptop.stop()
        ops.stop()


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
