"""The message schema: every type round-trips, and anything else is a BadFrame with a reason.

Round trips use one hypothesis strategy per type (`message_strategies()` from
tests/schema_strategies.py, built from the field annotations). The rejection tests feed
`decode` each kind of wrong frame the issue names: not msgpack, unknown type, wrong field
types, fields missing or extra, huge lengths, truncation, oversize.
"""

from __future__ import annotations

import dataclasses
import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from everchat.transport import BadFrame, schema
from everchat.transport import _wire as wire

from schema_strategies import message_strategies

STRATEGIES = message_strategies()
TYPES = sorted(schema.types().values(), key=lambda cls: cls.type_name)


@pytest.mark.parametrize("cls", TYPES, ids=lambda cls: cls.type_name)
def test_every_type_round_trips_through_msgpack(cls):
    @settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(STRATEGIES[cls])
    def round_trip(msg):
        data = schema.encode(msg)
        assert schema.decode(data) == msg
        assert type(schema.decode(data)) is cls

    round_trip()


def test_every_type_has_a_policy_and_a_handler_name():
    for cls in TYPES:
        assert cls.policy in (schema.BLOCK, schema.REFUSE, schema.DROP), cls
        assert cls.handler.startswith("on_") and cls.handler == cls.handler.lower()
    assert schema.AppendMany.handler == "on_append_many"
    assert schema.StatsRequest.handler == "on_stats_request"


def test_what_must_not_be_lost_never_has_the_drop_policy():
    for cls in (schema.Append, schema.AppendMany, schema.SaveNodes, schema.SaveMerge, schema.SaveViews,
                schema.Built, schema.BuildFailed, schema.BuildJob, schema.Register):
        assert cls.policy in (schema.BLOCK, schema.REFUSE), cls
    assert schema.NodeBuilt.policy == schema.DROP
    assert schema.MessageLogged.policy == schema.DROP


def test_messages_are_frozen():
    msg = schema.Ping(b"x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.payload = b"y"


def reason(data: bytes) -> str:
    with pytest.raises(BadFrame) as caught:
        schema.decode(data)
    return caught.value.reason


def test_bytes_that_are_not_msgpack_are_a_bad_frame():
    assert reason(b"\xc1").startswith("not msgpack")
    assert reason(b"").startswith("not msgpack")


def test_an_unknown_type_is_a_bad_frame():
    assert reason(msgpack.packb(["Nope", []])) == "unknown message type 'Nope'"
    assert reason(msgpack.packb([7, []])) == "unknown message type 7"


def test_a_frame_that_is_not_a_type_and_fields_pair_is_a_bad_frame():
    assert reason(msgpack.packb({"type": "Ping"})) == "expected [type, fields], got {'type': 'Ping'}"
    assert reason(msgpack.packb(["Ping", [b"x"], 1])).startswith("expected [type, fields]")


def test_a_field_of_the_wrong_type_is_a_bad_frame_naming_the_field():
    assert reason(msgpack.packb(["Ping", ["text"]])) == "Ping.payload: expected bytes, got str 'text'"
    assert reason(msgpack.packb(["ReadMessage", [True]])) == "ReadMessage.i: expected int, got bool True"
    assert reason(msgpack.packb(["Append", ["user", "hi", None, [1], None, None]])) == \
        "Append.images[]: expected str, got int 1"
    assert reason(msgpack.packb(["ReadNodes", [[[1, 2, 3]]]])) == \
        "ReadNodes.nodes[]: expected [int, int], got list [1, 2, 3]"


@pytest.mark.parametrize("cls", TYPES, ids=lambda cls: cls.type_name)
def test_each_field_of_each_type_rejects_a_value_of_another_type(cls):
    @settings(max_examples=5, deadline=None)
    @given(STRATEGIES[cls])
    def each_field(sample):
        fields = sample.to_wire()
        for index in range(len(fields)):
            wrong = list(fields)
            wrong[index] = object_of_another_type(fields[index])
            with pytest.raises(BadFrame):
                schema.decode(msgpack.packb([cls.type_name, wrong]))

    each_field()


def object_of_another_type(value):
    """A msgpack value no field of `value`'s kind accepts (a map of a map is JSON-like, so
    maps get a bytes value; everything else gets a map with an int key)."""
    return b"\x00" if isinstance(value, dict) else {1: 2}


@pytest.mark.parametrize("cls", TYPES, ids=lambda cls: cls.type_name)
def test_a_missing_or_extra_field_is_a_bad_frame(cls):
    @settings(max_examples=3, deadline=None)
    @given(STRATEGIES[cls])
    def missing_or_extra(sample):
        fields = sample.to_wire()
        assert reason(msgpack.packb([cls.type_name, fields + [0]])) == \
            f"{cls.type_name}: expected {len(fields)} fields, got {len(fields) + 1}"
        if fields:
            assert reason(msgpack.packb([cls.type_name, fields[:-1]])) == \
                f"{cls.type_name}: expected {len(fields)} fields, got {len(fields) - 1}"

    missing_or_extra()


def test_dict_fields_carry_json_like_data_only():
    meta_with_bytes = ["user", "hi", None, [], {"a": b"raw"}, None]
    assert reason(msgpack.packb(["Append", meta_with_bytes])) == "Append.meta: expected JSON-like value, got bytes b'raw'"
    deep: object = 1
    for _ in range(schema.MAX_DEPTH + 1):
        deep = [deep]
    assert "nested deeper than" in reason(msgpack.packb(["Append", ["user", "hi", None, [], {"a": deep}, None]]))


def test_a_float_field_takes_an_int_and_a_bool_is_never_an_int():
    assert schema.decode(msgpack.packb(["SettleView", [3, 2, 0]])) == schema.SettleView(3, 2.0)
    assert reason(msgpack.packb(["SettleView", [True, 2.0, 0]])) == "SettleView.until: expected int, got bool True"


def test_huge_claimed_lengths_are_refused_without_allocating_them():
    claims = [
        b"\xdd\xff\xff\xff\xff",                         # array of 4 billion items
        b"\xdf\xff\xff\xff\xff",                         # map of 4 billion pairs
        b"\xdb\xff\xff\xff\xff",                         # str of 4 GB
        b"\xc6\xff\xff\xff\xff",                         # bin of 4 GB
        b"\x92\xa4Ping\x91\xc6" + struct.pack(">I", 2**31),  # a Ping whose payload claims 2 GB
    ]
    for data in claims:
        assert reason(data).startswith("not msgpack")


def test_an_oversize_frame_is_refused_before_it_is_read():
    assert reason(b"\x00" * (schema.MAX_FRAME + 1)) == \
        f"frame of {schema.MAX_FRAME + 1} bytes is over the {schema.MAX_FRAME}-byte limit"
    with pytest.raises(BadFrame):
        schema.encode(schema.Ping(b"x" * schema.MAX_FRAME))


def test_extension_types_are_refused():
    assert reason(msgpack.packb(["Ping", [msgpack.ExtType(5, b"x")]])) == "msgpack extension type 5 is not allowed"


def test_encode_refuses_a_field_msgpack_cannot_carry():
    with pytest.raises(BadFrame, match="cannot encode Append"):
        schema.encode(schema.Append("user", "hi", None, [], {"a": object()}))


@st.composite
def one_byte_changed(draw) -> bytes:
    """A valid frame with one byte replaced: often still a message (a changed character,
    a changed number), so the successful decodes below are many, not a lucky few."""
    encoded = bytearray(schema.encode(draw(st.sampled_from(TYPES).flatmap(lambda cls: STRATEGIES[cls]))))
    at = draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[at] = draw(st.integers(min_value=0, max_value=255))
    return bytes(encoded)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | one_byte_changed())
def test_random_bytes_decode_or_raise_bad_frame_and_nothing_else(data):
    """BadFrame, or a message of the schema that encodes, and decodes back to itself
    and is what the bytes said (compared as frames: a NaN field is not equal to itself)."""
    try:
        msg = schema.decode(data)
    except BadFrame:
        return
    assert type(msg) in schema.types().values()
    frame = schema.encode(msg)
    assert schema.encode(schema.decode(frame)) == frame
    assert frame == msgpack.packb(msgpack.unpackb(data, strict_map_key=False))  # the message that was sent


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(TYPES).flatmap(lambda cls: STRATEGIES[cls]), st.data())
def test_every_truncation_of_a_valid_frame_is_a_bad_frame(msg, data):
    encoded = schema.encode(msg)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(BadFrame):
        schema.decode(encoded[:cut])


def test_request_frames_check_their_header():
    ping = schema.Ping(b"x")
    good = wire.request_frame(wire.ASK, 7, "echo", "main", 12.5, ping)
    assert wire.parse_request(good) == (wire.ASK, 7, "echo", "main", 12.5, ["Ping", [b"x"]])
    bad = {
        "unknown kind": msgpack.packb([9, 1, "echo", "main", None, None]),
        "a tell has no deadline": msgpack.packb([wire.TELL, 1, "echo", "main", 1.0, None]),
        "an ask needs a float deadline": msgpack.packb([wire.ASK, 1, "echo", "main", None, None]),
        "id must be int": msgpack.packb([wire.ASK, "1", "echo", "main", 1.0, None]),
        "6-array": msgpack.packb([wire.ASK, 1, "echo"]),
    }
    for expected, data in bad.items():
        with pytest.raises(BadFrame, match=expected):
            wire.parse_request(data)


def test_an_event_frame_wraps_an_encoded_message_without_unpacking_it():
    body = schema.encode(schema.NodeBuilt(1, 4))
    frame = wire.event_frame(99, 3, "planner", body)
    incarnation, seq, sender, message = wire.parse_event(frame)
    assert (incarnation, seq, sender, schema.from_obj(message)) == (99, 3, "planner", schema.NodeBuilt(1, 4))


def test_addresses_parse_and_say_what_is_wrong():
    ipc = wire.parse_address("ipc:///tmp/x/proc-a")
    assert (ipc.requests, ipc.events, ipc.server_key) == ("ipc:///tmp/x/proc-a", "ipc:///tmp/x/proc-a.events", None)
    key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
    tcp = wire.parse_address(f"tcp://10.0.0.2:5555;events=5556;key={key}")
    assert (tcp.requests, tcp.events, tcp.server_key) == ("tcp://10.0.0.2:5555", "tcp://10.0.0.2:5556", key.encode())
    from everchat.transport import TransportError
    for text in ("tcp://10.0.0.2:5555", "udp://x", "ipc://", f"tcp://:5;events=6;key={key}"):
        with pytest.raises(TransportError):
            wire.parse_address(text)


def test_the_readme_policy_table_lists_every_type_with_its_policy():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "transport" / "README.md").read_text()
    listed: dict[str, str] = {}
    for line in readme.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 4 and cells[0] in (schema.BLOCK, schema.REFUSE, schema.DROP):
            for name in re.findall(r"\b[A-Z][A-Za-z]+\b", cells[1]):
                listed[name] = cells[0]
    actual = {name: cls.policy for name, cls in schema.types().items()}
    assert listed == actual, "transport/README.md's policy table must list each message type under its policy"
