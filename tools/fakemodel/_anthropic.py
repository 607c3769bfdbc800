"""Anthropic's Messages API on the wire: request checks, messages, stream events, errors.

Stream order, as the API sends it: ``message_start`` (usage with the cache counts,
``output_tokens`` 1), then per content block ``content_block_start``, its deltas
(``text_delta``, ``thinking_delta`` then one ``signature_delta``, or for
``tool_use`` an empty ``input_json_delta`` followed by the JSON in pieces) and
``content_block_stop``, one ``ping`` after the first block starts, then
``message_delta`` (stop reason, cumulative usage) and ``message_stop``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._cache import CacheUsage
from ._replies import Fault, ModelRequest, Text, Thinking, ToolCall
from ._wire import Answer, SseEvent, compact

__all__ = [
    "check",
    "count_json",
    "error_json",
    "fault_error",
    "message_json",
    "models_json",
    "parse",
    "stream_error_event",
    "stream_events",
]

_FAULTS = {
    "rate_limited": (429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    "server_error": (500, "api_error", "Internal server error"),
    "overloaded": (529, "overloaded_error", "Overloaded"),
    "model_not_found": (404, "not_found_error", "model: {model}"),
    "quota_exceeded": (402, "billing_error", "Your credit balance is too low to access the Anthropic API."),
    "stream_error": (529, "overloaded_error", "Overloaded"),
    "usage_limit": (429, "rate_limit_error", "This request would exceed your account's rate limit. Please try again later."),
}


def error_json(kind: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


def fault_error(fault: Fault, model: str) -> tuple[int, str, str]:
    """(HTTP status, error type, message) for a fault that fails the whole request."""
    status, kind, message = _FAULTS[fault.name]
    return status, kind, message.format(model=model)


def _parts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _marks(body: Mapping[str, Any]) -> int:
    blocks = list(body.get("tools") or []) + _parts(body.get("system"))
    for message in body.get("messages") or []:
        blocks += _parts(message.get("content"))
    nested = [p for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"
              for p in _parts(b.get("content"))]
    count = sum(1 for b in blocks + nested if isinstance(b, dict) and b.get("cache_control"))
    return count + (1 if body.get("cache_control") else 0)


def check(body: Any) -> str | None:
    """Why the API would answer 400 invalid_request_error (None: the request is fine)."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Field required (an integer of at least 1)"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{n}.role: Input should be 'user' or 'assistant'"
        for c, block in enumerate(_parts(message.get("content"))):
            if isinstance(block, dict) and block.get("type") == "text" and not block.get("text"):
                return f"messages.{n}.content.{c}: text content blocks must be non-empty"
        if message.get("content") == "":
            return f"messages.{n}: text content blocks must be non-empty"
    marks = _marks(body)
    if marks > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {marks}."
    return None


def _text_of(content: Any) -> str:
    out = []
    for block in _parts(content):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            out.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            out.append(inner if isinstance(inner, str) else _text_of(inner))
    return "".join(out)


def parse(body: Mapping[str, Any], exchange_id: int, stream: bool) -> ModelRequest:
    return ModelRequest(
        api="anthropic",
        exchange_id=exchange_id,
        model=str(body.get("model", "")),
        stream=stream,
        body=body,
        system=_text_of(body.get("system")),
        messages=tuple((str(m.get("role")), _text_of(m.get("content"))) for m in body.get("messages") or []),
        tool_names=tuple(str(t.get("name", "")) for t in body.get("tools") or []),
        max_tokens=body.get("max_tokens"),
    )


def _usage(usage: CacheUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.cache_write - usage.cache_write_1h,
            "ephemeral_1h_input_tokens": usage.cache_write_1h,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _block_json(a: Answer, index: int) -> dict[str, Any]:
    block = a.blocks[index]
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Thinking):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signed()}
    return {"type": "tool_use", "id": a.call_id(index, block, "toolu_"), "name": block.name, "input": dict(block.input)}


def _message_id(a: Answer) -> str:
    return f"msg_fake{a.exchange_id:06d}"


def message_json(a: Answer) -> dict[str, Any]:
    """The non-streaming response body."""
    return {
        "id": _message_id(a),
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": [_block_json(a, i) for i in range(len(a.blocks))],
        "stop_reason": a.stop(),
        "stop_sequence": None,
        "usage": _usage(a.usage, a.output_tokens),
    }


def _event(kind: str, chunk: bool = False, **fields: Any) -> SseEvent:
    return SseEvent(kind, compact({"type": kind, **fields}), chunk)


def stream_events(a: Answer) -> list[SseEvent]:
    """The events of a streamed reply, in order."""
    start = {
        "id": _message_id(a),
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(a.usage, 1),
    }
    events = [_event("message_start", message=start)]
    for i, block in enumerate(a.blocks):
        if isinstance(block, Text):
            events.append(_event("content_block_start", index=i, content_block={"type": "text", "text": ""}))
            deltas = [{"type": "text_delta", "text": p} for p in a.pieces(block)]
        elif isinstance(block, Thinking):
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            events.append(_event("content_block_start", index=i, content_block=opening))
            deltas = [{"type": "thinking_delta", "thinking": p} for p in a.pieces(block)]
        else:
            assert isinstance(block, ToolCall)
            opening = {"type": "tool_use", "id": a.call_id(i, block, "toolu_"), "name": block.name, "input": {}}
            events.append(_event("content_block_start", index=i, content_block=opening))
            empty = {"type": "input_json_delta", "partial_json": ""}  # the API opens with an empty piece
            events.append(_event("content_block_delta", index=i, delta=empty))
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in a.pieces(block)]
        if i == 0:
            events.append(_event("ping"))
        events += [_event("content_block_delta", True, index=i, delta=d) for d in deltas]
        if isinstance(block, Thinking):
            signature = {"type": "signature_delta", "signature": block.signed()}
            events.append(_event("content_block_delta", index=i, delta=signature))
        events.append(_event("content_block_stop", index=i))
    if not a.blocks:
        events.append(_event("ping"))
    usage = _usage(a.usage, a.output_tokens)
    del usage["cache_creation"], usage["service_tier"]
    events.append(_event("message_delta", delta={"stop_reason": a.stop(), "stop_sequence": None}, usage=usage))
    events.append(_event("message_stop"))
    return events


def stream_error_event(request_id: str) -> SseEvent:
    """The error event the API sends inside a 200 stream when it overloads mid-answer."""
    return SseEvent("error", compact(error_json("overloaded_error", "Overloaded", request_id)))


def count_json(usage: CacheUsage) -> dict[str, Any]:
    """The ``/v1/messages/count_tokens`` body."""
    return {"input_tokens": usage.total}


def models_json(models: list[str]) -> dict[str, Any]:
    data = [
        {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in models
    ]
    return {"data": data, "has_more": False, "first_id": models[0] if models else None,
            "last_id": models[-1] if models else None}
