"""Joining another computer to the chat (docs/HANDS.md §5, R39): both ends of the remote
device's protocol.

Who joined, `DeviceBook`: the chat's `config/devices.json` (enrolled devices, removed ones,
join secrets as hashes), which the hub writes while it runs.

The hub's end, `EnrollmentServer`: one ROUTER socket in a zmq.Context of its own (so it
has a ZAP handler of its own), a CURVE server with the hub's key pair `devices`. Its ZAP
handler lets in any CURVE client key (a joining computer is not known yet) and records the
key as the connection's User-Id; the socket takes one message, `EnrollDevice(name,
secret, public_key)`, whose `public_key` must be the key of the connection it came on
(so the joiner proves it holds the secret key). The hub checks the secret and answers
`DeviceEnrolled(name, endpoint)` (the hub node's address, its key pinned) or an error.

The device's end: `enroll` presents a link's secret; the loop that serves jobs after that
(`run_device`, `DeviceRunner`) is in actors/joined/actor.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import secrets as _secrets
import threading
import time
from pathlib import Path

import zmq
from zmq.utils import z85

from everchat.transport import KeyPair, KeyStore, TransportError, schema

__all__ = ["DeviceBook", "remove_device", "hash_secret", "check_device_name", "EnrollmentServer", "JoinRefused",
           "parse_link", "enroll", "POLL_WAIT", "LINK_SECONDS", "DEVICE_NAME",
           "DEVICES_FILE_VERSION"]

log = logging.getLogger("everchat.device")

POLL_WAIT = 20.0          # a poll's wait for work (the hub answers "none" after it)
LINK_SECONDS = 3600.0     # a join secret's life
DEVICES_FILE_VERSION = 1
DEVICE_NAME = "a device name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
_ENROLL_DOMAIN = b"everchat-enroll"


class JoinRefused(Exception):
    """The chat refused to enroll this computer (the text says why), or did not answer."""


def check_device_name(name: str) -> str:
    """`name` when it is a good device name, else ValueError saying what one is."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
        raise ValueError(f"bad device name {name!r}: {DEVICE_NAME}")
    return name


def hash_secret(secret: str) -> str:
    """How a join secret is stored: its SHA-256, hex (the secret itself never is)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


# ---- who joined: config/devices.json, on the chat's computer ---------------------------


class DeviceBook:
    """`config/devices.json` of a chat: the enrolled devices (`devices`: name -> {key,
    enrolled}), the removed ones (`removed`: name -> key) and the join secrets (`secrets`:
    {hash, name, expires, used}), only as hashes. 0600, written atomically."""

    def __init__(self, chat: Path) -> None:
        self.chat = Path(chat)
        self.path = self.chat / "config" / "devices.json"

    def load(self) -> dict:
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return {"version": DEVICES_FILE_VERSION, "devices": {}, "removed": {}, "secrets": []}
        if not isinstance(data, dict) or data.get("version") != DEVICES_FILE_VERSION:
            raise ValueError(f"{self.path}: not a devices file of version {DEVICES_FILE_VERSION}")
        return data

    def save(self, data: dict) -> None:
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = folder / f".devices.json.tmp.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def keys(self) -> dict[str, str]:
        return {name: entry["key"] for name, entry in self.load()["devices"].items()}

    @staticmethod
    def add_secret(data: dict, name: str, now: float, ttl: float = LINK_SECONDS) -> tuple[str, float]:
        """Make a single-use join secret for `name` (32 random bytes); only its hash is kept."""
        check_device_name(name)
        secret = base64.urlsafe_b64encode(_secrets.token_bytes(32)).decode("ascii").rstrip("=")
        expires = now + ttl
        data["secrets"] = [s for s in data["secrets"] if s["expires"] > now]   # a used one stays: "used already"
        data["secrets"].append({"hash": hash_secret(secret), "name": name, "expires": expires, "used": None})
        return secret, expires

    @staticmethod
    def enroll(data: dict, name: str, secret: str, key: str, now: float) -> str | None:
        """Enroll `key` as `name` with `secret` (in `data`); None, or why it is refused."""
        digest = hash_secret(secret)
        entry = next((s for s in data["secrets"] if hmac.compare_digest(s["hash"], digest)), None)
        if entry is None:
            return ("the join secret is not one this chat made (or it expired long ago); make one with "
                    "`everchat device add NAME`")
        if entry.get("used"):
            return (f"the join secret was used already (at {_when(entry['used'])}); a secret joins once: make a new "
                    "one with `everchat device add NAME`")
        if entry["expires"] <= now:
            return (f"the join secret expired at {_when(entry['expires'])}; make a new one with "
                    "`everchat device add NAME`")
        if entry["name"] != name:
            return f"the join secret is for the device {entry['name']!r}, not {name!r}"
        enrolled = data["devices"].get(name)
        if enrolled is not None and enrolled["key"] != key:
            return (f"another computer (another key) is enrolled as {name!r}; `everchat device remove {name}` "
                    "on the chat's computer first")
        other = next((n for n, e in data["devices"].items() if e["key"] == key and n != name), None)
        if other is not None:
            return f"this computer's key is enrolled as {other!r} already"
        entry["used"] = now
        data["devices"][name] = {"key": key, "enrolled": now}
        data["removed"].pop(name, None)
        return None

    @staticmethod
    def remove(data: dict, name: str) -> tuple[str | None, int]:
        """Drop `name` from `data` and every join secret made for it: (its key to revoke, or
        None when it is not enrolled; how many of those secrets were still unused). So no
        link made for a removed device joins any more (HANDS.md §5)."""
        unused = sum(1 for s in data["secrets"] if s["name"] == name and not s.get("used"))
        data["secrets"] = [s for s in data["secrets"] if s["name"] != name]
        entry = data["devices"].pop(name, None)
        if entry is None:
            return None, unused
        data["removed"][name] = entry["key"]
        return entry["key"], unused


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def remove_device(chat: Path, name: str) -> bool:
    """`everchat device remove NAME` when no server runs: drop it and its unused join links
    from devices.json and its key from authorized_keys. False when there was neither."""
    book = DeviceBook(chat)
    data = book.load()
    key, links = DeviceBook.remove(data, name)
    if key is None and not links:
        return False
    if key is not None:
        KeyStore(Path(chat) / "config").revoke(key)
    book.save(data)
    return True


# ---- the hub's end -----------------------------------------------------------------------


class EnrollmentServer:
    """The enrollment socket (module docstring). `on_enroll(msg)` runs in this server's
    thread and returns the reply message (`DeviceEnrolled` or `ErrorReply`)."""

    def __init__(self, pair: KeyPair, bind: str, on_enroll) -> None:
        self.pair = pair
        self.on_enroll = on_enroll
        self.public_key = pair.public.decode("ascii")
        self._context = zmq.Context()
        self._zap = self._context.socket(zmq.ROUTER)
        self._zap.bind("inproc://zeromq.zap.01")
        self._router = self._context.socket(zmq.ROUTER)
        self._router.zap_domain = _ENROLL_DOMAIN
        self._router.curve_server = True
        self._router.curve_secretkey = pair.secret
        self._router.curve_publickey = pair.public
        self._router.setsockopt(zmq.LINGER, 1000)
        self._router.setsockopt(zmq.MAXMSGSIZE, 64 * 1024)
        self._router.bind(bind)
        self.address = self._router.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="devices-enrollment", daemon=True)

    def __repr__(self) -> str:
        return f"<EnrollmentServer {self.address}>"

    def start(self) -> EnrollmentServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._zap, zmq.POLLIN)
        poller.register(self._router, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                for sock, _ in poller.poll(200):
                    try:
                        if sock is self._zap:
                            self._on_zap(self._zap.recv_multipart())
                        else:
                            self._on_request()
                    except Exception:  # one bad request must not end enrollment
                        log.exception("%s: request failed", self)
        finally:
            self._router.close(linger=1000)
            self._zap.close(linger=0)
            self._context.term()

    def _on_zap(self, frames: list[bytes]) -> None:
        """Any CURVE key gets in; the key becomes the connection's User-Id."""
        if len(frames) < 8:
            return
        envelope, request_id, mechanism = frames[0], frames[3], frames[7]
        if mechanism == b"CURVE" and len(frames) > 8 and len(frames[8]) == 32:
            self._zap.send_multipart([envelope, b"", b"1.0", request_id, b"200", b"OK", z85.encode(frames[8]), b""])
        else:
            log.warning("%s: refused a %s client: enrollment needs CURVE", self, mechanism.decode(errors="replace"))
            self._zap.send_multipart([envelope, b"", b"1.0", request_id, b"400", b"CURVE only", b"", b""])

    def _on_request(self) -> None:
        identity = self._router.recv(copy=False)
        key = identity.get("User-Id")
        frames = [identity.bytes]
        while self._router.getsockopt(zmq.RCVMORE):
            frames.append(self._router.recv())
        if len(frames) != 2:
            log.warning("%s: dropped a request of %d frames from key %s", self, len(frames), key)
            return
        try:
            msg = schema.decode(frames[1])
        except TransportError as error:
            log.warning("%s: dropped a bad request from key %s: %s", self, key, error)
            return
        if not isinstance(msg, schema.EnrollDevice):
            reply = schema.ErrorReply("PermissionError",
                                      f"the enrollment socket takes EnrollDevice, not {msg.type_name}")
        elif msg.public_key != key:
            reply = schema.ErrorReply("PermissionError", "the public key in EnrollDevice is not the connection's")
        else:
            reply = self.on_enroll(msg)
        if isinstance(reply, schema.ErrorReply):
            log.warning("%s: refused %s from key %s: %s", self, msg.type_name, key, reply.text)
        self._router.send_multipart([frames[0], schema.encode(reply)])


# ---- the device's end --------------------------------------------------------------------


def parse_link(link: str) -> tuple[str, bytes, str]:
    """`tcp://HOST:PORT;key=Z85KEY;secret=SECRET` -> (tcp://HOST:PORT, key, secret);
    ValueError naming what is wrong."""
    if not isinstance(link, str) or not link.strip():
        raise ValueError("the join link is empty: give the one `everchat device add NAME` printed on the chat's "
                         "computer")
    base, *options = link.strip().split(";")
    fields = dict(option.partition("=")[::2] for option in options)
    host, _, port = base[len("tcp://"):].rpartition(":")
    if not base.startswith("tcp://") or not host or not port.isdigit():
        raise ValueError(f"not a join link: {base!r} is not tcp://HOST:PORT")
    key, secret = fields.get("key", ""), fields.get("secret", "")
    if len(key) != 40 or not secret:
        raise ValueError("not a join link: it needs ;key=SERVERKEY (40 characters) and ;secret=SECRET")
    return base, key.encode("ascii"), secret


def enroll(link: str, name: str, pair: KeyPair, timeout: float = 15.0) -> str:
    """Present the link's secret for `name` with this computer's key; the hub node's
    endpoint, dialled at the link's host. JoinRefused with the chat's reason, or when no
    answer comes within `timeout` (a wrong key in the link, a closed port)."""
    address, server_key, secret = parse_link(link)
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    try:
        sock.curve_serverkey = server_key
        sock.curve_publickey = pair.public
        sock.curve_secretkey = pair.secret
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        sock.send(schema.encode(schema.EnrollDevice(name, secret, pair.public.decode("ascii"))))
        if not sock.poll(int(timeout * 1000)):
            raise JoinRefused(f"no answer from the chat at {address} within {timeout:.0f} s (is `everchat serve --tcp` "
                              "running there, and is the link whole?)")
        reply = schema.decode(sock.recv())
    finally:
        sock.close(linger=0)
        context.term()
    if isinstance(reply, schema.ErrorReply):
        raise JoinRefused(f"the chat refused to join this computer as {name!r}: {reply.text}")
    if not isinstance(reply, schema.DeviceEnrolled) or not reply.endpoint.startswith("tcp://"):
        raise JoinRefused(f"the chat at {address} answered {reply.type_name}, not DeviceEnrolled")
    # The hub's node listens where the link pointed us (its own idea of its host may be
    # an address only it can use): keep its ports and key, take the link's host.
    rest = reply.endpoint[len("tcp://"):]
    host_port, _, options = rest.partition(";")
    port = host_port.rpartition(":")[2]
    host = address[len("tcp://"):].rpartition(":")[0]
    return f"tcp://{host}:{port};{options}"
