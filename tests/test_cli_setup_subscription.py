"""`everchat setup` with a subscription (issue 13): `claudecode` or `codex` as the replies'
connection, no key asked for or read, compactions through the same CLI, each role checked
through `models.connect_cli` (a fake here), and config.toml written with `connection` and
`cli` (and the `--cli-*` flags given to setup)."""

from __future__ import annotations

import io
import sys
import tomllib

import pytest

from everchat.actors import models
from everchat.actors.settings import ENV, load
from everchat.actors.models import DemoConnection, ModelError
from everchat.frontends.cli.main import main

KEY = "sk-never-read-by-a-subscription"


class FakeCli:
    """Stands for `models.connect_cli`: records each call's arguments; `fail` makes the
    check's call fail as a CLI that is not logged in would."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.fail = fail

    def __call__(self, cli: str, **kwargs):
        self.calls.append((cli, kwargs))
        if self.fail:
            raise ModelError("not logged in: run `claude` once and log in", provider=cli)
        return DemoConnection()


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "EVERCHAT_CONFIG", "EVERCHAT_DEMO", *ENV.values()):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EVERCHAT_HOME", str(home))
    return home


@pytest.fixture
def fake_cli(monkeypatch) -> FakeCli:
    fake = FakeCli()
    monkeypatch.setattr(models, "connect_cli", fake, raising=False)
    return fake


def setup(monkeypatch, capsys, *answers: str, flags: tuple[str, ...] = ()) -> tuple[int, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(a + "\n" for a in answers)))
    status = main(["setup", *flags])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_setup_saves_a_claude_code_subscription_without_any_key(home, monkeypatch, capsys, fake_cli):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    status, out = setup(monkeypatch, capsys,
                        "claudecode", "-", "-",  # replies: the CLI's own model and effort
                        "haiku", "low")          # compactions: through the same CLI, a model named
    assert status == 0, out
    assert "Compactions go through the same subscription (claudecode)." in out
    assert "Checking the reply model, subscription (claudecode) ... ok" in out
    assert "Checking the compaction model, haiku via subscription (claudecode) ... ok" in out
    assert tomllib.loads((home / "config.toml").read_text()) == {
        "connection": "subscription", "cli": "claudecode", "compaction": {"model": "haiku", "effort": "low"}}
    common = {"executable": None, "timeout": 300.0, "concurrency": 1, "state_dir": home}
    assert fake_cli.calls == [("claudecode", dict(common, model=None, effort=None)),
                              ("claudecode", dict(common, model="haiku", effort="low"))]
    assert KEY not in out and KEY not in (home / "config.toml").read_text()
    settings = load(home=home)
    assert settings.connection == "subscription" and settings.reply.api_key is None
    assert (settings.reply.label, settings.compaction.label) == (
        "subscription (claudecode)", "haiku via subscription (claudecode)")


def test_setup_takes_the_connection_and_cli_flags_as_its_defaults_and_saves_the_cli_flags(
        home, monkeypatch, capsys, fake_cli):
    home.mkdir()
    (home / "config.toml").write_text('settle_timeout = 3\n[reply]\nprovider = "anthropic"\nmodel = "claude-x"\n')
    flags = ("--connection", "subscription", "--cli", "codex", "--cli-timeout", "600", "--cli-concurrency", "3",
             "--cli-executable", "/opt/codex/bin/codex")
    status, out = setup(monkeypatch, capsys, "", "gpt-5.5", "high", "", "", flags=flags)
    assert status == 0, out
    assert "Connection for reply [codex]" in out
    assert tomllib.loads((home / "config.toml").read_text()) == {
        "settle_timeout": 3, "connection": "subscription", "cli": "codex", "cli_executable": "/opt/codex/bin/codex",
        "cli_timeout": 600.0, "cli_concurrency": 3, "reply": {"model": "gpt-5.5", "effort": "high"}}
    common = {"executable": "/opt/codex/bin/codex", "timeout": 600.0, "concurrency": 3, "state_dir": home}
    assert fake_cli.calls == [("codex", dict(common, model="gpt-5.5", effort="high")),
                              ("codex", dict(common, model=None, effort=None))]


def test_a_subscription_already_saved_is_offered_again_and_api_replaces_it(home, monkeypatch, capsys, fake_cli):
    home.mkdir()
    (home / "config.toml").write_text('connection = "subscription"\ncli = "codex"\ncli_timeout = 60\n'
                                      '[reply]\nmodel = "gpt-5.5"\n')
    status, out = setup(monkeypatch, capsys, "", "", "", "", "")  # every default kept
    assert status == 0, out
    assert "Connection for reply [codex]" in out and "Model for reply (- for the CLI's own default) [gpt-5.5]" in out
    assert tomllib.loads((home / "config.toml").read_text())["reply"] == {"model": "gpt-5.5"}

    status, out = setup(monkeypatch, capsys, "demo", "n", "demo")
    assert status == 0, out
    saved = tomllib.loads((home / "config.toml").read_text())
    assert (saved["connection"], saved["cli"], saved["cli_timeout"]) == ("api", "codex", 60)
    assert saved["reply"] == saved["compaction"] == {"provider": "demo", "model": "demo"}
    assert load(home=home).connection == "api"


def test_a_failed_subscription_check_says_why_and_saves_nothing_unless_asked(home, monkeypatch, capsys):
    monkeypatch.setattr(models, "connect_cli", FakeCli(fail=True), raising=False)
    status, out = setup(monkeypatch, capsys, "claudecode", "-", "-", "-", "-", "n")
    assert status == 1
    assert out.count("... failed") == 2 and "claudecode: not logged in: run `claude` once and log in" in out
    assert "Nothing was saved." in out and not (home / "config.toml").exists()


def test_compactions_cannot_take_a_subscription_apart_from_the_replies(home, monkeypatch, capsys):
    status, out = setup(monkeypatch, capsys, "demo", "n", "codex", "demo")
    assert status == 0, out
    assert "one of: anthropic, openai, openai-chat, demo\n" in out  # asked again: no CLI for compactions alone
    assert tomllib.loads((home / "config.toml").read_text())["compaction"] == {"provider": "demo", "model": "demo"}
