"""P12 (R5): `everchat ops` only reads. On a tcp placement it connects with a key the chat
already has and authorizes nothing new: every file and folder of the chat (content, mode,
mtime) is the same after `ops --once --json` as before, and the tcp sockets still let in
only enrolled keys. The same holds on ipc.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from everchat.actors.tree import Budget
from everchat.actors.supervisor.actor import Placement, Supervisor
from everchat.transport import KeyStore, Node, PeerLost, schema

EVERCHAT = [sys.executable, "-m", "everchat.frontends.cli.main"]


def folder_state(chat: Path) -> dict:
    """Every entry under the chat folder: mode and mtime, and the bytes of each file."""
    out = {}
    for root, folders, files in os.walk(chat):
        for name in folders + files + ([""] if root == str(chat) else []):
            path = Path(root, name)
            st = path.lstat()
            content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
            out[str(path.relative_to(chat))] = (st.st_mode, st.st_mtime_ns, content)
    return out


def ops_once(chat: Path, tmp_path: Path) -> list[dict]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    done = subprocess.run([*EVERCHAT, "ops", "--once", "--json", "--data-dir", str(chat)],
                          env=dict(keep, EVERCHAT_HOME=str(tmp_path / "home")), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_p12_ops_leaves_every_file_of_the_chat_as_it_was(tmp_path, transport):
    chat = tmp_path / "chat"
    placement = Placement("processes", transport=transport, workers=1, summarizer="scripted")
    with Supervisor(chat, placement, Budget()) as supervisor:
        assert supervisor.node.ask("planner", schema.PoolIdle(), timeout=30.0).idle
        before = folder_state(chat)
        rows = ops_once(chat, tmp_path)
        assert {row["name"] for row in rows} >= {"supervisor", "log_writer", "planner", "turn_runner", "compactor.0"}
        assert folder_state(chat) == before
    if transport == "tcp":
        assert not (chat / "config" / "keys" / "ops.key").exists()
        names = [line.split()[1] for line in (chat / "config" / "keys" / "authorized_keys").read_text().splitlines()]
        assert "ops" not in names


def test_p12_the_tcp_sockets_still_refuse_a_key_the_chat_never_enrolled(tmp_path):
    chat = tmp_path / "chat"
    placement = Placement("processes", transport="tcp", workers=1, summarizer="scripted")
    with Supervisor(chat, placement, Budget()) as supervisor:
        ops_once(chat, tmp_path)
        stranger = Node("stranger", keys=KeyStore(tmp_path / "elsewhere"), connect_timeout=2.0).start()
        try:
            stranger.route("supervisor", supervisor.node.endpoint)
            with pytest.raises(PeerLost):
                stranger.ask("supervisor", schema.StatsRequest(), timeout=2.0)
        finally:
            stranger.stop()
        assert supervisor.node.gateway_statistics().refused >= 1
