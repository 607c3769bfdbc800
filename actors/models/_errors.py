"""The failures of a model call, in one small vocabulary, and how each SDK's maps onto it.

Every error names the provider and model it came from and says what to do, in
words fit for the user (the edge turns them into text, STYLE 6). None of them
carries or repeats a key. `retryable` tells whether the same call may succeed
later (the caller decides; a connection never switches vendor or model).
"""

from __future__ import annotations

import json

__all__ = [
    "BadKey",
    "BadRequest",
    "CliMissing",
    "MissingKey",
    "ModelError",
    "ModelNotFound",
    "ModelTimeout",
    "NoAnswer",
    "NotLoggedIn",
    "Overloaded",
    "ProtocolError",
    "QuotaExceeded",
    "RateLimited",
    "Refused",
    "ServerError",
    "Unreachable",
    "error_for_status",
    "from_anthropic",
    "from_openai",
]


class ModelError(Exception):
    """A model call failed. `provider` and `model` say where; `status` is the HTTP status
    when there was one."""

    retryable = False

    def __init__(self, message: str, *, provider: str = "", model: str = "", status: int | None = None,
                 retry_after: float | None = None) -> None:
        self.provider = provider
        self.model = model
        self.status = status
        self.retry_after = retry_after
        where = f"{provider} {model}".strip()
        super().__init__(f"{where}: {message}" if where else message)


class MissingKey(ModelError):
    """No API key: the provider's key variable (ANTHROPIC_API_KEY, OPENAI_API_KEY) is unset.
    Raised when the connection is made, before any call."""


class BadKey(ModelError):
    """The provider refused the key (HTTP 401), or the key may not use this (403)."""


class QuotaExceeded(ModelError):
    """Out of credit or over the plan's quota (Anthropic 402 billing_error, OpenAI 429
    insufficient_quota). Waiting does not help; paying does."""


class RateLimited(ModelError):
    """Too many requests or tokens per minute (HTTP 429); `retry_after` seconds when the
    provider said."""

    retryable = True


class NotLoggedIn(ModelError):
    """A subscription CLI (Claude Code, Codex) has no valid login: run its own login
    (`claude` then /login, `codex login`). Never answered by falling back to an API key."""


class CliMissing(ModelError):
    """A subscription CLI's executable was not found or could not be started
    (`--cli-executable`, or `npm ci --prefix tools/clis` for the pinned ones)."""


class ModelNotFound(ModelError):
    """The provider does not serve this model name to this key (HTTP 404)."""


class ModelTimeout(ModelError):
    """The call took longer than its timeout (no answer, or the stream stalled)."""

    retryable = True


class Overloaded(ModelError):
    """The provider is overloaded (Anthropic 529, HTTP 503, or an overload error inside a
    stream)."""

    retryable = True


class ServerError(ModelError):
    """The provider failed on its side (HTTP 500 and other 5xx)."""

    retryable = True


class BadRequest(ModelError):
    """The provider rejected the request itself (HTTP 400, 413, 422): too long, malformed."""


class Unreachable(ModelError):
    """No connection to the base URL (nothing listens there, DNS, TLS)."""

    retryable = True


class ProtocolError(ModelError):
    """The answer broke: a dropped stream, an event that is not JSON, a stream that ends
    without its final event, or a body the SDK cannot read."""

    retryable = True


class Refused(ModelError):
    """The model declined to answer (a refusal or content-filter stop)."""


class NoAnswer(ModelError):
    """A compaction got no usable line in all its tries (empty answers, tool calls or
    thinking only, R29): a failed call for R30."""

    retryable = True


def _mro_names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def _transport(error: BaseException) -> type[ModelError] | None:
    """The class for an HTTP library error (httpx or httpx2), by name, else None."""
    chain: BaseException | None = error
    seen = 0
    while chain is not None and seen < 5:
        names = _mro_names(chain)
        if "TimeoutException" in names or "APITimeoutError" in names:
            return ModelTimeout
        if "ConnectError" in names:
            return Unreachable
        if names & {"RemoteProtocolError", "ReadError", "NetworkError", "StreamError", "DecodingError",
                    "LocalProtocolError", "CloseError", "SSEError", "EndOfStream"}:
            return ProtocolError
        chain = chain.__cause__ or chain.__context__
        seen += 1
    return None


def _body_error(body: object) -> tuple[str, str, str]:
    """(type, code, message) of an error body in either vendor's shape."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return (str(inner.get("type") or ""), str(inner.get("code") or ""), str(inner.get("message") or ""))
        if isinstance(inner, str):
            return ("", "", inner)
    if isinstance(body, str):
        return ("", "", body)
    return ("", "", "")


def _by_status(status: int, kind: str, code: str, message: str) -> type[ModelError]:
    text = f"{kind} {code} {message}".lower()
    if "insufficient_quota" in text or "billing" in text or status == 402:
        return QuotaExceeded
    if status == 401 or "authentication" in kind:
        return BadKey
    if status == 403 or kind == "permission_error":
        return BadKey
    if status == 404 or "not_found" in text or "model_not_found" in text:
        return ModelNotFound
    if status == 429 or "rate_limit" in text:
        return RateLimited
    if status in (529, 503) or "overload" in text:
        return Overloaded
    if status in (408, 504) or "timeout" in kind:
        return ModelTimeout
    if status in (400, 413, 422) or kind == "invalid_request_error":
        return BadRequest
    if status >= 500 or kind in ("api_error", "server_error"):
        return ServerError
    return ProtocolError


_ADVICE = {
    BadKey: "the key was refused; check {env}",
    QuotaExceeded: "out of credit or quota; check the account's billing",
    RateLimited: "rate limited; try again later",
    ModelNotFound: "model not found; check the model name in the config",
    Overloaded: "the provider is overloaded; try again later",
    ServerError: "the provider failed on its side",
    BadRequest: "the request was rejected",
    ModelTimeout: "no answer within the timeout",
    ProtocolError: "the answer broke off or could not be read",
    Unreachable: "cannot connect to {url}",
    NotLoggedIn: "the login was refused; log in again with the CLI",
}


def _retry_after(response: object) -> float | None:
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _make(cls: type[ModelError], detail: str, *, provider: str, model: str, env: str, url: str,
          status: int | None = None, retry_after: float | None = None) -> ModelError:
    advice = _ADVICE.get(cls, "the call failed").format(env=env, url=url or "the base URL")
    detail = " ".join(detail.split())[:300]
    message = f"{advice} ({detail})" if detail else advice
    return cls(message, provider=provider, model=model, status=status, retry_after=retry_after)


def _convert(error: BaseException, *, provider: str, model: str, env: str, url: str) -> ModelError:
    if isinstance(error, ModelError):
        return error
    names = _mro_names(error)
    status = getattr(error, "status_code", None)
    if "APIStatusError" in names and isinstance(status, int):
        kind, code, message = _body_error(getattr(error, "body", None))
        if status == 200:  # an error event inside a stream
            cls = _by_status(0, kind, code, message)
        else:
            cls = _by_status(status, kind, code, message)
        detail = f"HTTP {status}" if status != 200 else "error event in the stream"
        detail += f" {kind or code}: {message}" if (kind or code or message) else ""
        return _make(cls, detail, provider=provider, model=model, env=env, url=url,
                     status=status if status != 200 else None, retry_after=_retry_after(getattr(error, "response", None)))
    if "APIResponseValidationError" in names:
        return _make(ProtocolError, str(error), provider=provider, model=model, env=env, url=url)
    if isinstance(error, json.JSONDecodeError):
        return _make(ProtocolError, f"an event that is not JSON: {error.msg}", provider=provider, model=model,
                     env=env, url=url)
    transport = _transport(error)
    if transport is not None:
        return _make(transport, f"{type(error).__name__}", provider=provider, model=model, env=env, url=url)
    if "APIError" in names:  # an error inside a stream, without an HTTP status (OpenAI)
        kind, code, message = _body_error(getattr(error, "body", None))
        message = message or str(error)
        cls = _by_status(0, kind, code, message)
        return _make(cls, f"error in the stream: {message}", provider=provider, model=model, env=env, url=url)
    return _make(ProtocolError, f"{type(error).__name__}: {error}", provider=provider, model=model, env=env,
                 url=url)


def from_anthropic(error: BaseException, *, model: str, url: str = "") -> ModelError:
    """The `ModelError` for an exception out of the `anthropic` SDK (or its HTTP library)."""
    return _convert(error, provider="anthropic", model=model, env="ANTHROPIC_API_KEY", url=url)


def from_openai(error: BaseException, *, model: str, url: str = "", provider: str = "openai") -> ModelError:
    """The `ModelError` for an exception out of the `openai` SDK (or its HTTP library)."""
    return _convert(error, provider=provider, model=model, env="OPENAI_API_KEY", url=url)


def error_for_status(status: int | None, message: str, *, provider: str, model: str, kind: str = "",
                     code: str = "") -> ModelError:
    """The error for a failed call a subscription CLI reports (the HTTP status it saw, the
    API's error type and code, its words): the API path's class, so a rate limit or a
    timeout stays retryable alike. A refused credential is `NotLoggedIn`: a CLI has a login
    to renew, not a key variable to set."""
    cls = _by_status(status or 0, kind, code, message)
    if cls is BadKey:
        cls = NotLoggedIn
    detail = f"HTTP {status} {kind or code}: {message}" if status else message
    return _make(cls, detail, provider=provider, model=model, env="", url="", status=status)


def stream_error(provider: str, model: str, kind: str, code: str, message: str) -> ModelError:
    """The error for an error event a stream delivered as data (OpenAI Responses)."""
    cls = _by_status(0, kind, code, message)
    env = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    return _make(cls, f"error event in the stream: {code or kind} {message}".strip(), provider=provider,
                 model=model, env=env, url="")
