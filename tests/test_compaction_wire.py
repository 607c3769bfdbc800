"""The same compaction tests on every backend: Anthropic Messages, OpenAI Responses and Chat
Completions through the real SDKs and the fake model server (max_retries=0), and the demo
model where no script is needed (R23, R26-R29)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from everchat.actors.session.local import Chat
from everchat.actors.compactor.compaction import RULER, CompactionJob, Summarizer, summarize
from everchat.actors.tree import Budget, level, node_of
from everchat.actors.models import Connection, Request, TextBlock, connect
from everchat.actors.prompt import Prompt
from everchat.tools.fakemodel import Reply, Thinking, ToolCall, count_tokens
from fake_world import fake_server_fixtures

PROMPT = Prompt.make()
WIRES = ["anthropic", "openai", "openai-chat"]
API = {"anthropic": "anthropic", "openai": "responses", "openai-chat": "chat"}
CONTEXT = tuple(f"{k}+1|user: line {k} about the build" for k in range(10))
LEAF = CompactionJob(0, 10, CONTEXT, ("user: " + "please keep this in mind " * 20,))


shared, server = fake_server_fixtures(chunk_tokens=16)


@pytest.fixture(params=WIRES)
def wire(request, server):
    url = server.base_url if request.param == "anthropic" else server.openai_base_url
    with connect(request.param, api_key="test-key", base_url=url, max_retries=0) as connection:
        yield connection


def run(wire: Connection, job=LEAF) -> str:
    return summarize(job, wire, PROMPT, model="small-model")


def conversation(exchange) -> tuple[str, list[str], list[tuple[str, str]]]:
    """(system, tool names, [(role, text)]) of a recorded request, whatever its API."""
    body = exchange.body
    if exchange.api == "anthropic":
        turns = []
        for message in body["messages"]:
            text = "".join(b.get("text", "") or "".join(c.get("text", "") for c in b.get("content", []))
                           for b in message["content"] if b["type"] in ("text", "tool_result"))
            turns.append((message["role"], text))
        return body["system"][0]["text"], [t["name"] for t in body["tools"]], turns
    if exchange.api == "responses":
        turns = []
        for item in body["input"]:
            if "role" in item:
                content = item["content"]
                text = content if isinstance(content, str) else "".join(p["text"] for p in content)
                turns.append((item["role"], text))
            elif item["type"] == "function_call_output":
                turns.append(("tool", item["output"]))
        return body["instructions"], [t["name"] for t in body["tools"]], turns
    system, *rest = body["messages"]
    turns = []
    for message in rest:
        content = message.get("content") or ""
        turns.append((message["role"], content if isinstance(content, str) else "".join(p["text"] for p in content)))
    return system["content"], [t["function"]["name"] for t in body["tools"]], turns


def test_r26_on_the_wire_a_compaction_is_the_turns_tools_and_system_then_context_then_task(server, wire):
    server.script("user: asked to keep this in mind")
    assert run(wire) == "user: asked to keep this in mind"
    (exchange,) = server.model_calls
    assert exchange.api == API[wire.provider] and exchange.headers["x-everchat-call"] == "compaction"
    system, tools, turns = conversation(exchange)
    assert system == PROMPT.system and tools == ["zoom", "date"]
    ((role, text),) = turns
    context = "<chat>\n" + "".join(line + "\n" for line in CONTEXT) + "</chat>"
    assert role == "user" and text.startswith(context)
    assert text[len(context):].startswith("Compaction: write the line for message 10 (10+1).")
    assert text.endswith(f"{RULER}\n<input>\n{LEAF.input[0]}\n</input>")


def test_r29_on_the_wire_a_long_answer_is_followed_up_in_the_same_conversation(server, wire):
    server.script("a" * 600, "short enough")
    assert run(wire) == "short enough"
    first, second = server.model_calls
    turns = conversation(second)[2]
    assert turns[0] == conversation(first)[2][0]
    assert [role for role, _ in turns] == ["user", "assistant", "user"]
    assert turns[1][1] == "a" * 600
    assert "600 bytes" in turns[2][1] and f"{'a' * 512}[<- 512-byte limit]" in turns[2][1]


def test_r29_on_the_wire_an_answer_not_shorter_stops_and_the_best_is_cut(server, wire):
    server.script("a" * 600, "b" * 640)
    assert run(wire) == "a" * 512
    assert len(server.model_calls) == 2


def test_r29_on_the_wire_five_tries_at_most(server, wire):
    server.script(*(c * n for c, n in zip("abcde", (900, 800, 700, 600, 550))))
    assert run(wire) == "e" * 512
    assert len(server.model_calls) == 5


def test_r29_on_the_wire_a_tool_call_or_thinking_only_counts_as_a_try(server, wire):
    server.script(Reply(ToolCall("zoom", {"id": 0, "n": 1})), Reply(Thinking("hmm")), Reply(), "the line")
    assert run(wire) == "the line"
    calls = server.model_calls
    assert len(calls) == 4
    turns = conversation(calls[1])[2]
    assert "No tools in a compaction" in turns[-1][1]


def test_r23_on_anthropic_the_marks_sit_where_the_rule_says_and_the_next_compaction_reads_them(server):
    longer = (*CONTEXT, "10+1|user: one line more")
    with connect("anthropic", api_key="test-key", base_url=server.base_url, max_retries=0) as claude:
        server.script("first line", "second line", "third line", "fourth line")
        run(claude)
        run(claude, CompactionJob(0, 11, CONTEXT, ("user: " + "something else entirely " * 20,)))
        run(claude, CompactionJob(0, 12, longer, ("user: " + "and now another one " * 20,)))
        run(claude, CompactionJob(0, 0, (), ("user: " + "no context at all " * 20,)))
    first, second, third, bare = server.model_calls
    body = first.body
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    blocks = body["messages"][0]["content"]
    marked = [k for k, block in enumerate(blocks) if "cache_control" in block]
    # 10 lines: blocks of 4, 4, then 2 and </chat> (our closing mark beyond R23's three); the task
    assert marked == [1, 2, len(blocks) - 1] and blocks[2]["text"].endswith("</chat>")
    assert blocks[1]["text"] == "".join(line + "\n" for line in CONTEXT[4:8])
    assert all(block["cache_control"] == {"type": "ephemeral"} for block in blocks if "cache_control" in block)
    assert "ttl" not in json.dumps(body)
    # the same context is read whole, through its closing block; a longer one through the last whole
    # block; a bare one, the system's
    through_block = count_tokens(blocks[0]["text"]) + count_tokens(blocks[1]["text"])
    through_closing = through_block + count_tokens(blocks[2]["text"])
    assert first.cache.cache_read == 0 and second.cache.cache_read == bare.cache.cache_read + through_closing
    assert third.cache.cache_read == bare.cache.cache_read + through_block
    assert bare.cache.cache_read > 1000  # the system prompt's entry, shared by every call (R23)
    for call in server.model_calls:  # Anthropic's limit, and never a 1-hour mark
        assert json.dumps(call.body).count("cache_control") <= 4 and "\"ttl\"" not in json.dumps(call.body)


def test_r23_openai_requests_carry_no_cache_marks(server):
    for provider in ("openai", "openai-chat"):
        with connect(provider, api_key="test-key", base_url=server.openai_base_url, max_retries=0) as gpt:
            server.script("a line")
            run(gpt)
    assert all("cache_control" not in json.dumps(call.body) for call in server.model_calls)


# --- a whole chat's compactions: never a placeholder, never an unsummarized message (R27) -------

MARK = re.compile(r"\[m(\d+)-(?:start|mid|end)\]")
SMALL = Budget(ceiling=3000, floor=1500, cceiling=1200, cfloor=600, jobs=4)


class Recording(Connection):
    """Passes calls on, noting each request with the markers it may hold: those of its
    job's own input, and those inside lines already built (a summary may copy them)."""

    def __init__(self, inner: Connection) -> None:
        self.inner = inner
        self.provider = inner.provider
        self.built: set[str] = set()
        self.own: set[str] = set()
        self.seen: list[tuple[Request, frozenset[str]]] = []

    def stream(self, request: Request):
        self.seen.append((request, frozenset(self.built | self.own)))
        return self.inner.stream(request)


def markers(text: str) -> set[str]:
    return {m.group(0) for m in MARK.finditer(text)}


def summary_rule(request):
    digest = hashlib.sha256(request.last_user_text.encode()).hexdigest()[:12]
    return Reply(f"sum-{digest} " + "s" * 280)


def message(n: int) -> str:
    if n % 3:
        return f"short message {n}"
    filler = "words that say little " * (30 + n % 7 * 20)
    return f"[m{n}-start] {filler}[m{n}-mid] {filler}[m{n}-end]"


@pytest.mark.parametrize("provider", WIRES + ["demo"])
def test_r27_no_request_holds_a_placeholder_or_a_message_not_yet_summarized(server, tmp_path, provider):
    server.rule(summary_rule)
    url = server.base_url if provider == "anthropic" else server.openai_base_url
    recording = Recording(connect(provider, api_key="test-key", base_url=url, max_retries=0))
    summarizer = Summarizer(recording, PROMPT, model="small-model")
    built = {"leaf": 0, "merge": 0}
    with Chat.open(tmp_path / "chat", create=True, budget=SMALL) as chat:
        for n in range(70):
            chat.add("user" if n % 2 else "everchat", message(n))
            for key in sorted(chat.planner.running):
                l, i = node_of(key)
                job = CompactionJob(l, i, tuple(chat.compaction_context(key)), tuple(chat.compaction_input(key)))
                recording.own = markers("\n".join(job.input))
                line = summarizer(job)
                assert 1 <= len(line.encode()) <= 512
                chat.built(key, line)
                recording.built |= markers(line)
                built["merge" if level(key) else "leaf"] += 1
    assert built["leaf"] >= 15 and built["merge"] >= 5
    # the system prompt explains the placeholder (R34); the messages never hold one
    for request, allowed in recording.seen:
        everything = "\n".join(block.text for m in request.messages for block in m.content
                                if isinstance(block, TextBlock))
        assert "(not summarized yet" not in everything
        assert markers(everything) <= allowed
    if provider != "demo":
        assert len(server.model_calls) == len(recording.seen)
        for call in server.model_calls:
            sent = {"anthropic": lambda b: b["messages"], "responses": lambda b: b["input"],
                    "chat": lambda b: b["messages"][1:]}[call.api](call.body)
            assert "(not summarized yet" not in json.dumps(sent)
        assert all(not markers(line) for line in chat_lines(tmp_path))


def chat_lines(path) -> list[str]:
    with Chat.open(path / "chat", writer=False) as chat:
        return chat.view_lines()
