"""The compaction core (R26-R30): the request, the task texts, the tries and the 512 cut.

Pure: no threads, no sockets. `Compaction` is one node's conversation with the
model as a small state machine (`request()`, `take(reply)`, `result()`);
`summarize` drives it over a `Connection`, and `Summarizer` is the callable the
compactor workers use (`summarizer(job) -> str`). A failed call raises a
`ModelError` for the caller to count; after the third (R30) the caller builds the
node with `fallback_line(job)`.

A request is R26's `[tools] [system prompt] [<chat> context </chat>] [task]`, with
the chat's one `Prompt` (the same tools and system as its turns), R23's three
cache marks (the end of the system prompt, the last whole 4-line block of the
context, the end of the request) and a fourth of our choice beyond R23: the
context's closing block, when it holds lines (see `Compaction`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from everchat.actors.prompt.tasks import RULER, TaskInfo, leaf_task, merge_task, read_task
from everchat.actors.tree import LINE_LIMIT, cut_utf8, render_text
from everchat.actors.models import (
    Connection,
    Event,
    Message,
    NoAnswer,
    Refused,
    Reply,
    Request,
    TextBlock,
    ToolResultBlock,
)
from everchat.actors.prompt import BLOCK_LINES, Prompt, view_blocks

__all__ = [
    "COMPACTION_MAX_TOKENS",
    "COMPACTION_TIMEOUT",
    "Compaction",
    "CompactionJob",
    "FAILURE_CAP",
    "LIMIT_MARK",
    "MAX_TRIES",
    "RULER",
    "Summarizer",
    "TaskInfo",
    "cache_prefix",
    "clean_answer",
    "fallback_line",
    "final_cut",
    "follow_up",
    "fuller_follow_up",
    "job_of",
    "leaf_task",
    "merge_task",
    "read_task",
    "summarize",
    "task_text",
]

MAX_TRIES = 5
"""R29: at most five calls for one node."""

FAILURE_CAP = 3
"""R30: the third failed call of a node builds it from its input."""

COMPACTION_TIMEOUT = 600.0
"""R30: a call that has not finished in 10 minutes has failed."""

COMPACTION_MAX_TOKENS = 4096
"""Output room for one line (and any thinking before it)."""

LIMIT_MARK = "[<- 512-byte limit]"
"""R29: shows where the limit fell in a follow-up."""

_STRAY_HEAD = re.compile(r"^\s*\d+\+\d+\|")
_NO_TOOLS = "No tools in a compaction. Answer with the line alone."


@dataclass(frozen=True)
class CompactionJob:
    """One node to build: `(l, i)`, its context lines (R27, rendered) and its input (R28:
    the message's `kind: text` line for a leaf, the two halves' rendered lines for a
    merge). `attempt` counts calls of this node, 1 for the first."""

    l: int  # noqa: E741 (SPEC's name for a level)
    i: int
    context: tuple[str, ...]
    input: tuple[str, ...]
    attempt: int = 1
    mark: int = -1  # whole context blocks before the view's cache mark; -1: R23's last whole block
    closing: bool = True  # a cache mark on the closing block when it holds lines (the prefix gate may drop it)

    @property
    def first(self) -> int:
        return self.i << self.l

    @property
    def count(self) -> int:
        return 1 << self.l

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    @property
    def name(self) -> str:
        return f"{self.first}+{self.count}"

    @property
    def leaf(self) -> bool:
        return self.l == 0


def job_of(job: object) -> CompactionJob:
    """A `CompactionJob` from anything with `l`, `i`, `context`, `input` (and `attempt`),
    such as the transport's `BuildJob`."""
    if isinstance(job, CompactionJob):
        return job
    return CompactionJob(int(job.l), int(job.i), tuple(job.context), tuple(job.input),
                         int(getattr(job, "attempt", 1) or 1), int(getattr(job, "mark", -1)),
                         bool(getattr(job, "closing", True)))


# --- the task texts (R28; written in actors/prompt/tasks.py) --------------------------


def task_text(job: CompactionJob) -> str:
    if job.leaf:
        return leaf_task(job.first, job.input[0])
    left, right = job.input
    return merge_task(job.first, job.count, left, right)


def follow_up(answer: str) -> str:
    """R29: the answer's size, the limit, and its first 512 bytes (cut between characters)
    ending in a visible limit marker."""
    size = len(answer.encode())
    return (
        f"That line is {size} bytes; the limit is {LINE_LIMIT}. Here are its first {LINE_LIMIT} bytes, "
        f"up to the limit:\n{cut_utf8(answer, LINE_LIMIT)}{LIMIT_MARK}\n"
        f"Write it again in at most {LINE_LIMIT} bytes: keep what matters most, shorten or drop the rest. "
        f"Answer with the line alone."
    )


SHORT_LINE = LINE_LIMIT // 4
"""R47 (our choice): a line under a quarter of the limit is "far under" it."""


def had_more_to_say(job_input: Sequence[str]) -> bool:
    """R47: the input of a node holds more than one line's worth (its bytes, joined as in
    R11, exceed the limit), so a line far under the limit left something out."""
    return len("\n".join(job_input).encode()) > LINE_LIMIT


def fuller_follow_up(answer: str) -> str:
    """R47: the one follow-up for a line far under the limit when the input had more to say."""
    return (
        f"That line is {len(answer.encode())} bytes, far under the limit of {LINE_LIMIT}, and the input has more "
        f"to say. Use the space up to the limit: write the line again with more of what matters, in at most "
        f"{LINE_LIMIT} bytes. Answer with the line alone."
    )


def clean_answer(text: str) -> str:
    """R29: without a stray `id+n|` head and surrounding whitespace; line breaks become
    spaces (R14), which never makes it longer."""
    text = text.strip()
    head = _STRAY_HEAD.match(text)
    if head:
        text = text[head.end():].strip()
    return render_text(text).strip()


def final_cut(line: str) -> str:
    """R29: the kept line cut to 512 bytes at a character boundary."""
    cut = cut_utf8(line, LINE_LIMIT)
    if not cut:
        raise ValueError("a built line has at least one byte")
    return cut


def _strip_head(line: str) -> str:
    head = _STRAY_HEAD.match(line)
    return line[head.end():] if head else line


def fallback_line(job: object) -> str:
    """R30: after the third failed call, the node is its input (the message line, or the two
    halves' texts joined by a newline as in R11) cut to 512 bytes."""
    job = job_of(job)
    text = job.input[0] if job.leaf else "\n".join(_strip_head(line) for line in job.input)
    return cut_utf8(text, LINE_LIMIT) or "(empty)"


# --- the conversation (R26, R29) ------------------------------------------------------


class Compaction:
    """One node's calls: R26's request, then R29's follow-ups in the same conversation.

        compaction = Compaction(job, prompt, model="claude-haiku-5-5")
        while not compaction.done:
            compaction.take(connection.complete(compaction.request()))
        line = compaction.result()

    Cache marks: R23's three (the system prompt, the last whole 4-line context block,
    the request's end) and, our choice beyond R23 ("where we chose"), a fourth on the
    context's closing block (its last 1-3 lines and `</chat>`) when it holds lines.
    R27 cuts the context at the first unbuilt line, so compactions started together
    often share the whole context; with R23's marks alone the later ones read only up
    to the last whole block, with the fourth they read it whole (issue 4, 3,000
    messages through tools/bench/bench_cache.py: compactions read 0.982 / 0.985 of
    what a perfect prefix cache reads without it, 0.9945 / 0.9948 with, on the pastes
    / chatty workloads; the target is 0.99). It costs no extra write:
    the end mark writes that far anyway. A closing block of `</chat>` alone gains a
    few bytes, so it is not marked; Anthropic's limit of four marks always holds, and
    no mark is a 1-hour one. R23's prefix gate may drop the mark (`job.closing`)
    while another call writes the same closing prefix.
    """

    def __init__(self, job: object, prompt: Prompt, *, model: str, effort: str | None = None,
                 max_tokens: int = COMPACTION_MAX_TOKENS, timeout: float = COMPACTION_TIMEOUT) -> None:
        self.job = job_of(job)
        if self.job.leaf and len(self.job.input) != 1 or not self.job.leaf and len(self.job.input) != 2:
            raise ValueError(f"node {self.job.name} has {len(self.job.input)} input lines")
        self.prompt = prompt
        self.model = model
        self.effort = effort
        self.max_tokens = max_tokens
        self.timeout = timeout
        self._context = _marked_at(view_blocks(self.job.context), self.job.mark,
                                   self.job.closing and len(self.job.context) % BLOCK_LINES != 0)
        self._task = task_text(self.job)
        self._after: list[Message] = []  # assistant answers and our follow-ups, in order
        self.tries = 0
        self.best: str | None = None  # the shortest answer over the limit so far
        self.line: str | None = None  # an answer within the limit
        self._asked_fuller = False  # R47's one follow-up was sent
        self.done = False

    def __repr__(self) -> str:
        return f"Compaction({self.job.name}, tries={self.tries}, done={self.done})"

    def request(self) -> Request:
        """The next call: cache marks on the system prompt, the last whole context block
        (from `view_blocks`) and the request's last block (R23), and on the closing
        block (ours, see the class)."""
        if self.done:
            raise RuntimeError(f"{self!r} asks nothing more")
        first = Message("user", (*self._context, TextBlock(self._task, cache=not self._after)))
        after = list(self._after)
        if after:
            last = after[-1]
            *head, tail = last.content
            after[-1] = Message(last.role, (*head, _with_mark(tail)))
        return Request(model=self.model, system=self.prompt.system, tools=self.prompt.tools,
                       messages=(first, *after), cache_system=True, max_tokens=self.max_tokens,
                       effort=self.effort, timeout=self.timeout, label="compaction",
                       priority=1 if self.job.leaf else 2)  # a shared CLI slot: leaves before merges

    def take(self, reply: Reply) -> None:
        """Count one answer (R29). A refusal raises `Refused` (a failed call, R30)."""
        if self.done:
            raise RuntimeError(f"{self!r} took all its answers")
        self.tries += 1
        if reply.stop.reason == "refusal":
            self.done = True
            raise Refused(f"the model refused to summarize {self.job.name}", model=self.model)
        text = clean_answer(reply.text)
        if reply.tool_calls or not text:
            if reply.tool_calls:  # answer the calls, so the conversation stays well formed
                results = [ToolResultBlock.of_text(call.id, _NO_TOOLS, is_error=True) for call in reply.tool_calls]
                self._after += [Message("assistant", tuple(reply.blocks)), Message("user", tuple(results))]
            self.done = self.tries >= MAX_TRIES or self.line is not None  # after R47's follow-up: keep the line
            return
        size = len(text.encode())
        if size <= LINE_LIMIT:
            if self.line is not None and size <= len(self.line.encode()):
                self.done = True  # R47's follow-up gave no fuller line: keep the first
                return
            self.line = text
            # R47 (our choice): once, a line far under the limit whose input had more to say
            # is asked again; the fuller answer (still within the limit) is kept.
            # Not after R29's shortening: that answer was cut down on request.
            self.done = (self._asked_fuller or self.best is not None or size >= SHORT_LINE
                         or self.tries >= MAX_TRIES or not had_more_to_say(self.job.input))
            if not self.done:
                self._asked_fuller = True
                self._after += [Message("assistant", (TextBlock(text),)),
                                Message("user", (TextBlock(fuller_follow_up(text)),))]
            return
        if self.line is not None:
            self.done = True  # R47's follow-up went over the limit: the first line stands
            return
        if self.best is not None and size >= len(self.best.encode()):
            self.done = True  # not shorter than the best so far: stop early
            return
        self.best = text
        if self.tries >= MAX_TRIES:
            self.done = True
            return
        answer = tuple(b for b in reply.blocks if not isinstance(b, TextBlock) or b.text.strip()) or (
            TextBlock(reply.text),)
        self._after += [Message("assistant", answer), Message("user", (TextBlock(follow_up(text)),))]

    def result(self) -> str:
        """The built line, 1 … 512 bytes (R29); `NoAnswer` when no try gave a line."""
        if self.line is not None:
            return final_cut(self.line)
        if self.best is not None:
            return final_cut(self.best)
        raise NoAnswer(f"no line for {self.job.name} in {self.tries} tries (empty answers, tool calls or "
                       f"thinking only)", model=self.model)


def _with_mark(block):
    return replace(block, cache=True)


def _marked_at(blocks: list[TextBlock], mark: int, closing: bool) -> list[TextBlock]:
    """The context blocks with the view's cache mark after whole block `mark` (0: no
    view mark; -1: R23's default, the last whole block), and one on the closing block
    when `closing`. The prefix gate moves the view mark back to a prefix already
    written, or drops the closing one, when another call is writing the same prefix."""
    whole = len(blocks) - 1
    if mark > whole:
        raise ValueError(f"a view mark after block {mark} of a context with {whole} whole blocks")
    if mark < 0:
        mark = whole
    return [replace(block, cache=k == mark - 1 or closing and k == whole) for k, block in enumerate(blocks)]


class _FirstEvent(Connection):
    """A connection that calls `started()` at the first event of its first stream: the
    response started, so the prefix it wrote is readable (R23)."""

    def __init__(self, inner: Connection, started: Callable[[], None]) -> None:
        self.inner = inner
        self.provider = inner.provider
        self._started: Callable[[], None] | None = started

    def stream(self, request: Request) -> Iterator[Event]:
        for event in self.inner.stream(request):
            if self._started is not None:
                started, self._started = self._started, None
                started()
            yield event


def summarize(job: object, connection: Connection, prompt: Prompt, *, model: str, effort: str | None = None,
              max_tokens: int = COMPACTION_MAX_TOKENS, timeout: float = COMPACTION_TIMEOUT,
              started: Callable[[], None] | None = None) -> str:
    """Build one node's line through `connection` (R26-R29). A failed call raises its
    `ModelError`, for the caller to count (R30). `started` is called once, when the
    first call's response starts (the compactor tells the planner's prefix gate)."""
    compaction = Compaction(job, prompt, model=model, effort=effort, max_tokens=max_tokens, timeout=timeout)
    if started is not None:
        connection = _FirstEvent(connection, started)
    while not compaction.done:
        compaction.take(connection.complete(compaction.request()))
    return compaction.result()


class Summarizer:
    """The compactor workers' `summarizer(job) -> str` over one connection and model (R33).
    It tells when a response starts (`started=`), for R23's prefix gate."""

    tells_start = True

    def __init__(self, connection: Connection, prompt: Prompt, *, model: str, effort: str | None = None,
                 max_tokens: int = COMPACTION_MAX_TOKENS, timeout: float = COMPACTION_TIMEOUT) -> None:
        self.connection = connection
        self.prompt = prompt
        self.model = model
        self.effort = effort
        self.max_tokens = max_tokens
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Summarizer({self.connection!r}, {self.model})"

    def __call__(self, job: object, started: Callable[[], None] | None = None) -> str:
        return summarize(job, self.connection, self.prompt, model=self.model, effort=self.effort,
                         max_tokens=self.max_tokens, timeout=self.timeout, started=started)


def cache_prefix(request: Request) -> str | None:
    """A digest of the prefix a request marks for the cache through its last marked context
    block (model, tools, system, blocks), or None when it marks none there. Two calls with
    the same digest write the same cache entry: the pool lets one write it first (R23)."""
    first = request.messages[0]
    marked = [k for k, block in enumerate(first.content[:-1]) if block.cache]
    if not marked:
        return None
    digest = hashlib.sha256()
    digest.update(request.model.encode())
    for tool in request.tools:
        digest.update(json.dumps([tool.name, tool.description, tool.schema], sort_keys=True).encode())
    digest.update(request.system.encode())
    for block in first.content[: marked[-1] + 1]:
        digest.update(b"\0" + block.text.encode())
    return digest.hexdigest()
