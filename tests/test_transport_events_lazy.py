"""Issue 9: a node connects to its peers' event sockets only once it subscribes to a topic.

Every actor process of a `--processes` chat routes to every other one, and none of them
subscribes to anything (only the front end's node does): connecting each to each made a
dozen processes do about a hundred and thirty handshakes while the chat started. A node
that subscribes later still gets the events of every peer it routed before, and of every
peer it routes after.
"""

from __future__ import annotations

import queue
import time

from everchat.transport import Actor, Node
from everchat.transport.schema import NodeBuilt, Ping, Pong


class Publisher(Actor):
    def on_ping(self, msg: Ping, delivery) -> Pong:
        assert self.node.wait_subscribed("built", 1, 10.0)
        self.node.publish("built", NodeBuilt(1, int(msg.payload)))
        return Pong(msg.payload)


class Collector(Actor):
    def __init__(self, got: queue.Queue) -> None:
        super().__init__()
        self.got = got

    def on_node_built(self, msg: NodeBuilt, delivery) -> None:
        self.got.put((delivery.sender, msg.i))


def test_issue9_a_node_connects_to_event_sockets_only_once_it_subscribes(tmp_path):
    got: queue.Queue = queue.Queue()
    with Node("early", bind=f"ipc://{tmp_path}/early") as early, \
            Node("late", bind=f"ipc://{tmp_path}/late") as late, \
            Node("front", bind=f"ipc://{tmp_path}/front") as front:
        early.host("early_pub", Publisher)
        late.host("late_pub", Publisher)
        front.route("early_pub", early.endpoint)
        end = time.monotonic() + 0.5              # a connection would be made within milliseconds
        while time.monotonic() < end:
            assert front._gateway.subs == {}      # routed, subscribed to nothing: no event connection
            time.sleep(0.01)
        front.host("collector", Collector, got)
        front.subscribe("built", "collector")     # connects to the peer routed before ...
        front.route("late_pub", late.endpoint)    # ... and to the one routed after
        assert front.ask("early_pub", Ping(b"1"), 10.0) == Pong(b"1")
        assert front.ask("late_pub", Ping(b"2"), 10.0) == Pong(b"2")
        assert sorted(got.get(timeout=10) for _ in range(2)) == [("early_pub", 1), ("late_pub", 2)]
        assert len(front._gateway.subs) == 2
