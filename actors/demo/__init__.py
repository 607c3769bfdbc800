"""The demo model: offline, deterministic, and honest about how Everchat's memory works.

A compaction (its task read by `call_texts.read_task`) gets the extractive
summarizer's line (`_summarize`). A turn gets a small reply model that works only
from what the request holds, like a real model: it reads the view, picks the lines
that share words with the question (the person's own lines first when they ask
what *they* said; the latest line on ties, R34), zooms down to the message, and
answers with the message's own words. A statement is acknowledged. Replies stream
in several pieces; a zoom is a real tool call, answered by the turn runner.

It also shows the hands (issue 11, R38, R39), only when the request offers the tools: a
message with a command in backticks (``run `uname -a` on laptop``) gets a `shell` call
(with `device` when it names one), a message in `call_texts.agent_request`'s form gets a
`spawn` call ("send two agents to compare A and B" two, one a request), and once the calls
have their results the reply answers from them. The same rules serve an agent's call: its
last text is its task.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from everchat.actors.prompt.tasks import read_agent_request, read_task, split_turn

from everchat.actors.models._summarize import KINDS, key_tokens, summarize
from everchat.actors.models._types import (
    Connection,
    Event,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    approx_tokens,
)

__all__ = ["DemoConnection", "demo_turn", "hands_turn"]

_LINE = re.compile(r"^(\d+)\+(\d+)\|(.*)$")
_WORD = re.compile(r"[\w][\w'.-]*[\w]|[\w]")
_STOP = frozenset(
    "a an the and or but if of to in on at by for with from into about as is are was were be been being am do does "
    "did done have has had i me my mine you your yours we our us it its this that these those there here what which "
    "who whom whose when where why how can could would should will shall may might must please tell told say said "
    "ask asked asking again any some all me? just now then than so not no yes ok okay hey hi hello thanks thank "
    "know remind recall find show give let get got".split()
)
_SELF = frozenset({"i", "me", "my", "mine", "i'd", "i've", "i'm"})
_QUESTION = re.compile(r"^\s*(what|which|who|whom|whose|when|where|why|how|do|did|does|is|are|was|were|can|could|"
                       r"would|should|have|has|had|tell|remind|recall|find|show|list)\b", re.I)
_REMEMBER = re.compile(r"\bremember\b(?:\s+(?:that|this|the word|these|for me))?[\s:,]*(.+?)\s*(?:[.!?](?:\s|$)|$)",
                       re.I | re.S)
_MAX_ZOOMS = 24
_COMMAND = re.compile(r"`([^`\n]*[^`\s][^`\n]*)`(?:\s+on\s+([A-Za-z0-9][\w-]*(?:\.[\w-]+)*))?")
_COMPARE = re.compile(r"\bagents?\b[^.?!]*?\bcompare\s+(.+?)\s+(?:and|with|to|vs\.?|versus)\s+(.+?)[\s.?!]*$",
                      re.I | re.S)
_NOT_A_DEVICE = frozenset({"this", "that", "the", "my", "your", "a", "it", "here"})  # "on this computer"
_SHOWN = 3000  # characters of a tool's output a reply quotes at most
_PIECE = 16  # characters per streamed piece


def _stem(word: str) -> str:
    word = word.lower().strip(".'-")
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _words(text: str) -> set[str]:
    """Content words, stemmed; `amber-42` also counts as `amber` and `42`."""
    out = set()
    for word in _WORD.findall(text):
        if word.lower() in _STOP:
            continue
        out.add(_stem(word))
        parts = re.split(r"[-._/]+", word)
        if len(parts) > 1:
            out.update(_stem(part) for part in parts if part and part.lower() not in _STOP)
    return out


@dataclass
class _Line:
    first: int
    count: int
    text: str
    score: float
    depth: int

    @property
    def name(self) -> str:
        return f"{self.first}+{self.count}"


@dataclass
class _Turn:
    view: list[tuple[int, int, str]]
    message: str
    end: int  # the message's id: one past the view's last message


def _read_turn(request: Request) -> _Turn:
    first = request.messages[0]
    texts = [block.text for block in first.content if isinstance(block, TextBlock)]
    joined = "".join(texts)
    view: list[tuple[int, int, str]] = []
    begin, close = joined.find("<chat>\n"), joined.find("</chat>")
    if begin >= 0 and close > begin:
        for line in joined[begin + len("<chat>\n"):close].splitlines():
            match = _LINE.match(line)
            if match:
                view.append((int(match.group(1)), int(match.group(2)), match.group(3)))
    message = ""
    for text in reversed(texts):
        parts = split_turn(text)
        if parts is not None:
            message = parts[1]
            break
    else:
        message = joined[close + len("</chat>"):].strip() if close >= 0 else joined.strip()
    end = view[-1][0] + view[-1][1] if view else 0
    return _Turn(view, message, end)


def _history(request: Request) -> list[tuple[ToolUseBlock, ToolResultBlock | None]]:
    """The zoom calls so far in this turn's tool loop, each with its result."""
    results = {}
    calls = []
    for message in request.messages[1:]:
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                calls.append(block)
            elif isinstance(block, ToolResultBlock):
                results[block.tool_use_id] = block
    return [(call, results.get(call.id)) for call in calls]


def _score(text: str, wanted: set[str], about_self: bool) -> float:
    if "(not summarized yet" in text:
        return 0.1  # unknown: worth a look after the lines that match
    score = float(len(wanted & _words(text)))
    if score and about_self and re.search(r"(?:^|\s|\|)user: ", " " + text):
        score += 0.5
    return score


def _answer_from(message_id: int, text: str, question: str, path: list[str]) -> str:
    kind, _, body = text.partition(": ")
    if kind not in KINDS:
        kind, body = "", text
    route = " → ".join(path)
    how = f" (I zoomed {route} to read it.)" if path else ""
    remember = _REMEMBER.search(body)
    if re.search(r"\bremember", question, re.I) and remember and kind in ("user", "note"):
        thing = remember.group(1).strip().strip("\"'“”")
        return f"You asked me to remember: {thing}. That is message {message_id}, in your words: \"{body.strip()}\"{how}"
    wanted = _words(question)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", body) if s.strip()] or [body]
    best = max(sentences, key=lambda s: (len(wanted & _words(s)), -sentences.index(s)))
    who = {"user": "you wrote", "everchat": "I wrote", "tool": "I called", "echo": "a tool returned",
           "work": "an agent reported", "note": "a note says"}.get(kind, "it says")
    return f"In message {message_id} {who}: \"{best.strip()}\"{how}"


def _acknowledge(turn: _Turn) -> str:
    tokens = [token for _, _, token in key_tokens(turn.message)][:4]
    kept = f" I will find {', '.join(tokens)} again through the view." if tokens else ""
    return (f"Noted as message {turn.end}.{kept} I am the offline demo model: I answer "
            f"from the memory alone, by reading the view and zooming into its lines.")


def demo_turn(request: Request) -> tuple[str, ToolCall | None, str]:
    """(thinking, a zoom to make or None, the reply text) for a turn's request."""
    turn = _read_turn(request)
    history = _history(request)
    question = turn.message
    can_zoom = any(tool.name == "zoom" for tool in request.tools)
    recall = "?" in question or bool(_QUESTION.match(question))
    if not recall or not turn.view:
        if recall:
            return "", None, "My memory is empty so far: there is nothing in the view to look up."
        return "", None, _acknowledge(turn)
    wanted = _words(question)
    about_self = bool(_SELF & {w.lower() for w in _WORD.findall(question)})
    frontier = [_Line(a, n, text, _score(text, wanted, about_self), 0) for a, n, text in turn.view]
    frontier = [line for line in frontier if line.score > 0]
    path: list[str] = []
    found: tuple[int, str] | None = None
    for call, result in history:
        if call.name != "zoom" or "id" not in call.input:
            continue
        first, count = int(call.input.get("id", -1)), int(call.input.get("n", 1))
        parent = next((line for line in frontier if (line.first, line.count) == (first, count)), None)
        frontier = [line for line in frontier if (line.first, line.count) != (first, count)]
        if result is None or result.is_error:
            continue
        path.append(f"{first}+{count}")
        if count >= 2:
            inherited = parent.score / 2 if parent else 0.0
            depth = (parent.depth if parent else 0) + 1
            for child in result.text.splitlines():
                match = _LINE.match(child)
                if match:
                    score = _score(match.group(3), wanted, about_self) + inherited
                    if score > 0:
                        frontier.append(_Line(int(match.group(1)), int(match.group(2)), match.group(3), score, depth))
        elif _score(result.text, wanted, about_self) >= 1:
            found = (first, result.text)
            break
    if found is not None:
        return "", None, _answer_from(found[0], found[1], question, path)
    frontier.sort(key=lambda line: (-line.score, -line.depth, -line.first))
    if frontier and can_zoom and len(history) < _MAX_ZOOMS:
        target = frontier[0]
        count = target.count
        thinking = (f"Line {target.name} looks related to the question; its line is a summary, so I zoom in."
                    if count > 1 else f"Line {target.name} is one message; I read it whole.")
        call = ToolCall(f"demo-zoom-{len(history) + 1}", "zoom", {"id": target.first, "n": count})
        return thinking, call, ""
    if frontier and not can_zoom:
        best = frontier[0]
        return "", None, f"The view's line {best.name} says: \"{best.text}\" (I cannot zoom here to read more.)"
    looked = f" I zoomed {' → '.join(path)}." if path else ""
    return "", None, f"I found nothing about that in my memory.{looked}"



# --- the hands (issue 11): shell and spawn -------------------------------------------------


def _person_text(request: Request) -> str:
    """The last text the person (or, for an agent, its task) gave: the last text block of
    a user message, the turn header and the view taken off."""
    for message in reversed(request.messages):
        if message.role != "user":
            continue
        for block in reversed(message.content):
            if isinstance(block, TextBlock):
                parts = split_turn(block.text)
                if parts is not None:
                    return parts[1]
                text = block.text
                close = text.rfind("</chat>")
                return text[close + len("</chat>"):].strip() if close >= 0 else text.strip()
    return ""


def _quoted(text: str) -> str:
    """A tool's output as a reply quotes it: whole up to `_SHOWN` characters, else its
    start and its end with how much is left out between them."""
    text = text.rstrip("\n")
    if len(text) <= _SHOWN:
        return text
    half = _SHOWN // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters not quoted here ...]\n{text[-half:]}"


def _answer_hands(done: list[tuple[ToolUseBlock, ToolResultBlock]]) -> str:
    """The reply once the shell and spawn calls have their results: short, honest, quoting
    what a command printed."""
    spawns = [(call, result) for call, result in done if call.name == "spawn"]
    lines = []
    started = [str(call.input.get("name", "?")) for call, result in spawns if not result.is_error]
    if started:
        agents = " and ".join(started)
        lines.append(f"I started the agent {agents}; it will report here when it is done." if len(started) == 1
                     else f"I started the agents {agents}; they will report here when they are done.")
    for call, result in done:
        if call.name == "spawn" and result.is_error:
            lines.append(f"I could not start the agent {call.input.get('name', '?')}: {_quoted(result.text)}")
        elif call.name == "shell":
            where = call.input.get("device") or "this computer"
            verb = "failed" if result.is_error else "printed"
            lines.append(f"`{call.input.get('command', '')}` on {where} {verb}:\n{_quoted(result.text) or '(nothing)'}")
    return "\n".join(lines)


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return words[0][:24] if words else "it"


def _plan(text: str, offered: set[str]) -> list[tuple[str, dict, str]]:
    """The calls the person's message asks for, in order: (tool, input, thinking)."""
    wanted = read_agent_request(text)
    if wanted is not None and "spawn" in offered:
        name, task = wanted
        return [("spawn", {"name": name, "task": task}, f"The person asks for an agent named {name}: I start it.")]
    compare = _COMPARE.search(text)
    if compare is not None and "spawn" in offered:
        first, second = compare.group(1).strip(), compare.group(2).strip()
        calls = []
        for this, other in ((first, second), (second, first)):
            name = f"compare-{_slug(this)}"
            task = (f"Find out about {this}, to compare it with {other}: what it is, what it is good and bad at, "
                    f"with the evidence you found. Report in a few lines.")
            calls.append(("spawn", {"name": name, "task": task}, f"One agent per side of the comparison: {name}."))
        if calls[0][1]["name"] != calls[1][1]["name"]:
            return calls
    command = _COMMAND.search(text)
    if command is not None and "shell" in offered:
        device = command.group(2) if command.group(2) and command.group(2).lower() not in _NOT_A_DEVICE else ""
        arguments = {"command": command.group(1).strip()} | ({"device": device} if device else {})
        where = f"on {device}" if device else "here"
        return [("shell", arguments, f"The message names a command in backticks: I run it {where}.")]
    return []


def hands_turn(request: Request) -> tuple[str, ToolCall | None, str] | None:
    """(thinking, a shell or spawn call or None, the reply) when the request is about the
    hands, else None (the memory model answers). The calls the message asks for are made
    one a request; once each has its result, the reply answers from them."""
    offered = {tool.name for tool in request.tools}
    if not offered & {"shell", "spawn"}:
        return None
    history = _history(request)
    done = [(call, result) for call, result in history if call.name in ("shell", "spawn") and result is not None]
    plan = _plan(_person_text(request), offered)
    if len(done) < len(plan):
        tool, arguments, thinking = plan[len(done)]
        return thinking, ToolCall(f"demo-{tool}-{len(history) + 1}", tool, arguments), ""
    if done:
        return "", None, _answer_hands(done)
    return None


def _pieces(text: str) -> list[str]:
    return [text[k:k + _PIECE] for k in range(0, len(text), _PIECE)]


class DemoConnection(Connection):
    """The offline model: summaries for compactions, a zooming reply model for turns."""

    provider = "demo"

    def __repr__(self) -> str:
        return "DemoConnection()"

    def stream(self, request: Request) -> Iterator[Event]:
        task = None
        for message in reversed(request.messages):
            if message.role == "user":
                for block in message.content:
                    if isinstance(block, TextBlock):
                        task = read_task(block.text) or task
                if task is not None:
                    break
        prompt_tokens = approx_tokens(request.system) + sum(approx_tokens(m.text) for m in request.messages)
        if request.label == "goal-check":  # issue 13: the demo cannot judge a goal; it calls it met
            yield TextDelta("Goal met.")
            yield Usage(input=prompt_tokens, output=3)
            yield Stop("end_turn")
            return
        if task is not None:
            line = summarize(list(task.input), leaf=task.kind == "leaf")
            for piece in _pieces(line):
                yield TextDelta(piece)
            yield Usage(input=prompt_tokens, output=approx_tokens(line))
            yield Stop("end_turn")
            return
        thinking, call, text = hands_turn(request) or demo_turn(request)
        if thinking:
            yield ThinkingDelta(thinking)
        for piece in _pieces(text):
            yield TextDelta(piece)
        if call is not None:
            yield call
        yield Usage(input=prompt_tokens, output=approx_tokens(thinking + text))
        yield Stop("tool_use" if call is not None else "end_turn")
