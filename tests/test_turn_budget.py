"""A request never carries more than the budget (issue 8 and issue 20; R19, R36, R38, R27).

Notes logged with no compactor running leave the view far over its ceiling (the review saw
2.1 MB, 16.8 times it): their batches cannot merge pairs whose parents are not built, and
R36 renders a turn's view before its own message (whose batch would come too late). So a
turn whose settled view is still over the ceiling waits for the merges that can fit it and
runs the batch R19 would run at the next message before it renders; `compact` ends with
that batch. It is recorded as a merge record like any other (R25), so a restart refolds it.

Issue 20 (P2): when the merges or the leaves are never built (a compaction model that takes
the call and never answers), the settle wait times out, and R36's marked starts once sent
27.9 times the ceiling. Every path is tested here with thousands of notes logged straight
into the store and that model: a turn, an agent, a compaction, a goal's check. Each request
is read off the fake server's wire (docs/SPEC.md, R36's "Our choice").
"""

from __future__ import annotations

import re

from cli_world import env, everchat  # noqa: F401  (env is a fixture)

from everchat.actors.session.local import Chat
from everchat.actors.planner.planning import UNSETTLED_MARK
from everchat.actors.session.session import ChatSession
from everchat.tools.fakemodel import FakeModelServer, Gate, Reply, Text, ToolCall
from everchat.transport import schema

from polling import wait_until
from test_turns_wire import configure, until_end

CEILING = 128_000
WAIT = 120.0
_MERGE = re.compile(r"one line for (\d+)\+\d+\.")


def _notes(chat, count: int) -> int:
    """Log `count` notes of about 480 bytes (each its own free leaf, R11; their parents need
    a compaction) the way `note` does; returns the view's size."""
    with Chat.open(chat, create=True) as writer:
        writer.add_many(("note", f"note {n}: " + "amber and basalt " * 28) for n in range(count))
        return writer.planner.view.size


def _view_bytes(body) -> int:
    """R16's size of the view a request carries: its lines between <chat> and </chat>."""
    text = "".join(block.get("text", "") for message in body["messages"] for block in
                   (message["content"] if isinstance(message["content"], list) else [{"text": message["content"]}]))
    inner = re.search(r"<chat>\n(.*?)</chat>", text, re.S)
    assert inner, "the request carries a view"
    return len(inner.group(1).encode())


def test_r19_r36_a_turn_after_many_notes_sends_at_most_the_ceiling(env, tmp_path):  # noqa: F811
    chat = tmp_path / "chat"
    assert _notes(chat, 600) > 2 * CEILING
    with FakeModelServer() as server:
        server.script(Reply(Text("Noted.")))
        run_env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="anthropic",
                       EVERCHAT_REPLY_BASE_URL=server.base_url, EVERCHAT_COMPACTION_PROVIDER="demo")
        done = everchat(run_env, "--data-dir", str(chat), "ask", "What did the notes say?", "--no-wait",
                        timeout=600)
        assert done.returncode == 0, done.stderr
        [call] = [c for c in server.model_calls if c.model != "demo"]
        assert _view_bytes(call.body) <= CEILING
    with Chat.open(chat, writer=False) as reader:  # the batch is a record: a reader refolds it
        assert reader.check()["merges"] >= 1
        reader.verify_views()


def test_r19_compact_ends_with_the_batch_of_the_next_message(env, tmp_path):  # noqa: F811
    chat = tmp_path / "chat"
    assert _notes(chat, 400) > CEILING
    done = everchat(env, "--demo", "--data-dir", str(chat), "compact", timeout=600)
    assert done.returncode == 0, done.stderr
    with Chat.open(chat, writer=False) as reader:
        status = reader.status()
        assert status["view_bytes"] <= status["floor"] and not status["view_shrinking"]
        assert status["unbuilt_lines"] == 0
        reader.check()


# --- issue 20: a compaction model that never answers --------------------------------------


def _long_notes(chat, count: int) -> None:
    """`count` notes of about 620 bytes, logged with no compactor (as `import --log-only`
    does): each leaf needs a compaction, so every line is R15's placeholder."""
    with Chat.open(chat, create=True) as writer:
        writer.add_many(("note", f"note {n}: " + "cedar and flint " * 38) for n in range(count))
        assert writer.planner.unbuilt_lines() == count


def _held_compactions(held: Gate, answer_before: int = 0):
    """The fake server's rule: a compaction takes the call and never answers while `held`
    is closed, except merges of messages before `answer_before`, answered at once; a
    tool-less call (the goal's check) is met; an agent says it is done; a turn spawns the
    agent Scout when asked to, else notes."""
    def rule(request):
        said = request.last_user_text
        if "Compaction: " in said:
            merge = _MERGE.search(said)
            if merge and int(merge.group(1)) < answer_before:
                return Reply(Text("summary"))
            return Reply(Text("late summary"), gate=held)
        if not request.tool_names:
            return Reply(Text("Goal met."))
        opening = next((text for role, text in request.messages if role == "user"), "")
        if "the agent Scout's task" in opening:
            return Reply(Text("Scout is done."))
        if "Send Scout" in said and not any(role == "assistant" for role, _ in request.messages):
            return Reply(ToolCall("spawn", {"name": "Scout", "task": "read the notes"}, id="s1"))
        return Reply(Text("Noted."))
    return rule


def _calls(server, label: str) -> list:
    """The requests of one kind (`x-everchat-call`) whose body has arrived."""
    return [c for c in server.model_calls if c.headers.get("x-everchat-call") == label and c.body is not None]


def _view_lines(body) -> list[str]:
    text = "".join(block.get("text", "") for block in body["messages"][0]["content"])
    inner = re.search(r"<chat>\n(.*?)</chat>", text, re.S)
    assert inner, "the request carries a view"
    return inner.group(1).splitlines()


def _covered(lines: list[str]) -> int:
    """How many messages the lines cover, each once and in order (R13); -1 when they do not."""
    expect = 0
    for line in lines:
        first, count = map(int, re.match(r"(\d+)\+(\d+)\|", line).groups())
        if first != expect:
            return -1
        expect = first + count
    return expect


def test_p2_a_turn_after_thousands_of_unsummarized_notes_and_a_settle_timeout_sends_at_most_the_ceiling(
        monkeypatch, tmp_path):
    """Review (c), scaled: 2,500 notes whose leaves are never built. R15's view fits
    (about 90 KB), but their marked starts would be 1.5 MB: the newest get them, as far as
    the ceiling allows, and the rest are placeholders to zoom."""
    held = Gate()
    with FakeModelServer() as server:
        settings = configure(monkeypatch, tmp_path, server, "anthropic", settle=0.5)
        _long_notes(settings.chat_dir, 2500)
        server.rule(_held_compactions(held))
        with ChatSession.open(settings) as session:
            try:
                events = until_end(session, session.send("What did the last note say?"), timeout=WAIT)
            finally:
                held.open()
    [call] = _calls(server, "turn")
    lines = _view_lines(call.body)
    assert _view_bytes(call.body) <= CEILING and _covered(lines) == 2500
    assert lines[-1].startswith(f"2499+1|{UNSETTLED_MARK}note: note 2499: cedar")
    notices = [e.text for e in events if isinstance(e, schema.Notice)]
    assert notices and "2500 line(s) of the view were not summarized" in notices[0]


def test_p2_a_turn_whose_built_lines_pass_the_ceiling_with_merges_never_built_sends_at_most_the_ceiling(
        monkeypatch, tmp_path):
    """1,200 notes of 480 bytes, each its own free leaf (R11) whose pair needs a merge the
    model never answers: 590 KB of built lines the batch cannot merge. The newest lines go
    out word for word, the oldest folded into lines to zoom."""
    held = Gate()
    with FakeModelServer() as server:
        settings = configure(monkeypatch, tmp_path, server, "anthropic", settle=0.5)
        assert _notes(settings.chat_dir, 1200) > 4 * CEILING
        server.rule(_held_compactions(held))
        with ChatSession.open(settings) as session:
            try:
                until_end(session, session.send("What did the notes say?"), timeout=WAIT)
            finally:
                held.open()
    [call] = _calls(server, "turn")
    lines = _view_lines(call.body)
    assert _view_bytes(call.body) <= CEILING and _covered(lines) == 1200
    assert lines[-1] == "1199+1|note: note 1199: " + "amber and basalt " * 28


def test_p2_an_agent_after_thousands_of_unsummarized_notes_starts_from_a_view_within_the_ceiling(
        monkeypatch, tmp_path):
    """R38: an agent's first call carries the view as a turn's does, settled the same way."""
    held = Gate()
    with FakeModelServer() as server:
        settings = configure(monkeypatch, tmp_path, server, "anthropic", settle=0.5)
        _long_notes(settings.chat_dir, 2500)
        server.rule(_held_compactions(held))
        with ChatSession.open(settings) as session:
            try:
                until_end(session, session.send("Send Scout to read the notes."), timeout=WAIT)
                wait_until(lambda: _calls(server, "agent"), WAIT, "the agent's call")
            finally:
                held.open()
    call = _calls(server, "agent")[0]
    assert _view_bytes(call.body) <= CEILING
    assert _covered(_view_lines(call.body)) > 2500  # the notes, the turn's message and its spawn


def test_p2_a_compaction_behind_thousands_of_built_lines_sends_a_context_within_the_ceiling(monkeypatch, tmp_path):
    """1,200 free notes of 480 bytes whose merges are built in order: the first 150 at
    once, the rest never. The compaction view holds all 1,200 leaves (nothing merges it
    without a message), so merge 300+2's context (R27) was 150 KB; now its newest lines,
    within the ceiling, up to its own cut."""
    held = Gate()
    with FakeModelServer() as server:
        settings = configure(monkeypatch, tmp_path, server, "anthropic", settle=0.5)
        _notes(settings.chat_dir, 1200)
        server.rule(_held_compactions(held, answer_before=300))
        with ChatSession.open(settings) as session:
            try:
                wait_until(lambda: [c for c in _calls(server, "compaction")
                                    if "one line for 300+2." in c.body["messages"][0]["content"][-1]["text"]],
                           WAIT, "merge 300+2's call")
            finally:
                held.open()
    call = next(c for c in _calls(server, "compaction")
                if "one line for 300+2." in c.body["messages"][0]["content"][-1]["text"])
    lines = _view_lines(call.body)
    assert _view_bytes(call.body) <= CEILING
    assert lines[-1] == "301+1|note: note 301: " + "amber and basalt " * 28  # R27: it ends at the node


def test_p2_a_goal_check_stays_within_the_ceiling_after_thousands_of_notes_and_a_long_goal(monkeypatch, tmp_path):
    """The check reads the goal and the latest turn, no view: a goal pasted whole (300 KB
    of 4-byte characters) once went out whole. Now it is cut like the turn's messages."""
    held = Gate()
    goal = "Make every fox count: " + "🦊" * 75_000
    with FakeModelServer() as server:
        settings = configure(monkeypatch, tmp_path, server, "anthropic", settle=0.5)
        _long_notes(settings.chat_dir, 2500)
        server.rule(_held_compactions(held))
        with ChatSession.open(settings) as session:
            try:
                session.goal(goal)
                wait_until(lambda: _calls(server, "goal-check"), WAIT, "the goal's check")
            finally:
                held.open()
    [check] = _calls(server, "goal-check")
    [said] = [block["text"] for message in check.body["messages"] for block in message["content"]]
    assert len(said.encode()) <= CEILING and "<chat>" not in said
    assert said.startswith("<goal>\nMake every fox count: 🦊")
