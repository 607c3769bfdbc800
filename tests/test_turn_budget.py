"""A turn never sends more than the budget (issue 8, R19, R36).

Notes logged with no compactor running leave the view far over its ceiling (the review saw
2.1 MB, 16.8 times it): their batches cannot merge pairs whose parents are not built, and
R36 renders a turn's view before its own message (whose batch would come too late). So a
turn whose settled view is still over the ceiling waits for the merges that can fit it and
runs the batch R19 would run at the next message before it renders; `compact` ends with
that batch. It is recorded as a merge record like any other (R25), so a restart refolds it.
"""

from __future__ import annotations

import re

from cli_world import env, everchat  # noqa: F401  (env is a fixture)

from everchat.actors.chat import Chat
from everchat.tools.fakemodel import FakeModelServer, Reply, Text

CEILING = 128_000


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
