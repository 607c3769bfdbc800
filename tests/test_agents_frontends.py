"""The agents' front ends (R38, R35): `/agent NAME TASK` sends the person's request in
its fixed words, `/stop NAME` stops an agent, `/agents` lists them (the real terminal
application on a pipe, over a scripted session); `everchat agents` and `everchat zoom
NAME` read the transcripts read-only (R5) when no chat runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from terminal_world import ScriptedSession, running
from test_turns_wire import fake, server  # noqa: F401 (fixtures)

from everchat.actors.chat import Chat
from everchat.actors.store import Transcripts


class AgentSession(ScriptedSession):
    """ScriptedSession with the agents' methods."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped_agents: list[str] = []

    def agents(self):
        return [{"name": "Scout", "state": "working", "task": "find the bug", "position": 0},
                {"name": "Later", "state": "queued", "task": "wait", "position": 1}]

    def stop_agent(self, name):
        self.stopped_agents.append(name)


def test_r38_agent_sends_the_request_and_stop_name_and_agents_reach_the_session():
    session = AgentSession()
    with running(session) as run:
        run.line("/agent Scout find the bug in x.py")
        run.wait(lambda t: session.sent, "the request sent")
        assert session.sent == [("Start an agent named Scout with this task: find the bug in x.py", ())]
        run.line("/stop Scout")
        run.wait_printed("Scout is asked to stop")
        assert session.stopped_agents == ["Scout"]
        run.line("/agents")
        run.wait_printed("Later: queued (1 in line) — wait")
        run.wait_printed("Scout: working — find the bug")


def everchat(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def snapshot(folder):
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_r38_r5_everchat_agents_and_zoom_name_read_the_transcripts_read_only(tmp_path):
    folder = tmp_path / "chat"
    with Chat.open(folder, create=True) as writer:
        writer.add("note", "a note")
    book = Transcripts(folder, writer=True)
    book.append("Scout", "user", "find the bug", "spawn:k", {"task": True, "run": 1})
    book.append("Scout", "state", "working", "run-1", {"run": 1})
    book.append("Scout", "everchat", "Found it in x.py.", "turn-0-1", {"run": 1})
    book.append("Scout", "work", "[Scout] Found it in x.py.", "report-1",
                {"run": 1, "state": "done", "key": "agent-Scout-report-1"})
    book.append("Idle", "user", "wait", "spawn:j", {"task": True, "run": 1})
    book.append("Cut", "user", "cut", "spawn:c", {"task": True, "run": 1})
    book.append("Cut", "state", "working", "run-1", {"run": 1})
    before = snapshot(folder)

    listed = everchat("agents", "--json", "--data-dir", str(folder))
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {"name": "Cut", "state": "interrupted", "task": "cut", "position": 0},
        {"name": "Idle", "state": "queued", "task": "wait", "position": 1},
        {"name": "Scout", "state": "done", "task": "find the bug", "position": 0},
    ]
    zoomed = everchat("zoom", "Scout", "--data-dir", str(folder))
    assert zoomed.returncode == 0, zoomed.stderr
    assert zoomed.stdout.splitlines() == ["0 user: find the bug", "1 state: working", "2 everchat: Found it in x.py.",
                                          "3 work: [Scout] Found it in x.py."]
    missing = everchat("zoom", "Nobody", "--data-dir", str(folder))
    assert missing.returncode == 2 and "No agent named 'Nobody' in this chat." in missing.stderr
    assert snapshot(folder) == before


def test_r38_ops_shows_the_agents_queue_under_its_row():
    from everchat.frontends.ops import render_table

    rows = [{"name": "agents", "host": "h", "pid": 1, "depth": 0, "handled": 3, "errors": 0, "dropped_bad": 0,
             "dropped_late": 0, "dropped_full": 0, "refused": 0, "p50_ms": 0.1, "p99_ms": 0.2, "restarts": 0,
             "last_type": "SpawnAgent", "working": 8, "queued": ["Q8", "Q9"]}]
    lines = render_table(rows).splitlines()
    assert lines[2].startswith("agents")
    assert lines[3] == "  agents: 8 working; queued: Q8, Q9"


def test_r35_a_sessions_zoom_name_reads_the_transcript_through_the_log_writer(monkeypatch, tmp_path, fake):
    import pytest

    from everchat.actors.session import ChatSession, ZoomError
    from everchat.transport import schema
    from test_turns_wire import configure

    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    with ChatSession.open(settings) as session:
        session._ask("log_writer", schema.AppendTranscript("Scout", "user", "find the bug", "spawn:k",
                                                          {"task": True, "run": 1}), timeout=10)
        assert session.zoom("Scout") == "0 user: find the bug"
        with pytest.raises(ZoomError, match="No agent named 'Nobody' in this chat."):
            session.zoom("Nobody")
        with pytest.raises(ZoomError, match="has 1 page, not page 2"):
            session.zoom("Scout", 1, 2)
