"""Images (R9): PNG, JPEG, GIF or WebP, at most 5 MB, stored once under `assets/<sha256>`.

"5 MB" is read as 5 MiB (5,242,880 bytes), the limit the Anthropic API enforces for one
image. The type is checked from the bytes (magic numbers), never from a name.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ._errors import BadInput, CorruptRecord
from ._files import atomic_write

__all__ = ["MAX_ASSET_BYTES", "image_type", "check_digest", "put_asset", "read_asset",
           "has_asset"]

MAX_ASSET_BYTES = 5 * 1024 * 1024
_HEX64 = re.compile(r"[0-9a-f]{64}")


def image_type(data: bytes) -> str | None:
    """`png`, `jpeg`, `gif` or `webp` judged from the first bytes; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def check_digest(digest: object) -> str:
    """A well-formed asset name: 64 lowercase hex digits (BadInput otherwise)."""
    if type(digest) is not str or not _HEX64.fullmatch(digest):
        raise BadInput(f"{digest!r} is not a sha256 hex digest")
    return digest


def has_asset(chat: Path, digest: str) -> bool:
    return (chat / "assets" / digest).is_file()


def put_asset(chat: Path, data: bytes) -> str:
    """Store an image once (R9, atomic write per R4) and return its sha256 hex digest."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadInput(f"an image is bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_ASSET_BYTES:
        raise BadInput(f"image of {len(data)} bytes is over {MAX_ASSET_BYTES} bytes (R9)")
    if image_type(data) is None:
        raise BadInput("not a PNG, JPEG, GIF or WebP image (R9: type checked from the bytes)")
    digest = hashlib.sha256(data).hexdigest()
    path = chat / "assets" / digest
    if not path.is_file():
        atomic_write(path, data)
    return digest


def read_asset(chat: Path, digest: str) -> bytes:
    """The stored bytes of an asset; CorruptRecord when they no longer hash to its name."""
    check_digest(digest)
    path = chat / "assets" / digest
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"no asset {digest}") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise CorruptRecord(path, 0, "the bytes do not hash to the file name")
    return data
