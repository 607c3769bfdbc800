"""Issue 11 through a whole chat (R26, R34, R38, R39): a ChatSession with every actor of the
single placement (the real device hub and agents actor included), the real SDK on the wire
and the fake model server scripting the model. The turn spawns two agents; each runs shell
commands on this computer; both reports arrive once, in the order they finished; zoom of
each name shows its steps; the next turn's view holds the reports; and every call of the
chat (the turns, the agents, the compactions) sends the same system prompt and tools."""

from __future__ import annotations

from pathlib import Path

from everchat.actors.session.session import ChatSession
from everchat.tools.fakemodel import Gate, Reply, Text, ToolCall
from everchat.transport import schema

from polling import wait_until
from test_turns_wire import configure, fake, server, until_end  # noqa: F401 (fixtures)

WAIT = 60.0


def _opening(request) -> str:
    return next((text for role, text in request.messages if role == "user"), "")


def _rounds(request) -> int:
    return sum(1 for role, _ in request.messages if role == "assistant")


def _work(session) -> list[str]:
    out = []
    for i in range(session.count_messages()):
        record = session.node.ask("log_writer", schema.ReadMessage(i=i), timeout=30)
        if record.kind == "work":
            out.append(record.text)
    return out


def test_r38_r39_two_agents_run_shell_here_and_report_once_in_the_order_they_finished(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    assert settings.devices
    alpha_may_end = Gate()

    def rule(request):
        opening, rounds = _opening(request), _rounds(request)
        if "Compaction: " in request.last_user_text:
            return Reply(Text("user: a long note about basalt and cedar"))
        if "the agent Alpha's task" in opening:
            if rounds == 0:
                return Reply(ToolCall("shell", {"command": "echo alpha > alpha.txt && cat alpha.txt && pwd"}, id="a1"))
            return Reply(Text("Alpha wrote alpha.txt."), gate=alpha_may_end)
        if "the agent Beta's task" in opening:
            if rounds == 0:
                return Reply(ToolCall("shell", {"command": "echo beta-$((6*7))"}, id="b1"))
            return Reply(Text("Beta printed beta-42."))
        if "Start agents" in request.last_user_text and rounds == 0:
            return Reply(ToolCall("spawn", {"name": "Alpha", "task": "write alpha.txt"}, id="s1"),
                         ToolCall("spawn", {"name": "Beta", "task": "print beta"}, id="s2"))
        return Reply(Text("ok"))

    fake.rule(rule)
    with ChatSession.open(settings) as session:
        turn = session.send("Start agents Alpha and Beta.")
        until_end(session, turn)
        wait_until(lambda: _work(session) == ["[Beta] Beta printed beta-42."], WAIT, "Beta's report")
        alpha_may_end.open()
        wait_until(lambda: len(_work(session)) == 2, WAIT, "Alpha's report")
        assert _work(session) == ["[Beta] Beta printed beta-42.", "[Alpha] Alpha wrote alpha.txt."]

        # R39: the shell ran on this computer, in the agent's own work folder
        work = Path(settings.home) / "work" / "Alpha"
        assert (work / "alpha.txt").read_text() == "alpha\n"
        alpha = session.zoom("Alpha")
        assert 'tool: shell {"command": "echo alpha > alpha.txt && cat alpha.txt && pwd"}' in alpha
        assert f"alpha\n{work}\n[exit 0]" in alpha and "everchat: Alpha wrote alpha.txt." in alpha
        assert "echo: beta-42\n[exit 0]" in session.zoom("Beta")

        # the next turn's view holds both reports, and not the agents' steps (R38)
        session.note("A long note: " + "basalt and cedar " * 40)  # its leaf needs a compaction
        until_end(session, session.send("What did they find?"))
        session.compact(timeout=WAIT)
        rows = {row["name"]: row["state"] for row in session.agents()}
        assert rows == {"Alpha": "done", "Beta": "done"}

    turns = [c for c in fake.model_calls if c.headers.get("x-everchat-call") == "turn"]
    agents = [c for c in fake.model_calls if c.headers.get("x-everchat-call") == "agent"]
    compactions = [c for c in fake.model_calls if c.headers.get("x-everchat-call") == "compaction"]
    assert len(turns) >= 3 and len(agents) == 4 and compactions
    last_view = "".join(block["text"] for block in turns[-1].body["messages"][0]["content"] if "text" in block)
    assert "work: [Beta] Beta printed beta-42." in last_view and "work: [Alpha] Alpha wrote alpha.txt." in last_view
    assert "echo alpha > alpha.txt" not in last_view
    # R26, R34, R45: one system prompt and one tool list for every call: one cache entry
    first = turns[0].body
    assert [tool["name"] for tool in first["tools"]] == ["zoom", "date", "search", "fetch", "spawn", "tell", "shell",
                                                         "read", "write", "edit"]
    for call in turns + agents + compactions:
        assert (call.body["system"], call.body["tools"]) == (first["system"], first["tools"]), call.headers


def test_r34_r38_a_report_logged_while_the_turn_works_joins_it_between_tool_calls(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    turn_may_go_on = Gate()

    def rule(request):
        opening, rounds = _opening(request), _rounds(request)
        if "Compaction: " in request.last_user_text:
            return Reply(Text("a line"))
        if "the agent Beta's task" in opening:
            return Reply(Text("Beta found 7."))
        if rounds == 0:
            return Reply(ToolCall("spawn", {"name": "Beta", "task": "find it"}, id="s1"))
        if rounds == 1:  # the turn works on while Beta reports
            return Reply(ToolCall("date", {"id": 0}, id="d1"), gate=turn_may_go_on)
        return Reply(Text("Beta says 7."))

    fake.rule(rule)
    with ChatSession.open(settings) as session:
        turn = session.send("Send Beta, then check the date.")
        wait_until(lambda: _work(session) == ["[Beta] Beta found 7."], WAIT, "Beta's report")
        turn_may_go_on.open()
        events = until_end(session, turn)
        report = next(i for i in range(session.count_messages())
                      if session.node.ask("log_writer", schema.ReadMessage(i=i), timeout=30).kind == "work")
        assert schema.TurnJoined(turn=turn, message=report) in events
    turns = [c for c in fake.model_calls if c.headers.get("x-everchat-call") == "turn"]
    last = turns[-1].body["messages"][-1]["content"]
    texts = [block.get("text", "") for block in last if block.get("type") == "text"]
    assert f"[An agent's report arrived while you worked (message {report}):]\n[Beta] Beta found 7." in texts
