"""What the transport's parts need from their node, as protocols: the leaf under them all.

`Node` (`_node.py`) builds mailboxes, actors, clients and the gateway and hands itself to
each. They only call it back, so instead of importing `_node` (a circle: `_node` imports
them) each names here the few members it uses and `Node` satisfies them by shape. The
imports of the package then run one way: `_ports` ← `_mailbox` ← `_actor` ← `_client`,
`_gateway` ← `_node` (tests/test_boundaries.py checks there is no circle).
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import zmq

    from ._keys import KeyPair, KeyStore
    from ._stats import Recorder
    from ._wire import Address
    from .schema import Message

__all__ = ["Host", "Dialer", "GatewayHost"]


class Host(Protocol):
    """What a mailbox, an actor and a delivery use of the node that hosts them."""

    ident: str
    name: str

    def _send_reply(self, identity: bytes, request_id: int, msg: Message) -> bool: ...

    def _enter_actor_thread(self, mailbox: Any) -> None: ...

    def _leave_actor_thread(self, mailbox: Any, actor: Any) -> None: ...


class Dialer(Protocol):
    """What a thread's connection to a peer (`_client.Client`) uses of its node."""

    ident: str
    name: str
    _pair: KeyPair | None
    _rids: itertools.count
    _stopping: bool

    def _socket(self, kind: int) -> zmq.Socket: ...

    def _track(self, sock: zmq.Socket) -> None: ...

    def _count_late_reply(self, address: Address, request_id: int) -> None: ...

    def _count_bad_reply(self, address: Address, reason: str) -> None: ...


class GatewayHost(Protocol):
    """What the gateway thread (`_gateway.Gateway`) uses of its node: the bound sockets'
    settings, the hosted mailboxes and subscriptions, and the reply path."""

    ident: str
    name: str
    endpoint: str | None
    _bind: str | None
    _keys: KeyStore | None
    _pair: KeyPair | None
    _context: zmq.Context
    _pull_endpoint: str
    _gateway_recorder: Recorder
    _router: zmq.Socket | None
    _router_lock: threading.Lock
    _mailboxes: dict[str, Any]
    _subscribers: dict[str, tuple[Any, ...]]
    _event_sources: dict[str, bytes | None]

    def _send_routed(self, frames: list[bytes]) -> bool: ...

    def _remote_subscription(self, topic: str, delta: int) -> None: ...
