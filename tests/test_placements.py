"""Issue 3: the same scripted conversation in every placement gives the same chat folder.

A few hundred messages with a scripted summarizer; after each message the test
waits until the pool is idle, so the schedule is deterministic. Placements: all
actors in this process; every actor in its own process (ipc); every actor in its
own process over tcp with CURVE, one compactor joining from "another host" (its
own folder, messages only). Then the same in processes with one actor killed
with SIGKILL halfway: the supervisor restarts it and the folder still matches.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from everchat.actors.tree import Budget
from everchat.actors.supervisor.actor import Placement, Supervisor
from everchat.transport import ActorStopped, AskTimeout, KeyStore, PeerLost, RemoteError, schema

MESSAGES = 160
BUDGET = Budget(ceiling=4000, floor=2000, cceiling=1500, cfloor=800, jobs=2)


def _texts(count: int) -> list[tuple[str, str]]:
    rng = random.Random(2026)
    words = ["amber-42", "zoom", "tree", "path/to/file.py", "error 7", "view", "log", "summary", "héllo"]
    out = []
    for n in range(count):
        size = rng.choice([20, 60, 200, 700, 1500])
        text = f"m{n} " + " ".join(rng.choice(words) for _ in range(size // 6))
        out.append((rng.choice(["user", "everchat", "tool", "echo"]), text))
    return out


def _retrying(action, what: str, timeout: float = 120.0):
    """Asks across a restart: the peer may be gone for a while (PeerLost, a timeout, or
    "no actor" while a process that lost its actor exits and the supervisor restarts it,
    after its backoff). Some of these fail at once: the retries are bounded by time."""
    pause = threading.Event()
    end = time.monotonic() + timeout
    while True:
        try:
            return action()
        except (PeerLost, AskTimeout, RemoteError, ActorStopped) as error:
            if time.monotonic() > end:
                raise AssertionError(f"{what} kept failing for {timeout} s: {error}") from error
        pause.wait(0.05)


def converse(supervisor: Supervisor, count: int, on_append=None) -> None:
    """Log the script, waiting for an idle pool after each message; `on_append(n)` runs as
    soon as message n is logged, while the chat still works on it."""
    node = supervisor.node
    for n, (kind, text) in enumerate(_texts(count)):
        append = schema.Append(kind=kind, text=text, key=f"script-{n}", images=[], meta=None)
        _retrying(lambda: node.ask("log_writer", append, timeout=10.0), f"append {n}")
        if on_append is not None:
            on_append(n)
        _retrying(lambda: node.ask("planner", schema.PoolIdle(), timeout=30.0), f"idle after {n}")


def folder_digest(chat: Path) -> dict:
    """What must match across placements: messages (dates and so checksums aside), the set of nodes,
    the merge records, and the two view files byte for byte."""
    messages, nodes, merges = [], set(), []
    for path in sorted((chat / "main").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line:
                record = json.loads(line)
                record.pop("date", None)
                record.pop("crc", None)  # P3: over the bytes, the date included
                messages.append(record)
    for path in sorted((chat / "tree").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line:
                continue
            record = json.loads(line)
            if "merge" in record:
                merges.append(record)
            else:
                nodes.add((record["l"], record["i"], record["text"]))
    return {
        "messages": messages,
        "nodes": nodes,
        "merges": merges,
        "view": (chat / "view.json").read_bytes(),
        "cview": (chat / "compaction-view.json").read_bytes(),
    }


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict:
    chat = tmp_path_factory.mktemp("single") / "chat"
    with Supervisor(chat, Placement("single", workers=2, summarizer="scripted"), BUDGET) as supervisor:
        converse(supervisor, MESSAGES)
    digest = folder_digest(chat)
    assert digest["merges"] and any(l > 0 for l, _, _ in digest["nodes"]), "the script should merge"
    return digest


def test_every_actor_in_its_own_process_gives_the_same_folder(tmp_path, baseline):
    chat = tmp_path / "chat"
    with Supervisor(chat, Placement("processes", workers=2, summarizer="scripted"), BUDGET) as supervisor:
        pids = {child.pid for child in supervisor.children.values()}
        assert len(pids) == len(supervisor.children) and os.getpid() not in pids
        converse(supervisor, MESSAGES)
    assert folder_digest(chat) == baseline


def test_a_compactor_joins_over_tcp_from_another_host_and_the_folder_is_the_same(tmp_path, baseline):
    chat = tmp_path / "chat"
    elsewhere = tmp_path / "other-host"
    placement = Placement("processes", transport="tcp", workers=2, remote=("compactor.1",), summarizer="scripted")
    supervisor = Supervisor(chat, placement, BUDGET)
    joiner: list[subprocess.Popen] = []

    # The other host gets its own key pair, authorized by the chat beforehand; it never
    # sees the chat folder (the supervisor's public key is part of its endpoint).
    KeyStore(chat / "config").ensure("compactor.1")
    (elsewhere / "config" / "keys").mkdir(parents=True)
    shutil.copy2(chat / "config" / "keys" / "compactor.1.key", elsewhere / "config" / "keys")

    def join_when_listening() -> None:
        info = _wait_for_file(chat / "run" / "supervisor.json")
        joiner.append(subprocess.Popen(
            [sys.executable, "-m", "everchat.frontends.cli.main", "actor", "compactor.1",
             "--join", info["endpoint"], "--keys", str(elsewhere / "config"), "--data-dir", str(elsewhere / "none"),
             "--summarizer", "scripted"],
            stdin=subprocess.DEVNULL,
        ))

    thread = threading.Thread(target=join_when_listening)
    thread.start()
    try:
        supervisor.start()
        thread.join()
        assert supervisor.children["compactor.1"].pid == joiner[0].pid
        converse(supervisor, MESSAGES)
    finally:
        thread.join()
        supervisor.stop()
        for process in joiner:
            process.terminate()
            process.wait(timeout=10)
    assert not (elsewhere / "none").exists()
    assert folder_digest(chat) == baseline


def busy_message(baseline: dict) -> int:
    """The first message from the middle on that, once logged, gives every actor of the
    pool work: its append ends a batch that merges (a merge record at t = n + 1, so the
    planner saves the record and both views through the log writer) and its line needs a
    compaction (over 512 bytes, so a worker gets a leaf job)."""
    batches = {record["t"] - 1 for record in baseline["merges"] if record["merge"]}
    for n in range(MESSAGES // 2, MESSAGES):
        if n in batches and len(baseline["messages"][n]["text"].encode()) > 512:
            return n
    raise AssertionError("the script should have a merging message over 512 bytes after its middle")


# The kill comes the moment the busy message's Append is answered, before the pool is
# idle: the planner is planning it (merge record, views) through the log writer, and a
# leaf job is on its way to a worker. (The turn runner runs no turn in this script: its
# kill is a restart from a quiet state; test_turns_kill kills one mid-stream.)
# The planner's kill also checks its recovery hands out the jobs that planning the
# messages logged while it was down started (they once stayed running with no worker).
@pytest.mark.parametrize("victim", ["log_writer", "compactor.0", "planner", "turn_runner"])
def test_kill_9_of_any_actor_midway_is_restarted_and_the_folder_is_the_same(tmp_path, baseline, victim):
    chat = tmp_path / "chat"
    busy = busy_message(baseline)
    with Supervisor(chat, Placement("processes", workers=2, summarizer="scripted"), BUDGET) as supervisor:
        child = supervisor.children[victim]

        def kill_while_working(n: int) -> None:
            if n == busy:
                os.kill(child.pid, signal.SIGKILL)

        converse(supervisor, MESSAGES, kill_while_working)
        assert child.restarts == 1
    assert folder_digest(chat) == baseline


def _wait_for_file(path: Path, timeout: float = 30.0) -> dict:
    done = threading.Event()
    deadline = timeout
    while not path.exists():
        if done.wait(0.02):
            break
        deadline -= 0.02
        if deadline <= 0:
            raise AssertionError(f"{path} never appeared")
    return json.loads(path.read_text())


def test_tcp_actors_listen_on_the_address_given_and_are_announced_there(tmp_path):
    """`serve --listen ADDR`: another host dials the supervisor and every actor at ADDR
    (127.0.0.2 stands in for this host's network address); the default is 127.0.0.1."""
    placement = Placement("processes", transport="tcp", workers=1, summarizer="scripted", listen="127.0.0.2")
    with Supervisor(tmp_path / "chat", placement, BUDGET) as supervisor:
        endpoints = [child.endpoint for child in supervisor.children.values()] + [supervisor.node.endpoint]
        assert all(endpoint.startswith("tcp://127.0.0.2:") for endpoint in endpoints), endpoints
        converse(supervisor, 3)
    assert Placement().listen == "127.0.0.1"


@pytest.mark.parametrize("address", ["0.0.0.0", "*", "::", ""])
def test_listening_on_every_interface_is_refused_with_a_reason(address):
    with pytest.raises(ValueError, match="other hosts can dial"):
        Placement("processes", transport="tcp", listen=address)
