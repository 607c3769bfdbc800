"""What OpenAI's two APIs share on the wire: errors, the model list, stop reasons, cached tokens.

OpenAI caches prompt prefixes by itself (no marks). The fake reports as
``cached_tokens`` the perfect prefix read, rounded down to a multiple of 128 tokens
and zero below 1,024, the granularity and minimum OpenAI documents.
"""

from __future__ import annotations

from typing import Any

from ._replies import Fault

__all__ = ["cached_tokens", "error_json", "fault_error", "finish_reason", "models_json"]

_SORRY = "The server had an error while processing your request. Sorry about that!"
_OVERLOADED = "The engine is currently overloaded, please try again later."
_FAULTS = {
    "rate_limited": (429, "requests", "rate_limit_exceeded",
                     "Rate limit reached for requests. Please try again later."),
    "server_error": (500, "server_error", None, _SORRY),
    "overloaded": (503, "server_error", None, _OVERLOADED),
    "model_not_found": (404, "invalid_request_error", "model_not_found",
                        "The model `{model}` does not exist or you do not have access to it."),
    "quota_exceeded": (429, "insufficient_quota", "insufficient_quota",
                       "You exceeded your current quota, please check your plan and billing details."),
    "stream_error": (503, "server_error", None, _OVERLOADED),
    "usage_limit": (429, "usage_limit_reached", "usage_limit_reached", "The usage limit has been reached"),
}


def error_json(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def fault_error(fault: Fault, model: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for a fault that fails the whole request."""
    status, kind, code, message = _FAULTS[fault.name]
    return status, error_json(message.format(model=model), kind, code)


_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", "stop_sequence": "stop"}


def finish_reason(stop: str) -> str:
    """An Anthropic-style stop reason in Chat Completions' words."""
    return _FINISH.get(stop, stop)


def cached_tokens(perfect_read: int) -> int:
    """OpenAI's automatic cache, modelled as the perfect read in 128-token steps from 1,024."""
    return 0 if perfect_read < 1024 else perfect_read - perfect_read % 128


def models_json(models: list[str]) -> dict[str, Any]:
    data = [{"id": m, "object": "model", "created": 1735689600, "owned_by": "everchat-fakemodel"}
            for m in models]
    return {"object": "list", "data": data}
