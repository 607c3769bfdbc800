"""P5: who may touch a chat over ipc. A node's ipc sockets let in only processes of its own
user (libzmq reads the peer's credentials from the unix socket and the node's ZAP handler
checks the uid), whatever the socket file's mode; and the supervisor makes `run/`, its
sockets and its files owner-only whatever the umask.

The other user is real: `nobody` (uid 65534). The intruder starts as root with this
venv's Python, imports what it needs, then drops to nobody's uid and gids for good before
it makes any socket: the attacker's move is a connection from another uid, and nobody
needs no access to the clone or its venv (a clone in a 0700 folder imported nothing as
nobody: `ModuleNotFoundError: No module named 'zmq'`). So these tests need root. The
owner's own client is another node of this process, over the same socket. Nothing here
sleeps: the intruder reports the handshake's outcome as its socket's monitor sees it
(refused or connected, then the reply if one comes).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from everchat.transport import Actor, Node, schema

NOBODY = 65534
needs_another_user = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="runs a client as another user: needs root (to become nobody)")

# Imports as root, becomes `nobody` (uid and gid 65534, no other groups; checked), then
# connects to argv[1] with a DEALER (argv[2] == "ask": then ask a Ping of the actor "echo")
# or a SUB (argv[2] == "sub"), and prints what happens, one word a line: "refused" (the
# handshake failed on authentication), "connected", "reply <payload>".
_INTRUDER = textwrap.dedent("""
    import os, sys, time, zmq
    from zmq.utils.monitor import recv_monitor_message
    from everchat.transport._wire import ASK, parse_reply, request_frame
    from everchat.transport.schema import Ping
    nobody = int(sys.argv[3])
    os.setgroups([])
    os.setgid(nobody)
    os.setuid(nobody)
    assert os.getresuid() == (nobody,) * 3 and os.getresgid() == (nobody,) * 3 and os.getgroups() == []
    endpoint, mode = sys.argv[1], sys.argv[2]
    sock = zmq.Context().socket(zmq.DEALER if mode == "ask" else zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    sock.connect(endpoint if mode == "ask" else endpoint + ".events")
    event = recv_monitor_message(monitor)["event"]
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        print("refused", flush=True)
        sys.exit(0)
    print("connected", flush=True)
    if mode == "ask":
        sock.send(request_frame(ASK, 1, "echo", "intruder", time.time() + 60, Ping(b"secret?")))
        print("reply", parse_reply(sock.recv())[1][1][0].decode(), flush=True)
""")


class Echo(Actor):
    def on_ping(self, msg: schema.Ping, delivery) -> schema.Pong:
        return schema.Pong(msg.payload)


def _searchable(folder: Path) -> bool:
    """Every folder from the root down to `folder` lets others through (o+x)."""
    return all(part.stat().st_mode & stat.S_IXOTH for part in [folder, *folder.parents])


@pytest.fixture
def open_folder():
    """A folder every user may enter: pytest's own temporary folders are root's 0700, and
    so may be the temporary folder itself (a TMPDIR of a 0700 folder); then /tmp."""
    base = Path(tempfile.gettempdir()).resolve()
    folder = Path(tempfile.mkdtemp(prefix="everchat-p5-", dir=base if _searchable(base) else "/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def served(open_folder):
    """A node on ipc in `open_folder`, its socket files made permissive afterwards (as a
    umask of 000 or a careless chmod would leave them): only the uid check is left."""
    node = Node("p5-server", bind=f"ipc://{open_folder}/p5.sock").start()
    node.host("echo", Echo)
    for name in ("p5.sock", "p5.sock.events"):
        (open_folder / name).chmod(0o777)
    yield node
    node.stop()


def intrude(endpoint: str, mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _INTRUDER, endpoint, mode, str(NOBODY)],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[:-1]


@needs_another_user
def test_p5_another_user_gets_no_reply_from_an_ipc_actor_even_through_a_socket_anyone_may_open(served, caplog):
    with caplog.at_level("WARNING", logger="everchat.transport"):
        assert intrude(served.endpoint, "ask") == ["refused"]
    assert served.gateway_statistics().refused >= 1
    assert any(f"uid {NOBODY}" in r.getMessage() and "only uid 0 may connect" in r.getMessage()
               for r in caplog.records)


@needs_another_user
def test_p5_another_user_cannot_subscribe_to_an_ipc_node_s_events(served):
    assert intrude(served.endpoint, "sub") == ["refused"]


@needs_another_user
def test_p5_the_owner_s_own_client_works_through_the_same_socket(served):
    with Node("p5-owner") as client:
        client.route("echo", served.endpoint)
        assert client.ask("echo", schema.Ping(b"mine"), timeout=10.0) == schema.Pong(b"mine")
    assert served.gateway_statistics().refused == 0


def test_p5_ipc_socket_files_are_the_owner_s_only_whatever_the_umask(open_folder):
    old = os.umask(0)
    try:
        node = Node("p5-umask", bind=f"ipc://{open_folder}/u.sock").start()
    finally:
        os.umask(old)
    try:
        for name in ("u.sock", "u.sock.events"):
            assert stat.S_IMODE((open_folder / name).stat().st_mode) == 0o600, name
    finally:
        node.stop()


# -- the supervisor's run/ folder -----------------------------------------------------------

_SERVE = textwrap.dedent("""
    import sys
    from everchat.actors.tree import Budget
    from everchat.actors.supervisor.actor import Placement, Supervisor
    supervisor = Supervisor(sys.argv[1], Placement("processes", workers=1, summarizer="scripted"), Budget()).start()
    print("up", flush=True)
    sys.stdin.read()
    supervisor.stop()
""")


def test_p5_run_folder_its_sockets_and_files_are_owner_only_under_umask_000(tmp_path):
    chat = tmp_path / "chat"
    serving = subprocess.Popen([sys.executable, "-c", _SERVE, str(chat)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, umask=0)
    try:
        assert serving.stdout.readline() == "up\n"
        run = chat / "run"
        assert stat.S_IMODE(run.stat().st_mode) == 0o700
        modes = {entry.name: stat.S_IMODE(entry.lstat().st_mode) for entry in run.iterdir()}
        assert "supervisor.json" in modes and "log_writer.sock" in modes and "supervisor.sock.events" in modes
        assert {name: mode for name, mode in modes.items() if mode != 0o600} == {}
        assert stat.S_IMODE((chat / "supervisor.lock").stat().st_mode) == 0o600
    finally:
        serving.stdin.close()
        assert serving.wait(timeout=60) == 0
