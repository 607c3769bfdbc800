"""The session the turn kill test kills (tests/test_turns_kill.py).

Run as a script: opens a ChatSession with the settings in the environment (the test
points them at its fake model server), sends argv[1], and prints every turn event as one
JSON line (`{"type": …, fields…}`), flushed, until the turn ends; then it waits on stdin,
so it only ends when it is killed or its stdin closes.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from everchat.actors.settings import load
from everchat.actors.session.session import ChatSession
from everchat.transport import schema


def main() -> int:
    session = ChatSession.open(load())
    turn = session.send(sys.argv[1])
    print(json.dumps({"type": "Sent", "turn": turn}), flush=True)
    while True:
        event = session.next_event(timeout=60)
        if event is None:
            break
        print(json.dumps({"type": event.type_name, **dataclasses.asdict(event)}), flush=True)
        if isinstance(event, schema.TurnEnded) and event.turn == turn:
            break
    sys.stdin.read()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
