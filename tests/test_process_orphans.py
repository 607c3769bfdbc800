"""An actor process never outlives its supervisor: after a `kill -9` of the process that
started it (a chat that crashed), each child stops by itself instead of holding its socket
and its share of the machine for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

_SUPERVISE = textwrap.dedent("""
    import sys, time
    from everchat.actors.tree import Budget
    from everchat.actors.supervisor.actor import Placement, Supervisor
    supervisor = Supervisor(sys.argv[1], Placement("processes", workers=1, summarizer="scripted"), Budget()).start()
    print(" ".join(str(child.pid) for child in supervisor.children.values()), flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too (our test process is not its parent, so nothing reaps it here)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_children_stop_when_their_supervisor_is_killed(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", _SUPERVISE, str(tmp_path / "chat")],
                              stdout=subprocess.PIPE, text=True)
    try:
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(children) == 6 and all(_alive(pid) for pid in children)  # with the devices and the agents
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in children if _alive(pid)]
    finally:
        parent.kill()
        for pid in children if "children" in locals() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
