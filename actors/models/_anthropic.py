"""Anthropic's Messages API through the official `anthropic` SDK, streamed.

The request goes out as tools, system, messages, in that prefix order, with an
ephemeral `cache_control` exactly on the blocks the request marks (R23) and never
a 1-hour lifetime. Reasoning effort turns on adaptive thinking with
`output_config.effort`. The key comes only from the argument or ANTHROPIC_API_KEY.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from ._errors import MissingKey, ModelTimeout, ProtocolError, from_anthropic
from ._types import (
    Connection,
    Event,
    ImageBlock,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

__all__ = ["AnthropicConnection", "DEFAULT_URL", "anthropic_body"]

DEFAULT_URL = "https://api.anthropic.com"
_MARK = {"type": "ephemeral"}  # five minutes; R23 forbids the 1-hour kind
_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "max"}


def _marked(block: dict[str, Any], cache: bool) -> dict[str, Any]:
    if cache:
        block["cache_control"] = dict(_MARK)
    return block


def _image(block: ImageBlock) -> dict[str, Any]:
    """An image content block, unmarked (Claude Code's stream-json input takes the same)."""
    source = {"type": "base64", "media_type": block.media_type, "data": base64.b64encode(block.data).decode()}
    return {"type": "image", "source": source}


def _part(block: Any) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return _marked({"type": "text", "text": block.text}, block.cache)
    if isinstance(block, ImageBlock):
        return _marked(_image(block), block.cache)
    if isinstance(block, ToolUseBlock):
        return _marked({"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)},
                       block.cache)
    if isinstance(block, ToolResultBlock):
        content = [_part(part) for part in block.content]
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": content}
        if block.is_error:
            result["is_error"] = True
        return _marked(result, block.cache)
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    raise TypeError(f"not a content block: {block!r}")


def anthropic_body(request: Request) -> dict[str, Any]:
    """The Messages API parameters for a request (without `stream`)."""
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": [{"role": m.role, "content": [_part(b) for b in m.content]} for m in request.messages],
    }
    if request.system:
        body["system"] = [_marked({"type": "text", "text": request.system}, request.cache_system)]
    if request.tools:
        body["tools"] = [{"name": t.name, "description": t.description, "input_schema": dict(t.schema)}
                         for t in request.tools]
    if request.effort and request.effort != "none":
        body["thinking"] = {"type": "adaptive"}
        body["output_config"] = {"effort": _EFFORT[request.effort]}
    return body


class AnthropicConnection(Connection):
    """Claude models over the Messages API. `max_retries` is the SDK's own retries of the
    same call (rate limits, overloads); it never changes the model."""

    provider = "anthropic"

    def __init__(self, api_key: str | None = None, base_url: str | None = None, *, max_retries: int = 2) -> None:
        import anthropic

        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise MissingKey("ANTHROPIC_API_KEY is not set: export it, or choose another provider "
                             "(the demo model works offline)", provider="anthropic")
        self.base_url = base_url or DEFAULT_URL
        self._client = anthropic.Anthropic(api_key=key, base_url=self.base_url, max_retries=max_retries)

    def __repr__(self) -> str:
        return f"AnthropicConnection({self.base_url})"

    def close(self) -> None:
        self._client.close()

    def stream(self, request: Request) -> Iterator[Event]:
        deadline = time.monotonic() + request.timeout
        headers = {"x-everchat-call": request.label} if request.label else None
        try:
            raw = self._client.messages.create(**anthropic_body(request), stream=True, timeout=request.timeout,
                                               extra_headers=headers)
        except Exception as error:
            raise from_anthropic(error, model=request.model, url=self.base_url) from error
        try:
            yield from self._events(raw, request, deadline)
        except GeneratorExit:
            raise
        except Exception as error:
            raise from_anthropic(error, model=request.model, url=self.base_url) from error
        finally:
            raw.close()

    def _events(self, raw: Any, request: Request, deadline: float) -> Iterator[Event]:
        usage = Usage()
        tools: dict[int, list[Any]] = {}  # index -> [id, name, json pieces]
        stop: str | None = None
        finished = False
        for event in raw:
            if time.monotonic() > deadline:
                raise ModelTimeout(f"the stream ran past its {request.timeout:g} s timeout",
                                   provider=self.provider, model=request.model)
            kind = event.type
            if kind == "message_start":
                usage = _usage(event.message.usage, usage)
            elif kind == "content_block_start":
                block = event.content_block
                if block.type == "tool_use":
                    tools[event.index] = [block.id, block.name, []]
                elif block.type == "text" and block.text:
                    yield TextDelta(block.text)
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    yield TextDelta(delta.text)
                elif delta.type == "thinking_delta":
                    yield ThinkingDelta(delta.thinking)
                elif delta.type == "signature_delta":
                    yield ThinkingDelta("", signature=delta.signature)
                elif delta.type == "input_json_delta" and event.index in tools:
                    tools[event.index][2].append(delta.partial_json)
            elif kind == "content_block_stop":
                if event.index in tools:
                    call_id, name, pieces = tools.pop(event.index)
                    yield ToolCall(call_id, name, _arguments("".join(pieces), name, request))
            elif kind == "message_delta":
                stop = event.delta.stop_reason or stop
                usage = _usage(event.usage, usage)
            elif kind == "message_stop":
                finished = True
        if not finished:
            raise ProtocolError("the stream ended before message_stop", provider=self.provider, model=request.model)
        yield usage
        reason = stop or "end_turn"
        yield Stop(reason, incomplete=reason in ("max_tokens", "refusal"))


def _arguments(text: str, name: str, request: Request) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProtocolError(f"the input of tool call {name} is not JSON ({error.msg})", provider="anthropic",
                            model=request.model) from None
    if not isinstance(value, dict):
        raise ProtocolError(f"the input of tool call {name} is not an object", provider="anthropic",
                            model=request.model)
    return value


def _usage(raw: Any, before: Usage) -> Usage:
    """Usage with the numbers `raw` has (message_delta repeats or updates them): the SDK's
    usage object here, the same event's JSON (a dict) in Claude Code's stream."""
    if raw is None:
        return before

    def pick(name: str, old: int) -> int:
        value = raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)
        return value if isinstance(value, int) else old

    return Usage(
        input=pick("input_tokens", before.input),
        output=pick("output_tokens", before.output),
        cache_read=pick("cache_read_input_tokens", before.cache_read),
        cache_write=pick("cache_creation_input_tokens", before.cache_write),
    )
