"""The fake tokenizer and the prompt as a chain of blocks.

Tokenizer rule (used for every usage number the server reports): a piece of text
counts ``ceil(utf8_bytes / 4)`` tokens, so "" is 0 tokens, "abcd" is 1 and "abcde"
is 2. Each prompt block is counted on its own and the counts are added, so a
request's input tokens depend on how its text is split into blocks (as real
tokenizers do, a little).

What text a block counts:

- a text block: its ``text``; a thinking block: ``thinking``; redacted thinking: ``data``
- a tool call (``tool_use``, ``function_call``, a chat ``tool_calls`` entry): name plus
  the compact JSON of its input or its arguments string
- a tool result: the text of its content (nested text blocks joined)
- a tool definition: name, description and the compact JSON of its schema
- anything else (images, documents): its compact JSON

The prompt is a list of `PromptBlock`s in prefix order (Anthropic: tools, system,
messages; OpenAI: tools, instructions, input). Each block carries the digest of the
whole prefix through it, so two requests share a prefix through block ``j`` exactly
when their digests at ``j`` are equal. The model name seeds the chain: prefixes never
match across models. A block's digest covers its canonical JSON without
``cache_control``, plus its message's role and whether it opens a message.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable

__all__ = [
    "BYTES_PER_TOKEN",
    "PromptBlock",
    "anthropic_blocks",
    "chat_blocks",
    "count_tokens",
    "responses_blocks",
]

BYTES_PER_TOKEN = 4


def count_tokens(text: str) -> int:
    """Tokens in `text`: ceil(UTF-8 bytes / 4)."""
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


@dataclass(frozen=True)
class PromptBlock:
    """One block of a prompt, in prefix order."""

    digest: bytes  # digest of the prefix through this block (model included)
    tokens: int  # this block's own tokens
    mark: str | None  # None, or the cache mark's lifetime: "5m" or "1h"
    where: str  # e.g. "tools[0]", "system[1]", "messages[3].content[0]"


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _without_mark(block: Any) -> Any:
    """The block without ``cache_control``, also on the blocks nested in a tool result."""
    if not isinstance(block, dict):
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [_without_mark(part) for part in out["content"]]
    return out


def _mark_of(block: Any) -> str | None:
    """"5m", "1h" or None: the block's cache mark (a mark nested in a tool result's content counts)."""
    if not isinstance(block, dict):
        return None
    mark = block.get("cache_control")
    if not isinstance(mark, dict) or mark.get("type") != "ephemeral":
        nested = [_mark_of(part) for part in block.get("content") or [] if isinstance(part, dict)]
        return next((m for m in nested if m), None) if block.get("type") == "tool_result" else None
    return "1h" if mark.get("ttl") == "1h" else "5m"


def _content_text(content: Any) -> str:
    """The text inside a tool result's (or an output's) content."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_content_text(part) for part in content)
    if isinstance(content, dict):
        for key in ("text", "output", "data"):
            if isinstance(content.get(key), str):
                return content[key]
        return _compact(_without_mark(content))
    return str(content)


def _block_text(block: Any) -> str:
    """The text a block counts for the tokenizer (see the module docstring)."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return _compact(block)
    kind = block.get("type")
    if kind in ("text", "input_text", "output_text", "summary_text"):
        return str(block.get("text", ""))
    if kind == "thinking":
        return str(block.get("thinking", ""))
    if kind == "redacted_thinking":
        return str(block.get("data", ""))
    if kind == "tool_use":
        return str(block.get("name", "")) + _compact(block.get("input", {}))
    if kind == "function_call":
        return str(block.get("name", "")) + str(block.get("arguments", ""))
    if kind == "function":  # a chat tool call entry or a chat tool definition
        fn = block.get("function", {})
        if "arguments" in fn:
            return str(fn.get("name", "")) + str(fn.get("arguments", ""))
        return _tool_text(fn.get("name"), fn.get("description"), fn.get("parameters"))
    if kind == "tool_result":
        return _content_text(block.get("content"))
    if kind == "function_call_output":
        return _content_text(block.get("output"))
    if kind == "reasoning":
        return "".join(_content_text(part) for part in block.get("summary") or [])
    return _compact(_without_mark(block))


def _tool_text(name: Any, description: Any, schema: Any) -> str:
    return str(name or "") + str(description or "") + (_compact(schema) if schema is not None else "")


class _Chain:
    """Builds PromptBlocks, each digest folding in the one before it."""

    def __init__(self, seed: str) -> None:
        self._digest = hashlib.blake2b(seed.encode("utf-8"), digest_size=16).digest()
        self.blocks: list[PromptBlock] = []

    def add(self, label: str, block: Any, text: str, where: str, mark: str | None = None) -> None:
        h = hashlib.blake2b(self._digest, digest_size=16)
        h.update(label.encode("utf-8"))
        h.update(b"\0")
        h.update(_compact(_without_mark(block)).encode("utf-8"))
        self._digest = h.digest()
        self.blocks.append(PromptBlock(self._digest, count_tokens(text), mark, where))


def _parts(content: Any) -> list[Any]:
    """A message's content as a list of blocks (a string is one text block)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return list(content)
    return [content]


def anthropic_blocks(body: dict[str, Any]) -> list[PromptBlock]:
    """The blocks of a Messages request: tools, then system, then message content.

    A top-level ``cache_control`` (automatic caching) marks the last block.
    """
    chain = _Chain("anthropic\0" + str(body.get("model", "")))
    for i, tool in enumerate(body.get("tools") or []):
        text = _tool_text(tool.get("name"), tool.get("description"), tool.get("input_schema"))
        if tool.get("type") not in (None, "custom"):  # server tools: count their JSON
            text = _compact(_without_mark(tool))
        chain.add("tool", tool, text, f"tools[{i}]", _mark_of(tool))
    for i, block in enumerate(_parts(body.get("system"))):
        chain.add("system", block, _block_text(block), f"system[{i}]", _mark_of(block))
    for m, message in enumerate(body.get("messages") or []):
        role = str(message.get("role", ""))
        for c, block in enumerate(_parts(message.get("content"))):
            label = f"{role}\0{'open' if c == 0 else 'more'}"
            chain.add(label, block, _block_text(block), f"messages[{m}].content[{c}]", _mark_of(block))
    blocks = chain.blocks
    top = _mark_of(body)
    if top and blocks and blocks[-1].mark is None:
        last = blocks[-1]
        blocks[-1] = PromptBlock(last.digest, last.tokens, top, last.where)
    return blocks


def _openai_tools(chain: _Chain, tools: Iterable[Any]) -> None:
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function" and "function" in tool:  # chat shape
            text = _block_text(tool)
        elif tool.get("type") == "function":  # responses shape
            text = _tool_text(tool.get("name"), tool.get("description"), tool.get("parameters"))
        else:
            text = _compact(tool)
        chain.add("tool", tool, text, f"tools[{i}]")


def responses_blocks(body: dict[str, Any]) -> list[PromptBlock]:
    """The blocks of a Responses request: tools, instructions, then input items."""
    chain = _Chain("openai\0" + str(body.get("model", "")))
    _openai_tools(chain, body.get("tools") or [])
    if body.get("instructions"):
        chain.add("instructions", body["instructions"], str(body["instructions"]), "instructions")
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for n, item in enumerate(items or []):
        if not isinstance(item, dict):
            continue
        if "role" in item and item.get("type", "message") == "message":
            role = str(item["role"])
            for c, part in enumerate(_parts(item.get("content"))):
                label = f"{role}\0{'open' if c == 0 else 'more'}"
                chain.add(label, part, _block_text(part), f"input[{n}].content[{c}]")
        else:
            chain.add(str(item.get("type", "item")), item, _block_text(item), f"input[{n}]")
    return chain.blocks


def chat_blocks(body: dict[str, Any]) -> list[PromptBlock]:
    """The blocks of a Chat Completions request: tools, then each message's parts and tool calls."""
    chain = _Chain("openai\0" + str(body.get("model", "")))
    _openai_tools(chain, body.get("tools") or [])
    for m, message in enumerate(body.get("messages") or []):
        # role, tool_call_id, name: everything but the parts, so a tool answer's id counts
        head = _compact({k: v for k, v in message.items() if k not in ("content", "tool_calls")})
        parts = [(f"content[{c}]", p) for c, p in enumerate(_parts(message.get("content")))]
        parts += [(f"tool_calls[{c}]", call) for c, call in enumerate(message.get("tool_calls") or [])]
        for n, (where, part) in enumerate(parts):
            chain.add(f"{head}\0{'open' if n == 0 else 'more'}", part, _block_text(part), f"messages[{m}].{where}")
        if not parts:  # an empty message still separates the ones around it
            chain.add(f"{head}\0open", {}, "", f"messages[{m}]")
    return chain.blocks
