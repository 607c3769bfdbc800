"""`everchat setup`: questions on stdout, answers piped on stdin, each model checked with
one tiny request against the fake model server at the configured base URL (the real
SDKs), the file saved without any key (R33: the compaction model set apart)."""

from __future__ import annotations

import io
import subprocess
import sys
import tomllib

import pytest

from everchat.actors.settings import load
from everchat.frontends.cli.main import main
from everchat.tools.fakemodel import FakeModelServer

KEY = "test-key"


@pytest.fixture(scope="module")
def server():
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "EVERCHAT_CONFIG", "EVERCHAT_DEMO",
                 "EVERCHAT_REPLY_MODEL", "EVERCHAT_REPLY_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EVERCHAT_HOME", str(home))
    return home


def setup(monkeypatch, capsys, *answers: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(a + "\n" for a in answers)))
    status = main(["setup"])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_r33_setup_checks_both_models_at_the_base_url_and_saves_no_key(server, home, monkeypatch, capsys):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    before = len(server.model_calls)
    status, out = setup(monkeypatch, capsys,
                        "anthropic", server.base_url, "", "low",  # replies: Sonnet by default, low effort
                        "", "", "-")                               # compactions: same connection, Haiku
    assert status == 0, out
    assert out.count("... ok") == 2 and f"Saved {home / 'config.toml'}." in out
    calls = server.model_calls[before:]
    assert [c.model for c in calls] == ["claude-sonnet-5-5", "claude-haiku-5-5"]
    text = (home / "config.toml").read_text()
    assert KEY not in text and KEY not in out
    assert tomllib.loads(text) == {
        "reply": {"provider": "anthropic", "model": "claude-sonnet-5-5", "base_url": server.base_url,
                  "effort": "low"},
        "compaction": {"provider": "anthropic", "model": "claude-haiku-5-5", "base_url": server.base_url},
    }
    settings = load(env={"ANTHROPIC_API_KEY": KEY}, home=home)
    assert (settings.reply.model, settings.reply.effort, settings.compaction.model) == (
        "claude-sonnet-5-5", "low", "claude-haiku-5-5")


def test_a_local_chat_completions_server_is_checked_with_its_dummy_key(server, home, monkeypatch, capsys):
    before = len(server.model_calls)
    status, out = setup(monkeypatch, capsys,
                        "openai-chat", server.openai_base_url, KEY, "qwen3:8b", "-",  # replies
                        "y", "qwen3:1.7b", "none")                                   # compactions
    assert status == 0, out
    calls = server.model_calls[before:]
    assert [(c.api, c.model) for c in calls] == [("chat", "qwen3:8b"), ("chat", "qwen3:1.7b")]
    saved = tomllib.loads((home / "config.toml").read_text())
    assert saved["reply"] == {"provider": "openai-chat", "model": "qwen3:8b",
                              "base_url": server.openai_base_url, "dummy_key": KEY}
    assert saved["compaction"]["effort"] == "none" and saved["compaction"]["dummy_key"] == KEY


def test_a_failed_check_saves_nothing_unless_asked(server, home, monkeypatch, capsys):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-wrong-key")
    status, out = setup(monkeypatch, capsys, "anthropic", server.base_url, "", "-", "", "", "-", "n")
    assert status == 1
    assert out.count("... failed") == 2 and "Nothing was saved." in out
    assert "authentication_error" in out  # the server's own words, never the key
    assert "sk-wrong-key" not in out
    assert not (home / "config.toml").exists()


def test_wrong_answers_are_asked_again_and_other_settings_are_kept(server, home, monkeypatch, capsys):
    home.mkdir()
    (home / "config.toml").write_text('settle_timeout = 3\n[reply]\nprovider = "demo"\n')
    status, out = setup(monkeypatch, capsys, "gemini", "demo", "n", "demo")
    assert status == 0, out
    assert "one of: anthropic, openai, openai-chat, demo" in out
    saved = tomllib.loads((home / "config.toml").read_text())
    assert saved["settle_timeout"] == 3
    assert saved["reply"] == saved["compaction"] == {"provider": "demo", "model": "demo"}


def test_setup_stops_at_the_end_of_input_and_saves_nothing(home, monkeypatch, capsys):
    status, out = setup(monkeypatch, capsys, "anthropic")
    assert status == 1 and "nothing was saved" in out
    assert not (home / "config.toml").exists()


def test_setup_runs_as_a_command_with_piped_answers(server, home):
    env = {"PATH": "/usr/bin:/bin", "EVERCHAT_HOME": str(home), "OPENAI_API_KEY": KEY}
    answers = f"openai\n{server.openai_base_url}\n-\ngpt-test\nhigh\ny\ngpt-test-mini\n-\n"
    done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "setup"], input=answers,
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert KEY not in done.stdout + done.stderr
    saved = tomllib.loads((home / "config.toml").read_text())
    assert saved["reply"] == {"provider": "openai", "model": "gpt-test", "base_url": server.openai_base_url,
                              "effort": "high"}
    assert saved["compaction"]["model"] == "gpt-test-mini"
