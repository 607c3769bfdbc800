"""The cache benchmark's chat (issue 4): a seeded workload of turns, and the fake model's rule
that plays it.

A workload is a list of turns drawn from one seed, so two runs send the same bytes:

- `pastes` (the issue's workload): a user message of 40-400 bytes, one in five a paste of
  1.5-6 KB; 0-5 tool rounds, each a call of 120-400 bytes (its JSON input) and a result of
  200 bytes to 30 KB (log-uniform: most results are small, a few are long); a reply of
  300-2,500 bytes.
- `chatty`: the same without long pastes (every user message 40-400 bytes) and with small
  tool results (200 bytes to 2 KB).

Nothing here talks to a server. `WorkloadRule` is the fake model server's rule
(`server.rule(WorkloadRule(workload))`): it reads each request the real turn runner or
compactor sends and answers as the workload says. A turn's request is known by its turn
header (R36, `prompt.split_turn`) and the tag `[bench turn N]` its message opens with; the
round is the number of assistant messages the request already holds. A compaction's is
known by its task (R28, `compaction.read_task`) and gets a line of 380-500 bytes made from
a digest of its input, so every node's line is its own. The rule also notes what each
request is and every view line it carried, for the accounting (`RequestNotes`).

`FETCH_TOOL` and `fetch` are the bench-only tool: the model's call names the result's size
and `fetch` returns that many bytes of text, the same bytes for the same call.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from everchat.actors.compactor.compaction import read_task
from everchat.actors.models import ToolSpec
from everchat.actors.prompt import split_turn
from everchat.tools.fakemodel import ModelRequest, Reply, Text, ToolCall, anthropic_blocks

__all__ = [
    "FETCH_TOOL",
    "PLACEHOLDER",
    "RequestNotes",
    "Round",
    "SPLIT_BYTES",
    "Shape",
    "Turn",
    "WORKLOADS",
    "Workload",
    "WorkloadRule",
    "call_input",
    "fetch",
    "filler",
    "make_workload",
    "summary_line",
    "turn_tag",
]

WORKLOADS = ("pastes", "chatty")

SPLIT_BYTES = 16_000
"""R8: a long text is logged in messages of at most 16,000 bytes (used to estimate counts)."""

PLACEHOLDER = "(not summarized yet"
"""R15's placeholder and R36's fallback mark both start so; no request may carry one."""

_WORDS = (
    "build cache view line node merge turn tool call result reply paste error path config test "
    "server client socket actor planner worker queue budget floor ceiling prefix block mark "
    "write read zoom date chat log tree leaf parent child batch sawtooth digest token byte "
    "the a of to in and for with on at from by is was be it this that we you they will can"
).split()


def filler(seed: str, size: int) -> str:
    """`size` bytes of ASCII words, the same for the same seed (never empty for size > 0)."""
    if size <= 0:
        return ""
    rng = random.Random(hashlib.sha256(seed.encode()).digest())
    words = rng.choices(_WORDS, k=size // 4 + 8)
    text = " ".join(words)
    while len(text) < size:
        text += " " + " ".join(rng.choices(_WORDS, k=size // 4 + 8))
    body = text[:size - 1]
    if body.endswith(" "):
        body = body[:-1] + "s"  # no space before the full stop, and the size stays exact
    return body + "."


@dataclass(frozen=True)
class Round:
    """One tool round: the call's JSON input size and the result's size, in bytes."""

    call_bytes: int
    result_bytes: int


@dataclass(frozen=True)
class Turn:
    """One turn: the user's words, the tool rounds, the reply's size."""

    index: int
    user: str
    rounds: tuple[Round, ...]
    reply_bytes: int

    def messages(self) -> int:
        """The messages this turn logs (R3, R8): the user's, a call and its result per round,
        the reply; a text over 16,000 bytes counts once per part."""
        parts = lambda size: max(1, math.ceil(size / SPLIT_BYTES))  # noqa: E731
        count = parts(len(self.user.encode())) + parts(self.reply_bytes)
        return count + sum(1 + parts(r.result_bytes) for r in self.rounds)


@dataclass(frozen=True)
class Workload:
    name: str
    seed: int
    turns: tuple[Turn, ...]

    def messages(self) -> int:
        """The messages the whole workload logs (an estimate by `Turn.messages`)."""
        return sum(turn.messages() for turn in self.turns)

    def turn(self, index: int) -> Turn:
        return self.turns[index]


def turn_tag(index: int) -> str:
    return f"[bench turn {index}]"


_TAG = re.compile(r"\[bench turn (\d+)\]")


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def make_workload(name: str = "pastes", messages: int = 3000, seed: int = 4) -> Workload:
    """Turns drawn from `seed` until they log at least `messages` messages."""
    if name not in WORKLOADS:
        raise ValueError(f"a workload is one of {', '.join(WORKLOADS)}, not {name!r}")
    rng = random.Random(f"{name}:{seed}")
    turns: list[Turn] = []
    count = 0
    while count < messages:
        index = len(turns)
        paste = name == "pastes" and rng.random() < 0.2
        user_bytes = rng.randint(1500, 6000) if paste else rng.randint(40, 400)
        tag = turn_tag(index)
        user = tag + " " + filler(f"user:{name}:{seed}:{index}", max(1, user_bytes - len(tag) - 1))
        top = 30_000 if name == "pastes" else 2_000
        rounds = tuple(Round(rng.randint(120, 400), _log_uniform(rng, 200, top))
                       for _ in range(rng.randint(0, 5)))
        turn = Turn(index, user, rounds, rng.randint(300, 2500))
        turns.append(turn)
        count += turn.messages()
    return Workload(name, seed, tuple(turns))


# --- the bench-only tool -------------------------------------------------------------------

FETCH_TOOL = ToolSpec(
    name="fetch",
    description="Fetch a document of the given size (a benchmark's stand-in for a real tool).",
    schema={
        "type": "object",
        "properties": {
            "turn": {"type": "integer"},
            "round": {"type": "integer"},
            "bytes": {"type": "integer", "minimum": 1},
            "note": {"type": "string"},
        },
        "required": ["turn", "round", "bytes"],
        "additionalProperties": False,
    },
)


def fetch(arguments: Mapping[str, Any]) -> str:
    """The result of a `fetch` call: `bytes` bytes of text, the same for the same call."""
    size = int(arguments["bytes"])
    return filler(f"result:{arguments.get('turn')}:{arguments.get('round')}", size)


def call_input(turn: Turn, k: int) -> dict[str, Any]:
    """The call's JSON input, padded so its compact JSON is `call_bytes` long."""
    rnd = turn.rounds[k]
    base = {"turn": turn.index, "round": k, "bytes": rnd.result_bytes, "note": ""}
    empty = len(json.dumps(base, separators=(",", ":")))
    base["note"] = filler(f"call:{turn.index}:{k}", max(1, rnd.call_bytes - empty))
    return base


def summary_line(kind: str, name: str, inputs: tuple[str, ...]) -> str:
    """A compaction's answer: 380-500 ASCII bytes drawn from a digest of the task's input."""
    digest = hashlib.sha256(("\n".join(inputs)).encode()).hexdigest()
    size = 380 + int(digest[:4], 16) % 121
    head = f"{kind} {name} #{digest[:12]}: "
    return head + filler(digest, size - len(head))


# --- the rule ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A request's prompt as the fake cache sees it (`anthropic_blocks`): each block's prefix
    digest, the tokens through it, the marked blocks, and the view's closing block (the
    0-3 lines after its last whole block, and `</chat>`; -1 when there is no view)."""

    digests: tuple[bytes, ...]
    ends: tuple[int, ...]
    marks: tuple[int, ...]
    closing: int
    opening_end: int  # the index after the first message's last block


@dataclass
class RequestNotes:
    """What the rule saw, per exchange id: "turn" or "compaction" (or "other"), the
    prompt's `Shape`, and the first exchange that marked each block prefix; every distinct
    view line any request carried, with the exchanges that carried a placeholder."""

    kinds: dict[int, str] = field(default_factory=dict)
    turns: dict[int, int] = field(default_factory=dict)  # exchange -> workload turn
    shapes: dict[int, Shape] = field(default_factory=dict)
    first_marked: dict[bytes, int] = field(default_factory=dict)  # marked block prefix -> exchange
    lines: set[str] = field(default_factory=set)
    placeholders: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.append(str(block.get("text", "")))
    return out


_LINE = re.compile(r"^\d+\+\d+\|")


def _view_lines(first_message: Mapping[str, Any]) -> list[str]:
    """The `id+n|text` lines between `<chat>` and `</chat>` of a request's first message."""
    joined = "".join(_texts(first_message.get("content")))
    begin, end = joined.find("<chat>\n"), joined.find("</chat>")
    if begin < 0 or end < begin:
        return []
    return [line for line in joined[begin + len("<chat>\n"):end].split("\n") if line]


def _shape(body: Mapping[str, Any]) -> Shape:
    blocks = anthropic_blocks(dict(body))
    ends, running = [], 0
    for block in blocks:
        running += block.tokens
        ends.append(running)
    closing = next((j for j, b in enumerate(blocks) if b.where.startswith("messages[0].")
                    and _block_at(body, b.where).endswith("</chat>")), -1)
    opening_end = sum(1 for b in blocks if not b.where.startswith("messages[") or b.where.startswith("messages[0]."))
    return Shape(tuple(b.digest for b in blocks), tuple(ends), tuple(j for j, b in enumerate(blocks) if b.mark),
                 closing, opening_end)


def _block_at(body: Mapping[str, Any], where: str) -> str:
    """The text of the block at "messages[m].content[c]" ("" when it is not text)."""
    m, c = (int(part) for part in re.findall(r"\[(\d+)\]", where))
    content = body["messages"][m].get("content")
    block = content[c] if isinstance(content, list) else {"text": content}
    return str(block.get("text", "")) if isinstance(block, dict) else ""


class WorkloadRule:
    """The fake model's answers for a workload (see the module docstring). Thread-safe: the
    server calls it on its event loop while the bench reads `notes` after the run."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.notes = RequestNotes()
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> Reply:
        body = request.body
        messages = body.get("messages") or []
        first = messages[0] if messages else {}
        first_texts = _texts(first.get("content"))
        last_first = first_texts[-1] if first_texts else ""
        lines = _view_lines(first)
        shape = _shape(body)
        with self._lock:
            self.notes.shapes[request.exchange_id] = shape
            for j in shape.marks:
                self.notes.first_marked.setdefault(shape.digests[j], request.exchange_id)
            self.notes.lines.update(lines)
            if PLACEHOLDER in json.dumps(messages, ensure_ascii=False):
                self.notes.placeholders.append(request.exchange_id)
        task = read_task(last_first)
        if task is not None:
            with self._lock:
                self.notes.kinds[request.exchange_id] = "compaction"
            return Reply(summary_line(task.kind, task.name, task.input))
        turn = split_turn(last_first)
        tag = _TAG.search(turn[1]) if turn is not None else None
        if tag is None:
            with self._lock:
                self.notes.kinds[request.exchange_id] = "other"
                self.notes.problems.append(f"request {request.exchange_id} is neither a turn nor a compaction")
            return Reply("(the benchmark's model does not know this request)")
        index = int(tag.group(1))
        plan = self.workload.turn(index)
        k = sum(1 for m in messages if m.get("role") == "assistant")
        with self._lock:
            self.notes.kinds[request.exchange_id] = "turn"
            self.notes.turns[request.exchange_id] = index
        if k < len(plan.rounds):
            return Reply(ToolCall(FETCH_TOOL.name, call_input(plan, k), id=f"fetch_{index}_{k}"))
        return Reply(Text(filler(f"reply:{index}", plan.reply_bytes)))
