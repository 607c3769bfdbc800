"""The transport: named actors exchanging msgpack messages over ZeroMQ (inproc, ipc, tcp).

    from everchat.transport import Node, Actor, schema

    class Echo(Actor):
        def on_ping(self, msg, delivery):
            return schema.Pong(msg.payload)

    node = Node("proc-a", bind="ipc:///tmp/everchat/proc-a").start()
    node.host("echo", Echo)
    node.ask("echo", schema.Ping(b"hi"), timeout=1.0)     # Pong(payload=b'hi')
    node.stop()

One `Node` per process owns the ZeroMQ sockets (one gateway thread) and hosts pykka actors
by name; `tell` / `ask` / `publish` reach a name wherever it lives: straight into the inbox
in this process, over ipc or tcp (CURVE, keys from `KeyStore`) otherwise. Every message type
is a frozen dataclass in `schema`; anything that does not decode is dropped, logged and
counted, never raised into an actor. See README.md in this folder for the policy table,
the exceptions and the wire format.
"""

from . import schema
from ._actor import Actor
from ._errors import (ActorStopped, AskTimeout, BadFrame, PeerLost, Refused, RemoteError,
                      TransportError)
from ._keys import KeyPair, KeyStore
from ._mailbox import Delivery
from ._node import Node
from ._stats import MailboxStats
from ._wire import check_ipc_bind, parse_address
from .schema import Message

__all__ = [
    "Node",
    "Actor",
    "Delivery",
    "schema",
    "Message",
    "TransportError",
    "AskTimeout",
    "PeerLost",
    "ActorStopped",
    "RemoteError",
    "BadFrame",
    "Refused",
    "KeyStore",
    "KeyPair",
    "MailboxStats",
    "check_ipc_bind",
    "parse_address",
]
