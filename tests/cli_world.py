"""What the command-line tests share: a clean environment and `everchat` as a real process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture
def env(tmp_path):
    """A clean environment: no keys, Everchat's home in the test's folder."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    return dict(keep, EVERCHAT_HOME=str(tmp_path / "home"))


def everchat(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def clean_home(tmp_path, monkeypatch) -> None:
    """This process's environment cleaned as `env` cleans a child's: no keys, no EVERCHAT_
    settings, Everchat's home in the test's folder."""
    for key in list(os.environ):
        if key.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("EVERCHAT_HOME", str(tmp_path / "home"))
