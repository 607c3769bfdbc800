"""What the Claude Code tests share: the pinned `claude` binary, a dummy subscription login,
and the fake model server it talks to (docs/SUBSCRIPTIONS.md).

The real CLI runs end to end: `ANTHROPIC_BASE_URL` points it at the fake server and a
temporary `CLAUDE_CONFIG_DIR` holds a `.credentials.json` with a dummy OAuth login (what
`/login` writes). The fake server accepts only that token as a Bearer, so a request that
reached it came through the subscription path, never an API key.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from everchat.tools.fakemodel import FakeModelServer

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = ROOT / "tools" / "clis" / "node_modules" / ".bin" / "claude"
TOKEN = "sk-ant-oat01-everchat-dummy-login"
MODEL = "claude-sonnet-4-5"


def claude_binary() -> str:
    """The pinned binary; a missing one fails the test with what to run (CI installs it)."""
    if not CLAUDE.exists():
        pytest.fail(f"{CLAUDE} is missing: run `npm ci --prefix tools/clis` (the pinned Claude Code)")
    return str(CLAUDE)


def write_login(config_dir: Path) -> None:
    """A dummy Claude subscription login, as `/login` saves it."""
    config_dir.mkdir(parents=True, exist_ok=True)
    login = {"claudeAiOauth": {"accessToken": TOKEN, "refreshToken": "sk-ant-ort01-everchat-dummy",
                               "expiresAt": int(time.time() * 1000) + 24 * 3600 * 1000,
                               "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"}}
    (config_dir / ".credentials.json").write_text(json.dumps(login))


def login_env(tmp_path: Path, server: FakeModelServer, logged_in: bool = True) -> dict[str, str]:
    """The variables that put a child `claude` on the dummy login and the fake server."""
    home = tmp_path / "claude-home"
    config = home / ".claude"
    if logged_in:
        write_login(config)
    else:
        config.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(config), "ANTHROPIC_BASE_URL": server.url}


@pytest.fixture
def fake():
    with FakeModelServer(api_keys=(TOKEN,), chunk_tokens=2) as server:
        yield server
        assert server.errors == []


@pytest.fixture
def claude_env(tmp_path, fake, monkeypatch):
    """This process's environment set for a logged-in `claude` on the fake server."""
    for name, value in login_env(tmp_path, fake).items():
        monkeypatch.setenv(name, value)
    return os.environ
