"""R37: `kill -9` of a session while a reply streams. After a restart the person's
message and the part that streamed are in the log once each, the part marked incomplete,
and the next turn works. A real child process runs the ChatSession against the fake
model server, whose reply streams slowly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from everchat.actors.session.session import ChatSession
from everchat.actors.turns.turn import incomplete_text
from everchat.tools.fakemodel import Latency, Reply, Text
from everchat.transport import schema

from test_turns_wire import configure, fake, server, turn_calls, until_end  # noqa: F401 (fixtures)

CHILD = Path(__file__).with_name("turn_kill_child.py")
STORY = "".join(f"word{n} " for n in range(80))


def test_r37_kill_9_mid_stream_keeps_the_message_and_the_streamed_part_once(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    fake.script(Reply(Text(STORY), latency=Latency(per_chunk=0.15)))
    child = subprocess.Popen([sys.executable, str(CHILD), "Tell me a long story."], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        for line in child.stdout:
            event = json.loads(line)
            if event["type"] == "TurnText":
                seen.append(event["text"])
            assert event["type"] != "TurnEnded", event
            if len(seen) == 6:
                break
    finally:
        child.kill()
        child.wait()
    shown = "".join(seen)
    assert 0 < len(shown) < len(STORY)
    fake.script(Reply(Text("Here is the rest.")))
    with ChatSession.open(settings) as session:
        assert session.status()["messages"] == 2  # the message and the partial reply, once each
        assert session.zoom(0, 1) == "user: Tell me a long story."
        kind, _, text = session.zoom(1, 1).partition(": ")
        assert kind == "everchat"
        partial, _, mark = text.rpartition("\n")
        assert text == incomplete_text(partial, "crashed")
        assert partial.startswith(shown) and STORY.startswith(partial)  # what was shown survived
        turn = session.send("Go on.")
        events = until_end(session, turn)
        assert events[-1] == schema.TurnEnded(turn=2, reason="done", incomplete=False, detail="")
        assert session.status()["messages"] == 4
    assert not (Path(settings.home) / "chat" / "draft.json").exists()
    body = json.dumps(turn_calls(fake)[-1].body)
    assert "1+1|everchat: " + partial.split("\n")[0][:40] in body  # the next turn sees the part
