"""AgentBook, the agents' pure core (R38): names, the queue and its limit, keys, tells,
the outbox, and what a restart rebuilds from the transcripts."""

from __future__ import annotations

import pytest

from everchat.actors.agents.actor import (AGENT_LIMIT, AgentBook, AgentError, agent_header, history_messages,
                                    report_key, report_text)
from everchat.actors.prompt.tasks import TURN_OPENING
from everchat.actors.models import TextBlock, ToolResultBlock, ToolUseBlock
from everchat.actors.turns.turn import Input


def spawn(book: AgentBook, name: str, n: int = 0) -> None:
    book.spawned(name, f"task of {name}", f"spawn:k-{name}", Input((n,), f"task of {name}"))


def test_r38_names_start_with_a_letter_and_are_permanent():
    book = AgentBook()
    for bad in ("1st", "", "a b", "-x", "x" * 41):
        with pytest.raises(ValueError):
            book.check_spawn(bad)
    spawn(book, "Alpha")
    with pytest.raises(AgentError, match="exists already"):
        spawn(book, "Alpha")
    book.next_runs()
    book.ended("Alpha", "done", 1, report_key("Alpha", 1), "[Alpha] ok")
    with pytest.raises(AgentError, match="names are permanent"):
        book.check_spawn("Alpha")


def test_r38_at_most_8_work_at_once_and_the_rest_wait_in_order():
    book = AgentBook()
    assert book.limit == AGENT_LIMIT == 8
    for n in range(10):
        spawn(book, f"A{n}", n)
    started = book.next_runs()
    assert [agent.name for agent, _ in started] == [f"A{n}" for n in range(8)]
    assert [row["position"] for row in book.rows()] == [0] * 8 + [1, 2]
    assert [row["state"] for row in book.rows()] == ["working"] * 8 + ["queued"] * 2
    assert book.next_runs() == []
    book.ended("A3", "done", 1, report_key("A3", 1), "[A3] ok")
    assert [agent.name for agent, _ in book.next_runs()] == ["A8"]
    assert book.statistics() == {"limit": 8, "working": 8, "queued": ["A9"], "agents": 10}


def test_r38_the_limit_is_configurable():
    book = AgentBook(limit=2)
    for n in range(3):
        spawn(book, f"B{n}", n)
    assert len(book.next_runs()) == 2
    with pytest.raises(ValueError):
        AgentBook(limit=0)


def test_r38_a_spawn_key_reaches_the_agent_it_started():
    book = AgentBook()
    spawn(book, "Alpha")
    assert book.known("spawn:k-Alpha").name == "Alpha"
    assert book.known("spawn:other") is None


def test_r38_a_tell_joins_a_working_run_until_its_last_join_then_starts_the_next_run():
    book = AgentBook()
    spawn(book, "Alpha")
    (agent, first), = book.next_runs()
    assert first.ids == (0,) and agent.runs == 1
    assert book.tell_target("Alpha") == (agent, 1)
    book.told("Alpha", "tell:t1", Input((3,), "also this"), 1)
    assert [m.text for m in book.take_joined("Alpha", final=False)] == ["also this"]
    assert book.take_joined("Alpha", final=True) == []  # the run takes no more
    assert book.tell_target("Alpha") == (agent, 2)
    book.told("Alpha", "tell:t2", Input((5,), "go on"), 2)
    assert agent.state == "working"  # its run still ends: the tell waits for it
    book.ended("Alpha", "done", 1, report_key("Alpha", 1), "[Alpha] ok")
    assert agent.state == "queued"
    (again, second), = book.next_runs()
    assert (again.runs, second.text) == (2, "go on")
    with pytest.raises(AgentError, match="no agent named"):
        book.tell_target("Nobody")


def test_r38_restore_rebuilds_states_the_queue_and_the_unreported_outbox():
    records = {
        "Done": [
            {"i": 0, "kind": "user", "text": "t", "key": "spawn:a", "meta": {"task": True, "run": 1}},
            {"i": 1, "kind": "state", "text": "working", "key": "run-1", "meta": {"run": 1}},
            {"i": 2, "kind": "everchat", "text": "found it", "key": "turn-0-1", "meta": {"run": 1}},
            {"i": 3, "kind": "work", "text": "[Done] found it", "key": "report-1",
             "meta": {"run": 1, "state": "done", "key": "agent-Done-report-1"}},
        ],
        "Reported": [
            {"i": 0, "kind": "user", "text": "t", "key": "spawn:b", "meta": {"task": True, "run": 1}},
            {"i": 1, "kind": "state", "text": "working", "key": "run-1", "meta": {"run": 1}},
            {"i": 2, "kind": "work", "text": "[Reported] x", "key": "report-1",
             "meta": {"run": 1, "state": "done", "key": "agent-Reported-report-1"}},
            {"i": 3, "kind": "reported", "text": "agent-Reported-report-1", "key": "reported-1",
             "meta": {"run": 1}},
        ],
        "Cut": [
            {"i": 0, "kind": "user", "text": "t", "key": "spawn:c", "meta": {"task": True, "run": 1}},
            {"i": 1, "kind": "state", "text": "working", "key": "run-1", "meta": {"run": 1}},
        ],
        "Waiting": [
            {"i": 0, "kind": "user", "text": "wait", "key": "spawn:d", "meta": {"task": True, "run": 1}},
        ],
    }
    book = AgentBook()
    for name, recs in records.items():
        book.restore(name, recs)
    states = {row["name"]: row["state"] for row in book.rows()}
    assert states == {"Done": "done", "Reported": "done", "Cut": "working", "Waiting": "queued"}
    assert book.agents["Done"].outbox == {1: ("agent-Done-report-1", "[Done] found it")}
    assert book.agents["Reported"].outbox == {}
    assert list(book.queue) == ["Waiting"]
    assert book.known("spawn:c").name == "Cut"


def test_r3_a_report_is_one_work_text_starting_with_the_name():
    assert report_text("Alpha", "done", "the answer") == "[Alpha] the answer"
    assert report_text("Alpha", "stopped", "", "stopped by the person") == \
        "[Alpha] (stopped: stopped by the person) (no reply)"


def test_r36_r38_the_agent_header_opens_like_a_turn_and_names_the_agent():
    from datetime import datetime, timezone

    header = agent_header(datetime(2026, 12, 3, 20, 0, tzinfo=timezone.utc), "Alpha")
    assert header.startswith(TURN_OPENING)
    assert "the agent Alpha's task" in header and "2026-12-03 20:00" in header
    assert "\n\n" not in header


def test_r38_a_continued_agent_gets_its_earlier_run_back_with_every_tool_call_answered():
    records = [
        {"i": 0, "kind": "user", "text": "count files", "meta": {"task": True, "run": 1}},
        {"i": 1, "kind": "state", "text": "working", "meta": {"run": 1}},
        {"i": 2, "kind": "everchat", "text": "Looking.", "meta": {"run": 1}},
        {"i": 3, "kind": "tool", "text": 'shell {"command": "ls"}', "meta": {"run": 1, "call": "c1"}},
        {"i": 4, "kind": "echo", "text": "a b", "meta": {"run": 1, "call": "c1"}},
        {"i": 5, "kind": "tool", "text": 'shell {"command": "wc"}', "meta": {"run": 1, "call": "c2"}},
    ]
    messages = history_messages(records, "<chat>\n0+1|user: hi\n</chat>", "[turn] header")
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0].content[-1] == TextBlock("[turn] header\n\ncount files")
    assert messages[1].content == (TextBlock("Looking."), ToolUseBlock("c1", "shell", {"command": "ls"}))
    assert messages[2].content == (ToolResultBlock("c1", (TextBlock("a b"),), False),)
    assert messages[4].content[0].tool_use_id == "c2" and messages[4].content[0].is_error
