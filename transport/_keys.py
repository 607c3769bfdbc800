"""CURVE keys in the chat's config folder, and the ZAP handler that checks every peer.

    keys = KeyStore(config_dir)        # files under config_dir/keys/, folder 0700, files 0600
    pair = keys.ensure("proc-a")       # makes or loads proc-a's key pair (and authorizes it)
    pair = keys.load("supervisor")     # an existing pair, read without writing anything
    keys.authorize(other_public_key, "laptop")
    keys.authorized()                  # {public keys}
    keys.revoke(other_public_key)      # lets it in no more (a connection already made stays)

`<name>.key` holds a node's pair; `authorized_keys` holds one `<z85 public key> <name>` per
line. Every socket a node binds is checked by its ZAP handler (run by the node's gateway
thread, `ZapHandler`), which logs each refusal:
- tcp: the socket is a CURVE server; a client gets in only when its public key is in
  `authorized_keys` (re-read when the file changes, so a key authorized later works without
  a restart). A client pins the server's key (it is part of the tcp endpoint), so neither
  side talks to an unknown key.
- ipc (P5): a client gets in only when its process runs as the node's own user. libzmq
  reads the peer's credentials from the unix socket (SO_PEERCRED on Linux, LOCAL_PEERCRED
  on macOS) and reports them in the ZAP request's address as `...:UID:GID:PID` (`...:UID:GID:`
  on macOS); `peer_uid` reads the uid from it. A libzmq built without either reports none:
  then the socket file's mode (0600, in the supervisor's 0700 `run/`) is the only check.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import NamedTuple

import zmq
from zmq.utils import z85

from ._errors import TransportError

__all__ = ["KeyPair", "KeyStore", "ZapHandler", "ZAP_ENDPOINT", "ZAP_DOMAIN", "ZAP_EVENTS_DOMAIN", "DEVICE_HUB", "DEVICE_PREFIX",
           "own_uid", "peer_uid"]

log = logging.getLogger("everchat.transport")

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"everchat"
ZAP_EVENTS_DOMAIN = b"everchat-events"
"""The XPUB's ZAP domain over tcp: a joined computer's key is refused there (it would read every event)."""
DEVICE_HUB = "devices"    # the one actor a joined computer's key may reach (docs/HANDS.md §5)
DEVICE_PREFIX = "device."  # authorized_keys names a joined computer's key `device.NAME`
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEY = re.compile(rb"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}")


class KeyPair(NamedTuple):
    """A CURVE key pair, z85-encoded as ZeroMQ takes it."""
    public: bytes
    secret: bytes


def _check_key(key: str | bytes) -> bytes:
    raw = key.encode("ascii") if isinstance(key, str) else bytes(key)
    if not _KEY.fullmatch(raw):
        raise TransportError(f"not a z85 CURVE public key: {raw[:50]!r}")
    return raw


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically with mode 0600, whatever the umask."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_pair(path: Path) -> KeyPair:
    fields = dict(line.partition("=")[::2] for line in path.read_text("ascii").splitlines() if line)
    try:
        return KeyPair(_check_key(fields["public"]), _check_key(fields["secret"]))
    except KeyError:
        raise TransportError(f"key file {path} has no public= or secret= line") from None


class KeyStore:
    """The CURVE keys of one chat config folder (see the module docstring)."""

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(config_dir) / "keys"
        self._authorized_file = self.dir / "authorized_keys"

    def __repr__(self) -> str:
        return f"KeyStore({str(self.dir)!r})"

    def _ready(self) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)

    def ensure(self, name: str) -> KeyPair:
        """Load `name`'s key pair, or make it (zmq.curve_keypair) and authorize its public key."""
        if not _NAME.fullmatch(name):
            raise TransportError(f"bad key name {name!r}: letters, digits, '.', '_', '-'")
        self._ready()
        path = self.dir / f"{name}.key"
        if not path.exists():
            public, secret = zmq.curve_keypair()
            _write_private(path, f"public={public.decode()}\nsecret={secret.decode()}\n")
            self.authorize(public, name)
        if path.stat().st_mode & 0o077:
            log.warning("key file %s was readable by others; made it 0600", path)
            os.chmod(path, 0o600)
        return _read_pair(path)

    def load(self, name: str) -> KeyPair:
        """`name`'s existing key pair, read without creating, authorizing or changing any
        file (for a console that must leave the chat folder as it is, P12). TransportError
        when there is no such key or it cannot be read."""
        if not _NAME.fullmatch(name):
            raise TransportError(f"bad key name {name!r}: letters, digits, '.', '_', '-'")
        path = self.dir / f"{name}.key"
        try:
            return _read_pair(path)
        except FileNotFoundError:
            raise TransportError(f"no key file {path}") from None
        except OSError as error:
            raise TransportError(f"cannot read the key file {path}: {error.strerror or error}") from None

    def authorize(self, public_key: str | bytes, name: str = "") -> None:
        """Let the holder of `public_key` connect to this folder's nodes over tcp."""
        key = _check_key(public_key)
        if key in self.authorized():
            return
        self._ready()
        old = self._authorized_file.read_text("ascii") if self._authorized_file.exists() else ""
        _write_private(self._authorized_file, old + f"{key.decode()} {name}".rstrip() + "\n")

    def revoke(self, public_key: str | bytes) -> bool:
        """Drop every line of `public_key` from authorized_keys: new connections with it are
        refused from now on (the ZAP handler re-reads the file). A connection made before
        stays up: whoever serves it checks the key per request (`Delivery.peer`). False
        when the key was not there."""
        key = _check_key(public_key)
        try:
            lines = self._authorized_file.read_bytes().splitlines()
        except FileNotFoundError:
            return False
        kept = [line for line in lines if line[:40] != key]
        if len(kept) == len(lines):
            return False
        _write_private(self._authorized_file, "".join(line.decode("ascii") + "\n" for line in kept))
        return True

    def authorized(self) -> set[bytes]:
        """The public keys allowed to connect."""
        return set(self.authorized_names())

    def authorized_names(self) -> dict[bytes, str]:
        """The public keys allowed to connect, each with the name written beside it."""
        try:
            text = self._authorized_file.read_bytes()
        except FileNotFoundError:
            return {}
        keys = {}
        for line in text.splitlines():
            if line[:40] and _KEY.fullmatch(line[:40]) and line[40:41] in (b"", b" "):
                keys[line[:40]] = line[41:].decode("ascii", errors="replace")
        return keys

    def stamp(self) -> tuple[int, int] | None:
        """Changes whenever authorized_keys does (mtime, size); None when it is missing."""
        try:
            st = self._authorized_file.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size


def own_uid() -> int | None:
    """The effective uid of this process (None where the OS has none)."""
    geteuid = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else None


def peer_uid(address: bytes) -> int | None:
    """The uid of an ipc peer as libzmq reports it in a ZAP request's address
    (`...:UID:GID:PID`, or `...:UID:GID:` on macOS); None when it reports no credentials."""
    parts = address.split(b":")
    if len(parts) >= 4 and parts[-3].isdigit() and (parts[-1].isdigit() or parts[-1] == b""):
        return int(parts[-3])
    return None


class ZapHandler:
    """Answers the ZAP requests of one node's bound sockets (see the module docstring).

    tcp: `ZapHandler(keys, own_pair, ident)`, CURVE clients with an authorized key only.
    ipc: `ZapHandler(None, None, ident, uid=own_uid())`, peers running as `uid` only.
    """

    def __init__(self, keys: KeyStore | None, own: KeyPair | None, ident: str, *, uid: int | None = None) -> None:
        self.keys = keys
        self.own = own.public if own is not None else None
        self.ident = ident
        self.uid = uid
        self.ipc = keys is None
        self.refused = 0
        self._stamp: object = object()
        self._allowed: set[bytes] = set()
        self._hub_only: set[str] = set()
        self._said_no_credentials = False

    def _allowed_keys(self) -> set[bytes]:
        stamp = self.keys.stamp()
        if stamp != self._stamp:
            names = self.keys.authorized_names()
            self._stamp, self._allowed = stamp, set(names) | {self.own}
            # Sticky: a joined computer's key stays one after it is revoked, so its live
            # connection is still checked (and refused) per request.
            self._hub_only |= {key.decode() for key, name in names.items() if name.startswith(DEVICE_PREFIX)}
        return self._allowed

    def admits(self, peer: str) -> bool:
        """Whether `peer` (a request's CURVE key) is authorized now (authorized_keys is
        re-read when it changed: a stat per call): a key revoked after its connection was
        made is refused from then on, on that connection too."""
        return peer.encode("ascii", errors="replace") in self._allowed_keys()

    def limited_to_hub(self, peer: str) -> bool:
        """Whether `peer` (a request's CURVE key) is a joined computer's, which may reach
        only the device hub (as authorized_keys said at a handshake since this node started;
        a key once seen as one stays one)."""
        return peer in self._hub_only

    def reply(self, frames: list[bytes]) -> list[bytes] | None:
        """The reply frames for one ZAP request (None when it is too broken to answer)."""
        if len(frames) < 8 or frames[1] != b"":       # NULL sends 8 frames, CURVE 9 (its key)
            log.warning("%s: malformed ZAP request of %d frames dropped", self.ident, len(frames))
            return None
        envelope, request_id, address, mechanism = frames[0], frames[3], frames[5], frames[7]
        if self.ipc:
            return self._ipc(envelope, request_id, address, mechanism)
        key = z85.encode(frames[8]) if mechanism == b"CURVE" and len(frames) > 8 and len(frames[8]) == 32 else None
        if key is not None and key in self._allowed_keys():
            if frames[4] == ZAP_EVENTS_DOMAIN and key.decode() in self._hub_only:
                # A joined computer reaches the device hub's requests only; on the events
                # socket it could subscribe to every topic (turn text, job output).
                self.refused += 1
                log.warning("%s: refused joined computer key %s on the events socket", self.ident, key.decode())
                return [envelope, b"", b"1.0", request_id, b"400", b"events are not for joined computers", b"", b""]
            return [envelope, b"", b"1.0", request_id, b"200", b"OK", key, b""]
        self.refused += 1
        who = key.decode() if key is not None else f"mechanism {mechanism.decode(errors='replace')}"
        log.warning("%s: refused tcp peer %s with unknown key %s", self.ident,
                    address.decode(errors="replace"), who)
        return [envelope, b"", b"1.0", request_id, b"400", b"unknown key", b"", b""]

    def _ipc(self, envelope: bytes, request_id: bytes, address: bytes, mechanism: bytes) -> list[bytes]:
        uid = peer_uid(address)
        if mechanism == b"NULL" and uid is None:
            if not self._said_no_credentials:
                self._said_no_credentials = True
                log.info("%s: libzmq reports no credentials of ipc peers here (%r); the socket file's mode "
                         "is the only check", self.ident, address.decode(errors="replace"))
            return [envelope, b"", b"1.0", request_id, b"200", b"OK", b"", b""]
        if mechanism == b"NULL" and uid == self.uid:
            return [envelope, b"", b"1.0", request_id, b"200", b"OK", str(uid).encode(), b""]
        self.refused += 1
        if self.refused <= 10 or self.refused % 1000 == 0:   # a refused client keeps reconnecting
            log.warning("%s: refused ipc peer %s (uid %s, mechanism %s): only uid %s may connect (%d refused so far)",
                        self.ident, address.decode(errors="replace"), uid,
                        mechanism.decode(errors="replace"), self.uid, self.refused)
        return [envelope, b"", b"1.0", request_id, b"400", b"another user", b"", b""]
