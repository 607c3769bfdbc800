"""Fuzz a live node with hypothesis: random and truncated frames, wrong types, huge lengths,
wrong frame counts, bad events and bad replies. Nothing crashes, no actor's state changes,
and each bad frame is counted exactly once, against the actor it named or the gateway.

The fuzzer is a raw DEALER on the node's real ipc socket. After each bad frame it asks a
Ping on the same connection: the gateway reads a connection in order, so when the Pong is
back the bad frame has been dropped and counted.
"""

from __future__ import annotations

import queue
import threading

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from everchat.transport import Actor, BadFrame, Node, schema
from everchat.transport import _wire as wire
from everchat.transport.schema import Ping, Pong

from schema_strategies import message_strategies

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])
TYPES = sorted(schema.types())
MESSAGES = st.one_of(*message_strategies().values())


class Keeper(Actor):
    """State that no bad frame may change: every message other than Ping it ever handled."""

    def __init__(self, kept: list) -> None:
        super().__init__()
        self.kept = kept

    def on_ping(self, msg: Ping, delivery) -> Pong:
        return Pong(msg.payload)

    def keep(self, msg, delivery) -> None:
        self.kept.append(msg)


for _cls in schema.types().values():       # a handler for every other type: it records
    if _cls is not Ping:
        setattr(Keeper, _cls.handler, Keeper.keep)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    kept: list = []
    node = Node("fuzzed", bind=f"ipc://{folder}/fuzzed").start()
    node.host("keeper", Keeper, kept)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 10_000)
    dealer.connect(node.endpoint)
    yield node, dealer, kept
    dealer.close(0)
    ctx.term()
    node.stop()


def counts(node: Node) -> tuple[int, int]:
    """(bad frames counted against the keeper, bad frames counted by the gateway)."""
    [keeper] = node.statistics()
    return keeper.dropped_bad, node.gateway_statistics().dropped_bad


def barrier(dealer: zmq.Socket) -> None:
    dealer.send(wire.request_frame(wire.ASK, 1, "keeper", "fuzzer", 1e12, Ping(b"barrier")))
    reply = schema.from_obj(wire.parse_reply(dealer.recv())[2 - 1])
    assert reply == Pong(b"barrier")


def send_and_count(live, frames: list[bytes]) -> tuple[int, int]:
    node, dealer, kept = live
    before = counts(node)
    dealer.send_multipart(frames)
    barrier(dealer)
    after = counts(node)
    assert kept == []
    return after[0] - before[0], after[1] - before[1]


def expected(frame: bytes) -> tuple[int, int]:
    """Where a bad frame with a good header is counted: against its actor, unless the frame
    as a whole is not even msgpack by our rules (a map key that is not a str, ...), when
    no header can be read from it and the gateway counts it."""
    try:
        msgpack.unpackb(frame)
        return (1, 0)
    except (ValueError, TypeError):
        return (0, 1)


def is_request(data: bytes) -> bool:
    try:
        wire.parse_request(data)
        return True
    except BadFrame:
        return False


# msgpack values of any shape, to put where a field or a header item should be
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5) | st.integers(0, 9), inner,
                                                                 max_size=3),
    max_leaves=10)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_are_dropped_and_counted_by_the_gateway(live, data):
    assume(not is_request(data))
    assert send_and_count(live, [data]) == (0, 1)


@FUZZ
@given(st.sampled_from(TYPES), st.lists(values, max_size=8))
def test_a_good_header_with_wrong_field_types_is_counted_against_its_actor(live, type_name, fields):
    body = [type_name, fields]
    try:
        schema.from_obj(body)
        assume(False)                       # hypothesis made a valid message: not this test's case
    except BadFrame:
        pass
    frame = msgpack.packb([wire.TELL, 0, "keeper", "fuzzer", None, body])
    assert send_and_count(live, [frame]) == expected(frame)


@FUZZ
@given(values)
def test_any_message_object_under_a_good_header_never_changes_the_actor(live, body):
    try:
        schema.from_obj(body)
        assume(False)
    except BadFrame:
        pass
    frame = msgpack.packb([wire.TELL, 0, "keeper", "fuzzer", None, body])
    assert send_and_count(live, [frame]) == expected(frame)


@FUZZ
@given(MESSAGES, st.data())
def test_a_truncated_request_is_dropped_and_counted(live, msg, data):
    frame = wire.request_frame(wire.TELL, 0, "keeper", "fuzzer", None, msg)
    cut = data.draw(st.integers(min_value=0, max_value=len(frame) - 1))
    assert send_and_count(live, [frame[:cut]]) == (0, 1)


HUGE = [b"\xdd\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff",
        b"\xdd\x7f\xff\xff\xff", b"\xc6\x00\xff\xff\xff"]


@FUZZ
@given(st.sampled_from(HUGE), st.sampled_from(["header", "target", "body", "field"]))
def test_huge_claimed_lengths_are_dropped_and_counted(live, claim, where):
    header = {"header": claim,
              "target": b"\x96\x01\x00" + claim,
              "body": b"\x96\x01\x00\xa6keeper\xa6fuzzer\xc0" + claim,
              "field": b"\x96\x01\x00\xa6keeper\xa6fuzzer\xc0\x92\xa4Ping\x91" + claim}[where]
    assert send_and_count(live, [header]) == (0, 1)


@FUZZ
@given(st.lists(st.binary(max_size=20), min_size=2, max_size=5))
def test_a_request_of_several_frames_is_dropped_and_counted(live, parts):
    assert send_and_count(live, parts) == (0, 1)


def test_a_bad_ask_is_answered_with_bad_frame_and_counted_against_its_actor(live):
    node, dealer, kept = live
    before = counts(node)
    dealer.send(msgpack.packb([wire.ASK, 99, "keeper", "fuzzer", 1e12, ["Ping", ["not bytes"]]]))
    request_id, body = wire.parse_reply(dealer.recv())
    assert request_id == 99
    assert schema.from_obj(body) == schema.ErrorReply(
        "transport:BadFrame", f"keeper@{node.ident} could not decode the request: Ping.payload: expected bytes, "
                              "got str 'not bytes'")
    assert counts(node) == (before[0] + 1, before[1])
    assert kept == []


def test_after_all_that_the_node_still_serves_everyone(live):
    node, _, kept = live
    with Node("bystander") as other:
        other.route("keeper", node.endpoint)
        assert other.ask("keeper", Ping(b"fine"), 10.0) == Pong(b"fine")
    assert kept == []
    assert (node.statistics()[0].errors, node.gateway_statistics().errors) == (0, 0), \
        (node.statistics(), node.gateway_statistics())


# ---- events and replies from a rogue peer ----

class Collector(Actor):
    def __init__(self, got: queue.Queue) -> None:
        super().__init__()
        self.got = got

    def on_node_built(self, msg, delivery) -> None:
        self.got.put(msg)


def test_bad_events_from_a_rogue_publisher_are_dropped_and_counted(tmp_path):
    ctx = zmq.Context()
    rogue = ctx.socket(zmq.XPUB)
    rogue.bind(f"ipc://{tmp_path}/rogue.events")
    got: queue.Queue = queue.Queue()
    garbage = [[b"built\0", b"\xc1"], [b"built\0"], [b"built\0", msgpack.packb([wire.EVENT, 1, 1, "r", ["NodeBuilt", ["x", 1]]])],
               [b"built\0", b"a", b"b"], [b"built\0", b"\xdd\xff\xff\xff\xff"]]
    with Node("listener") as node:
        node.host("collector", Collector, got)
        node.subscribe("built", "collector")
        node.route("rogue", f"ipc://{tmp_path}/rogue")
        assert rogue.poll(10_000)
        assert rogue.recv() == b"\x01built\0"                       # our subscription arrived
        for frames in garbage:
            rogue.send_multipart(frames)
        good = wire.event_frame(1, 2, "rogue", schema.encode(schema.NodeBuilt(3, 4)))
        rogue.send_multipart([b"built\0", good])
        assert got.get(timeout=10) == schema.NodeBuilt(3, 4)     # the good one after them all
        assert node.gateway_statistics().dropped_bad == len(garbage)
        assert got.empty()
    rogue.close(0)
    ctx.term()


def test_bad_replies_are_dropped_and_counted_and_the_ask_still_gets_its_own(tmp_path):
    ctx = zmq.Context()
    rogue = ctx.socket(zmq.ROUTER)
    rogue.bind(f"ipc://{tmp_path}/rogue")

    def answer() -> None:
        identity, frame = rogue.recv_multipart()
        request_id = wire.parse_request(frame)[1]
        for junk in (b"\xc1", msgpack.packb([wire.REPLY, "id", None]), b"\xdd\xff\xff\xff\xff"):
            rogue.send_multipart([identity, junk])
        rogue.send_multipart([identity, wire.reply_frame(request_id - 1, Pong(b"old"))])   # a late one
        rogue.send_multipart([identity, wire.reply_frame(request_id, Pong(b"mine"))])

    thread = threading.Thread(target=answer)
    thread.start()
    with Node("asker") as node:
        node.route("rogue", f"ipc://{tmp_path}/rogue")
        assert node.ask("rogue", Ping(b"x"), 10.0) == Pong(b"mine")
        gateway = node.gateway_statistics()
        assert (gateway.dropped_bad, gateway.dropped_late) == (3, 1)
    thread.join()
    rogue.close(0)
    ctx.term()


def test_a_reply_that_does_not_decode_raises_bad_frame_in_the_asker(tmp_path):
    ctx = zmq.Context()
    rogue = ctx.socket(zmq.ROUTER)
    rogue.bind(f"ipc://{tmp_path}/rogue")

    def answer() -> None:
        identity, frame = rogue.recv_multipart()
        rogue.send_multipart([identity, msgpack.packb([wire.REPLY, wire.parse_request(frame)[1], ["Pong", [1]]])])

    thread = threading.Thread(target=answer)
    thread.start()
    with Node("asker") as node:
        node.route("rogue", f"ipc://{tmp_path}/rogue")
        with pytest.raises(BadFrame, match="Pong.payload: expected bytes, got int 1"):
            node.ask("rogue", Ping(b"x"), 10.0)
    thread.join()
    rogue.close(0)
    ctx.term()
