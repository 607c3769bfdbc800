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

The device's end, `run_device`: `everchat device join LINK --name NAME` on the other
computer, with its own `$EVERCHAT_HOME`. It makes this computer's CURVE pair
(`HOME/device/keys/device.key`, 0600), enrolls once (the link's secret joins once; the
result is kept in `HOME/device/joined.json`), then serves jobs until stopped: it dials the
hub (it listens on nothing), long-polls `PollJobs`, runs each job with `run_job` in
`work_folder(HOME, caller)` after journaling it (`HOME/device/journal.jsonl`, fsynced), and
reports the outcome (`ReportJob`); output chunks go as `DeviceOutput` tells. A lost
connection is retried by itself; at start (and so after a crash) the journal's finished
but unreported jobs are reported, and a job that may have started is reported uncertain,
never run again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import queue
import re
import secrets as _secrets
import threading
import time
from pathlib import Path

import zmq
from zmq.utils import z85

from everchat.actors.device_hub import same_call
from everchat.actors.device_jobs import TOOLS, Job, Journal, Outcome, OutputClip, run_job, work_folder
from everchat.transport import (ActorStopped, AskTimeout, KeyPair, KeyStore, Node, PeerLost, RemoteError,
                                TransportError, schema)

__all__ = ["DeviceBook", "remove_device", "hash_secret", "check_device_name", "EnrollmentServer", "JoinRefused",
           "parse_link", "enroll", "DeviceRunner", "run_device", "POLL_WAIT", "LINK_SECONDS", "DEVICE_NAME",
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


class _KeyRefused(logging.Filter):
    """Notices the chat refusing this computer's key at the handshake (the transport's
    warning, held back: the command's one last line says it instead), as the CLI's
    `_RefusedKey` does for `everchat actor --join`."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(str(arg) == "HANDSHAKE_FAILED_AUTH" for arg in record.args):
            self.seen.set()
            return False
        return True


class DeviceRunner:
    """The joined computer's loop (module docstring). `serve()` returns when `stop` is set
    (0) or the chat removed this computer (1)."""

    def __init__(self, home: Path, name: str, endpoint: str, pair: KeyPair, stop: threading.Event) -> None:
        self.home = Path(home)
        self.name = name
        self.endpoint = endpoint
        self.stop = stop
        folder = self.home / "device"
        self.journal = Journal(folder / "journal.jsonl")
        self.node = Node(f"device.{name}", pair=pair, connect_timeout=5.0)
        self._lock = threading.Lock()
        self._running: dict[str, tuple[Job, threading.Event, threading.Thread]] = {}
        self._unreported: dict[str, Outcome] = {}
        self._parked: set[str] = set()   # reports the chat did not take (it restarted): kept till it sends the job again
        self._output: queue.Queue = queue.Queue(maxsize=1000)
        self._key_refused = _KeyRefused()
        self._left = False
        self.removed: str | None = None

    def __repr__(self) -> str:
        return f"<DeviceRunner {self.name} -> {self.endpoint.split(';')[0]}>"

    def serve(self) -> int:
        transport_log = logging.getLogger("everchat.transport")
        transport_log.addFilter(self._key_refused)
        self.node.start()
        self.node.route("devices", self.endpoint)
        sender = threading.Thread(target=self._send_output, name="device-output", daemon=True)
        sender.start()
        watcher = threading.Thread(target=self._watch_stop, name="device-stop", daemon=True)
        watcher.start()
        try:
            for job, outcome in self.journal.recover(time.time()):
                self._unreported[job.id] = outcome   # finished, or uncertain: reported, never rerun
                log.info("%s: job %s from before this start is reported as %s", self, job.id,
                         "uncertain" if outcome.uncertain else "finished")
            backoff = 0.2
            while not self.stop.is_set() and self.removed is None:
                self._report_all()
                try:
                    work = self.node.ask("devices", schema.PollJobs(self.name, POLL_WAIT, self._holding()),
                                         timeout=POLL_WAIT + 15.0)
                except (PeerLost, AskTimeout, ActorStopped) as error:
                    if self._key_refused.seen.is_set():
                        self._gone("this computer's key is refused there: it was removed from the chat (on the "
                                   f"chat's computer, `everchat device add {self.name}` makes a new link)")
                        break
                    log.info("%s: the chat is not reachable (%s); trying again", self, error)
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                except RemoteError as error:
                    self._refused(error)
                    continue
                backoff = 0.2
                for caller in work.stop:
                    self._stop_caller(caller)
                for item in work.jobs:
                    self._start(item)
        finally:
            self.stop.set()
            watcher.join(15.0)
            if self._left:
                self._leave()     # again: our last word comes after any poll of ours
            self.node.stop()
            try:
                self._output.put(None, timeout=2.0)
            except queue.Full:
                pass
            sender.join(2.0)
            self.journal.close()
            transport_log.removeFilter(self._key_refused)
        if self.removed is not None:
            log.info("%s: %s", self, self.removed)   # the command says it, once
            return 1
        return 0

    def _watch_stop(self) -> None:
        """On stop: cancel the running jobs (every process of theirs is killed), let them
        report (what cannot is reported at the next start), then tell the chat this
        computer leaves (its other jobs fail at once; its waiting poll ends). When the chat
        cannot be told, the node stops, which also ends a poll waiting for work."""
        self.stop.wait()
        with self._lock:      # no job starts after this look (_start checks `stop` under the lock)
            running = list(self._running.values())
        for _, cancel, _ in running:
            cancel.set()
        for _, _, thread in running:
            thread.join(10.0)
        self._left = self._leave()
        if not self._left:
            self.node.stop()

    def _leave(self) -> bool:
        """LeaveDevice (HANDS.md §5); whether the chat heard it."""
        if self.removed is not None:
            return False
        try:
            self.node.ask("devices", schema.LeaveDevice(self.name), timeout=5.0)
        except TransportError as error:
            log.info("%s: the chat was not told that this computer leaves (%s): it sees it offline later", self, error)
            return False
        return True

    def _gone(self, why: str) -> None:
        self.removed = why
        self.stop.set()

    def _refused(self, error: RemoteError) -> None:
        if error.kind == "PermissionError":
            self._gone(error.text)
        else:
            log.warning("%s: the chat answered an error: %s", self, error)
            self.stop.wait(1.0)

    def _holding(self) -> list[str]:
        with self._lock:
            return sorted(set(self._running) | set(self._unreported))

    def _start(self, item: dict) -> None:
        job = Job(id=str(item["id"]), tool=str(item["tool"]), arguments=dict(item["arguments"]),
                  caller=str(item["caller"]), timeout=float(item["timeout"]), created=float(item["created"]))
        with self._lock:
            if self.stop.is_set() or job.id in self._running:
                return       # stopping: not journaled, so the hub's next look sends it again
            if job.id in self._unreported or self.journal.known(job.id):   # sent again: never run twice
                self._parked.discard(job.id)     # its report goes before the next poll
                self._unreported[job.id] = self._known_outcome(job)
                return
            self.journal.begin(job)              # before it starts (fsync): the order is the guarantee
            cancel = threading.Event()
            thread = threading.Thread(target=self._run, args=(job, cancel), name=f"device-job-{job.id}", daemon=True)
            self._running[job.id] = (job, cancel, thread)
        thread.start()

    def _known_outcome(self, job: Job) -> Outcome:
        """What a job the journal knows gets: its recorded outcome, checked against the
        job sent (the same id for another call is refused: nothing runs)."""
        known = self.journal.job(job.id)
        if known is not None and known.tool in TOOLS and not same_call(known, job):
            return Outcome("this computer ran another call under this job's id before; this one was not run",
                           is_error=True)
        return self.journal.outcome(job.id) or Outcome(
            "this job may have run before the device restarted; it was not run again", True, True)

    def _run(self, job: Job, cancel: threading.Event) -> None:
        clip = OutputClip(lambda text: self._queue_output(job, text))   # P4: about 30,000 characters a job
        try:
            outcome = run_job(job, work_folder(self.home, job.caller), clip.add, cancel)
        except Exception as error:
            log.exception("%s: job %s failed", self, job.id)
            outcome = Outcome(f"the job could not run: {type(error).__name__}: {error}", is_error=True)
        clip.close()
        self._flush_output()   # the output goes before the report: the hub takes none after it
        self.journal.finish(job.id, outcome)
        with self._lock:
            self._unreported[job.id] = outcome
            self._running.pop(job.id, None)
        self._report(job.id, outcome)

    def _report_all(self) -> None:
        with self._lock:
            pending = [(job_id, outcome) for job_id, outcome in self._unreported.items() if job_id not in self._parked]
        for job_id, outcome in pending:
            if not self._report(job_id, outcome):
                return

    def _report(self, job_id: str, outcome: Outcome) -> bool:
        """Report a job's outcome; False when it could not be said (the chat is away, or
        removed this computer). One the chat does not take (it restarted and forgot the
        job) is kept, and reported when the chat sends the job again."""
        try:
            self.node.ask("devices", schema.ReportJob(self.name, job_id, outcome.text, outcome.is_error,
                                                      outcome.uncertain), timeout=10.0)
        except RemoteError as error:
            if error.kind == "PermissionError":
                self._refused(error)
                return False
            log.info("%s: the chat did not take the report of %s (%s); it is kept until the chat asks for the job "
                     "again", self, job_id, error.text)
            with self._lock:
                self._parked.add(job_id)
            return True
        except TransportError as error:
            log.info("%s: report of %s not delivered (%s); it goes again after the next poll", self, job_id, error)
            return False
        self.journal.delivered(job_id)
        with self._lock:
            self._unreported.pop(job_id, None)
            self._parked.discard(job_id)
        return True

    def _stop_caller(self, caller: str) -> None:
        with self._lock:
            for job, cancel, _ in self._running.values():
                if job.caller == caller:
                    log.info("%s: stopping job %s of %s", self, job.id, caller)
                    cancel.set()

    def _queue_output(self, job: Job, text: str) -> None:
        try:
            self._output.put_nowait((job.id, text))
        except queue.Full:  # output is a hint: the result carries what counts
            pass

    def _flush_output(self) -> None:
        """Wait (a few seconds at most) until what was queued so far is sent."""
        sent = threading.Event()
        try:
            self._output.put(sent, timeout=5.0)
        except queue.Full:
            return
        sent.wait(5.0)

    def _send_output(self) -> None:
        while True:
            item = self._output.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self.node.tell("devices", schema.DeviceOutput(self.name, item[0], item[1]))
            except TransportError as error:
                log.info("%s: output chunk dropped: %s", self, error)


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def run_device(home: Path, link: str, name: str, stop: threading.Event) -> int:
    """`everchat device join`: enroll (once) and serve jobs until `stop` (module docstring);
    0. JoinRefused when enrollment is refused or the chat refused this computer later
    (removed); ValueError for a bad (or empty) link or name, before anything is written."""
    parse_link(link)
    folder = Path(home) / "device"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    pair = KeyStore(folder).ensure("device")
    joined_file = folder / "joined.json"
    joined = json.loads(joined_file.read_text("utf-8")) if joined_file.exists() else None
    if joined is not None and (not isinstance(joined, dict) or joined.get("version") != 1):
        raise JoinRefused(f"{joined_file} is not a joined-chat file of version 1; remove it and join again")
    if joined is not None and joined.get("name") != name:
        raise JoinRefused(f"this computer joined a chat as {joined.get('name')!r}; to join as {name!r}, remove "
                          f"{joined_file} first")
    # A link joins once: the one this computer joined with is not presented again (a
    # restart serves at once); a new one (a new `device add`: after a removal, or a server
    # that moved to another port) enrolls again, with the same key.
    secret_hash = hash_secret(parse_link(link)[2])
    if joined is None or secret_hash != joined.get("link"):
        endpoint = enroll(link, name, pair)
        joined = {"version": 1, "name": name, "endpoint": endpoint, "joined": time.time(), "link": secret_hash}
        _write_private(joined_file, json.dumps(joined))
        log.info("joined the chat at %s as %r", endpoint.split(";")[0], name)
    runner = DeviceRunner(home, name, joined["endpoint"], pair, stop)
    if runner.serve():
        raise JoinRefused(f"the chat refused {name!r}: {runner.removed}")
    return 0
