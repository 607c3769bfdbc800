"""Who may use the web page (docs/WEB.md, "Who may use it"): the token, the sessions, the
pairing codes, and the Host and Origin decisions. Pure cores: files and a clock, no sockets.

- The token lives in `$EVERCHAT_HOME/web-token` (0600, 32 random bytes, url-safe base64);
  `load_token(home, new=True)` replaces it.
- `SessionStore` keeps `web-sessions.json` (0600, versioned): per session a public `id`, the
  SHA-256 of its cookie (never the cookie), a `name`, `created`, `last_seen` (written at
  most once a minute) and `paired`. Every write replaces the file atomically, under a lock
  file shared by every server on the home (P5); `may_revoke` says who may end whom.
- `Pairing` hands out single-use codes valid 10 minutes, in memory only.
- `host_allowed` and `origin_allowed` are the two request checks, as plain functions.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

__all__ = [
    "TOKEN_FILE",
    "SESSIONS_FILE",
    "PAIRING_SECONDS",
    "TOUCH_SECONDS",
    "COOKIE",
    "load_token",
    "token_matches",
    "SessionStore",
    "SessionsUnreadable",
    "WebSession",
    "may_revoke",
    "current_token",
    "Pairing",
    "allowed_hosts",
    "host_allowed",
    "origin_allowed",
    "iso",
]

TOKEN_FILE = "web-token"
SESSIONS_FILE = "web-sessions.json"
SESSIONS_LOCK = "web-sessions.lock"
COOKIE = "everchat_session"
PAIRING_SECONDS = 600.0
"""A pairing code is good for 10 minutes, once."""
TOUCH_SECONDS = 60.0
"""`last_seen` is written at most once a minute per session."""
_VERSION = 1
_NAME_CHARS = 200


def iso(seconds: float) -> str:
    """A time as ISO 8601 UTC, to the second: `2026-12-03T17:02:37Z`."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _random() -> str:
    """256 random bits, url-safe base64 without padding (43 characters)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def _write_private(path: Path, data: bytes) -> None:
    """Replace `path` by `data` atomically, owner-only (0600 whatever the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}.{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def load_token(home: Path, new: bool = False) -> str:
    """The web token in `home/web-token`, made at the first call (and by `new`, which
    replaces it). A file open to others is closed to 0600."""
    path = Path(home) / TOKEN_FILE
    if not new:
        try:
            token = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            token = ""
        if token:
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
            return token
    token = _random()
    _write_private(path, (token + "\n").encode("ascii"))
    return token


def current_token(home: Path, fallback: str) -> str:
    """The token in `home/web-token` now (another `everchat web --new-token` may have replaced
    it, P5), or `fallback` (the one this server started with) when there is none to read."""
    try:
        return (Path(home) / TOKEN_FILE).read_text(encoding="ascii").strip() or fallback
    except (OSError, UnicodeDecodeError):
        return fallback


def token_matches(given: object, token: str) -> bool:
    """The token a page posted is this server's (constant time)."""
    return isinstance(given, str) and bool(given) and hmac.compare_digest(given.encode(), token.encode())


def _hash(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


@dataclass
class WebSession:
    """One signed-in page or client; `hash` is the SHA-256 of its cookie. `paired`: made
    with a pairing code, not with the token (docs/WEB.md, "Who may revoke whom")."""

    id: str
    hash: str
    name: str
    created: float
    last_seen: float
    paired: bool = False

    def public(self) -> dict:
        """What the API shows of it (never the hash)."""
        return {"id": self.id, "name": self.name, "created": iso(self.created), "last_seen": iso(self.last_seen),
                "paired": self.paired}

    def record(self) -> dict:
        return {"id": self.id, "hash": self.hash, "name": self.name, "created": iso(self.created),
                "last_seen": iso(self.last_seen), "paired": self.paired}


def may_revoke(by: WebSession, target: WebSession) -> bool:
    """Who may revoke whom: a session made with the token, any session; a paired one (a
    phone), only itself. So a lost phone cannot lock its owner out."""
    return not by.paired or by.id == target.id


def _seconds(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


class SessionsUnreadable(ValueError):
    """`web-sessions.json` cannot be read or is damaged: the message names it and the way out."""


def _identity(st: os.stat_result) -> tuple:
    """What changes whenever the file is replaced (every write is a new inode)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class SessionStore:
    """The sessions of `home/web-sessions.json`, shared by every server on this home (P5).

    The file is the truth. A change takes the lock file `web-sessions.lock` (flock), reads the
    file again, changes it and replaces it atomically, so two servers never drop each other's
    sessions. A lookup first compares the file's identity (inode, size, times) with the one it
    read last and reads it again when it changed, so a session revoked on one server is refused
    on every other at its next request. Thread-safe (one lock). A file that cannot be read is
    an error naming it, never a silent fresh start (that would end every session without a
    word)."""

    def __init__(self, home: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(home) / SESSIONS_FILE
        self.lock_path = Path(home) / SESSIONS_LOCK
        self.clock = clock
        self._lock = threading.Lock()
        self._by_hash: dict[str, WebSession] = {}
        self._seen: tuple | None = None  # the identity of the file last read (None: there was none)
        with self._lock:
            self._read()
        if self._seen is not None and self.path.stat().st_mode & 0o077:
            os.chmod(self.path, 0o600)

    def __repr__(self) -> str:
        return f"<SessionStore {self.path} sessions={len(self._by_hash)}>"

    def _read(self) -> None:
        """Read the file into memory (under the lock); an entry read before stays the same
        object, its fields updated."""
        try:
            with open(self.path, "rb") as file:
                seen = _identity(os.fstat(file.fileno()))
                raw = file.read()
        except FileNotFoundError:
            self._seen, self._by_hash = None, {}
            return
        except OSError as error:
            raise SessionsUnreadable(f"cannot read {self.path}: {error} (delete it to end every web session)") from None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as error:
            raise SessionsUnreadable(f"cannot read {self.path}: {error} (delete it to end every web session)") from None
        if not isinstance(data, dict) or data.get("version") != _VERSION or not isinstance(data.get("sessions"), list):
            raise SessionsUnreadable(f"{self.path} is not a web sessions file of version {_VERSION} "
                                     "(delete it to end every web session)")
        fresh: dict[str, WebSession] = {}
        for entry in data["sessions"]:
            try:
                session = WebSession(str(entry["id"]), str(entry["hash"]), str(entry["name"]),
                                     _seconds(entry["created"]), _seconds(entry["last_seen"]),
                                     entry.get("paired", False) is True)  # before it was written: the token's
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                raise SessionsUnreadable(f"{self.path} holds a damaged session entry ({error}); "
                                         "delete the file to end every web session") from None
            known = self._by_hash.get(session.hash)
            if known is not None:
                known.__dict__.update(session.__dict__)
                session = known
            fresh[session.hash] = session
        self._seen, self._by_hash = seen, fresh

    def _refresh(self) -> None:
        """Read the file again if another server (or `--new-token`) replaced it (under the lock)."""
        try:
            now = _identity(os.stat(self.path))
        except FileNotFoundError:
            now = None
        if now != self._seen:
            self._read()

    def _change(self, change: Callable[[dict[str, WebSession]], Any]) -> Any:
        """`change(sessions)` on the file as it is now, written back (under both locks)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
            self._read()
            before = [s.record() for s in self._by_hash.values()]
            result = change(self._by_hash)
            after = [s.record() for s in self._by_hash.values()]  # in the order they were made
            if after != before:
                body = {"version": _VERSION, "sessions": after}
                _write_private(self.path, (json.dumps(body, indent=1) + "\n").encode())
                self._seen = _identity(os.stat(self.path))
            return result
        finally:
            os.close(fd)

    def create(self, name: str, paired: bool = False) -> tuple[str, WebSession]:
        """A new session: (the cookie value, which only the page keeps; the entry)."""
        cookie = _random()
        now = float(int(self.clock()))
        name = (name if isinstance(name, str) else "")[:_NAME_CHARS].strip() or "a browser"

        def add(sessions: dict[str, WebSession]) -> WebSession:
            ids = {s.id for s in sessions.values()}
            while (public := secrets.token_hex(4)) in ids:
                pass
            session = sessions[_hash(cookie)] = WebSession(public, _hash(cookie), name, now, now, paired)
            return session

        with self._lock:
            return cookie, self._change(add)

    def find(self, cookie: str | None) -> WebSession | None:
        """The session of a cookie, or None; its `last_seen` is written at most once a minute."""
        if not cookie:
            return None
        key = _hash(cookie)
        with self._lock:
            self._refresh()
            session = self._by_hash.get(key)
            if session is None:
                return None
            now = self.clock()
            if now - session.last_seen >= TOUCH_SECONDS:
                def touch(sessions: dict[str, WebSession]) -> WebSession | None:
                    found = sessions.get(key)
                    if found is not None:
                        found.last_seen = float(int(now))
                    return found

                session = self._change(touch)
            return session

    def get(self, public: str) -> WebSession | None:
        """Session `public` as the file has it now, or None."""
        with self._lock:
            self._refresh()
            return next((s for s in self._by_hash.values() if s.id == public), None)

    def sessions(self) -> list[WebSession]:
        """Every session, oldest first."""
        with self._lock:
            self._refresh()
            return list(self._by_hash.values())

    def revoke(self, public: str) -> bool:
        """Remove session `public`; False when there is none."""
        def remove(sessions: dict[str, WebSession]) -> bool:
            for key, session in sessions.items():
                if session.id == public:
                    del sessions[key]
                    return True
            return False

        with self._lock:
            return self._change(remove)

    def clear(self) -> None:
        """End every session (`--new-token`)."""
        with self._lock:
            self._change(dict.clear)


class Pairing:
    """Single-use pairing codes (128 bits), valid `PAIRING_SECONDS`, in memory only."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._codes: dict[str, float] = {}
        self._lock = threading.Lock()

    def make(self) -> tuple[str, float]:
        """A new code and when it expires (seconds since the epoch)."""
        code = base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()
        with self._lock:
            now = self.clock()
            self._codes = {c: t for c, t in self._codes.items() if t > now}  # forget the expired
            expires = now + PAIRING_SECONDS
            self._codes[code] = expires
        return code, expires

    def redeem(self, code: object) -> bool:
        """True once for a code made here and not expired; False ever after."""
        if not isinstance(code, str):
            return False
        with self._lock:
            expires = self._codes.pop(code, None)
            return expires is not None and self.clock() < expires


def allowed_hosts(port: int, allow: tuple[str, ...] = ()) -> frozenset[str]:
    """The Host headers this server answers: the loopback names with the port, and each
    `--allow-host NAME` alone or with the port (lower case)."""
    names = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    for name in allow:
        name = name.lower()
        names.update({name, f"{name}:{port}"})
    return frozenset(names)


def host_allowed(host: str | None, port: int, allow: tuple[str, ...] = ()) -> bool:
    """A request's Host header names this server (DNS rebinding: a foreign name is refused).
    ASCII only: `str.lower` maps look-alikes such as the Kelvin sign onto ASCII letters."""
    return bool(host) and host.isascii() and host.lower() in allowed_hosts(port, allow)


def origin_allowed(origin: str | None, host: str | None, https: bool = False) -> bool:
    """A state change or a socket comes from the page this server served: its Origin is the
    request's own (`http://` + Host, or `https://` behind a proxy), exactly as a browser
    serializes it: scheme and host in lower case (RFC 6454). So `HTTP://…` and any
    look-alike (a suffix, `@`, a path, a Unicode letter) are refused. Missing: refused."""
    if not origin or not host or not host.isascii():
        return False
    scheme = "https" if https else "http"
    return origin == f"{scheme}://{host.lower()}"
