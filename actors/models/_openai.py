"""OpenAI's Responses API and Chat Completions through the official `openai` SDK, streamed.

`OpenAIConnection` speaks the Responses API (function tools, reasoning summaries,
cached-token usage). `OpenAIChatConnection` speaks Chat Completions with
`include_usage`, the protocol local OpenAI-compatible servers (Ollama, llama.cpp
server, vLLM) share; their thinking arrives as `reasoning_content`. OpenAI caches
prefixes by itself, so cache marks are not sent. The key comes only from the
argument or OPENAI_API_KEY; a local server that needs none takes a configured
dummy (`dummy_key`).
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ._errors import MissingKey, ModelTimeout, ProtocolError, from_openai, stream_error
from ._types import (
    Connection,
    Event,
    ImageBlock,
    Message,
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

__all__ = ["DEFAULT_URL", "OpenAIChatConnection", "OpenAIConnection", "chat_body", "responses_body"]

DEFAULT_URL = "https://api.openai.com/v1"


def _data_url(image: ImageBlock) -> str:
    return f"data:{image.media_type};base64,{base64.b64encode(image.data).decode()}"


def _arguments(text: str, name: str, provider: str, model: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProtocolError(f"the arguments of tool call {name} are not JSON ({error.msg})", provider=provider,
                            model=model) from None
    if not isinstance(value, dict):
        raise ProtocolError(f"the arguments of tool call {name} are not an object", provider=provider, model=model)
    return value


class _OpenAIBase(Connection):
    provider = "openai"

    def __init__(self, api_key: str | None = None, base_url: str | None = None, *, dummy_key: str | None = None,
                 max_retries: int = 2) -> None:
        import openai

        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key:
            key = dummy_key
        if not key:
            raise MissingKey("OPENAI_API_KEY is not set: export it (a local server that needs no key takes "
                             "dummy_key in the config), or choose another provider", provider=self.provider)
        self.base_url = base_url or DEFAULT_URL
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=max_retries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url})"

    def close(self) -> None:
        self._client.close()

    def _error(self, error: BaseException, request: Request):
        return from_openai(error, model=request.model, url=self.base_url, provider=self.provider)

    def _headers(self, request: Request) -> dict[str, str] | None:
        return {"x-everchat-call": request.label} if request.label else None

    def _check_deadline(self, deadline: float, request: Request) -> None:
        if time.monotonic() > deadline:
            raise ModelTimeout(f"the stream ran past its {request.timeout:g} s timeout", provider=self.provider,
                               model=request.model)

    def stream(self, request: Request) -> Iterator[Event]:
        deadline = time.monotonic() + request.timeout
        try:
            raw = self._open(request)
        except Exception as error:
            raise self._error(error, request) from error
        try:
            yield from self._events(raw, request, deadline)
        except GeneratorExit:
            raise
        except Exception as error:
            raise self._error(error, request) from error
        finally:
            raw.close()

    def _open(self, request: Request) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _events(self, raw: Any, request: Request, deadline: float) -> Iterator[Event]:  # pragma: no cover
        raise NotImplementedError


# --- Responses ---------------------------------------------------------------------


def _joined(blocks: Any) -> list[str | ImageBlock]:
    """Text and images in order, each run of adjacent text blocks joined into one string.

    The SDK walks every content part against every type its union allows before it sends
    (about 0.3 ms a part), so a 100 KB view sent as its ~65 R23 blocks of 4 lines cost
    19 ms a turn (bench_turn p50 30.0 -> 11.1 ms).
    OpenAI sets no cache marks, so the blocks' borders mean nothing here: the model reads
    the same text in the same order, as Chat Completions already joined it.
    """
    out: list[str | ImageBlock] = []
    run: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            run.append(block.text)
        elif isinstance(block, ImageBlock):
            if run:
                out.append("".join(run))
                run = []
            out.append(block)
    if run:
        out.append("".join(run))
    return out


def _responses_content(blocks: Any) -> list[dict[str, Any]]:
    return [{"type": "input_text", "text": part} if isinstance(part, str)
            else {"type": "input_image", "image_url": _data_url(part), "detail": "auto"} for part in _joined(blocks)]


def _responses_input(request: Request) -> list[dict[str, Any]]:
    return _responses_items(request.messages)


def _responses_items(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Messages as Responses API input items (also what the Codex subscription path
    injects as a thread's history: `_codex_wire.history_items`)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        pending: list[Any] = []  # user text and images, kept together in one message

        def flush() -> None:
            if pending:
                if message.role == "user":
                    items.append({"role": "user", "content": _responses_content(pending)})
                else:
                    text = "".join(b.text for b in pending if isinstance(b, TextBlock))
                    items.append({"role": "assistant", "content": text})
                pending.clear()

        for block in message.content:
            if isinstance(block, (TextBlock, ImageBlock)):
                pending.append(block)
            elif isinstance(block, ToolUseBlock):
                flush()
                items.append({"type": "function_call", "call_id": block.id, "name": block.name,
                              "arguments": json.dumps(dict(block.input), ensure_ascii=False)})
            elif isinstance(block, ToolResultBlock):
                flush()
                images = [b for b in block.content if isinstance(b, ImageBlock)]
                output: Any = block.text or "(empty)"
                if images:
                    output = [{"type": "input_text", "text": block.text or "(image)"}] + _responses_content(images)
                items.append({"type": "function_call_output", "call_id": block.tool_use_id, "output": output})
            elif isinstance(block, ThinkingBlock):
                continue  # reasoning is not sent back (store=False, no encrypted content asked for)
        flush()
    return items


def responses_body(request: Request) -> dict[str, Any]:
    """The Responses API parameters for a request (without `stream`)."""
    body: dict[str, Any] = {
        "model": request.model,
        "input": _responses_input(request),
        "max_output_tokens": request.max_tokens,
        "store": False,
    }
    if request.system:
        body["instructions"] = request.system
    if request.tools:
        body["tools"] = [{"type": "function", "name": t.name, "description": t.description,
                          "parameters": dict(t.schema), "strict": False} for t in request.tools]
    if request.effort:
        body["reasoning"] = {"effort": request.effort, "summary": "auto"}
    return body


_PLAIN = ("input", "tools")
"""Responses parameters sent as they are (`extra_body`), past the SDK's transform: it
only renames aliased keys and formats dates and files, which these plain strings and dicts
never hold (a test checks it leaves them equal), and walking them against the SDK's
unions cost 1.4 ms of a 100 KB view's turn."""


class OpenAIConnection(_OpenAIBase):
    """OpenAI models over the Responses API."""

    provider = "openai"

    def _open(self, request: Request) -> Any:
        body = responses_body(request)
        plain = {key: body.pop(key) for key in _PLAIN if key in body}
        return self._client.responses.create(**body, stream=True, timeout=request.timeout,
                                             extra_headers=self._headers(request), extra_body=plain)

    def _events(self, raw: Any, request: Request, deadline: float) -> Iterator[Event]:
        calls: dict[str, list[Any]] = {}  # item id -> [call id, name, argument pieces]
        final = None
        for event in raw:
            self._check_deadline(deadline, request)
            kind = event.type
            if kind == "response.output_text.delta":
                yield TextDelta(event.delta)
            elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                yield ThinkingDelta(event.delta)
            elif kind == "response.output_item.added" and event.item.type == "function_call":
                calls[event.item.id] = [event.item.call_id, event.item.name, []]
            elif kind == "response.function_call_arguments.delta" and event.item_id in calls:
                calls[event.item_id][2].append(event.delta)
            elif kind == "response.output_item.done" and event.item.type == "function_call":
                item = event.item
                calls.pop(item.id, None)
                arguments = _arguments(item.arguments or "", item.name, self.provider, request.model)
                yield ToolCall(item.call_id, item.name, arguments)
            elif kind in ("response.completed", "response.incomplete"):
                final = event.response
                break
            elif kind == "response.failed":
                error = getattr(event.response, "error", None)
                code = str(getattr(error, "code", "") or "")
                raise stream_error(self.provider, request.model, "", code, str(getattr(error, "message", "")))
            elif kind == "error":
                raise stream_error(self.provider, request.model, "", str(getattr(event, "code", "") or ""),
                                   str(getattr(event, "message", "") or ""))
        if final is None:
            raise ProtocolError("the stream ended before response.completed", provider=self.provider,
                                model=request.model)
        yield _responses_usage(final.usage)
        has_calls = any(getattr(item, "type", "") == "function_call" for item in final.output or [])
        if final.status == "incomplete":
            details = getattr(final, "incomplete_details", None)
            why = getattr(details, "reason", "") or ""
            yield Stop("refusal" if why == "content_filter" else "max_tokens", incomplete=True)
        else:
            yield Stop("tool_use" if has_calls else "end_turn")


def _responses_usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    details = getattr(raw, "input_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0)
    total = int(raw.input_tokens or 0)
    return Usage(input=max(0, total - cached), output=int(raw.output_tokens or 0), cache_read=cached)


# --- Chat Completions ------------------------------------------------------------------


def _chat_content(blocks: list[Any]) -> Any:
    if all(isinstance(b, TextBlock) for b in blocks):
        return "".join(b.text for b in blocks)
    return [{"type": "text", "text": part} if isinstance(part, str)
            else {"type": "image_url", "image_url": {"url": _data_url(part)}} for part in _joined(blocks)]


def _chat_messages(request: Request) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role == "assistant":
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            calls = [{"id": b.id, "type": "function",
                      "function": {"name": b.name, "arguments": json.dumps(dict(b.input), ensure_ascii=False)}}
                     for b in message.content if isinstance(b, ToolUseBlock)]
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        pending: list[Any] = []
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": block.text or "(empty)"})
                pending += [b for b in block.content if isinstance(b, ImageBlock)]  # images follow as user input
            elif isinstance(block, (TextBlock, ImageBlock)):
                pending.append(block)
        if pending:
            out.append({"role": "user", "content": _chat_content(pending)})
    return out


def chat_body(request: Request) -> dict[str, Any]:
    """The Chat Completions parameters for a request (without `stream`)."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": _chat_messages(request),
        "max_tokens": request.max_tokens,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                           "parameters": dict(t.schema)}} for t in request.tools]
    if request.effort:
        body["reasoning_effort"] = request.effort
    return body


_FINISH = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
           "content_filter": "refusal"}


class OpenAIChatConnection(_OpenAIBase):
    """Chat Completions, for OpenAI-compatible servers (Ollama, llama.cpp server, vLLM)."""

    provider = "openai-chat"

    def _open(self, request: Request) -> Any:
        return self._client.chat.completions.create(**chat_body(request), stream=True, timeout=request.timeout,
                                                    extra_headers=self._headers(request))

    def _events(self, raw: Any, request: Request, deadline: float) -> Iterator[Event]:
        calls: dict[int, list[Any]] = {}  # index -> [id, name, argument pieces]
        finish: str | None = None
        usage = Usage()
        for chunk in raw:
            self._check_deadline(deadline, request)
            if getattr(chunk, "usage", None) is not None:
                usage = _chat_usage(chunk.usage)
            for choice in chunk.choices or []:
                delta = choice.delta
                if delta is not None:
                    thinking = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
                    if isinstance(thinking, str) and thinking:
                        yield ThinkingDelta(thinking)
                    if delta.content:
                        yield TextDelta(delta.content)
                    for call in delta.tool_calls or []:
                        slot = calls.setdefault(call.index, ["", "", []])
                        if call.id:
                            slot[0] = call.id
                        if call.function is not None:
                            if call.function.name:
                                slot[1] = call.function.name
                            if call.function.arguments:
                                slot[2].append(call.function.arguments)
                if choice.finish_reason:
                    finish = choice.finish_reason
        if finish is None:
            raise ProtocolError("the stream ended without a finish reason", provider=self.provider,
                                model=request.model)
        for index in sorted(calls):
            call_id, name, pieces = calls[index]
            yield ToolCall(call_id or f"call_{index}", name,
                           _arguments("".join(pieces), name, self.provider, request.model))
        yield usage
        reason = _FINISH.get(finish, finish)
        if calls and reason == "end_turn":
            reason = "tool_use"  # some local servers say "stop" after tool calls
        yield Stop(reason, incomplete=reason in ("max_tokens", "refusal"))


def _chat_usage(raw: Any) -> Usage:
    details = getattr(raw, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0)
    total = int(raw.prompt_tokens or 0)
    return Usage(input=max(0, total - cached), output=int(raw.completion_tokens or 0), cache_read=cached)
