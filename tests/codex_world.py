"""The world of the Codex subscription tests: the real `codex` binary, a CODEX_HOME that
sends it to the fake model server, and recorded app-server streams.

The binary is the pinned one (`npm ci --prefix tools/clis`, as CI does). Its CODEX_HOME
holds a config.toml with a custom model provider at the fake server's Responses API (a
dummy bearer token, no retries), and the tests' connection selects it (the constructor's
test-only `model_provider`), so the real client runs end to end without a login.
The other homes stand for logins that cannot run here: none at all, an API key (which
the connection refuses), and a ChatGPT login whose account check needs chatgpt.com.

Re-record tests/data/codex_app_server_*.jsonl (after a Codex upgrade) from the real
binary's own output, through the real connection:

    .venv/bin/python tests/codex_world.py
"""

from __future__ import annotations

import base64
import json
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CODEX = ROOT / "tools" / "clis" / "node_modules" / ".bin" / "codex"
DATA = ROOT / "tests" / "data"
MODEL = "gpt-fake"
FAKE_PROVIDER = "fake"

__all__ = ["CODEX", "DATA", "FAKE_PROVIDER", "MODEL", "api_key_home", "chatgpt_home", "codex_executable",
           "fake_connection", "fake_home", "png", "recorded"]


def codex_executable() -> str:
    """The pinned codex binary; a clear failure (never a skip) when it is not installed."""
    if not CODEX.exists():
        raise AssertionError(f"the pinned codex CLI is missing at {CODEX}: run `npm ci --prefix tools/clis` "
                             f"(CI does it in .ci/run)")
    return str(CODEX)


def fake_home(folder: Path, base_url: str) -> Path:
    """A CODEX_HOME that defines the provider FAKE_PROVIDER at the fake server (no login
    needed, no retries). It does not select it: a run uses it only when the connection
    is made with ``model_provider=FAKE_PROVIDER`` (`fake_connection`); a production
    connection forces OpenAI's provider."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        f"[model_providers.{FAKE_PROVIDER}]\n"
        'name = "everchat fake model server"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
        'experimental_bearer_token = "test-key"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n", encoding="utf-8")
    return folder


def fake_connection(**options: Any):
    """A Codex connection to the pinned binary that runs on the fake server's provider
    (`fake_home`); `options` as for `CodexConnection`."""
    from everchat.actors.models._codex import CodexConnection

    return CodexConnection(codex_executable(), model_provider=FAKE_PROVIDER, **options)


def _b64(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def chatgpt_home(folder: Path) -> Path:
    """A CODEX_HOME with a ChatGPT login of made-up tokens (unsigned, for nobody): Codex
    takes it as signed in and checks the account with chatgpt.com before any model call."""
    folder.mkdir(parents=True, exist_ok=True)
    now = int(time.time())
    auth = {"chatgpt_plan_type": "plus", "chatgpt_account_id": "acc-test", "chatgpt_user_id": "user-test"}
    claims = {"email": "nobody@example.invalid", "exp": now + 30 * 86400, "iat": now, "sub": "user-test",
              "https://api.openai.com/auth": auth}
    token = ".".join([_b64({"alg": "none", "typ": "JWT"}), _b64(claims), "c2ln"])
    (folder / "auth.json").write_text(json.dumps({
        "auth_mode": "chatgpt", "OPENAI_API_KEY": None,
        "tokens": {"id_token": token, "access_token": token, "refresh_token": "rt-test", "account_id": "acc-test"},
        "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
    }), encoding="utf-8")
    (folder / "auth.json").chmod(0o600)
    return folder


def api_key_home(folder: Path) -> Path:
    """A CODEX_HOME logged in with an API key (`codex login --with-api-key`), which a
    subscription connection must refuse rather than bill."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "auth.json").write_text(json.dumps({"auth_mode": "apikey", "OPENAI_API_KEY": "sk-test-not-a-key"}),
                                      encoding="utf-8")
    (folder / "auth.json").chmod(0o600)
    return folder


def png(width: int = 2, height: int = 2, rgb: bytes = b"\xff\x00\x00") -> bytes:
    """A real PNG (Codex decodes and re-encodes images before sending them)."""
    raw = b"".join(b"\x00" + rgb * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def recorded(name: str) -> list[str]:
    """The lines of a recorded app-server stream (tests/data/codex_app_server_NAME.jsonl)."""
    path = DATA / f"codex_app_server_{name}.jsonl"
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- recording -------------------------------------------------------------------------


def _record_all() -> None:  # pragma: no cover - run by hand
    import os
    import tempfile

    sys.path.insert(0, str(ROOT.parent))
    from everchat.actors.models import ImageBlock, Message, Request, ToolCall, ToolResultBlock, ToolSpec, ToolUseBlock
    from everchat.actors.models import _codex
    from everchat.tools.fakemodel import FakeModelServer, QuotaExceeded, Reply, Text
    from everchat.tools.fakemodel import ToolCall as FakeCall

    lines: list[str] = []

    class Recorder(_codex.CodexDecoder):
        def feed(self, line: str):
            lines.append(line)
            return super().feed(line)

    class Recording(_codex.CodexConnection):
        def decoder(self, request):
            return Recorder(request, model=self.model_for(request), effort=self.effort_for(request),
                            subscription=False)

    zoom = ToolSpec("zoom", "Read a summary's sources.", {"type": "object", "properties": {"id": {"type": "string"}}})
    view = (Message.user("The view: an older exchange."), Message.assistant("An older answer."))

    def run(name: str, home: Path, script: list[Any], turn: Message, answer: str | None = None) -> None:
        lines.clear()
        os.environ["CODEX_HOME"] = str(home)
        with tempfile.TemporaryDirectory() as state:
            connection = Recording(codex_executable(), timeout=60, state_dir=state, model_provider=FAKE_PROVIDER)
            server.reset()
            server.script(*script)
            request = Request(model=MODEL, system="You are Everchat.", messages=view + (turn,), tools=(zoom,))
            try:
                events = list(connection.stream(request))
                calls = [e for e in events if isinstance(e, ToolCall)]
                if calls and answer is not None:
                    asked = Message("assistant", tuple(ToolUseBlock(c.id, c.name, c.input) for c in calls))
                    results = Message.user(*(ToolResultBlock.of_text(c.id, answer) for c in calls))
                    follow = request.messages + (asked, results)
                    list(connection.stream(Request(model=MODEL, system=request.system, messages=follow,
                                                   tools=request.tools)))
            except Exception as error:  # the failing scenarios are recorded too
                print(f"{name}: {type(error).__name__}: {error}")
            finally:
                connection.close()
        (DATA / f"codex_app_server_{name}.jsonl").write_text("".join(line + "\n" for line in lines),
                                                             encoding="utf-8")
        print(f"{name}: {len(lines)} lines")

    with FakeModelServer() as server, tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home = fake_home(base / "fake", server.openai_base_url)
        run("reply", home, [Reply(Text("Hello from the fake server."))], Message.user("Say hello."))
        run("zoom", home, [Reply(Text("Let me look."), FakeCall("zoom", {"id": "s12"})), Reply(Text("It says 42."))],
            Message.user("What is in s12?"), answer="s12: the answer is 42")
        run("image", home, [Reply(Text("A red square."))],
            Message.user("What is this?", ImageBlock(png(), "image/png")))
        run("quota", home, [QuotaExceeded()], Message.user("Say hello."))
        (base / "nologin").mkdir()
        run("nologin", base / "nologin", [], Message.user("Say hello."))
        run("apikey", api_key_home(base / "apikey"), [], Message.user("Say hello."))
        run("chatgpt", chatgpt_home(base / "chatgpt"), [], Message.user("Say hello."))


if __name__ == "__main__":  # pragma: no cover
    _record_all()
