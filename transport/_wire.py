"""Frames on the wire, node addresses, and the socket options every socket gets.

Every transport frame is one msgpack array; the message inside is `schema.to_obj(msg)`,
`[type name, fields]`:

    request  (DEALER -> ROUTER)   [kind, request_id, target, sender, deadline, message]
    reply    (ROUTER -> DEALER)   [REPLY, request_id, message]
    event    (XPUB -> SUB)        topic + b"\\0", then [EVENT, incarnation, seq, sender, message]

`kind` is TELL, ASK or FLUSH; the ROUTER adds the sender's routing id as a first frame.
`deadline` is None for a tell and, for an ask, the wall-clock time (time.time()) after which
nobody waits for the reply (exact between processes of one host; across hosts it assumes
clocks agree to well under the timeout). FLUSH is answered by the gateway itself (with Ack)
once it has read everything sent before it on that connection: a closing DEALER flushes its
tells that way, because ZeroMQ may drop what a receiver had not read yet when the sender
disconnects. An event's `seq` counts the publishing node's events per topic (`incarnation`
is random per node start), so a subscriber sees a gap when events were dropped on the way.
The header is checked here; the message by `schema.from_obj`, so a frame with a good header
and a bad message is counted against its target actor.

A node's address is one opaque string (what `Node.endpoint` returns and `Directory` carries):

    ipc:///run/everchat/proc-a                      requests; events at the same path + ".events"
    tcp://10.0.0.2:5555;events=5556;key=<z85>       events port and the node's CURVE public key

The tcp form pins the server's public key, so a client never talks to an impostor.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import msgpack
import zmq
from zmq.backend import Socket as _RawSocket

from ._check import show
from ._errors import BadFrame, TransportError
from .schema import MAX_FRAME, Message, unpack

__all__ = [
    "TELL", "ASK", "REPLY", "EVENT", "FLUSH", "MAX_HEADER", "MAX_WIRE", "Address", "parse_address",
    "tcp_address", "pack", "request_frame", "parse_request", "reply_frame", "parse_reply",
    "event_frame", "parse_event", "topic_frame", "tune", "send_frames", "recv_frames", "readable",
    "NOBLOCK", "POLLIN", "POLLOUT",
]

TELL, ASK, REPLY, EVENT, FLUSH = 1, 2, 3, 4, 5
MAX_HEADER = 4096
MAX_WIRE = MAX_FRAME + MAX_HEADER
HEARTBEAT_MS = 1000      # tcp: ping every second, give up after three
LINGER_MS = 2000         # unsent frames get this long to leave when a socket closes

_packb = msgpack.packb
_unpackb = msgpack.unpackb

# pyzmq's sugar layer (send_multipart, recv_multipart, enum flags) costs ~6 us a call, more
# than the rest of a request's handling; the hot paths use the backend methods with ints.
_send = _RawSocket.send
_recv = _RawSocket.recv
_get = _RawSocket.get
NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
RCVMORE = int(zmq.RCVMORE)
EVENTS = int(zmq.EVENTS)
POLLIN = int(zmq.POLLIN)
POLLOUT = int(zmq.POLLOUT)


def send_frames(sock: zmq.Socket, frames: list[bytes], flags: int = 0) -> None:
    """send_multipart without the sugar. With NOBLOCK only the first frame can raise
    zmq.Again: ZeroMQ takes the rest of a message once it took its first frame."""
    last = len(frames) - 1
    more = flags | SNDMORE
    for index, frame in enumerate(frames):
        _send(sock, frame, flags if index == last else more)


def recv_frames(sock: zmq.Socket, flags: int = 0) -> list[bytes]:
    """recv_multipart without the sugar (zmq.Again when NOBLOCK finds nothing)."""
    frames = [_recv(sock, flags)]
    while _get(sock, RCVMORE):
        frames.append(_recv(sock, flags))
    return frames


def readable(sock: zmq.Socket) -> int:
    """Whether a message is waiting (cheaper than a recv that raises zmq.Again)."""
    return _get(sock, EVENTS) & POLLIN


@dataclass(frozen=True, slots=True)
class Address:
    """Where a node listens: `requests` (its ROUTER), `events` (its XPUB), `server_key`
    (its z85 CURVE public key, tcp only) and `text`, the opaque string it was parsed from."""
    requests: str
    events: str
    server_key: bytes | None
    text: str


IPC_PATH_LIMIT = 103 if sys.platform == "darwin" else 107
"""Bytes an ipc socket's path may have (sun_path less its NUL: 104 on macOS, 108 on Linux)."""


def check_ipc_bind(bind: str) -> None:
    """TransportError naming the path when `ipc://PATH` (with its `.events` twin) is too long
    for a unix socket: the bind would fail in the process that makes it, seen elsewhere only
    as an actor that never starts."""
    path = bind[len("ipc://"):] + ".events"
    if not path.startswith("@") and len(os.fsencode(path)) > IPC_PATH_LIMIT:
        raise TransportError(f"the socket path {path} is {len(os.fsencode(path))} bytes, over the "
                             f"{IPC_PATH_LIMIT} a unix socket may have here: use a chat folder with a shorter path")


def parse_address(text: str) -> Address:
    """Parse a node address string; TransportError names what is wrong with it."""
    if not isinstance(text, str):
        raise TransportError(f"an endpoint is a str, not {type(text).__name__}")
    if text.startswith("ipc://") and ";" not in text and len(text) > 6:
        return Address(text, text + ".events", None, text)
    if text.startswith("tcp://"):
        base, *options = text.split(";")
        fields = dict(option.partition("=")[::2] for option in options)
        host, _, port = base[6:].rpartition(":")
        key = fields.get("key", "")
        if not host or not port.isdigit() or not fields.get("events", "").isdigit() or len(key) != 40:
            raise TransportError(f"bad tcp endpoint {text!r}: expected tcp://HOST:PORT;events=PORT;key=Z85KEY")
        return Address(base, f"tcp://{host}:{fields['events']}", key.encode("ascii"), text)
    raise TransportError(f"unsupported endpoint {text!r}: use ipc://PATH or tcp://HOST:PORT;events=PORT;key=KEY")


def tcp_address(requests: str, events_port: int, public_key: bytes) -> str:
    return f"{requests};events={events_port};key={public_key.decode('ascii')}"


def pack(obj: list, what: str) -> bytes:
    """msgpack.packb, raising BadFrame (not TypeError) for a field that cannot be packed."""
    try:
        data = _packb(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadFrame(f"cannot encode {what}: {exc}") from None
    if len(data) > MAX_WIRE:
        raise BadFrame(f"{what} is {len(data)} bytes, over the {MAX_WIRE}-byte limit")
    return data


def request_frame(kind: int, request_id: int, target: str, sender: str, deadline: float | None,
                  msg: Message | None) -> bytes:
    body = None if msg is None else [msg.type_name, msg.to_wire()]
    return pack([kind, request_id, target, sender, deadline, body], msg.type_name if msg else "flush")


def parse_request(data: bytes) -> tuple[int, int, str, str, float | None, Any]:
    """(kind, request_id, target, sender, deadline, message object) or BadFrame; the message
    object is unchecked (schema.from_obj checks it)."""
    frame = unpack(data, MAX_WIRE)
    if type(frame) is not list or len(frame) != 6:
        raise BadFrame(f"request must be a 6-array, got {show(frame)}")
    kind, request_id, target, sender, deadline, body = frame
    if kind != TELL and kind != ASK and kind != FLUSH:
        raise BadFrame(f"request: unknown kind {show(kind)}")
    if type(request_id) is not int or type(target) is not str or type(sender) is not str:
        raise BadFrame("request: id must be int, target and sender str")
    if kind == TELL:
        if deadline is not None:
            raise BadFrame("request: a tell has no deadline")
    elif type(deadline) is not float:
        raise BadFrame("request: an ask needs a float deadline")
    return kind, request_id, target, sender, deadline, body


def reply_frame(request_id: int, msg: Message) -> bytes:
    return pack([REPLY, request_id, [msg.type_name, msg.to_wire()]], msg.type_name)


def parse_reply(data: bytes) -> tuple[int, Any]:
    """(request id, message object) of a reply, or BadFrame."""
    frame = unpack(data, MAX_WIRE)
    if type(frame) is not list or len(frame) != 3 or frame[0] != REPLY or type(frame[1]) is not int:
        raise BadFrame(f"reply must be [REPLY, id, message], got {show(frame)}")
    return frame[1], frame[2]


def event_frame(incarnation: int, seq: int, sender: str, body: bytes) -> bytes:
    """An event frame around `body` (schema.encode(msg)), without unpacking it."""
    return b"\x95" + _packb(EVENT) + _packb(incarnation) + _packb(seq) + _packb(sender) + body


def parse_event(data: bytes) -> tuple[int, int, str, Any]:
    """(incarnation, seq, sender, message object) of an event, or BadFrame."""
    frame = unpack(data, MAX_WIRE)
    if (type(frame) is not list or len(frame) != 5 or frame[0] != EVENT or type(frame[1]) is not int
            or type(frame[2]) is not int or type(frame[3]) is not str):
        raise BadFrame(f"event must be [EVENT, incarnation, seq, sender, message], got {show(frame)}")
    return frame[1], frame[2], frame[3], frame[4]


def topic_frame(topic: str) -> bytes:
    """A topic's first frame; the trailing NUL keeps "built" from matching "builtin"."""
    return topic.encode("utf-8") + b"\0"


def tune(sock: zmq.Socket, *, tcp: bool) -> None:
    """Options every transport socket gets: a frame size limit (a peer that sends more is
    disconnected by ZeroMQ), a short linger, and tcp heartbeats so a vanished host is noticed
    within three seconds even when no packet says goodbye."""
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_WIRE)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
    if tcp:
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * HEARTBEAT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TTL, 3 * HEARTBEAT_MS)
