"""The demo model's extractive summarizer: one line of at most 512 bytes, by R34's values.

It keeps, in this order of value: the person's words (their sentences near
verbatim); then names, numbers, ids, paths, URLs and error messages copied
exactly, from every item; then the other items' sentences, first ones first. Each
item is tagged with its kind (`user:`, `echo:` …) and items are joined by ` | `,
oldest first. Nothing is paraphrased: every byte comes from the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["KINDS", "key_tokens", "parse_items", "summarize"]

KINDS = ("user", "everchat", "tool", "echo", "work", "note")
_KIND_HEAD = re.compile(r"^(user|everchat|tool|echo|work|note): ?", re.S)
_NODE_HEAD = re.compile(r"^\d+\+\d+\|")
# a kind tag that opens a new item inside a merge's line: after ` | `, or after a space (two
# messages joined free, R11, render as one line with a space between them)
_ITEM_SPLIT = re.compile(r" \| | (?=(?:user|everchat|tool|echo|work|note): )")
_SENTENCE = re.compile(r"(?<=[.!?…])\s+|\s*\n+\s*")
_SPACES = re.compile(r"\s+")

_GLUE = "(?i:is|are|was|were|be|been|on|at|in|of|to|by|for|from|with|as|about|than|then|the|a|an|and|or|but|it|its|my|your|our|their|his|her|this|that|these|those|till|until|since|after|before)"

_TOKEN_PATTERNS = [
    r"\b[\w.]*(?:Error|Exception|Errno|errno|FAILED|Traceback)\b[^\n|]{0,90}",  # error messages
    r"\b(?:error|failed|fatal|denied|refused|not found|timed out)\b[^\n.|]{0,70}",
    r"https?://[^\s\"'<>)\]]+",  # URLs
    r"[\w.+-]+@[\w-]+\.[\w.]+",  # e-mail addresses
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b",  # dates, with a time
    r"(?:~|\.{1,2})?/[\w.\-~/@%+=:]+",  # POSIX paths
    r"\b[\w.\-~@%+]+(?:/[\w.\-~@%+]+)+",  # relative paths: src/app.py
    r"\b[A-Za-z]:\\[\w\\.\-]+",  # Windows paths
    r"`[^`\n]{1,80}`",  # code spans
    r"\"[^\"\n]{2,60}\"",  # quoted names
    r"\b[A-Za-z][\w-]*\d[\w.-]*\b",  # ids with digits: amber-42, v1.2, sha256
    rf"\b(?:(?!{_GLUE}\b)[A-Za-z]+ )?\d[\d.,:/]*(?: ?(?:%|ms|s|KB|MB|GB|TB|bytes|B|px|h|min)\b)?",  # numbers, with the word they count ("port 8080", not "is 8080")
    r"\b[\w.]+\.(?:py|js|ts|md|txt|json|toml|yaml|yml|csv|html|css|rs|go|c|h|cpp|sh|log|cfg|conf|ini)\b",
    r"\b[a-z]+(?:_[a-z0-9]+)+\b",  # snake_case identifiers
    r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b",  # CamelCase names
    r"(?<=[\w,;:] )[A-Z][a-zA-Z0-9-]{2,}(?: [A-Z][a-zA-Z0-9-]{2,})*",  # Capitalized names inside a sentence
]
_TOKENS = re.compile("|".join(f"(?:{p})" for p in _TOKEN_PATTERNS))
_MAX_CANDIDATES = 300
_TOKEN_SENTENCE = 160  # a token's sentence up to this size is kept whole with it
_ELLIPSIS = "…"


def _size(text: str) -> int:
    return len(text.encode())


def _cut_words(text: str, limit: int) -> str:
    """The longest prefix of `text` within `limit` bytes ending at a word, plus an ellipsis."""
    room = limit - _size(_ELLIPSIS)
    if room <= 0:
        return ""
    cut = text.encode()[:room].decode(errors="ignore")
    if " " in cut[8:]:
        cut = cut[: cut.rfind(" ")]
    cut = cut.rstrip(" ,;:")
    return cut + _ELLIPSIS if cut else ""


@dataclass
class _Item:
    kind: str | None
    text: str
    picked: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, text) in the item's text

    def render(self, extra: tuple[int, int, str] | None = None) -> str:
        pieces = sorted(self.picked + ([extra] if extra else []))
        out = []
        last_end = None
        for begin, end, text in pieces:
            if out:
                gap = self.text[last_end:begin] if last_end is not None and 0 <= begin - last_end <= 3 else None
                if gap is not None:  # neighbours in the input: keep what stood between them
                    out.append(_SPACES.sub(" ", gap) or " ")
                else:
                    out.append(" " if out[-1][-1:] in ".!?…;:" else "; ")
            out.append(text)
            last_end = end
        body = "".join(out)
        return f"{self.kind}: {body}" if self.kind else body


def parse_items(lines: list[str], leaf: bool) -> list[_Item]:
    """The tagged items of the input: a leaf is one message `kind: text`; merge lines are
    `id+n|text` whose text may hold several items (`kind: …` after ` | ` or a sentence end)."""
    items: list[_Item] = []
    for line in lines:
        if leaf:
            match = _KIND_HEAD.match(line)
            kind, text = (match.group(1), line[match.end():]) if match else (None, line)
            items.append(_Item(kind, text))
            continue
        line = _NODE_HEAD.sub("", line, count=1)
        for part in _ITEM_SPLIT.split(line):
            part = part.strip()
            if not part:
                continue
            match = _KIND_HEAD.match(part)
            if match:
                items.append(_Item(match.group(1), part[match.end():]))
            elif items and not leaf and items[-1].kind is not None and part[:1].islower():
                items[-1].text += " | " + part  # a piece of the previous item
            else:
                items.append(_Item(None, part))
    return [item for item in items if item.text.strip()]


def _sentences(text: str) -> list[tuple[int, int, str]]:
    out = []
    begin = 0
    for match in _SENTENCE.finditer(text):
        out.append((begin, match.start()))
        begin = match.end()
    out.append((begin, len(text)))
    return [(b, e, _SPACES.sub(" ", text[b:e]).strip()) for b, e in out if text[b:e].strip()]


def key_tokens(text: str) -> list[tuple[int, int, str]]:
    """Names, numbers, ids, paths, URLs and errors in `text`, exactly as written, in order,
    each once (a token inside an earlier one is left out)."""
    found: list[tuple[int, int, str]] = []
    seen: set[str] = set()
    for match in _TOKENS.finditer(text):
        token = _SPACES.sub(" ", match.group(0)).strip().rstrip(".,;:")
        if len(token) < 2 or token.lower() in seen:
            continue
        if any(token in earlier for earlier in seen):
            continue
        seen.add(token.lower())
        found.append((match.start(), match.start() + len(match.group(0)), token))
    return found


def summarize(lines: list[str], limit: int = 512, leaf: bool = True) -> str:
    """One line of at most `limit` bytes from a compaction's input (R28): a leaf's message
    line, or a merge's two lines. Deterministic; never empty for a non-empty input."""
    items = parse_items(lines, leaf)
    if not items:
        return "(empty)"
    separator = " | "

    def total(trial: dict[int, str]) -> int:
        rendered = [trial.get(n, item.render()) for n, item in enumerate(items)]
        kept = [text for n, text in enumerate(rendered) if items[n].picked or n in trial]
        return _size(separator.join(kept))

    def try_add(n: int, piece: tuple[int, int, str], budget: int) -> bool:
        item = items[n]
        if any(piece[2] in text for _, _, text in item.picked):
            return True  # already there
        if total({n: item.render(piece)}) > budget:
            return False
        item.picked = [p for p in item.picked if not (piece[0] <= p[0] and p[1] <= piece[1])] + [piece]
        return True

    # the bytes other items need for their tag and one token, kept free of the person's words
    reserve = 0
    for item in items:
        if item.kind != "user":
            tokens = key_tokens(item.text)
            reserve += len(item.kind or "") + 5 + (min(_size(tokens[0][2]), 40) if tokens else 12)
    reserve = min(reserve, limit // 3)

    # 1. the person's words, sentence by sentence, near verbatim
    for n, item in enumerate(items):
        if item.kind != "user":
            continue
        for sentence in _sentences(item.text):
            if try_add(n, sentence, limit - reserve):
                continue
            room = limit - reserve - total({n: item.render(sentence[:2] + ("",))})
            cut = _cut_words(sentence[2], room)
            if len(cut) >= 12:
                try_add(n, (sentence[0], sentence[1], cut), limit - reserve)
            break
    # 2. names, numbers, ids, paths and errors, copied exactly: each in its sentence when
    #    that is short, else alone; the items take turns, oldest first
    found = [(n, key_tokens(item.text)[:_MAX_CANDIDATES], _sentences(item.text)) for n, item in enumerate(items)]
    depth = 0
    while any(depth < len(tokens) for _, tokens, _ in found):
        for n, tokens, sentences in found:
            if depth >= len(tokens):
                continue
            token = tokens[depth]
            if any(b <= token[0] and token[1] <= e for b, e, _ in items[n].picked):
                continue
            around = next((s for s in sentences if s[0] <= token[0] and token[1] <= s[1]), None)
            if around is None or _size(around[2]) > _TOKEN_SENTENCE or not try_add(n, around, limit):
                try_add(n, token, limit)
        depth += 1
    # 3. the rest: the other items' sentences, first ones first
    queues = [(n, _sentences(item.text)[:40]) for n, item in enumerate(items) if item.kind != "user"]
    depth = 0
    while any(depth < len(queue) for _, queue in queues):
        for n, queue in queues:
            if depth < len(queue):
                sentence = queue[depth]
                if not any(b <= sentence[0] and sentence[1] <= e for b, e, _ in items[n].picked):
                    try_add(n, sentence, limit)
        depth += 1
    line = separator.join(item.render() for item in items if item.picked)
    if not line:  # nothing fit whole: the first item, cut
        first = items[0]
        head = f"{first.kind}: " if first.kind else ""
        line = head + _cut_words(_SPACES.sub(" ", first.text).strip(), limit - _size(head))
    return line.encode()[:limit].decode(errors="ignore") or "(empty)"
