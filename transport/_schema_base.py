"""The base of every message: `Message`, its registration with a full-mailbox policy, and
the msgpack encoding of `[type name, fields]` (`encode`, `decode`, `to_obj`, `from_obj`).

Part of `everchat.transport.schema` (whose docstring says what a message is); the message
types themselves are in `_schema_store`, `_schema_planner`, `_schema_turns` and
`_schema_system`, each registering its types here as it is imported.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import msgpack

from ._check import MAX_DEPTH, no_ext, show
from ._errors import BadFrame

__all__ = [
    "Message", "encode", "decode", "to_obj", "from_obj", "unpack", "types", "message",
    "BLOCK", "DROP", "REFUSE", "MAX_FRAME", "MAX_DEPTH",
]

BLOCK = "block"
DROP = "drop"
REFUSE = "refuse"
MAX_FRAME = 16 * 1024 * 1024

_TYPES: dict[str, type[Message]] = {}


class Message:
    """Base class of every message. Subclasses are registered with `message(policy)`."""

    __slots__ = ()
    type_name: ClassVar[str]   # the name on the wire: the class name
    handler: ClassVar[str]     # the Actor method that handles it: on_<snake_case name>
    policy: ClassVar[str]      # BLOCK, REFUSE or DROP

    def to_wire(self) -> list:
        raise NotImplementedError

    @classmethod
    def from_wire(cls, obj: Any) -> Message:
        raise NotImplementedError


def message(policy: str):
    """Class decorator: register a Message subclass under its class name with `policy`."""
    def register(cls: type[Message]) -> type[Message]:
        cls.type_name = cls.__name__
        cls.handler = "on_" + re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        cls.policy = policy
        _TYPES[cls.__name__] = cls
        return cls
    return register


def types() -> dict[str, type[Message]]:
    """Every registered message type by its wire name."""
    return dict(_TYPES)


def to_obj(msg: Message) -> list:
    """`[type name, fields]`: what `encode` packs (the transport nests it in its frames)."""
    return [msg.type_name, msg.to_wire()]


def from_obj(obj: Any) -> Message:
    """The message for an unpacked `[type name, fields]`, or BadFrame(reason)."""
    if type(obj) is not list or len(obj) != 2:
        raise BadFrame(f"expected [type, fields], got {show(obj)}")
    name, fields_ = obj
    cls = _TYPES.get(name) if type(name) is str else None
    if cls is None:
        raise BadFrame(f"unknown message type {show(name)}")
    try:
        return cls.from_wire(fields_)
    except (TypeError, ValueError) as exc:     # a checker missed something: still a bad frame
        raise BadFrame(f"{name}: {type(exc).__name__}: {str(exc):.80}") from None


def encode(msg: Message) -> bytes:
    """The frame for `msg`. Raises BadFrame when a field cannot be encoded or the frame
    would be over MAX_FRAME (a decoder would drop it anyway)."""
    try:
        data = msgpack.packb([msg.type_name, msg.to_wire()])
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadFrame(f"cannot encode {type(msg).__name__}: {exc}") from None
    if len(data) > MAX_FRAME:
        raise BadFrame(f"{type(msg).__name__} is {len(data)} bytes, over the {MAX_FRAME}-byte limit")
    return data


def decode(data: bytes) -> Message:
    """The message in `data`; BadFrame(reason) when anything about it is wrong."""
    return from_obj(unpack(data, MAX_FRAME))


def unpack(data: bytes, limit: int) -> Any:
    """msgpack.unpackb for untrusted bytes: BadFrame for anything over `limit` bytes, not
    msgpack, or using extension types. Lengths inside are capped by the data's length."""
    if len(data) > limit:
        raise BadFrame(f"frame of {len(data)} bytes is over the {limit}-byte limit")
    try:
        return msgpack.unpackb(data, ext_hook=no_ext)
    except BadFrame:
        raise
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as exc:
        raise BadFrame(f"not msgpack: {type(exc).__name__}: {str(exc):.80}") from None
