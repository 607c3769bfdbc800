"""The agents actor over real ZeroMQ sockets (R38): a real node hosting the real log
writer, planner and turn runner, the fake model server (tools/fakemodel) answering every
call by rule, and a stand-in devices actor. A scripted turn spawns two agents; each
report reaches the chat once, as a `work` message `[NAME] …`, in the order the runs
ended; zoom("NAME") shows each one's steps; the next view holds the reports.

The crash tests (R38: "once, even across a crash") kill a real child process right after
an agent's report is in its outbox and before it is in the chat: once the process that
hosts the agents actor (and everything else), once the log writer's process alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from everchat.actors.agents.actor import AgentsActor, transcript_page
from everchat.actors.log_writer.actor import LogWriter
from everchat.actors.tree import Budget
from everchat.actors.planner.actor import PlannerActor
from everchat.actors.folder import Transcripts
from everchat.actors.turns.actor import TurnRunnerActor
from everchat.tools.fakemodel import Gate, Reply, Text, ToolCall
from everchat.transport import Actor, Node, RemoteError, schema

from polling import wait_until
from test_turns_wire import configure, fake, server  # noqa: F401 (fixtures)

CHILD = Path(__file__).with_name("agents_kill_child.py")


class StandInDevices(Actor):
    """The devices actor's stand-in (the real one is another helper's): it runs nothing,
    it echoes; and it counts the StopJobs it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped: list[str] = []

    def on_run_job(self, msg, delivery):
        return schema.JobResult(job=msg.job, text=f"ran nothing: {msg.tool} {msg.arguments}", is_error=False,
                                uncertain=False)

    def on_stop_jobs(self, msg, delivery):
        self.stopped.append(msg.caller)
        return schema.Ack()


class Collector(Actor):
    """Subscribes to topic "agent"."""

    def __init__(self, events: list) -> None:
        super().__init__()
        self.events = events

    def on_agent_event(self, msg, delivery):
        self.events.append(msg)


def first_user(request) -> str:
    return next((text for role, text in request.messages if role == "user"), "")


def ask(node, msg, target="log_writer"):
    return node.ask(target, msg, timeout=30)


def work_messages(node) -> list[str]:
    count = ask(node, schema.CountMessages()).messages
    texts = []
    for i in range(count):
        record = ask(node, schema.ReadMessage(i=i))
        if record.kind == "work":
            texts.append(record.text)
    return texts


def host_chat(node, chat: Path, settings) -> None:
    """The log writer, the planner (no prefix gate), the stand-in devices and the agents."""
    node.host("log_writer", LogWriter, chat)
    node.host("planner", PlannerActor, Budget(), "log_writer", "off")
    node.host("devices", StandInDevices)
    node.host("agents", AgentsActor, settings)


def test_r38_two_spawned_agents_report_once_each_in_the_order_they_finished(monkeypatch, tmp_path, fake):
    # tools off: the turn header asks no devices' hub (ListDevices is the devices helper's)
    monkeypatch.setenv("EVERCHAT_TOOLS", "off")
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    assert not settings.devices
    alpha_may_end = Gate()

    def rule(request):
        opening = first_user(request)
        turns = sum(1 for role, _ in request.messages if role == "assistant")
        if "the agent Alpha's task" in opening:
            if turns == 0:
                return Reply(Text("Checking the date."), ToolCall("date", {"id": 0}, id="a1"))
            return Reply(Text("Alpha found 42."), gate=alpha_may_end)
        if "the agent Beta's task" in opening:
            return Reply(Text("Beta is done."))
        if turns == 0:
            return Reply(ToolCall("spawn", {"name": "Alpha", "task": "find the number"}, id="s1"),
                         ToolCall("spawn", {"name": "Beta", "task": "say done"}, id="s2"))
        return Reply(Text("Started Alpha and Beta; their reports will come."))

    fake.rule(rule)
    node = Node("agents-test").start()
    events: list = []
    try:
        host_chat(node, tmp_path / "chat", settings)
        node.host("turn_runner", TurnRunnerActor, settings)  # its spawn asks "agents" (actors/hands/__init__.py)
        node.host("collector", Collector, events)
        node.subscribe("agent", "collector")
        ask(node, schema.Append("user", "a note before", "note-0", [], None))
        logged = node.ask("turn_runner", schema.UserInput(text="Start agents Alpha and Beta.", images=[], key="u1"),
                          timeout=30)
        wait_until(lambda: work_messages(node) == ["[Beta] Beta is done."], 60, "Beta's report")
        alpha_may_end.open()
        wait_until(lambda: len(work_messages(node)) == 2, 60, "Alpha's report")
        assert work_messages(node) == ["[Beta] Beta is done.", "[Alpha] Alpha found 42."]
        rows = {row["name"]: row for row in ask(node, schema.ListAgents(), "agents").agents}
        assert {name: row["state"] for name, row in rows.items()} == {"Alpha": "done", "Beta": "done"}
        assert rows["Alpha"]["task"] == "find the number"

        read = lambda msg: ask(node, msg)  # noqa: E731
        alpha = transcript_page(read, "Alpha")
        lines = alpha.splitlines()
        assert lines[0] == "0 user: find the number"
        assert lines[1] == "1 state: working"
        assert lines[2] == "2 everchat: Checking the date."
        assert lines[3] == '3 tool: date {"id": 0}'
        assert lines[4].startswith("4 echo: 20")  # the date of message 0
        assert lines[5] == "5 everchat: Alpha found 42."
        assert lines[6] == "6 work: [Alpha] Alpha found 42."
        assert lines[7] == "7 reported: agent-Alpha-report-1"
        assert "everchat: Beta is done." in transcript_page(read, "Beta")
        count = ask(node, schema.CountMessages()).messages
        view = node.ask("planner", schema.SettleView(until=count, timeout=20), timeout=60).text
        assert "work: [Beta] Beta is done." in view and "work: [Alpha] Alpha found 42." in view
        assert "Checking the date." not in view  # R38: an agent's steps stay in its transcript
        assert logged.ids == [1]

        # a restart finds nothing left to report: still once each
        assert node.stop_actor("agents", timeout=10)
        node.host("agents", AgentsActor, settings)
        assert len(ask(node, schema.ListAgents(), "agents").agents) == 2
        assert work_messages(node) == ["[Beta] Beta is done.", "[Alpha] Alpha found 42."]
        assert any(e.name == "Alpha" and e.state == "done" for e in events)
        # R34: an agent's call sends the turn's very system prompt and tools (one cache entry)
        turn = next(c.body for c in fake.model_calls if c.headers.get("x-everchat-call") == "turn")
        agent = next(c.body for c in fake.model_calls if c.headers.get("x-everchat-call") == "agent")
        assert agent["system"] == turn["system"] and agent["tools"] == turn["tools"]
        assert [tool["name"] for tool in agent["tools"]] == ["zoom", "date", "search", "fetch", "spawn", "tell"]
    finally:
        node.stop()


def test_r38_a_stopped_agent_reports_that_it_was_stopped_and_its_jobs_are_stopped(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    never = Gate()
    fake.rule(lambda request: Reply(Text("never sent"), gate=never))
    node = Node("agents-stop").start()
    try:
        host_chat(node, tmp_path / "chat", settings)
        answer = ask(node, schema.SpawnAgent("Slow", "wait forever", "k1"), "agents")
        assert (answer.name, answer.state) == ("Slow", "working")
        again = ask(node, schema.SpawnAgent("Slow", "wait forever", "k1"), "agents")
        assert again.state == "working" and "already" in again.detail  # the key: never a second agent
        with pytest.raises(RemoteError, match="exists already"):
            ask(node, schema.SpawnAgent("Slow", "another task", "k2"), "agents")  # names are permanent
        with pytest.raises(RemoteError, match="starts with a letter"):
            ask(node, schema.SpawnAgent("9lives", "x", "k3"), "agents")
        wait_until(lambda: "state: working" in transcript_page(lambda m: ask(node, m), "Slow"), 30, "the run")
        ask(node, schema.StopAgent("Slow"), "agents")
        wait_until(lambda: work_messages(node), 30, "the report")
        assert work_messages(node) == ["[Slow] (stopped: stopped by the person) (no reply)"]
        if hasattr(schema, "StopJobs"):
            assert node._mailboxes["devices"].actor.stopped == ["Slow"]
    finally:
        never.open()
        node.stop()


def test_r38_the_ninth_agent_waits_in_the_queue(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    hold = Gate()
    fake.rule(lambda request: Reply(Text("held"), gate=hold))
    node = Node("agents-queue").start()
    try:
        host_chat(node, tmp_path / "chat", settings)
        states = [ask(node, schema.SpawnAgent(f"Q{n}", "wait", f"k{n}"), "agents").state for n in range(9)]
        assert states == ["working"] * 8 + ["queued"]
        rows = ask(node, schema.ListAgents(), "agents").agents
        assert rows[-1] == {"name": "Q8", "state": "queued", "task": "wait", "position": 1}
        assert ask(node, schema.SpawnAgent("Q9", "wait", "k9"), "agents").state == "queued"
        ask(node, schema.StopAgent("Q8"), "agents")  # a queued agent leaves the queue and says so
        wait_until(lambda: work_messages(node), 30, "Q8's report")
        assert work_messages(node) == ["[Q8] (stopped: stopped before it began) (no reply)"]
        assert ask(node, schema.ListAgents(), "agents").agents[-1]["position"] == 1  # Q9 moved up
        hold.open()
        wait_until(lambda: len(work_messages(node)) == 10, 60, "ten reports")
        assert sorted(work_messages(node)[1:]) == sorted(f"[Q{n}] held" for n in (*range(8), 9))
    finally:
        hold.open()
        node.stop()


def run_child(mode: str, chat: Path, address: str = "", crash: str = "work") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CHILD), mode, str(chat), address, crash], stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True)


@pytest.mark.parametrize("mode, crash", [("all", "work"), ("log_writer", "work"), ("all", "message"),
                                         ("log_writer", "message")])
def test_r38_a_kill_between_the_outbox_and_the_chat_still_reports_once(monkeypatch, tmp_path, fake, mode, crash):
    """`all`: the process hosting the agents actor (and the log writer) dies; `log_writer`:
    only the log writer's process dies, and the agents actor, in this process, asks again
    until a new log writer answers. `work`: right after the outbox record's fsync, before
    the chat has the report; `message`: right after the chat has it, before `reported`
    (the resend must be recognised by its key)."""
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    fake.rule(lambda request: Reply(Text("Solo says hi.")))
    chat = tmp_path / "chat"
    address = f"ipc://{tmp_path}/lw.sock"
    child = run_child(mode, chat, address, crash)
    node = None
    try:
        assert child.stdout.readline().strip() == "ready"
        if mode == "all":
            child.stdin.write("spawn\n")
            child.stdin.flush()
        else:
            node = Node("agents-near").start()
            node.route("log_writer", address)
            node.route("planner", address)
            node.host("agents", AgentsActor, settings)
            ask(node, schema.SpawnAgent("Solo", "say hi", "k1"), "agents")
        assert child.wait(timeout=60) == 86  # the crash point
        records = Transcripts(chat, writer=False).records("Solo")
        assert [r.kind for r in records][-1] == "work"
        main = list((chat / "main").glob("*.jsonl"))
        assert (b"[Solo]" in b"".join(p.read_bytes() for p in main)) == (crash == "message")
        if mode == "all":
            node = Node("agents-after").start()
            host_chat(node, chat, settings)
        else:
            child = run_child("restart", chat, address)
            assert child.stdout.readline().strip() == "ready"
        wait_until(lambda: Transcripts(chat, writer=False).records("Solo")[-1].kind == "reported", 60,
                   "the report, noted")
        if mode == "all":
            texts = work_messages(node)
        else:
            texts = [r for r in node.ask("log_writer", schema.ReadMessage(i=0), timeout=30).text.splitlines()]
            assert ask(node, schema.CountMessages()).messages == 1
        assert texts == ["[Solo] Solo says hi."]
        # and a restart of the agents actor finds it reported: still once
        assert node.stop_actor("agents", timeout=10)
        node.host("agents", AgentsActor, settings)
        ask(node, schema.ListAgents(), "agents")
        assert ask(node, schema.CountMessages()).messages == 1
    finally:
        if node is not None:
            node.stop()
        if child.poll() is None:
            child.stdin.close()
            child.wait(timeout=30)


def test_r38_a_tell_joins_a_working_agent_and_continues_a_finished_one_from_its_transcript(
        monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    first_call = Gate()

    def rule(request):
        last = request.last_user_text
        if "now check z" in last:
            return Reply(Text("z checked too."))
        if "also check y" in last:
            return Reply(Text("Alpha done, also y."))
        return Reply(ToolCall("date", {"id": 0}, id="d1"), gate=first_call)

    fake.rule(rule)
    node = Node("agents-tell").start()
    try:
        host_chat(node, tmp_path / "chat", settings)
        ask(node, schema.Append("user", "a note before", "note-0", [], None))
        ask(node, schema.SpawnAgent("Alpha", "find the number", "k1"), "agents")
        wait_until(lambda: "state: working" in transcript_page(lambda m: ask(node, m), "Alpha"), 30, "the run")
        told = ask(node, schema.TellAgent("Alpha", "also check y", "t1"), "agents")
        assert told.state == "working" and "between its tool calls" in told.detail
        first_call.open()
        wait_until(lambda: work_messages(node) == ["[Alpha] Alpha done, also y."], 60, "the first report")
        again = ask(node, schema.TellAgent("Alpha", "now check z", "t2"), "agents")
        assert again.state in ("queued", "working")
        wait_until(lambda: len(work_messages(node)) == 2, 60, "the second report")
        assert work_messages(node) == ["[Alpha] Alpha done, also y.", "[Alpha] z checked too."]
        assert ask(node, schema.TellAgent("Alpha", "now check z", "t2"), "agents").state == "done"  # the key
        calls = [c for c in fake.model_calls if c.headers.get("x-everchat-call") == "agent"]
        body = calls[-1].body
        roles = [m["role"] for m in body["messages"]]
        assert roles[0] == "user" and roles[-1] == "user" and "assistant" in roles
        flat = json.dumps(body["messages"])
        assert "find the number" in flat and "Alpha done, also y." in flat and "now check z" in flat
        assert body["messages"][-1]["content"][-1]["text"].endswith("now check z")
        # the tell that joined the first run between its tool calls came from the chat (R38)
        joined = next(c.body for c in calls if "also check y" in json.dumps(c.body["messages"][-1]))
        said = [block.get("text", "") for block in joined["messages"][-1]["content"] if block.get("type") == "text"]
        assert any(text.startswith("[The chat told you this (record ") and text.endswith("also check y")
                   for text in said), said
        assert "The person wrote this" not in json.dumps(joined["messages"])
        page = transcript_page(lambda m: ask(node, m), "Alpha")
        assert "user: also check y" in page and "user: now check z" in page
        assert "reported: agent-Alpha-report-2" in page
    finally:
        first_call.open()
        node.stop()


def test_r38_an_agent_working_when_its_process_died_is_reported_failed_once(monkeypatch, tmp_path, fake):
    """The process dies right after a run's `everchat` reply is fsynced, before the run
    ended: at the next start the agent is failed (never run again, R39) and one report
    says so, with the reply it had."""
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    fake.rule(lambda request: Reply(Text("Half done."), ToolCall("date", {"id": 0}, id="d1")))
    chat = tmp_path / "chat"
    child = run_child("all", chat, crash="everchat")
    node = None
    try:
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("spawn\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 86
        node = Node("agents-after-run").start()
        host_chat(node, chat, settings)
        wait_until(lambda: work_messages(node), 60, "the failed report")
        (text,) = work_messages(node)
        assert text.startswith("[Solo] (failed: Everchat stopped while it worked") and text.endswith("Half done.")
        rows = ask(node, schema.ListAgents(), "agents").agents
        assert rows == [{"name": "Solo", "state": "failed", "task": "say hi", "position": 0}]
        wait_until(lambda: Transcripts(chat, writer=False).records("Solo")[-1].kind == "reported", 30, "noted")
        assert node.stop_actor("agents", timeout=10)
        node.host("agents", AgentsActor, settings)
        ask(node, schema.ListAgents(), "agents")
        assert len(work_messages(node)) == 1
        assert [c for c in fake.model_calls if c.headers.get("x-everchat-call") == "agent"].__len__() == 1  # not rerun
    finally:
        if node is not None:
            node.stop()
        if child.poll() is None:
            child.stdin.close()
            child.wait(timeout=30)


def test_r38_everchat_agents_and_ops_ask_the_running_agents_actor(monkeypatch, tmp_path, fake):
    """A chat served here (its run file names this node as the supervisor's): `everchat
    agents` lists the live queue, and `everchat ops` shows it under the agents' row."""
    import json as json_
    import os
    import socket

    from everchat.actors.supervisor.catalog import NodeAgent
    from everchat.frontends.cli.agents import live_agents
    from everchat.frontends.ops import fetch_rows

    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    hold = Gate()
    fake.rule(lambda request: Reply(Text("held"), gate=hold))
    chat = tmp_path / "chat"
    (chat / "run").mkdir(parents=True)
    node = Node("served", bind=f"ipc://{chat}/run/served.sock").start()
    try:
        host_chat(node, chat, settings)
        node.host("supervisor", NodeAgent)  # answers StatsRequest with this node's rows
        (chat / "run" / "supervisor.json").write_text(json_.dumps({
            "version": 1, "pid": os.getpid(), "host": socket.gethostname(), "endpoint": node.endpoint,
            "placement": "single", "transport": "ipc", "attachable": True}))
        ask(node, schema.SpawnAgent("Scout", "look", "k"), "agents")
        assert live_agents(chat) == [{"name": "Scout", "state": "working", "task": "look", "position": 0}]
        (row,) = [row for row in fetch_rows(chat) if row.get("name") == "agents"]
        assert (row["working"], row["queued"]) == (1, [])
    finally:
        hold.open()
        node.stop()
