"""OpenAI's Chat Completions on the wire: request checks, completions, stream chunks.

A stream is ``chat.completion.chunk`` objects: the first delta carries the role, then
content pieces, then per tool call a delta with its id, type and name followed by
argument pieces (all under the call's ``index``), then an empty delta with the
finish reason. With ``stream_options.include_usage`` every chunk has ``"usage":
null`` and one more chunk with no choices carries the usage; ``data: [DONE]`` ends
the stream. Thinking goes out as ``reasoning_content`` deltas, as local
OpenAI-compatible servers (vLLM, llama.cpp, DeepSeek) send it; OpenAI itself never
does.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._openai import finish_reason
from ._replies import ModelRequest, Text, Thinking, ToolCall
from ._wire import Answer, SseEvent, compact

__all__ = ["DONE", "check", "completion_json", "parse", "stream_error_event", "stream_events"]

DONE = SseEvent(None, "[DONE]")


def check(body: Any) -> str | None:
    """Why the API would answer 400 (None: fine)."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "Missing required parameter: 'messages'."
    return None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def parse(body: Mapping[str, Any], exchange_id: int, stream: bool) -> ModelRequest:
    system, messages = [], []
    for message in body.get("messages") or []:
        role, text = str(message.get("role")), _text_of(message.get("content"))
        if role in ("system", "developer"):
            system.append(text)
        else:
            messages.append((role, text))
    names = tuple(str(t.get("function", {}).get("name", "")) for t in body.get("tools") or [] if isinstance(t, dict))
    return ModelRequest(
        api="chat",
        exchange_id=exchange_id,
        model=str(body.get("model", "")),
        stream=stream,
        body=body,
        system="\n".join(system),
        messages=tuple(messages),
        tool_names=names,
        max_tokens=body.get("max_completion_tokens", body.get("max_tokens")),
    )


def _usage(a: Answer) -> dict[str, Any]:
    return {
        "prompt_tokens": a.usage.total,
        "completion_tokens": a.output_tokens,
        "total_tokens": a.usage.total + a.output_tokens,
        "prompt_tokens_details": {"cached_tokens": a.usage.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": a.thinking_tokens(), "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    }


def _completion_id(a: Answer) -> str:
    return f"chatcmpl-fake{a.exchange_id:06d}"


def _calls(a: Answer) -> list[tuple[int, ToolCall]]:
    return [(i, b) for i, b in enumerate(a.blocks) if isinstance(b, ToolCall)]


def completion_json(a: Answer) -> dict[str, Any]:
    """The non-streaming response body."""
    text = "".join(b.text for b in a.blocks if isinstance(b, Text))
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    calls = [{"id": a.call_id(i, b, "call_"), "type": "function",
              "function": {"name": b.name, "arguments": b.arguments()}} for i, b in _calls(a)]
    if calls:
        message["tool_calls"] = calls
    thinking = "".join(b.thinking for b in a.blocks if isinstance(b, Thinking))
    if thinking:
        message["reasoning_content"] = thinking
    return {
        "id": _completion_id(a),
        "object": "chat.completion",
        "created": a.created,
        "model": a.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(a.stop())}],
        "usage": _usage(a),
        "system_fingerprint": None,
    }


def stream_events(a: Answer) -> list[SseEvent]:
    options = a.request.get("stream_options") or {}
    with_usage = bool(options.get("include_usage"))

    def chunk(delta: dict[str, Any], finish: str | None = None, piece: bool = False) -> SseEvent:
        data: dict[str, Any] = {
            "id": _completion_id(a), "object": "chat.completion.chunk", "created": a.created, "model": a.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if with_usage:
            data["usage"] = None
        return SseEvent(None, compact(data), piece)

    events = [chunk({"role": "assistant", "content": ""})]
    call_index = 0
    for i, block in enumerate(a.blocks):
        if isinstance(block, Text):
            events += [chunk({"content": p}, piece=True) for p in a.pieces(block)]
        elif isinstance(block, Thinking):
            events += [chunk({"reasoning_content": p}, piece=True) for p in a.pieces(block)]
        else:
            head = {"index": call_index, "id": a.call_id(i, block, "call_"), "type": "function",
                    "function": {"name": block.name, "arguments": ""}}
            events.append(chunk({"tool_calls": [head]}))
            events += [chunk({"tool_calls": [{"index": call_index, "function": {"arguments": p}}]}, piece=True)
                       for p in a.pieces(block)]
            call_index += 1
    events.append(chunk({}, finish_reason(a.stop())))
    if with_usage:
        data = {"id": _completion_id(a), "object": "chat.completion.chunk", "created": a.created, "model": a.model,
                "system_fingerprint": None, "choices": [], "usage": _usage(a)}
        events.append(SseEvent(None, compact(data)))
    events.append(DONE)
    return events


def stream_error_event() -> SseEvent:
    """A chunk carrying an ``error`` object, as OpenAI-compatible servers send mid-stream."""
    error = {"message": "The engine is currently overloaded, please try again later.", "type": "server_error",
             "param": None, "code": None}
    return SseEvent(None, compact({"error": error}))
