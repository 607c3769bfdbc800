"""The process the agents' crash test kills (tests/test_agents_actor.py).

`python agents_kill_child.py MODE CHAT ADDRESS [KIND]`, with the model settings in the
environment (the test points them at its fake model server); KIND is the transcript
record after whose first fsync the process ends (default `work`, the outbox; `message`:
the first message appended to main/, the report, before its `reported` record):

- `all`: hosts the log writer, the planner and the agents actor in one node, arms the
  crash point "right after the first `work` (outbox) record's fsync", prints `ready`, and
  on the line `spawn` asks for agent Solo: the process ends (status 86) inside the window
  between the outbox and the chat.
- `log_writer`: hosts the log writer and the planner at ADDRESS with the same crash point
  armed, prints `ready`; the test's own agents actor asks it.
- `restart`: the same without the crash point (the log writer after the crash).

Then it waits on stdin, so it ends when it is killed or its stdin closes.
"""

from __future__ import annotations

import sys

from everchat.actors.agents.actor import AgentsActor
from everchat.actors.settings import load
from everchat.actors.log_writer.actor import LogWriter
from everchat.actors.tree import Budget
from everchat.actors.planner.actor import PlannerActor
from everchat.actors.folder._transcripts import arm_transcript_crash
from everchat.transport import Node, schema


def main() -> int:
    mode, chat, address = sys.argv[1], sys.argv[2], sys.argv[3]
    crash = sys.argv[4] if len(sys.argv) > 4 else "work"
    node = Node(f"agents-child-{mode}", bind=address if mode != "all" else None).start()
    if mode in ("all", "log_writer") and crash == "message":  # right after the report's append to main/
        from everchat.actors.folder import _crash

        _crash.arm("message", 1)
    elif mode in ("all", "log_writer"):
        arm_transcript_crash(crash, 1)
    node.host("log_writer", LogWriter, chat)
    node.host("planner", PlannerActor, Budget(), "log_writer", "off")
    if mode == "all":
        node.host("agents", AgentsActor, load())
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "spawn":
            node.ask("agents", schema.SpawnAgent("Solo", "say hi", "k1"), timeout=30)
    node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
