"""Codex as the model: `codex app-server` over stdio, on the person's ChatGPT login.

    codex app-server --strict-config --listen stdio:// -c features.shell_tool=false -c ... (`_codex_wire.CONFIG`)

Codex's app server is a JSON-RPC conversation, so the run is driven by `CodexDecoder`
as the server answers: ``initialize``; ``account/read`` (a ChatGPT login is required:
`NotLoggedIn` otherwise, and an API-key login is refused, never used; the run forces
Codex's OpenAI provider, so a custom ``model_provider`` in the user's config, another
API, is never used); ``thread/start``
(ephemeral, read-only sandbox, no approvals, the system prompt as base instructions, our
tools as *dynamic tools*); ``thread/inject_items`` (the saved view, as the Responses
items the API path sends); ``turn/start`` (the turn: its text, and its images as
``localImage`` files in the run's folder: never on the command line).

Text streams as ``item/agentMessage/delta``; reasoning summaries as thinking; token
counts come cumulative in ``thread/tokenUsage/updated`` and are reported as the part of
each stretch of the run. When the model calls one of our tools Codex sends the request
``item/tool/call`` and waits for its answer: the base (`_cli.CliConnection`) yields the
`ToolCall` and `Stop("tool_use")`, the caller runs the tool, and its results answer that
request in the same process. Codex runs the calls of one message at once: those that
reach us together stop once, a later one stops again.

Nothing of Codex's own reaches the model: its shell, file, web, image, plan, goal,
agent, app, plugin, hook and skill tools are off, and so are its environment and
permission notes and the MCP servers of the user's own config (see `_codex_wire`); the
one exception is the user's global CODEX_HOME/AGENTS.md, which Codex 0.171.0 cannot be
told to leave out (docs/SUBSCRIPTIONS.md). The child keeps CODEX_HOME (the login lives
there); every API-key variable is removed by the base.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from . import _codex_wire as wire
from ._cli import CliConnection
from ._cli_run import Decoder, Finished, Run, asked_tool
from ._errors import ModelError, NotLoggedIn, ProtocolError, Unreachable
from ._types import ImageBlock, Request, TextBlock, TextDelta, ThinkingDelta, ToolResultBlock

__all__ = ["CodexConnection", "CodexDecoder"]

CLIENT = {"name": "everchat", "title": "Everchat", "version": "1"}


class CodexConnection(CliConnection):
    """OpenAI models through the `codex` CLI's app server and its ChatGPT login (see the module)."""

    provider = "codex"

    def __init__(self, executable: str, *, model_provider: str = wire.SUBSCRIPTION_PROVIDER, **options: Any) -> None:
        """`options` as for `CliConnection`. `model_provider` is for the tests only: the
        Codex provider the run forces, which must be OpenAI's (the ChatGPT login) for a
        subscription; the tests name their fake server's, defined in their CODEX_HOME."""
        super().__init__(executable, **options)
        self.model_provider = model_provider

    def argv(self, run: Run, request: Request) -> list[str]:
        # --strict-config: a `-c` key this codex does not know (renamed in another version)
        # fails the run; without it codex ignores the key and the tool it meant stays on
        return [self.executable, "app-server", "--strict-config", "--listen", "stdio://",
                *wire.config_args(_user_config(), self.model_provider)]

    def environment(self, run: Run, request: Request) -> dict[str, str]:
        env = super().environment(run, request)
        # codex's startup errors end in a Rust backtrace when these ask for one, and the
        # call's error keeps only the tail of stderr: keep codex's own words there
        env["RUST_BACKTRACE"] = env["RUST_LIB_BACKTRACE"] = "0"
        return env

    def opening(self, run: Run, request: Request) -> bytes:
        return _line({"id": 0, "method": "initialize",
                      "params": {"clientInfo": CLIENT, "capabilities": {"experimentalApi": True}}})

    def decoder(self, request: Request) -> Decoder:
        return CodexDecoder(request, model=self.model_for(request), effort=self.effort_for(request),
                            provider=self.provider,
                            subscription=self.model_provider == wire.SUBSCRIPTION_PROVIDER)


def _user_config() -> str:
    """The text of the user's CODEX_HOME/config.toml ("" when there is none). One that
    exists but cannot be read is a `ModelError` (the call's error, not a crash)."""
    home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    path = os.path.join(home, "config.toml")
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except UnicodeDecodeError:
        # codex itself would refuse it too: TOML is UTF-8
        raise ModelError(f"Codex's config {path} is not UTF-8 text: fix or re-save it", provider="codex") from None
    except OSError as error:
        raise ModelError(f"Codex's config {path} cannot be read ({error.strerror}): its MCP servers must be "
                         f"known to turn them off", provider="codex") from None


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"


class CodexDecoder(Decoder):
    """Reads the app server's lines and answers them: drives the handshake, turns the
    turn's notifications into events, and hands `item/tool/call` requests to the base as
    pending calls whose results go back as the JSON-RPC answer.

    `attach` gives it the run (for the images' folder) and the writer to the server's
    stdin; the base calls it before it reads the first line."""

    def __init__(self, request: Request, *, model: str | None = None, effort: str | None = None,
                 provider: str = "codex", subscription: bool = True) -> None:
        self.request = request
        self.subscription = subscription  # False only on the tests' fake provider
        self.model = model or ""
        self.effort = wire.codex_effort(effort)
        self.provider = provider
        self.parts = wire.split(request)
        self.thread_id: str | None = None
        self.failure: dict[str, Any] | None = None  # the last error Codex will not retry
        self._usage_seen: dict[str, Any] | None = None
        self._streamed: dict[str, str] = {}  # agent message id -> text streamed so far
        self._ids = itertools.count(1)
        self._asked: dict[int, str] = {}  # our request id -> method
        self._run: Run | None = None
        self._write: Callable[[bytes], None] | None = None
        self._images = itertools.count(1)  # the turn's image files, named in order

    # --- sending -------------------------------------------------------------------

    def attach(self, run: Run, write: Callable[[bytes], None]) -> None:
        self._run, self._write = run, write

    def _send(self, message: dict[str, Any]) -> None:
        assert self._write is not None  # feed() checked
        self._write(_line(message))

    def _ask(self, method: str, params: dict[str, Any]) -> None:
        number = next(self._ids)
        self._asked[number] = method
        self._send({"id": number, "method": method, "params": params})

    def _error(self, cls: type[ModelError], advice: str, detail: str = "") -> ModelError:
        text = f"{advice} ({detail})" if detail and detail not in advice else advice
        return cls(text, provider=self.provider, model=self.model)

    # --- reading -------------------------------------------------------------------

    def feed(self, line: str) -> Iterable[Any]:
        if self._run is None or self._write is None:
            raise RuntimeError("CodexDecoder.attach() comes before the first line it reads")
        message = wire.parse_line(line)
        if "method" in message and "id" in message:
            return self._server_request(message)
        if "id" in message:
            return self._response(message)
        if "method" in message:
            return self._notification(message)
        return [self._error(ProtocolError, "codex app-server sent a message that is neither a request, "
                                           "an answer nor a notification", line[:120])]

    def _response(self, message: dict[str, Any]) -> list[Any]:
        ident = message["id"]
        method = "initialize" if ident == 0 else self._asked.pop(ident, "")
        if "error" in message:
            error = message["error"] or {}
            detail = str(error.get("message") or "")
            if method == "account/read":
                return [self._error(Unreachable, "Codex could not check its ChatGPT login (is chatgpt.com "
                                                 "reachable? `codex login status` tells more)", detail)]
            return [self._error(ProtocolError, f"codex app-server refused {method or 'a request'}", detail)]
        result = message.get("result") or {}
        if method == "initialize":
            self._send({"method": "initialized"})
            self._ask("account/read", {})
        elif method == "account/read":
            problem = wire.login_problem(result, subscription=self.subscription)
            if problem:
                return [self._error(NotLoggedIn, problem)]
            assert self._run is not None  # feed() checked
            self._ask("thread/start", wire.thread_params(self.request, str(self._run.folder), self.model or None))
        elif method == "thread/start":
            self.thread_id = str((result.get("thread") or {}).get("id") or "")
            if not self.thread_id:
                return [self._error(ProtocolError, "codex app-server started a thread without an id")]
            items = wire.history_items(self.parts.history)
            if items:
                self._ask("thread/inject_items", {"threadId": self.thread_id, "items": items})
            else:
                self._start_turn()
        elif method == "thread/inject_items":
            self._start_turn()
        return []

    def _start_turn(self) -> None:
        params: dict[str, Any] = {"threadId": self.thread_id,
                                  "input": wire.turn_input(self.parts.turn, self._save_image)}
        if self.effort:
            params["effort"] = self.effort
        self._ask("turn/start", params)

    def _save_image(self, data: bytes, suffix: str) -> str:
        assert self._run is not None  # feed() checked
        path = self._run.folder / f"image-{next(self._images)}.{suffix}"
        path.write_bytes(data)
        return str(path)

    def _ours(self, params: dict[str, Any]) -> bool:
        thread = params.get("threadId")
        return thread is None or thread == self.thread_id

    def _notification(self, message: dict[str, Any]) -> list[Any]:
        method = message["method"]
        params = message.get("params") or {}
        if not isinstance(params, dict) or not self._ours(params):
            return []
        if method == "item/agentMessage/delta":
            delta = str(params.get("delta") or "")
            item = str(params.get("itemId") or "")
            self._streamed[item] = self._streamed.get(item, "") + delta
            return [TextDelta(delta)] if delta else []
        if method == "item/completed":
            return self._completed(params.get("item") or {})
        if method in ("item/reasoning/summaryTextDelta", "item/reasoning/textDelta"):
            delta = str(params.get("delta") or "")
            return [ThinkingDelta(delta)] if delta else []
        if method == "thread/tokenUsage/updated":
            total = (params.get("tokenUsage") or {}).get("total")
            if not isinstance(total, dict):
                return []
            usage = wire.usage_between(total, self._usage_seen)
            self._usage_seen = total
            return [usage]
        if method == "error":
            if not params.get("willRetry"):
                self.failure = params.get("error") or {}
            return []
        if method == "turn/completed":
            return self._turn_completed(params.get("turn") or {})
        return []

    def _completed(self, item: dict[str, Any]) -> list[Any]:
        """A finished agent message whose text did not all stream (Codex may skip deltas)."""
        if item.get("type") != "agentMessage":
            return []
        text = str(item.get("text") or "")
        sent = self._streamed.pop(str(item.get("id") or ""), "")
        if text.startswith(sent) and len(text) > len(sent):
            return [TextDelta(text[len(sent):])]
        return []

    def _turn_completed(self, turn: dict[str, Any]) -> list[Any]:
        status = turn.get("status")
        if status == "completed":
            return [Finished("end_turn")]
        if status == "interrupted":
            return [Finished("end_turn", incomplete=True)]
        error = turn.get("error") or self.failure or {}
        cls, advice = wire.error_class(error)
        return [self._error(cls, advice, wire.error_detail(error))]

    def _server_request(self, message: dict[str, Any]) -> list[Any]:
        ident, method = message["id"], message["method"]
        params = message.get("params") or {}
        if method == "item/tool/call" and isinstance(params, dict):
            arguments = params.get("arguments")
            call_id = str(params.get("callId") or f"codex_call_{ident}")

            def reply(parts: list[TextBlock | ImageBlock], is_error: bool, ident: Any = ident,
                      call_id: str = call_id) -> None:
                result = ToolResultBlock(call_id, tuple(parts), is_error)
                self._send({"id": ident, "result": wire.tool_response(result)})

            return [asked_tool(call_id, str(params.get("tool") or ""),
                               arguments if isinstance(arguments, dict) else {}, reply)]
        # approvals, questions, elicitations: with everything off and approvals "never" none
        # should come; answer each so Codex never waits on us
        self._send({"id": ident, "error": {"code": -32601,
                                           "message": f"everchat does not answer {method}: it runs no commands, "
                                                      f"edits no files and asks the person nothing"}})
        return []

