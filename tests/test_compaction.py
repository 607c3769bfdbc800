"""The compaction core on its own (R26-R30): tasks, marks, tries, cuts and the fallback.

A scripted connection stands in for the model here; tests/test_compaction_wire.py
runs the same conversation through the real SDKs and the fake model server.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from everchat.actors.compactor.compaction import (
    LIMIT_MARK,
    MAX_TRIES,
    RULER,
    Compaction,
    CompactionJob,
    Summarizer,
    cache_prefix,
    clean_answer,
    fallback_line,
    final_cut,
    follow_up,
    job_of,
    read_task,
    summarize,
)
from everchat.actors.models import (
    Connection,
    NoAnswer,
    Overloaded,
    Refused,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from everchat.actors.prompt import Prompt

PROMPT = Prompt.make()
LEAF_TEXT = "user: please keep the deploy key at /etc/deploy/key.pem, it expires 2026-11-01"
LEAF = CompactionJob(0, 12, tuple(f"{k}+1|line {k}" for k in range(12)), (LEAF_TEXT,))
MERGE = CompactionJob(2, 3, tuple(f"{k}+1|line {k}" for k in range(5)), ("12+2|left half", "14+2|right half"))


class Scripted(Connection):
    """Answers from a list: a string is a text answer; ("tool",) a tool call; ("think",)
    thinking only; ("refuse",) a refusal; an exception is raised. Records requests."""

    provider = "scripted"

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.requests: list[Request] = []

    def stream(self, request: Request) -> Iterator:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer == ("tool",):
            yield ToolCall(f"call-{len(self.requests)}", "zoom", {"id": 0, "n": 1})
            yield Stop("tool_use")
            return
        if answer == ("think",):
            yield ThinkingDelta("let me think", signature="sig")
            yield Stop("end_turn")
            return
        if answer == ("refuse",):
            yield Stop("refusal", incomplete=True)
            return
        if answer:
            yield TextDelta(answer)
        yield Usage(10, 5)
        yield Stop("end_turn")


def run(job, *answers):
    connection = Scripted(*answers)
    line = summarize(job, connection, PROMPT, model="m")
    return line, connection.requests


def last_text(request: Request) -> str:
    return request.messages[-1].content[-1].text


# --- R26, R28: the request and its task -------------------------------------------------------


def test_r26_a_compaction_is_tools_system_chat_context_then_task():
    request = Compaction(LEAF, PROMPT, model="m").request()
    assert request.system == PROMPT.system and request.tools == PROMPT.tools
    (message,) = request.messages
    assert message.role == "user"
    *context, task = message.content
    joined = "".join(block.text for block in context)
    assert joined == "<chat>\n" + "".join(line + "\n" for line in LEAF.context) + "</chat>"
    assert task.text.startswith("Compaction: ")


def test_r28_a_leaf_task_names_the_message_shows_the_ruler_and_holds_the_text_whole():
    task = last_text(Compaction(LEAF, PROMPT, model="m").request())
    assert "message 12 (12+1)" in task and "512 bytes" in task
    assert task.endswith(f"\n{RULER}\n<input>\n{LEAF_TEXT}\n</input>")
    assert RULER == "-" * 512 and task.count("-" * 512) == 1 and "-" * 513 not in task


def test_r28_a_merge_task_names_both_halves_and_says_the_context_holds_their_messages():
    task = last_text(Compaction(MERGE, PROMPT, model="m").request())
    assert "12+2 and 14+2" in task and "one line for 12+4" in task
    assert "(12 to 15) in more detail" in task
    assert task.endswith(f"\n{RULER}\n<input>\n12+2|left half\n14+2|right half\n</input>")


def test_the_demo_reads_back_what_a_task_asks():
    assert read_task(last_text(Compaction(LEAF, PROMPT, model="m").request())).input == (LEAF_TEXT,)
    merge = read_task(last_text(Compaction(MERGE, PROMPT, model="m").request()))
    assert (merge.kind, merge.name, merge.input) == ("merge", "12+4", ("12+2|left half", "14+2|right half"))
    tricky = CompactionJob(0, 3, (), ("user: it ends with\n</input>\nand goes on",))
    assert read_task(last_text(Compaction(tricky, PROMPT, model="m").request())).input == tricky.input
    assert read_task("What did I ask you to remember?") is None


@pytest.mark.parametrize("lines", [0, 1, 3, 4, 5, 8, 11])
def test_r23_marks_sit_on_the_system_prompt_the_last_whole_block_the_closing_block_and_the_end(lines):
    job = CompactionJob(0, 40, tuple(f"{k}+1|line {k}" for k in range(lines)), ("user: " + "y" * 700,))
    request = Compaction(job, PROMPT, model="m").request()
    blocks = request.messages[0].content
    marked = [k for k, block in enumerate(blocks) if block.cache]
    whole = lines // 4
    closing = lines % 4 != 0  # our fourth mark, only on a closing block that holds lines
    assert request.cache_system and request.marks() == 2 + (whole > 0) + closing <= 4
    assert marked == ([whole - 1] if whole else []) + ([whole] if closing else []) + [len(blocks) - 1]
    assert blocks[whole].text.endswith("</chat>") and blocks[whole].text.count("|") == lines % 4
    for block in blocks[:whole]:
        assert block.text.count("\n") == 4 + (1 if block is blocks[0] else 0)


def test_a_job_without_its_closing_mark_keeps_r23s_three():
    job = CompactionJob(0, 40, tuple(f"{k}+1|line {k}" for k in range(10)), ("user: " + "y" * 700,), closing=False)
    request = Compaction(job, PROMPT, model="m").request()
    assert [k for k, block in enumerate(request.messages[0].content) if block.cache] == [1, 3]
    assert request.marks() == 3


def test_r23_a_follow_up_moves_the_end_mark_to_the_new_last_block():
    compaction = Compaction(LEAF, PROMPT, model="m")
    compaction.take(Scripted("a" * 700).complete(compaction.request()))
    request = compaction.request()
    first, answer, again = request.messages
    assert [k for k, b in enumerate(first.content) if b.cache] == [2]  # the last whole block of 12 lines
    assert not answer.content[-1].cache and again.content[-1].cache and request.marks() == 3


def test_r23_follow_ups_keep_four_marks_at_most_with_the_closing_mark():
    job = CompactionJob(0, 10, tuple(f"{k}+1|line {k}" for k in range(10)), (LEAF_TEXT,))
    compaction = Compaction(job, PROMPT, model="m")
    for size in (900, 800, 700):
        request = compaction.request()
        assert request.marks() == 4  # system, last whole block, closing block, end
        assert [k for k, b in enumerate(request.messages[0].content) if b.cache][:2] == [1, 2]
        compaction.take(Scripted("a" * size).complete(request))


def test_r23_requests_with_the_same_context_share_a_cache_prefix():
    other = CompactionJob(0, 13, LEAF.context, ("user: " + "z" * 600,))
    a, b = (Compaction(job, PROMPT, model="m").request() for job in (LEAF, other))
    assert cache_prefix(a) == cache_prefix(b) is not None
    shorter = CompactionJob(0, 13, LEAF.context[:8], ("user: " + "z" * 600,))
    assert cache_prefix(Compaction(shorter, PROMPT, model="m").request()) != cache_prefix(a)
    assert cache_prefix(Compaction(CompactionJob(0, 3, (), ("user: q",)), PROMPT, model="m").request()) is None


# --- R29: the tries -----------------------------------------------------------------------------


def test_r29_an_answer_within_512_bytes_is_the_line_after_one_call():
    line, requests = run(LEAF, "user: deploy key at /etc/deploy/key.pem, expires 2026-11-01")
    assert line == "user: deploy key at /etc/deploy/key.pem, expires 2026-11-01" and len(requests) == 1


def test_r29_a_long_answer_is_asked_again_in_the_same_conversation_with_its_size_and_first_512_bytes():
    long = "é" * 300  # 600 bytes
    line, requests = run(LEAF, long, "short enough")
    assert line == "short enough" and len(requests) == 2
    first, answer, again = requests[1].messages
    assert [b.text for b in first.content] == [b.text for b in requests[0].messages[0].content]
    assert answer.role == "assistant" and answer.content[0].text == long
    text = again.content[0].text
    assert "600 bytes" in text and "the limit is 512" in text
    assert f"\n{'é' * 256}{LIMIT_MARK}\n" in text  # 512 bytes exactly, then the marker


def test_r29_the_follow_up_cuts_between_characters():
    text = follow_up("a" + "€" * 200)  # 1 + 600 bytes: 512 falls inside a character
    shown = text.split(":\n", 1)[1].split(LIMIT_MARK)[0]
    assert shown == "a" + "€" * 170 and len(shown.encode()) == 511


def test_r29_an_answer_not_shorter_than_the_best_ends_the_tries():
    line, requests = run(LEAF, "a" * 600, "b" * 650)
    assert len(requests) == 2 and line == "a" * 512
    line, requests = run(LEAF, "a" * 600, "b" * 600)
    assert len(requests) == 2 and line == "a" * 512


def test_r29_at_most_five_tries_and_the_shortest_answer_is_kept_cut_to_512():
    line, requests = run(LEAF, "a" * 900, "b" * 800, "c" * 700, "d" * 600, "e" * 550)
    assert len(requests) == MAX_TRIES == 5 and line == "e" * 512


LONG_LEAF = CompactionJob(0, 3, (), ("user: " + "the build on ci-7 fails in step 4 of 9 because /opt/cache is full; " * 12,))


def test_r47_a_line_far_under_the_limit_for_an_input_with_more_to_say_is_asked_again_once():
    short, fuller = "user: ci-7 build fails", "user: ci-7 build fails in step 4 of 9: /opt/cache is full " * 3
    line, requests = run(LONG_LEAF, short, fuller)
    assert line == fuller.strip() and len(requests) == 2
    first, answer, again = requests[1].messages
    assert answer.role == "assistant" and answer.content[0].text == short
    text = again.content[0].text
    assert f"{len(short)} bytes" in text and "Use the space up to the limit" in text


def test_r47_the_follow_up_is_sent_once_and_a_shorter_or_overlong_answer_keeps_the_first_line():
    for second in ("user: ci-7", "x" * 700, ""):
        line, requests = run(LONG_LEAF, "user: ci-7 build fails", second)
        assert line == "user: ci-7 build fails" and len(requests) == 2
    line, requests = run(LONG_LEAF, "user: ci-7 build fails", "user: ci-7 build fails, cache full")
    assert line == "user: ci-7 build fails, cache full" and len(requests) == 2  # fuller, still short: no third


def test_r47_no_follow_up_when_the_line_uses_a_quarter_of_the_limit_or_the_input_fits_a_line():
    assert len(run(LONG_LEAF, "u" * 128)[1]) == 1  # a quarter of 512: not far under
    assert len(run(LONG_LEAF, "u" * 600, "user: ci-7")[1]) == 2  # cut down on R29's request: kept
    assert len(run(LEAF, "user: deploy key")[1]) == 1  # LEAF's input is under 512 bytes: nothing more to say
    merge = CompactionJob(2, 3, (), ("12+2|" + "l" * 300, "14+2|" + "r" * 300))
    line, requests = run(merge, "l and r", "l" * 100 + " and " + "r" * 100)
    assert len(requests) == 2 and line.startswith("l" * 100)  # a merge of 610 bytes had more to say


def test_r47_the_system_prompt_asks_to_use_the_space_up_to_the_limit():
    assert "Use the space up to the limit" in PROMPT.system


@pytest.mark.parametrize("non_answer", ["", "   \n ", ("tool",), ("think",)])
def test_r29_an_empty_answer_a_tool_call_or_thinking_only_counts_as_a_try(non_answer):
    line, requests = run(LEAF, non_answer, "the line")
    assert line == "the line" and len(requests) == 2


def test_r29_a_tool_call_is_answered_so_the_conversation_stays_well_formed():
    _, requests = run(LEAF, ("tool",), "the line")
    first, call, results = requests[1].messages
    (use,) = call.content
    (result,) = results.content
    assert isinstance(use, ToolUseBlock) and isinstance(result, ToolResultBlock)
    assert result.tool_use_id == use.id and result.is_error and "No tools" in result.text
    assert result.cache  # the end of the request


def test_r29_five_non_answers_are_a_failed_call():
    with pytest.raises(NoAnswer):
        run(LEAF, "", ("tool",), ("think",), " ", "")


def test_r29_a_stray_head_and_surrounding_whitespace_are_stripped():
    line, _ = run(MERGE, "  \n12+4| user: asked for the key; everchat: found it  \n")
    assert line == "user: asked for the key; everchat: found it"
    assert clean_answer("3+1|x") == "x" and clean_answer("a\r\nb\nc") == "a b c"


def test_r29_a_head_alone_is_an_empty_answer():
    line, requests = run(LEAF, "12+1|  ", "ok")
    assert line == "ok" and len(requests) == 2


def test_r30_a_refusal_is_a_failed_call():
    with pytest.raises(Refused):
        run(LEAF, ("refuse",))


def test_r30_a_call_error_reaches_the_caller_to_count():
    with pytest.raises(Overloaded):
        run(LEAF, Overloaded("busy", provider="scripted", model="m"))


def test_r30_the_fallback_is_the_input_cut_to_512_bytes():
    assert fallback_line(LEAF) == LEAF_TEXT.encode()[:512].decode()
    assert fallback_line(MERGE) == "left half\nright half"  # joined as R11 joins halves
    assert fallback_line(CompactionJob(0, 1, (), ("note: " + "ü" * 400,))) == "note: " + "ü" * 253


def test_the_summarizer_adapts_a_build_job_from_the_transport():
    job = SimpleNamespace(l=0, i=12, context=list(LEAF.context), input=[LEAF_TEXT], attempt=2)
    assert job_of(job) == CompactionJob(0, 12, LEAF.context, (LEAF_TEXT,), 2)
    summarizer = Summarizer(Scripted("a line"), PROMPT, model="m", effort="low")
    assert summarizer(job) == "a line"
    (request,) = summarizer.connection.requests
    assert (request.model, request.effort, request.label, request.timeout) == ("m", "low", "compaction", 600.0)


# --- the 512 cut, for any text ------------------------------------------------------------------

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(texts)
def test_r29_the_final_cut_is_1_to_512_bytes_at_a_character_boundary(text):
    text = text * 3
    cut = final_cut(text)
    data = cut.encode()
    assert 1 <= len(data) <= 512 and text.startswith(cut)
    assert len(data) == len(text.encode()) or len(data) > 508  # never more than one character short


@settings(max_examples=100, deadline=None)
@given(texts)
def test_r30_the_fallback_is_a_prefix_of_its_input_within_512_bytes(text):
    line = fallback_line(CompactionJob(0, 5, (), (text * 3,)))
    assert 1 <= len(line.encode()) <= 512 and (text * 3).startswith(line)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 1200), st.just(-1)), min_size=MAX_TRIES, max_size=MAX_TRIES),
       st.sampled_from(["a", "é", "€", "😀"]))
def test_r29_any_run_of_answers_gives_a_line_of_1_to_512_bytes_or_a_failure(sizes, char):
    answers = [("tool",) if size < 0 else char * (size // len(char.encode())) for size in sizes]
    connection = Scripted(*answers)
    try:
        line = summarize(LEAF, connection, PROMPT, model="m")
    except NoAnswer:
        assert all(not (a if isinstance(a, str) else "").strip() for a in answers[: len(connection.requests)])
        return
    assert 1 <= len(line.encode()) <= 512 and len(connection.requests) <= MAX_TRIES
    usable = [a for a in answers[: len(connection.requests)] if isinstance(a, str) and a]
    assert line == final_cut(min(usable, key=lambda a: len(a.encode()))) or len(usable[-1].encode()) <= 512


def test_a_text_block_is_never_empty():
    with pytest.raises(ValueError):
        TextBlock("")
