"""The offline demo model: a real extractive summarizer (R34's values) and a reply model
that answers from the view and zooms (R35) for the details."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from everchat.actors.prompt.tasks import agent_request, read_agent_request
from everchat.actors.session.local import Chat, ZoomError
from everchat.actors.compactor.compaction import CompactionJob, Summarizer
from everchat.actors.tree import Budget, node_of
from everchat.actors.models import (
    DemoConnection,
    Message,
    Request,
    TextBlock,
    TextDelta,
    ToolCall,
    ToolResultBlock,
    ToolSpec,
    connect,
    extractive_summary,
)
from everchat.actors.devices.jobs import job_from_call, run_job, work_folder
from everchat.actors.models._summarize import key_tokens
from everchat.actors.prompt import Prompt, turn_header, turn_text, view_blocks

PROMPT = Prompt.make()
DEMO = DemoConnection()
SMALL = Budget(ceiling=1500, floor=700, cceiling=600, cfloor=300, jobs=3)
NOW = datetime(2026, 10, 8, 14, 3, tzinfo=timezone.utc)


# --- the summarizer -------------------------------------------------------------------------


def test_a_persons_words_come_first_and_near_verbatim():
    text = ("user: Please keep the staging config at /srv/app/config.yaml; it listens on port 8443. "
            "Alice Martin owns ticket OPS-1182. " + "Some background that matters less. " * 40)
    line = extractive_summary([text])
    assert line.startswith("user: Please keep the staging config at /srv/app/config.yaml; it listens on port 8443. "
                           "Alice Martin owns ticket OPS-1182.")
    assert len(line.encode()) <= 512


def test_names_numbers_ids_paths_and_errors_are_copied_exactly():
    echo = ("echo: Traceback (most recent call last):\n  File \"/opt/app/main.py\", line 12, in <module>\n"
            + "    noise = compute_everything()\n" * 30
            + "FileNotFoundError: [Errno 2] No such file or directory: '/etc/everchat/keys.toml'\n")
    line = extractive_summary([echo])
    assert line.startswith("echo: ")
    for exact in ("/opt/app/main.py", "FileNotFoundError: [Errno 2] No such file or directory: "
                  "'/etc/everchat/keys.toml'", "line 12"):
        assert exact in line
    assert len(line.encode()) <= 512


def test_r34_key_tokens_are_whole_paths_dates_and_numbers_with_the_word_they_count():
    """R34's priorities copy names, numbers and paths exactly: a relative path whole, a
    date whole, and a number with the noun before it but never a glue word ("is 4471")."""
    assert [token for _, _, token in key_tokens("Deploy path/to/app.py to Berlin on 2026-12-04, ask Maria.")] == \
        ["path/to/app.py", "Berlin", "2026-12-04", "Maria"]
    assert [token for _, _, token in key_tokens("My locker code is 4471. Is 42 right? Port 8080 is open.")] == \
        ["4471", "42", "Port 8080"]


def test_the_rest_fills_the_space_left_first_sentences_first():
    reply = "everchat: " + " ".join(f"Step {k} went through the pipeline stage number {k} without trouble."
                                    for k in range(30))
    line = extractive_summary([reply])
    assert line.startswith("everchat: Step 0 went through the pipeline stage number 0 without trouble.")
    assert 400 < len(line.encode()) <= 512  # R47: the space is used when there is more to say


def test_a_merge_keeps_each_items_kind_and_the_persons_words_before_the_rest():
    left = "0+2|user: Remember amber-42. | everchat: Noted as message 1."
    right = "2+2|tool: shell {\"cmd\": \"make test\"} | echo: " + "FAILED tests/test_x.py::test_y - AssertionError " * 12
    line = extractive_summary([left, right], leaf=False)
    assert line.startswith("user: Remember amber-42. | everchat: Noted as message 1. | tool: ")
    assert "echo: FAILED tests/test_x.py::test_y - AssertionError" in line and len(line.encode()) <= 512


def test_non_ascii_counts_in_bytes_and_cuts_between_characters():
    line = extractive_summary(["user: " + "Grüße aus Köln, 東京 und São Paulo. " * 40])
    assert len(line.encode()) <= 512 and line.startswith("user: Grüße aus Köln, 東京 und São Paulo.")


@pytest.mark.parametrize("pad", range(3))
def test_a_run_of_3_byte_characters_is_cut_between_characters_and_fills_the_line(pad):
    """No sentence ends, so the line must be cut inside the run: wherever the 512th byte
    falls in a character (the pad moves it), the cut keeps whole characters of the input
    (no replacement character) and wastes at most one character before the ellipsis."""
    text = "user: " + "x" * pad + "東京" * 400
    line = extractive_summary([text])
    kept = line.removesuffix("…")
    assert line.endswith("…") and text.startswith(kept) and "\ufffd" not in line
    assert 512 - 3 - 2 <= len(line.encode()) <= 512


def test_the_summary_is_deterministic():
    text = ["note: " + " ".join(f"item {k} at /data/{k}.csv" for k in range(200))]
    assert extractive_summary(text) == extractive_summary(list(text))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=900), min_size=1, max_size=2), st.booleans())
def test_any_input_gives_one_line_of_1_to_512_bytes(lines, leaf):
    line = extractive_summary(lines, leaf=leaf)
    assert 1 <= len(line.encode()) <= 512


# --- compactions through the demo connection ---------------------------------------------------


def test_a_demo_compaction_is_built_from_its_input_and_streams_in_pieces():
    job = CompactionJob(0, 7, ("0+1|user: hi",), ("user: Deploy to prod-eu-3 failed with exit code 137 " + "x" * 600,))
    assert Summarizer(DEMO, PROMPT, model="demo")(job).startswith("user: Deploy to prod-eu-3 failed with exit code 137")
    request = Request(model="demo", system=PROMPT.system, tools=PROMPT.tools,
                      messages=(Message.user(TextBlock("hello")),))
    assert connect("demo").complete(request).text  # the factory gives the demo without any key


# --- the reply model ----------------------------------------------------------------------------


def settle(chat: Chat) -> None:
    """Build every running compaction with the demo summarizer, as the pool would."""
    summarizer = Summarizer(DEMO, PROMPT, model="demo")
    while chat.planner.running:
        for key in sorted(chat.planner.running):
            l, i = node_of(key)
            job = CompactionJob(l, i, tuple(chat.compaction_context(key)), tuple(chat.compaction_input(key)))
            chat.built(key, summarizer(job))


def turn(chat: Chat, message: str) -> tuple[str, list[dict], list[Request]]:
    """One turn's tool loop, as the turn runner runs it (R36, R37)."""
    first = (*view_blocks(chat.view_lines()), TextBlock(turn_text(turn_header(NOW), message), cache=True))
    messages = [Message("user", first)]
    zooms, requests = [], []
    for _ in range(30):
        request = Request(model="demo", system=PROMPT.system, tools=PROMPT.tools, messages=tuple(messages))
        requests.append(request)
        reply = DEMO.complete(request)
        if not reply.tool_calls:
            return reply.text, zooms, requests
        messages.append(reply.message())
        results = []
        for call in reply.tool_calls:
            zooms.append(dict(call.input))
            try:
                out, failed = chat.zoom(call.input["id"], call.input.get("n", 1), call.input.get("page", 1)), False
            except ZoomError as error:
                out, failed = str(error), True
            results.append(ToolResultBlock.of_text(call.id, out, failed))
        messages.append(Message("user", tuple(results)))
    raise AssertionError("the demo never stopped zooming")


@pytest.fixture
def chat(tmp_path):
    with Chat.open(tmp_path / "chat", create=True, budget=SMALL) as chat:
        yield chat


def test_a_statement_is_acknowledged_without_a_tool_call(chat):
    text, zooms, _ = turn(chat, "Remember amber-42.")
    assert zooms == [] and text.startswith("Noted as message 0.") and "amber-42" in text


def test_r35_asked_what_to_remember_it_zooms_down_to_the_message_and_answers_the_exact_word(chat):
    chat.add("user", "Remember amber-42.")
    chat.add("everchat", turn(chat, "Remember amber-42.")[0])
    rng = random.Random(3)
    for k in range(60):
        chat.add("user" if k % 2 == 0 else "everchat",
                 f"Filler {k}: the build logs of service s{k} " + "and the queue was long " * rng.randint(1, 40))
        settle(chat)
    first_line = chat.view_lines()[0]
    assert first_line.startswith("0+") and not first_line.startswith("0+1|")  # a summary, not the message
    text, zooms, requests = turn(chat, "What did I ask you to remember?")
    assert "You asked me to remember: amber-42." in text
    assert zooms[-1] == {"id": 0, "n": 1} and len(zooms) > 1
    assert [zoom["n"] for zoom in zooms] == sorted((zoom["n"] for zoom in zooms), reverse=True)
    # the tool loop: each request after the first ends with the result of the call before it
    for request, zoom in zip(requests[1:], zooms):
        (result,) = request.messages[-1].content
        assert isinstance(result, ToolResultBlock) and result.tool_use_id.startswith("demo-zoom-")


def test_the_reply_streams_in_several_pieces(chat):
    chat.add("user", "Remember amber-42.")
    first = (*view_blocks(chat.view_lines()), TextBlock(turn_text(turn_header(NOW), "Where is amber?")))
    request = Request(model="demo", system=PROMPT.system, tools=PROMPT.tools, messages=(Message("user", first),))
    events = list(DEMO.stream(request))
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert call.input == {"id": 0, "n": 1}
    final = list(DEMO.stream(Request(model="demo", system=PROMPT.system, tools=PROMPT.tools, messages=(
        Message("user", first), Message.assistant(*DEMO.complete(request).blocks),
        Message.user(ToolResultBlock.of_text(call.id, chat.zoom(0, 1)))))))
    pieces = [e.text for e in final if isinstance(e, TextDelta)]
    assert len(pieces) > 3 and "amber-42" in "".join(pieces)


def test_a_question_about_nothing_in_memory_says_so(chat):
    chat.add("user", "The sky is blue today.")
    text, zooms, _ = turn(chat, "What is the capital of Mongolia?")
    assert zooms == [] and "found nothing" in text


# --- the hands (issue 11): shell and spawn, only when offered --------------------------------


def _spec(name: str, *fields: str) -> ToolSpec:
    return ToolSpec(name, f"the {name} tool", {"type": "object", "properties": {f: {"type": "string"} for f in fields},
                                                "required": list(fields)})


HANDS = Prompt.make(extra_tools=(_spec("spawn", "name", "task"), _spec("tell", "name", "text"),
                                 _spec("shell", "command"), _spec("read", "path"), _spec("write", "path", "content"),
                                 _spec("edit", "path", "old", "new")), devices=True)


def hands_request(*messages: Message, prompt: Prompt = HANDS) -> Request:
    return Request(model="demo", system=prompt.system, tools=prompt.tools, messages=messages)


def first_message(text: str, chat_lines: tuple[str, ...] = ("0+1|user: hi",)) -> Message:
    return Message("user", (*view_blocks(list(chat_lines)), TextBlock(turn_text(turn_header(NOW), text), cache=True)))


def tool_loop(first: Message, answer, prompt: Prompt = HANDS) -> tuple[str, list[ToolCall]]:
    """The turn runner's loop (R37): each call answered by `answer(call) -> (text, is_error)`."""
    messages, calls = [first], []
    for _ in range(5):
        reply = DEMO.complete(hands_request(*messages, prompt=prompt))
        if not reply.tool_calls:
            return reply.text, calls
        calls.extend(reply.tool_calls)
        messages.append(reply.message())
        messages.append(Message.user(*(ToolResultBlock.of_text(call.id, *answer(call)) for call in reply.tool_calls)))
    raise AssertionError("the demo never stopped calling tools")


def test_r39_a_command_in_backticks_on_a_device_becomes_a_shell_call_with_that_device():
    reply = DEMO.complete(hands_request(first_message("run `uname -a` on laptop")))
    (call,) = reply.tool_calls
    assert (call.name, dict(call.input)) == ("shell", {"command": "uname -a", "device": "laptop"})


@pytest.mark.parametrize("message", ["please run `ls -la /tmp`", "run `ls -la /tmp` on this computer."])
def test_r39_a_command_without_a_device_runs_on_this_computer(message):
    (call,) = DEMO.complete(hands_request(first_message(message))).tool_calls
    assert dict(call.input) == {"command": "ls -la /tmp"}


def test_r39_the_demo_answers_from_a_real_shell_jobs_result(tmp_path):
    """The whole path a demo turn takes: the call, a real job on this computer (a real
    process group, R39), and a reply that quotes what it printed."""
    work = work_folder(tmp_path / "home", "main")

    def answer(call: ToolCall) -> tuple[str, bool]:
        job = job_from_call(call.id, call.name, dict(call.input), "main")
        outcome = run_job(job, work, lambda text: None, threading.Event())
        return outcome.text, outcome.is_error

    text, calls = tool_loop(first_message("run `echo hello from $(basename $PWD)` please"), answer)
    assert [call.name for call in calls] == ["shell"]
    assert text == "`echo hello from $(basename $PWD)` on this computer printed:\nhello from main\n[exit 0]"


def test_a_failed_command_is_reported_as_failed_with_its_output():
    text, _ = tool_loop(first_message("run `false` on laptop"), lambda call: ("[exit 1]", True))
    assert text == "`false` on laptop failed:\n[exit 1]"


def test_a_long_output_is_quoted_by_its_start_and_end_only():
    output = "".join(f"row {k}\n" for k in range(5000))
    text, _ = tool_loop(first_message("run `seq 5000`"), lambda call: (output, False))
    assert text.startswith("`seq 5000` on this computer printed:\nrow 0\nrow 1\n") and text.endswith("row 4999")
    assert "characters not quoted here" in text and len(text) < 3200


def test_r38_an_agent_request_becomes_a_spawn_call_and_a_one_line_reply():
    message = agent_request("Scout", "find the biggest file in /var/log and say its size")
    text, calls = tool_loop(first_message(message), lambda call: ("Scout is working", False))
    assert [(call.name, dict(call.input)) for call in calls] == \
        [("spawn", {"name": "Scout", "task": "find the biggest file in /var/log and say its size"})]
    assert text == "I started the agent Scout; it will report here when it is done." and "\n" not in text


def test_r38_a_refused_spawn_is_reported():
    text, _ = tool_loop(first_message(agent_request("Scout", "look")), lambda call: ("agents cannot start agents", True))
    assert text == "I could not start the agent Scout: agents cannot start agents"


def test_r38_an_agent_request_with_a_backticked_command_spawns_rather_than_runs():
    (call,) = DEMO.complete(hands_request(first_message(agent_request("Ops", "run `df -h` and report")))).tool_calls
    assert (call.name, dict(call.input)) == ("spawn", {"name": "Ops", "task": "run `df -h` and report"})


def test_r38_an_agents_task_with_a_backticked_command_runs_it():
    """An agent's call is a fresh call: the view, then its task (R38). Its last text is the
    task, whatever header it carries, and the backtick rule applies to it."""
    task = Message("user", (*view_blocks(["0+1|user: hi"]), TextBlock("[Agent Ops] Your task: run `df -h` on nas")))
    text, calls = tool_loop(task, lambda call: ("Filesystem Size\n/dev/sda1 1T\n[exit 0]", False))
    assert [(call.name, dict(call.input)) for call in calls] == [("shell", {"command": "df -h", "device": "nas"})]
    assert text == "`df -h` on nas printed:\nFilesystem Size\n/dev/sda1 1T\n[exit 0]"


def test_the_agent_request_text_reads_back():
    assert read_agent_request(agent_request("Scout", "find\nthings")) == ("Scout", "find\nthings")
    assert read_agent_request("Start an agent named 9x with this task: go") is None  # R38: names start with a letter
    assert read_agent_request("hello") is None


def test_without_the_hands_offered_backticks_and_agent_requests_stay_statements():
    for message in ("run `uname -a` on laptop", agent_request("Scout", "look")):
        reply = DEMO.complete(hands_request(first_message(message), prompt=PROMPT))
        assert reply.tool_calls == [] and reply.text.startswith("Noted as message 1.")


def test_the_memory_model_still_zooms_when_the_hands_are_offered(chat):
    chat.add("user", "Remember amber-42.")
    (call,) = DEMO.complete(hands_request(first_message("Where is amber?", tuple(chat.view_lines())))).tool_calls
    assert (call.name, dict(call.input)) == ("zoom", {"id": 0, "n": 1})


def test_r38_two_agents_asked_to_compare_are_spawned_one_a_request_and_both_reported():
    text, calls = tool_loop(first_message("Send two agents to compare SQLite and PostgreSQL for our cache."),
                            lambda call: (f"{call.input['name']} is working", False))
    assert [(call.name, call.input["name"]) for call in calls] == \
        [("spawn", "compare-sqlite"), ("spawn", "compare-postgresql")]
    assert calls[0].input["task"].startswith("Find out about SQLite, to compare it with PostgreSQL for our cache:")
    assert text == "I started the agents compare-sqlite and compare-postgresql; they will report here when they are done."


def test_r38_no_agent_starts_unless_asked_for_or_when_both_sides_would_share_a_name():
    """R38: subagents only when the user asks; two agents never get the same name."""
    for message in ("Compare SQLite and PostgreSQL.", "agents, compare x1 and x1"):
        reply = DEMO.complete(hands_request(first_message(message)))
        assert reply.tool_calls == [] and reply.text.startswith("Noted as message 1.")
