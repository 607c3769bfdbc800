"""The transport's small vocabulary of exceptions.

Every exception the transport raises on purpose is a `TransportError`. The subclasses say
what happened and on whose side: the peer took too long (`AskTimeout`), the peer's process
broke from outside (`PeerLost`), we (or our node) closed the actor (`ActorStopped`), the
handler raised (`RemoteError`), the bytes were wrong (`BadFrame`), or the mailbox was full
(`Refused`). Each message names the actor, the node, its pid and its host.
"""

from __future__ import annotations

__all__ = [
    "TransportError",
    "AskTimeout",
    "PeerLost",
    "ActorStopped",
    "RemoteError",
    "BadFrame",
    "Refused",
]


class TransportError(Exception):
    """Base class of every error the transport raises on purpose.

    Raised as such for misuse: a tcp endpoint without keys, an actor asking itself, a name
    hosted twice, a node used before `start()`.
    """


class AskTimeout(TransportError):
    """`ask` got no reply before its timeout, while the connection to the target's process
    stayed up (or the target is in this process). The request may still be handled later;
    its reply is then dropped and counted as late. Retry only idempotent requests."""


class PeerLost(TransportError):
    """The process hosting the target broke from outside: its connection dropped while an
    `ask` was waiting (killed, crashed, network gone), or no connection to it could be made
    within the timeout. The request may or may not have been handled."""


class ActorStopped(TransportError):
    """The target actor was closed on purpose: `stop_actor`, `node.stop()`, or it stopped
    itself; also raised for a name that is neither hosted here nor routed anywhere. Pending
    asks to an actor that stops are answered with this error, and so are asks that wait
    while their own node stops."""


class RemoteError(TransportError):
    """The target's handler raised (or called `delivery.fail`). `kind` is the exception's
    class name, `text` its message; the traceback is logged on the target's side."""

    def __init__(self, kind: str, text: str) -> None:
        self.kind = kind
        self.text = text
        super().__init__(f"{kind}: {text}")


class BadFrame(TransportError):
    """Bytes that are not a valid message: not msgpack, an unknown type, a field of the
    wrong type, fields missing or extra, or over the size limit. `reason` says which.

    Raised by `schema.decode`; the gateway and the actors never let it escape (the frame is
    dropped, logged and counted). `ask` raises it when the target could not decode the
    request, or when the reply itself does not decode."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Refused(TransportError):
    """The target's mailbox is full and the message type's policy is "refuse" (or "block"
    and the wait for room ran out). Nothing was delivered; the caller may retry."""
