"""Issue 3: `everchat ops`, the live table of every actor's mailbox.

A real chat runs for the module, every actor in its own process (ipc), started by the
Supervisor with the scripted summarizer; a dozen messages go through it. The installed
console script `everchat ops --once --json` runs as a real subprocess and its rows are
checked against the supervisor's registry and the OS: every actor listed with its own
pid, traffic counted where it went, latency fields, last message types the actor handles,
one gateway row per process. A worker killed with SIGKILL shows one restart and its new
pid (on a chat of its own). The table itself is a pure function of the rows (checked on fixed input), the live
mode redraws until interrupted, and a folder without a running chat fails clearly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from everchat.actors.tree import Budget
from everchat.actors.supervisor.actor import (NodeAgent, Placement, Supervisor, SupervisorActor, actor_names,
                                        build_actor)
from everchat.frontends.ops import render_table
from everchat.transport import schema

from polling import message_text, wait_until

EVERCHAT = Path(sys.executable).parent / "everchat"      # the installed console script
BUDGET = Budget(ceiling=4000, floor=2000, cceiling=1500, cfloor=800, jobs=2)
PLACEMENT = Placement("processes", workers=2, summarizer="scripted")
MESSAGES = 12
FIELDS = {"name", "node", "host", "pid", "depth", "handled", "errors", "dropped_bad", "dropped_late",
          "dropped_full", "refused", "p50_ms", "p99_ms", "restarts", "last_type"}


def everchat(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, EVERCHAT_HOME=str(home))
    return subprocess.run([str(EVERCHAT), *args], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)


def ops_rows(chat: Path, home: Path) -> list[dict]:
    done = everchat("ops", "--once", "--json", "--data-dir", str(chat), home=home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, "--once --json prints one JSON line"
    return json.loads(lines[0])




def talk(supervisor: Supervisor, start: int, count: int, idle_timeout: float = 60.0) -> None:
    node = supervisor.node
    for n in range(start, start + count):
        node.ask("log_writer", schema.Append("user", message_text(n), f"ops-{n}", [], None), timeout=10.0)
    assert node.ask("planner", schema.PoolIdle(), timeout=idle_timeout).idle


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    home = tmp_path_factory.mktemp("ops-home")
    folder = home / "chat"
    with Supervisor(folder, PLACEMENT, BUDGET) as supervisor:
        talk(supervisor, 0, MESSAGES)
        yield supervisor, home


def handles(name: str, type_name: str) -> bool:
    """Whether the actor called `name` has a handler for messages of `type_name`."""
    if name == "supervisor":
        cls = SupervisorActor
    elif name.startswith("node."):
        cls = NodeAgent
    else:
        cls = build_actor(name, Path("unused"), BUDGET)[0]
    return getattr(cls, schema.types()[type_name].handler, None) is not None


def test_ops_once_json_lists_every_actor_with_its_real_pid_and_host(chat):
    supervisor, home = chat
    rows = ops_rows(supervisor.chat, home)
    actors = {row["name"]: row for row in rows if row["name"] != "gateway"}
    children = supervisor.children
    assert set(actors) == {"supervisor"} | set(children) | {f"node.{name}" for name in children}
    assert set(children) == set(actor_names(PLACEMENT))
    assert all(set(row) == FIELDS for row in rows if row["name"] != "agents")
    # R38: the agents actor's row also carries its queue: how many work, who waits
    assert set(actors["agents"]) == FIELDS | {"working", "queued"}
    assert (actors["agents"]["working"], actors["agents"]["queued"]) == (0, [])
    assert actors["supervisor"]["pid"] == os.getpid()
    for name, child in children.items():
        assert actors[name]["pid"] == actors[f"node.{name}"]["pid"] == child.pid == child.process.pid
        assert child.process.poll() is None
        os.kill(child.pid, 0)                      # a live process of ours
    pids = {row["pid"] for row in actors.values()}
    assert len(pids) == len(children) + 1, "every actor in a process of its own"
    assert all(row["host"] == socket.gethostname() for row in rows)
    gateways = {row["node"]: row["pid"] for row in rows if row["name"] == "gateway"}
    assert gateways == {row["node"]: row["pid"] for row in actors.values()}, "one gateway row per process"


def test_ops_counts_traffic_where_it_went_with_latencies_and_plausible_last_types(chat):
    supervisor, home = chat
    rows = {row["name"]: row for row in ops_rows(supervisor.chat, home) if row["name"] != "gateway"}
    assert rows["log_writer"]["handled"] >= MESSAGES        # every Append, plus the planner's saves
    assert rows["planner"]["handled"] >= MESSAGES           # every Logged notice, NextJob, PoolIdle
    assert sum(rows[name]["handled"] for name in rows if name.startswith("compactor.")) > 0
    assert rows["supervisor"]["handled"] >= len(supervisor.children)     # a Register from each
    for name in ("log_writer", "planner"):
        assert 0 < rows[name]["p50_ms"] <= rows[name]["p99_ms"]
    for name, row in rows.items():
        assert isinstance(row["p50_ms"], float) and isinstance(row["p99_ms"], float)
        assert 0 <= row["p50_ms"] <= row["p99_ms"]
        assert (row["errors"], row["dropped_bad"], row["restarts"]) == (0, 0, 0), row
        assert isinstance(row["depth"], int) and row["depth"] >= 0
        if row["handled"]:
            assert handles(name, row["last_type"]), f"{name} last handled {row['last_type']!r}"
        else:
            assert row["last_type"] == ""


def test_ops_table_without_json_shows_every_actor_in_a_row_of_its_own(chat):
    supervisor, home = chat
    done = everchat("ops", "--once", "--data-dir", str(supervisor.chat), home=home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["actor", "host", "pid", "depth", "handled", "errors", "dropped", "p50", "ms",
                                "p99", "ms", "restarts", "last", "message"]
    assert "  agents: 0 working; queued: none" in lines  # R38: the queue under the agents' row
    first = {line.split()[0]: line.split() for line in lines[2:] if not line.startswith("  ")}
    names = {"supervisor", *supervisor.children, *(f"node.{name}" for name in supervisor.children)}
    gateways = {"gateway@supervisor", *(f"gateway@{name}" for name in supervisor.children)}
    assert set(first) == names | gateways
    for name, child in supervisor.children.items():
        assert first[name][2] == str(child.pid)


def test_ops_live_redraws_until_interrupted(chat):
    supervisor, home = chat
    env = dict(os.environ, EVERCHAT_HOME=str(home))
    # SIGINT as a terminal's Ctrl-C would reach it, even when this pytest ignores SIGINT
    # (a child inherits an ignored signal).
    process = subprocess.Popen([str(EVERCHAT), "ops", "--data-dir", str(supervisor.chat)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, stdin=subprocess.DEVNULL,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = b""
        while seen.count(b"\x1b[H\x1b[2J") < 2:          # two screens drawn
            chunk = process.stdout.read1(65536)
            assert chunk, process.stderr.read().decode()
            seen += chunk
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    screen = seen.split(b"\x1b[H\x1b[2J")[1].decode()
    assert screen.startswith("actor ") and "planner" in screen and "compactor.1" in screen


@pytest.fixture
def restarted(tmp_path):
    """A chat of its own (the shared one keeps every restart count at 0) whose worker
    compactor.0 was just killed with SIGKILL and has restarted and registered again."""
    home = tmp_path / "ops-home"
    with Supervisor(home / "chat", PLACEMENT, BUDGET) as supervisor:
        talk(supervisor, 0, MESSAGES)
        child = supervisor.children["compactor.0"]
        old = child.pid
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: child.restarts == 1 and child.registered.is_set() and child.pid != old, 60.0,
                   "compactor.0 restarted and registered")
        yield supervisor, home, old


def test_ops_after_kill_9_of_a_worker_shows_one_restart_and_its_new_pid(restarted):
    supervisor, home, old = restarted
    child = supervisor.children["compactor.0"]
    rows = {row["name"]: row for row in ops_rows(supervisor.chat, home) if row["name"] != "gateway"}
    assert (rows["compactor.0"]["pid"], rows["compactor.0"]["restarts"]) == (child.pid, 1)
    assert rows["node.compactor.0"]["pid"] == child.pid == child.process.pid != old
    assert [rows[name]["restarts"] for name in supervisor.children if name != "compactor.0"] == \
        [0] * (len(supervisor.children) - 1)


def test_r30_the_chat_goes_on_right_after_a_worker_restart(restarted):
    """R30: the killed worker's NextJob may still wait in the planner's queue of idle
    workers; a job handed to it cannot leave (`Delivery.reply` is False: the worker's
    connection is gone), so the planner puts it back first in line and the pool goes idle."""
    supervisor, _, _ = restarted
    talk(supervisor, MESSAGES, 4, idle_timeout=30.0)
    assert supervisor.node.ask("log_writer", schema.CountMessages(), timeout=10.0).messages == MESSAGES + 4


# -- the table as a pure function ------------------------------------------------------------

ROWS = [
    {"name": "planner", "node": "planner", "host": "vm", "pid": 4021, "depth": 3, "handled": 1520, "errors": 0,
     "dropped_bad": 2, "dropped_late": 1, "dropped_full": 0, "refused": 0, "p50_ms": 0.9043, "p99_ms": 8.7,
     "restarts": 0, "last_type": "NextJob"},
    {"name": "compactor.10", "node": "compactor.10", "host": "a-much-longer-host", "pid": 4100, "depth": 0,
     "handled": 7, "errors": 1, "dropped_bad": 0, "dropped_late": 0, "dropped_full": 0, "refused": 0,
     "p50_ms": 412.0, "p99_ms": 1250.5, "restarts": 2, "last_type": "PullWork"},
    {"name": "gateway", "node": "planner", "host": "vm", "pid": 4021, "depth": 0, "handled": 0, "errors": 0,
     "dropped_bad": 5, "dropped_late": 0, "dropped_full": 0, "refused": 0, "p50_ms": 0.0, "p99_ms": 0.0,
     "restarts": 0, "last_type": ""},
    {"name": "log_writer", "host": "vm", "pid": 4011, "error": "PeerLost: log_writer did not answer"},
]


def test_the_table_is_sorted_by_actor_with_columns_as_wide_as_their_cells():
    assert render_table(ROWS).splitlines() == [
        "actor           host               pid     depth  handled  errors dropped p50 ms  p99 ms  restarts "
        "last message",
        "-" * 111,
        "compactor.10    a-much-longer-host 4100    0      7        1      0       412.00  1250.50 2        PullWork",
        "log_writer      vm                 4011                           -",
        "  ! PeerLost: log_writer did not answer",
        "planner         vm                 4021    3      1520     0      3       0.90    8.70    0        NextJob",
        "gateway@planner vm                 4021    0      0        0      5       0.00    0.00    0",
    ]


def test_the_table_of_no_rows_is_its_head():
    assert render_table([]).splitlines()[0].split()[:2] == ["actor", "host"]
    assert len(render_table([]).splitlines()) == 2


# -- no chat running -----------------------------------------------------------------------------

def test_ops_on_a_folder_with_no_running_chat_fails_clearly(tmp_path):
    done = everchat("ops", "--once", "--json", "--data-dir", str(tmp_path / "chat"), home=tmp_path)
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.strip() == (f"everchat: no Everchat is running on {tmp_path / 'chat'} "
                                   f"(no {tmp_path / 'chat' / 'run' / 'supervisor.json'})")


def test_ops_on_a_run_file_left_by_a_crash_fails_clearly(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run = tmp_path / "chat" / "run"
    run.mkdir(parents=True)
    (run / "supervisor.json").write_text(json.dumps({
        "version": 1, "pid": gone.pid, "host": socket.gethostname(), "endpoint": f"ipc://{run}/supervisor.sock",
        "placement": "processes", "transport": "ipc"}))
    done = everchat("ops", "--once", "--json", "--data-dir", str(tmp_path / "chat"), home=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip() == (f"everchat: no Everchat is running on {tmp_path / 'chat'}: {run / 'supervisor.json'} "
                                   f"names pid {gone.pid}, which is gone (a crash left the file)")
