"""ChatSession, what the front ends hold: the demo model end to end, stop, status, notes,
zoom and date, the lock, and the turn runner in its own process."""

from __future__ import annotations

import os

import pytest

from everchat.actors.settings import load
from everchat.actors.session.session import ChatSession, ZoomError
from everchat.actors.folder import ChatLocked
from everchat.actors.supervisor.actor import Placement
from everchat.actors.turns.turn import incomplete_text
from everchat.tools.fakemodel import Latency, Reply, ServerError, Text, ToolCall
from everchat.transport import schema

from test_turns_wire import configure, fake, server, turn_calls, until_end  # noqa: F401 (fixtures)


def demo(tmp_path):
    return load({"demo": True}, env={}, home=tmp_path)


def reply_of(events):
    return "".join(e.text for e in events if isinstance(e, schema.TurnText))


def test_the_demo_model_finds_what_it_was_asked_to_remember_in_a_later_session_by_zooming(tmp_path):
    with ChatSession.open(demo(tmp_path)) as session:
        turn = session.send("Remember amber-42.")
        until_end(session, turn)
    with ChatSession.open(demo(tmp_path)) as session:
        turn = session.send("What did I ask you to remember?")
        events = until_end(session, turn)
    calls = [e for e in events if isinstance(e, schema.TurnToolCall)]
    assert [c.name for c in calls] == ["zoom"] and calls[0].arguments_json == '{"id": 0, "n": 1}'
    assert "amber-42" in reply_of(events)


def test_r37_stop_ends_the_call_keeps_what_streamed_and_the_next_turn_works(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    story = "".join(f"part{n} " for n in range(100))
    fake.script(Reply(Text(story), latency=Latency(per_chunk=0.1)), Reply(Text("Short now.")))
    with ChatSession.open(settings) as session:
        turn = session.send("Tell me everything.")
        shown = []
        while len(shown) < 3:
            event = session.next_event(timeout=30)
            if isinstance(event, schema.TurnText):
                shown.append(event.text)
        session.stop()
        events = until_end(session, turn)
        end = events[-1]
        assert end.reason == "stopped" and end.incomplete
        text = session.zoom(turn + 1, 1).removeprefix("everchat: ")
        partial = text.rpartition("\n")[0]
        assert text == incomplete_text(partial, "stopped")
        assert partial.startswith("".join(shown)) and len(partial) < len(story)
        again = session.send("Shorter, please.")
        assert reply_of(until_end(session, again)) == "Short now."
        assert session.status()["messages"] == 4


def test_the_round_limit_ends_a_turn_with_a_note_to_the_person(monkeypatch, tmp_path, fake):
    monkeypatch.setenv("EVERCHAT_TOOL_ROUNDS", "2")
    settings = configure(monkeypatch, tmp_path, fake, "openai")
    fake.script(*[Reply(ToolCall("date", {"id": 0}, id=f"d{n}")) for n in range(3)])
    with ChatSession.open(settings) as session:
        turn = session.send("Loop forever.")
        end = until_end(session, turn)[-1]
    assert end.reason == "round_limit" and "2 tool rounds" in end.detail
    assert len(turn_calls(fake)) == 2


def test_status_note_view_zoom_and_date(tmp_path):
    with ChatSession.open(demo(tmp_path)) as session:
        first = session.note("an old memory")
        second = session.note("x" * 2000)  # a compaction builds its leaf
        session.compact(timeout=60)
        status = session.status()
        assert (first, second) == (0, 1)
        assert status["messages"] == 2 and status["pending"] == 0 and status["failures"] == 0
        assert status["model"] == "demo" and status["view_budget"] == 128_000
        view = session.view()
        assert view.startswith("<chat>\n0+1|note: an old memory\n1+1|") and "not summarized" not in view
        assert status["view_bytes"] == sum(len(line.encode()) + 1 for line in view.splitlines()[1:-1])
        assert status["view_lines"] == len(view.splitlines()) - 2  # named as `everchat status` names it
        assert session.zoom(0, 2).startswith("0+1|note: an old memory\n1+1|")
        assert session.zoom(1, 1) == "note: " + "x" * 2000
        assert session.date(0)[:4].isdigit()
        with pytest.raises(ZoomError, match=r"^No line 2\+2\."):
            session.zoom(2, 2)
        with pytest.raises(ZoomError, match="No agent named 'Ada'"):
            session.zoom("Ada")
        with pytest.raises(ZoomError, match="No message 5"):
            session.date(5)


def test_r5_a_second_session_on_the_same_chat_is_refused_naming_the_owner(tmp_path):
    with ChatSession.open(demo(tmp_path)):
        with pytest.raises(ChatLocked, match=f"locked by its writer, pid {os.getpid()} on host"):
            ChatSession.open(demo(tmp_path))
    with ChatSession.open(demo(tmp_path)) as session:  # released at close
        assert session.status()["messages"] == 0


def test_the_turn_runner_in_its_own_process_runs_the_same_turn(tmp_path):
    placement = Placement("processes", workers=1)
    with ChatSession.open(demo(tmp_path), placement=placement) as session:
        pids = {child.name: child.pid for child in session.supervisor.children.values()}
        assert len(set(pids.values())) == len(pids)  # the turn runner has a process of its own
        session.note("Remember amber-42.")
        turn = session.send("What did I ask you to remember?")
        events = until_end(session, turn)
    assert "amber-42" in reply_of(events)


def test_r30_a_failed_compaction_reaches_the_person_as_a_notice(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    fake.rule(lambda request: ServerError() if "Compaction: " in request.last_user_text else Reply(Text("ok")))
    with ChatSession.open(settings) as session:
        session.note("long " * 200)  # its leaf needs a compaction, which fails
        notice = session.next_event(timeout=30)
        assert isinstance(notice, schema.Notice) and notice.level == "warning"
        assert notice.text.startswith("Summarizing 0+1 failed (1 of 3): ")
        assert session.status()["failures"] >= 1


def test_extra_tools_follow_the_memory_tools_and_their_results_are_logged(monkeypatch, tmp_path, fake):
    from everchat.actors.models import ToolSpec

    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    spec = ToolSpec("shout", "Upper-cases its text.", {"type": "object", "properties": {"text": {"type": "string"}}})
    fake.script(Reply(ToolCall("shout", {"text": "hi"}, id="s1")), Reply(ToolCall("shout", {}, id="s2")),
                Reply(Text("Done.")))
    with ChatSession.open(settings, extra_tools=[(spec, lambda arguments: arguments["text"].upper())]) as session:
        turn = session.send("Shout hi.")
        events = until_end(session, turn)
        results = [e for e in events if isinstance(e, schema.TurnToolResult)]
        assert [(r.preview, r.is_error) for r in results] == [("HI", False), ("shout failed: KeyError: 'text'", True)]
        assert session.zoom(turn + 2, 1) == "echo: HI"
        # A message over 512 bytes needs a compaction (R11); the script is spent, so the
        # fake echoes from here on, for the turn and the compaction alike.
        until_end(session, session.send("Remember the amber probe: " + "basalt and cedar " * 40))
        session.compact(timeout=120)
    # the memory tools, the hands (docs/HANDS.md §2), then the extra ones
    assert [tool["name"] for tool in turn_calls(fake)[0].body["tools"]] == [
        "zoom", "date", "search", "fetch", "spawn", "tell", "shell", "read", "write", "edit", "shout"]
    # R26, R45: compactions send the turns' very system prompt and tools, extra tools included.
    compactions = [c for c in fake.model_calls if c.headers.get("x-everchat-call") == "compaction"]
    assert compactions
    for call in compactions:
        assert (call.body["system"], call.body["tools"]) == (turn_calls(fake)[0].body["system"],
                                                             turn_calls(fake)[0].body["tools"])


def test_r37_closing_during_a_turn_stops_it_and_keeps_what_streamed(monkeypatch, tmp_path, fake):
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    fake.script(Reply(Text("".join(f"bit{n} " for n in range(100))), latency=Latency(per_chunk=0.1)))
    session = ChatSession.open(settings)
    turn = session.send("Talk a while.")
    shown = []
    while len(shown) < 2:
        event = session.next_event(timeout=30)
        if isinstance(event, schema.TurnText):
            shown.append(event.text)
    assert session.status()["running"]
    session.close()
    with ChatSession.open(settings) as again:
        assert again.status()["messages"] == 2
        text = again.zoom(turn + 1, 1)
    assert text.startswith("everchat: " + "".join(shown)) and text.endswith("[incomplete: stopped by the person]")


def test_r9_a_file_that_is_not_an_image_is_refused_before_anything_is_logged(tmp_path):
    from everchat.transport import RemoteError

    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a picture")
    with ChatSession.open(demo(tmp_path)) as session:
        with pytest.raises(RemoteError, match="not a PNG, JPEG, GIF or WebP image"):
            session.send("Look.", images=[text_file])
        assert session.status()["messages"] == 0


def test_a_reply_model_without_its_key_ends_the_turn_with_the_reason(monkeypatch, tmp_path, fake):
    configure(monkeypatch, tmp_path, fake, "anthropic")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("EVERCHAT_COMPACTION_PROVIDER", "demo")
    settings = load()
    with ChatSession.open(settings) as session:
        turn = session.send("Hello?")
        end = until_end(session, turn)[-1]
        assert end.reason == "error" and "MissingKey" in end.detail and "ANTHROPIC_API_KEY" in end.detail
        assert session.zoom(turn, 1) == "user: Hello?"  # the message is kept for the next try
