"""The aiohttp application: routes, key checks, and sending replies with latency and faults.

Routes: ``POST /v1/messages`` and ``/v1/messages/count_tokens`` (Anthropic),
``POST /v1/responses`` and ``/v1/chat/completions`` (OpenAI), ``GET /v1/models``
(Anthropic's shape when the request has ``anthropic-version``, else OpenAI's).

Order per model call: key (401), JSON body and the API's own checks (400),
``anthropic-version`` (400), known model (404); then the script, the injections or
the rule decide the answer. A fault that fails the whole request answers at once,
without latency and without touching the cache. Otherwise the cache accounting is
done on arrival, the gate and the first-byte latency are waited out, and the reply
is sent (streamed with per-chunk latency, or whole after the latency of all its
chunks). Cache writes become readable at the first byte.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from types import SimpleNamespace
from typing import Any

from aiohttp import web

from . import _anthropic, _chat, _openai, _responses
from ._record import Exchange, redact
from ._replies import (
    DropStream,
    Fault,
    GarbageEvent,
    ModelNotFound,
    Reply,
    StreamError,
    as_reply,
    fit,
    output_tokens,
)
from ._state import ServerState, echo_rule
from ._tokens import anthropic_blocks, chat_blocks, responses_blocks
from ._wire import Answer, SseEvent, garbage_event

__all__ = ["make_app"]

log = logging.getLogger("everchat.tools.fakemodel")

_STATE = web.AppKey("state", ServerState)
_MID_STREAM = (DropStream, GarbageEvent, StreamError)

_WIRES = {
    "anthropic": SimpleNamespace(check=_anthropic.check, parse=_anthropic.parse, blocks=anthropic_blocks,
                                 whole=_anthropic.message_json, events=_anthropic.stream_events, marks=True),
    "responses": SimpleNamespace(check=_responses.check, parse=_responses.parse, blocks=responses_blocks,
                                 whole=_responses.response_json, events=_responses.stream_events, marks=False),
    "chat": SimpleNamespace(check=_chat.check, parse=_chat.parse, blocks=chat_blocks,
                            whole=_chat.completion_json, events=_chat.stream_events, marks=False),
}


def make_app(state: ServerState) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_STATE] = state
    app.router.add_post("/v1/messages", _messages)
    app.router.add_post("/v1/messages/count_tokens", _count_tokens)
    app.router.add_post("/v1/responses", _responses_route)
    app.router.add_post("/v1/chat/completions", _chat_route)
    app.router.add_get("/v1/models", _models)
    return app


def _request_id(ex: Exchange) -> str:
    return f"req_fake{ex.id:06d}"


class _Failed(Exception):
    """A request answered with an error before any reply: carries the response to send."""

    def __init__(self, response: web.Response, outcome: str | None = None) -> None:
        super().__init__(response.status)
        self.response = response
        self.outcome = outcome or f"http {response.status}"


def _is_anthropic(api: str) -> bool:
    return api in ("anthropic", "count_tokens", "anthropic_models")


def _error(api: str, ex: Exchange, status: int, kind: str, message: str, code: str | None = None,
           headers: dict[str, str] | None = None) -> web.Response:
    """An error response in the API's own shape."""
    all_headers = {"request-id" if _is_anthropic(api) else "x-request-id": _request_id(ex), **(headers or {})}
    if _is_anthropic(api):
        body = _anthropic.error_json(kind, message, _request_id(ex))
    else:
        body = _openai.error_json(message, kind, code)
    return web.json_response(body, status=status, headers=all_headers)


def _fault_response(api: str, ex: Exchange, fault: Fault, model: str) -> web.Response:
    headers = {}
    if fault.name == "rate_limited":
        seconds = fault.retry_after  # type: ignore[attr-defined]
        headers["retry-after"] = str(int(seconds)) if float(seconds).is_integer() else str(seconds)
    if fault.name == "usage_limit":  # a plan's limit: the unified headers say when it resets
        reset = int(time.time() + fault.reset_in)  # type: ignore[attr-defined]
        headers.update({"anthropic-ratelimit-unified-status": "rejected",
                        "anthropic-ratelimit-unified-reset": str(reset),
                        "anthropic-ratelimit-unified-representative-claim": "five_hour",
                        "x-should-retry": "false"})
    if _is_anthropic(api):
        status, kind, message = _anthropic.fault_error(fault, model)
        return _error(api, ex, status, kind, message, headers=headers)
    status, body = _openai.fault_error(fault, model)
    error = body["error"]
    return _error(api, ex, status, error["type"], error["message"], error["code"], headers)


def _check_key(request: web.Request, state: ServerState, api: str, ex: Exchange) -> None:
    key = request.headers.get("x-api-key")
    bearer = request.headers.get("authorization", "")
    if key is None and bearer.lower().startswith("bearer "):
        key = bearer[7:].strip()
    if state.key_ok(key):
        return
    if _is_anthropic(api):
        message = "invalid x-api-key" if key else "x-api-key header is required"
        raise _Failed(_error(api, ex, 401, "authentication_error", message))
    message = "Incorrect API key provided." if key else "You didn't provide an API key."
    raise _Failed(_error(api, ex, 401, "invalid_request_error", message, "invalid_api_key"))


async def _read_body(request: web.Request, api: str, ex: Exchange) -> Any:
    try:
        return await request.json(loads=json.loads)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        kind = "invalid_request_error"
        raise _Failed(_error(api, ex, 400, kind, f"request body is not valid JSON: {err}")) from None


def _check_version(request: web.Request, api: str, ex: Exchange) -> None:
    if _is_anthropic(api) and not request.headers.get("anthropic-version"):
        raise _Failed(_error(api, ex, 400, "invalid_request_error", "anthropic-version: header is required"))


async def _guarded(request: web.Request, api: str, handler: Any) -> web.StreamResponse:
    """Open the exchange, run `handler`, and always close the exchange with its outcome."""
    state = request.app[_STATE]
    ex = state.open_exchange(api, request.method, request.path, redact(request.headers.items()))
    outcome: tuple[int | None, str] = (None, "failed")
    try:
        _check_key(request, state, api, ex)
        response, outcome = await handler(request, state, ex)
        return response
    except _Failed as failed:
        outcome = (failed.response.status, failed.outcome)
        return failed.response
    except asyncio.CancelledError:
        outcome = (ex.status, "cancelled")
        raise
    except Exception as err:  # a bug here or in a rule: logged, recorded, and a 500 in the API's shape
        log.exception("fake model server: exchange %d failed", ex.id)
        state.record_error(ex, traceback.format_exc())
        outcome = (500, "server failed")
        if ex.first_byte is not None:  # a response is under way: the connection breaks instead
            raise
        return _error(api, ex, 500, "api_error" if _is_anthropic(api) else "server_error",
                      f"the fake model server failed: {err!r}")
    finally:
        state.finish(ex, *outcome)
        log.debug("exchange %d %s %s -> %s %s", ex.id, request.method, request.path, *outcome)


async def _messages(request: web.Request) -> web.StreamResponse:
    return await _guarded(request, "anthropic", _model_call)


async def _responses_route(request: web.Request) -> web.StreamResponse:
    return await _guarded(request, "responses", _model_call)


async def _chat_route(request: web.Request) -> web.StreamResponse:
    return await _guarded(request, "chat", _model_call)


async def _count_tokens(request: web.Request) -> web.StreamResponse:
    async def count(request: web.Request, state: ServerState, ex: Exchange) -> tuple[web.Response, tuple]:
        _check_version(request, "count_tokens", ex)
        body = ex.body = await _read_body(request, "count_tokens", ex)
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
            raise _Failed(_error("count_tokens", ex, 400, "invalid_request_error", "model and messages are required"))
        ex.model = str(body["model"])
        total = sum(b.tokens for b in anthropic_blocks(body))
        return web.json_response({"input_tokens": total}, headers={"request-id": _request_id(ex)}), (200, "ok")

    return await _guarded(request, "count_tokens", count)


async def _models(request: web.Request) -> web.StreamResponse:
    anthropic = bool(request.headers.get("anthropic-version"))

    async def listing(request: web.Request, state: ServerState, ex: Exchange) -> tuple[web.Response, tuple]:
        models = list(state.models) if state.models is not None else ["fake-model"]
        body = _anthropic.models_json(models) if anthropic else _openai.models_json(models)
        return web.json_response(body), (200, "ok")

    return await _guarded(request, "anthropic_models" if anthropic else "models", listing)


async def _model_call(request: web.Request, state: ServerState, ex: Exchange) -> tuple[web.StreamResponse, tuple]:
    api = ex.api
    wire = _WIRES[api]
    body = ex.body = await _read_body(request, api, ex)
    problem = wire.check(body)
    if problem:
        raise _Failed(_error(api, ex, 400, "invalid_request_error", problem))
    _check_version(request, api, ex)
    model = ex.model = body["model"]
    if not state.model_ok(model):
        raise _Failed(_fault_response(api, ex, ModelNotFound(), model))
    stream = ex.stream = bool(body.get("stream"))
    parsed = wire.parse(body, ex.id, stream)

    choice = state.choose() or state.ask_rule(parsed)
    reply = choice if isinstance(choice, Reply) else None
    fault = choice if isinstance(choice, Fault) else None
    if fault is not None:
        ex.fault = fault.name
        if not isinstance(fault, _MID_STREAM) or (not stream and isinstance(fault, StreamError)):
            raise _Failed(_fault_response(api, ex, fault, model))
        if fault.reply is not None:  # type: ignore[attr-defined]
            reply = as_reply(fault.reply)  # type: ignore[attr-defined]
        else:
            asked = state.ask_rule(parsed)
            reply = asked if isinstance(asked, Reply) else echo_rule(parsed)
    assert isinstance(reply, Reply)

    usage = state.account(ex, wire.blocks(body), wire.marks)
    blocks, truncated = fit(reply, parsed.max_tokens)
    ex.reply = Reply(*blocks, stop_reason=reply.stop_reason)
    ex.output_tokens = output_tokens(blocks)
    answer = Answer(ex.id, model, body, blocks, reply.stop_reason, truncated, usage, ex.output_tokens,
                    int(time.time()), state.chunk_bytes)
    latency = reply.latency or state.latency
    if reply.gate is not None:
        await reply.gate.passed()
    await asyncio.sleep(state.draw(latency.first_byte))
    if stream:
        return await _send_stream(request, state, ex, answer, fault, latency.per_chunk)
    return await _send_whole(request, state, ex, answer, fault, latency.per_chunk)


async def _send_whole(request: web.Request, state: ServerState, ex: Exchange, answer: Answer,
                      fault: Fault | None, per_chunk: Any) -> tuple[web.StreamResponse, tuple]:
    chunks = sum(1 for e in _WIRES[ex.api].events(answer) if e.chunk)
    delay = sum(state.draw(per_chunk) for _ in range(chunks))
    await asyncio.sleep(delay)
    if isinstance(fault, DropStream):
        _close(request)
        return web.Response(status=200), (None, fault.name)
    if _gone(request):
        return web.Response(status=200), (None, "client closed")
    headers = {"request-id" if ex.api == "anthropic" else "x-request-id": _request_id(ex)}
    state.first_byte(ex)
    if isinstance(fault, GarbageEvent):
        garbage = '{"id": "' + _request_id(ex) + '", "content": [{"type": "te'
        return web.Response(text=garbage, content_type="application/json", headers=headers), (200, fault.name)
    return web.json_response(_WIRES[ex.api].whole(answer), headers=headers), (200, "ok")


def _gone(request: web.Request) -> bool:
    """Whether the client closed the connection (say, its timeout ran out during the latency)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _close(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.close()


async def _send_stream(request: web.Request, state: ServerState, ex: Exchange, answer: Answer,
                       fault: Fault | None, per_chunk: Any) -> tuple[web.StreamResponse, tuple]:
    events = _WIRES[ex.api].events(answer)
    strike = min(fault.after_events, len(events) - 1) if fault is not None else None  # type: ignore[attr-defined]
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
               "request-id" if ex.api == "anthropic" else "x-request-id": _request_id(ex)}
    response = web.StreamResponse(status=200, headers=headers)
    if _gone(request):
        return response, (None, "client closed")
    try:
        await response.prepare(request)
        state.first_byte(ex)
        for n, event in enumerate(events):
            if n == strike:
                return await _strike(request, response, ex, answer, fault, n)
            if event.chunk:
                await asyncio.sleep(state.draw(per_chunk))
            await response.write(event.encode())
            if event.chunk:
                ex.chunks_sent.append(time.monotonic())
        await response.write_eof()
    except ConnectionResetError:  # the client went away mid-stream: nobody to tell
        return response, (200, "client closed")
    return response, (200, "ok")


async def _strike(request: web.Request, response: web.StreamResponse, ex: Exchange, answer: Answer,
                  fault: Fault | None, sent: int) -> tuple[web.StreamResponse, tuple]:
    """A mid-stream fault, after `sent` events."""
    assert fault is not None
    if isinstance(fault, DropStream):
        _close(request)
        return response, (200, fault.name)
    if isinstance(fault, GarbageEvent):
        name = {"anthropic": "content_block_delta", "responses": "response.output_text.delta", "chat": None}[ex.api]
        await response.write(garbage_event(name).encode())
    else:
        event: SseEvent = {
            "anthropic": lambda: _anthropic.stream_error_event(_request_id(ex)),
            "responses": lambda: _responses.stream_error_event(sent),
            "chat": _chat.stream_error_event,
        }[ex.api]()
        await response.write(event.encode())
    await response.write_eof()
    return response, (200, fault.name)

