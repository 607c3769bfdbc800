"""The agents' front ends (R38, R35): `/agent NAME TASK` starts the agent at once and logs
the person's line (P15: from the terminal, the page and `connect`, two quick ones make two
agents), `/stop NAME` stops an agent, `/agents` lists them (the real terminal application
on a pipe, over a scripted session, then over the real ChatSession); `everchat agents` and
`everchat zoom NAME` read the transcripts read-only (R5) when no chat runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from terminal_world import ScriptedSession, running
from test_turns_wire import fake, server  # noqa: F401 (fixtures)

from everchat.actors.session.local import Chat
from everchat.actors.folder import Transcripts
from everchat.transport import RemoteError, schema


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

    def agent(self, name, task):
        self.spawned.append((name, task))
        if name == "Taken":
            raise RemoteError("AgentError", "an agent named Taken exists already (done)")
        return schema.AgentAccepted(name, "queued" if name == "Later" else "working", ""), 7


def test_r38_agent_starts_it_and_stop_name_and_agents_reach_the_session():
    session = AgentSession()
    session.spawned = []
    with running(session) as run:
        run.line("/agent Scout find the bug in x.py")
        run.wait_printed("agent Scout started; it reports into the chat as [Scout] …")
        assert run.terminal.printed.count("› /agent Scout find the bug in x.py") == 1
        run.line("/agent Later wait")
        run.wait_printed("agent Later is queued")
        run.line("/agent Taken again")
        run.wait_printed("no agent started: an agent named Taken exists already (done)")
        assert session.spawned == [("Scout", "find the bug in x.py"), ("Later", "wait"), ("Taken", "again")]
        assert session.sent == []  # P15: nothing goes to the model
        run.line("/stop Scout")
        run.wait_printed("Scout is asked to stop")
        assert session.stopped_agents == ["Scout"]
        run.line("/agents")
        run.wait_printed("Later: queued (1 in line) — wait")
        run.wait_printed("Scout: working — find the bug")


def everchat(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *args], env=env,
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

    from everchat.actors.session.session import ChatSession, ZoomError
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


# -- P15: every /agent makes an agent, on the real chat ------------------------------------------

TASKS = {"Ada": "compare the two logs", "Bob": "list what changed"}


def _demo(home):
    from everchat.actors import settings as config

    return config.load({"demo": True}, env={}, home=home)


def _agents_and_lines(chat) -> tuple[set, list]:
    """The agents the chat's transcripts hold, and the person's /agent lines in its log."""
    from everchat.frontends.cli.agents import folder_agents

    with Chat.open(chat, writer=False) as reader:
        lines = [reader.store.message(i).text for i in range(reader.store.message_count)
                 if reader.store.message(i).kind == "user"]
    return {row["name"] for row in folder_agents(chat)}, lines


def _wait_for_both(chat):
    from polling import wait_until

    wanted = {f"/agent {name} {task}" for name, task in TASKS.items()}

    def both() -> bool:  # the agent starts, then its line is logged: wait for both of each
        names, lines = _agents_and_lines(chat)
        return names >= set(TASKS) and wanted <= set(lines)

    wait_until(both, 60, "two agents and their lines")
    names, lines = _agents_and_lines(chat)
    assert names == set(TASKS)
    assert lines == [f"/agent {name} {task}" for name, task in TASKS.items()]  # the person's words, once each


def test_p15_two_quick_agent_commands_in_the_terminal_start_two_agents(tmp_path):
    from everchat.actors.session.session import ChatSession

    session = ChatSession.open(_demo(tmp_path))
    try:
        with running(session) as run:
            for name, task in TASKS.items():  # the second while the first is just starting
                run.line(f"/agent {name} {task}")
            _wait_for_both(session.settings.chat_dir)
            run.wait_printed("agent Bob started")
    finally:
        session.close()


def test_p15_two_quick_agent_commands_on_the_page_start_two_agents_and_a_taken_name_is_a_400(tmp_path):
    import asyncio

    from web_world import run, served

    world = served(tmp_path, _demo(tmp_path / "home"))
    web = next(world)
    try:
        async def page(*texts):
            async with web.client() as client:
                await web.sign_in(client)

                async def send(text):
                    async with client.post(web.base + "/api/send", json={"text": text},
                                           headers={"Origin": web.origin}) as response:
                        return response.status, await response.json()

                return await asyncio.gather(*(send(text) for text in texts))

        sent = run(page(*(f"/agent {name} {task}" for name, task in TASKS.items())))  # at once
        assert [status for status, _ in sent] == [200, 200]
        _wait_for_both(web.chat)
        [(status, answer)] = run(page("/agent Ada once more"))
        assert status == 400 and "an agent named Ada exists already" in answer["error"]
        _wait_for_both(web.chat)  # nothing more started or logged
    finally:
        world.close()


def test_p15_two_quick_agent_commands_over_connect_start_two_agents(tmp_path):
    from test_connect import Web

    from everchat.frontends.connect.remote import RemoteSession

    web = Web(tmp_path, _demo(tmp_path))
    try:
        remote = RemoteSession.connect(web.link)
        try:
            for name, task in TASKS.items():
                accepted, ident = remote.agent(name, task)
                assert accepted.name == name and ident >= 0
        finally:
            remote.close()
        _wait_for_both(web.session.settings.chat_dir)
    finally:
        web.close()
