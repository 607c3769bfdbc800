"""OpenAI's Responses API on the wire: request checks, the response object, stream events.

Stream order: ``response.created``, ``response.in_progress``, then per output item
``response.output_item.added``, its parts and deltas, ``response.output_item.done``;
last ``response.completed`` (or ``response.incomplete`` when ``max_output_tokens``
cut the reply) with usage. Every event carries ``sequence_number``, and its SSE
event name equals its ``type``. Items: a `Text` is a ``message`` with one
``output_text`` part; a `Thinking` is a ``reasoning`` item with one summary part;
a `ToolCall` is a ``function_call`` whose arguments stream as deltas.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._replies import ModelRequest, Text, Thinking, ToolCall
from ._wire import Answer, SseEvent, compact

__all__ = ["check", "parse", "response_json", "stream_error_event", "stream_events"]


def check(body: Any) -> str | None:
    """Why the API would answer 400 (None: fine)."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "Missing required parameter: 'model'."
    if "input" not in body:
        return "Missing required parameter: 'input'."
    return None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def parse(body: Mapping[str, Any], exchange_id: int, stream: bool) -> ModelRequest:
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    messages = []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        if "role" in item:
            messages.append((str(item["role"]), _text_of(item.get("content"))))
        elif item.get("type") == "function_call_output":
            messages.append(("tool", _text_of(item.get("output"))))
    names = tuple(str(t.get("name", "")) for t in body.get("tools") or [] if isinstance(t, dict))
    return ModelRequest(
        api="responses",
        exchange_id=exchange_id,
        model=str(body.get("model", "")),
        stream=stream,
        body=body,
        system=str(body.get("instructions") or ""),
        messages=tuple(messages),
        tool_names=names,
        max_tokens=body.get("max_output_tokens"),
    )


def _item_id(a: Answer, index: int, prefix: str) -> str:
    return f"{prefix}_fake{a.exchange_id:06d}_{index}"


def _item(a: Answer, index: int, done: bool) -> dict[str, Any]:
    block = a.blocks[index]
    status = "completed" if done else "in_progress"
    if isinstance(block, Text):
        content = [{"type": "output_text", "text": block.text, "annotations": [], "logprobs": []}] if done else []
        return {"type": "message", "id": _item_id(a, index, "msg"), "status": status, "role": "assistant",
                "content": content}
    if isinstance(block, Thinking):
        summary = [{"type": "summary_text", "text": block.thinking}] if done else []
        return {"type": "reasoning", "id": _item_id(a, index, "rs"), "summary": summary}
    assert isinstance(block, ToolCall)
    return {"type": "function_call", "id": _item_id(a, index, "fc"), "call_id": a.call_id(index, block, "call_"),
            "name": block.name, "arguments": block.arguments() if done else "", "status": status}


def _usage(a: Answer) -> dict[str, Any]:
    total = a.usage.total
    return {
        "input_tokens": total,
        "input_tokens_details": {"cached_tokens": a.usage.cache_read},
        "output_tokens": a.output_tokens,
        "output_tokens_details": {"reasoning_tokens": a.thinking_tokens()},
        "total_tokens": total + a.output_tokens,
    }


def response_json(a: Answer, final: bool = True) -> dict[str, Any]:
    """The response object: whole when `final`, else as in ``response.created``."""
    body = a.request
    status = ("incomplete" if a.stop() == "max_tokens" else "completed") if final else "in_progress"
    return {
        "id": f"resp_fake{a.exchange_id:06d}",
        "object": "response",
        "created_at": a.created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": a.model,
        "output": [_item(a, i, True) for i in range(len(a.blocks))] if final else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": _usage(a) if final else None,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


class _Events:
    def __init__(self) -> None:
        self.events: list[SseEvent] = []

    def add(self, kind: str, chunk: bool = False, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": len(self.events), **fields}
        self.events.append(SseEvent(kind, compact(data), chunk))


def stream_events(a: Answer) -> list[SseEvent]:
    out = _Events()
    out.add("response.created", response=response_json(a, final=False))
    out.add("response.in_progress", response=response_json(a, final=False))
    for i, block in enumerate(a.blocks):
        item_id = _item(a, i, False)["id"]
        at = {"item_id": item_id, "output_index": i}
        out.add("response.output_item.added", output_index=i, item=_item(a, i, False))
        if isinstance(block, Text):
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.add("response.content_part.added", **at, content_index=0, part=part)
            for piece in a.pieces(block):
                out.add("response.output_text.delta", True, **at, content_index=0, delta=piece, logprobs=[])
            out.add("response.output_text.done", **at, content_index=0, text=block.text, logprobs=[])
            out.add("response.content_part.done", **at, content_index=0, part={**part, "text": block.text})
        elif isinstance(block, Thinking):
            part = {"type": "summary_text", "text": ""}
            out.add("response.reasoning_summary_part.added", **at, summary_index=0, part=part)
            for piece in a.pieces(block):
                out.add("response.reasoning_summary_text.delta", True, **at, summary_index=0, delta=piece)
            out.add("response.reasoning_summary_text.done", **at, summary_index=0, text=block.thinking)
            out.add("response.reasoning_summary_part.done", **at, summary_index=0,
                    part={**part, "text": block.thinking})
        else:
            for piece in a.pieces(block):
                out.add("response.function_call_arguments.delta", True, **at, delta=piece)
            out.add("response.function_call_arguments.done", **at, name=block.name, arguments=block.arguments())
        out.add("response.output_item.done", output_index=i, item=_item(a, i, True))
    final = response_json(a)
    out.add("response.completed" if final["status"] == "completed" else "response.incomplete", response=final)
    return out.events


def stream_error_event(sequence_number: int) -> SseEvent:
    """The ``error`` event a Responses stream sends when the server fails mid-answer."""
    data = {"type": "error", "code": "server_error", "param": None, "sequence_number": sequence_number,
            "message": "The engine is currently overloaded, please try again later."}
    return SseEvent("error", compact(data))

