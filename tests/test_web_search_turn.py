"""Issue 13 end to end: a whole ChatSession with `--tools off`, the real SDK on the wire and
the fake model server scripting the model. The model calls `search`; the turn runner asks
the local search server (EVERCHAT_SEARCH_URL) for the DuckDuckGo-style fixture page; the
results reach the next model request, the echo is logged (R37), and the reply cites the URL."""

from __future__ import annotations

import json

from everchat.actors.prompt import TURN_OPENING
from everchat.actors.session.session import ChatSession
from everchat.tools.fakemodel import Reply, Text, ToolCall
from everchat.transport import schema

from test_turns_wire import configure, fake, server, turn_calls, until_end  # noqa: F401 (fixtures)
from test_web_search import web  # noqa: F401 (fixture)


def test_a_turn_searches_the_local_server_and_the_reply_cites_the_url(monkeypatch, tmp_path, fake, web):
    monkeypatch.setenv("EVERCHAT_TOOLS", "off")  # the web tools stay with the device tools off
    monkeypatch.setenv("EVERCHAT_SEARCH_URL", web.base + "/html/")
    monkeypatch.delenv("BRAVE_SEARCH_API_KEY", raising=False)
    settings = configure(monkeypatch, tmp_path, fake, "anthropic")
    assert not settings.devices and settings.web
    seen: list[str] = []

    def rule(request):
        opening = next((text for role, text in request.messages if role == "user"), "")
        if TURN_OPENING not in opening:  # a compaction, or its retry
            return Reply(Text("user: asked where Python's home page is; everchat: searched, cited the URL"))
        rounds = sum(1 for role, _ in request.messages if role == "assistant")
        if rounds == 0:
            return Reply(ToolCall("search", {"query": "python html parser"}, id="w1"))
        seen.append(request.last_user_text)
        url = "https://www.python.org/" if "https://www.python.org/" in request.last_user_text else "nothing"
        return Reply(Text(f"Python's home, from a search snippet (not the page): {url}"))

    fake.rule(rule)
    with ChatSession.open(settings) as session:
        turn = session.send("Where is Python's home page?")
        events = until_end(session, turn)
        texts = [session.zoom(i, 1) for i in range(session.count_messages())]
    # the local server got the query, and the results reached the next request
    assert [path for path in web.paths()] == ["/html/?q=python+html+parser"]
    (result,) = seen
    assert result.startswith('Search results for "python html parser" from DuckDuckGo')
    assert "1. Welcome to Python.org\n   https://www.python.org/" in result
    # logged in order (R37): the call, its echo, the reply citing the URL
    assert texts[-3:] == [
        "tool: search " + json.dumps({"query": "python html parser"}),
        "echo: " + result,
        "everchat: Python's home, from a search snippet (not the page): https://www.python.org/",
    ]
    (shown,) = [e for e in events if isinstance(e, schema.TurnToolResult)]
    assert not shown.is_error
    body = turn_calls(fake)[0].body
    assert [tool["name"] for tool in body["tools"]] == ["zoom", "date", "search", "fetch", "spawn", "tell"]
    assert "# The web" in "".join(part["text"] for part in body["system"])
