"""Issue 13's subscription connection in the settings: `connection = "subscription"` with
`cli`, `cli_executable`, `cli_timeout` and `cli_concurrency`, resolved like every other
setting (flag > env > file > default); every reply, agent and compaction call then goes
through `models.connect_cli` (a fake here: the connection itself is not this module's),
no API key is read, and a model name is optional."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from everchat.actors import models
from everchat.actors.settings import ENV, ConfigError, add_arguments, load, read_file, save_file
from everchat.actors.turns.calls import SETTINGS_ENV, configured_settings, settings_flags
from everchat.actors.models import DemoConnection, ModelError

KEY = "sk-ant-secret-subscription-test"


class FakeCli:
    """Stands for `models.connect_cli`: records each call's arguments, answers as the demo."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, cli: str, **kwargs) -> DemoConnection:
        self.calls.append((cli, kwargs))
        return DemoConnection()


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def fake_cli(monkeypatch) -> FakeCli:
    fake = FakeCli()
    monkeypatch.setattr(models, "connect_cli", fake, raising=False)
    return fake


def write(home, text: str):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)
    return home / "config.toml"


def test_the_default_connection_is_the_api_as_before(home):
    settings = load(env={"ANTHROPIC_API_KEY": KEY}, home=home)
    assert settings.connection == "api" and settings.reply.connection == settings.compaction.connection == "api"
    assert (settings.reply.provider, settings.reply.api_key) == ("anthropic", KEY)
    assert settings.sources["connection"] == "default" and settings.sources["cli"] == "default"
    assert settings.reply.label == "claude-sonnet-5-5"


def test_the_subscription_settings_come_from_flags_then_env_then_the_file(home):
    write(home, 'connection = "subscription"\ncli = "codex"\ncli_timeout = 120\ncli_concurrency = 4\n'
                'cli_executable = "/opt/codex/bin/codex"\n')
    from_file = load(env={}, home=home)
    assert from_file.connection == "subscription"
    assert (from_file.reply.cli, from_file.reply.cli_timeout, from_file.reply.cli_concurrency) == ("codex", 120.0, 4)
    assert from_file.reply.cli_executable == "/opt/codex/bin/codex"
    assert from_file.sources["cli"] == "file" and from_file.sources["cli_timeout"] == "file"

    env = {ENV["cli"]: "claudecode", ENV["cli_concurrency"]: "2", ENV["cli_timeout"]: "30.5"}
    assert ENV["cli"] == "EVERCHAT_CLI" and ENV["cli_concurrency"] == "EVERCHAT_CLI_CONCURRENCY"
    from_env = load(env=env, home=home)
    assert (from_env.reply.cli, from_env.reply.cli_concurrency, from_env.reply.cli_timeout) == ("claudecode", 2, 30.5)
    assert from_env.sources["cli"] == "env" and from_env.sources["connection"] == "file"

    from_flags = load({"cli": "codex", "cli_concurrency": 8, "connection": "api"}, env=env, home=home)
    assert from_flags.connection == "api" and from_flags.sources["connection"] == "flag"
    assert load({"cli_concurrency": 8}, env=env, home=home).compaction.cli_concurrency == 8


def test_both_roles_go_through_the_cli_with_their_own_model_and_effort(home):
    write(home, 'connection = "subscription"\ncli = "claudecode"\n[reply]\nmodel = "opus"\neffort = "high"\n'
                '[compaction]\nmodel = "haiku"\n')
    settings = load(env={}, home=home)
    assert (settings.reply.provider, settings.reply.model, settings.reply.effort) == ("claudecode", "opus", "high")
    assert (settings.compaction.provider, settings.compaction.model) == ("claudecode", "haiku")
    assert settings.compaction.connection == "subscription" and settings.compaction.state_dir == home


def test_without_a_model_the_cli_uses_its_own_default(home):
    settings = load({"connection": "subscription", "cli": "codex"}, env={}, home=home)
    assert settings.reply.model == settings.compaction.model == ""
    assert settings.reply.label == "subscription (codex)"
    assert load({"connection": "subscription", "cli": "codex", "reply.model": "gpt-5.5"}, env={},
                home=home).reply.label == "gpt-5.5 via subscription (codex)"


def test_a_subscription_reads_no_key_and_ignores_the_api_providers(home):
    write(home, '[reply]\nprovider = "anthropic"\nbase_url = "https://api.example"\n'
                '[compaction]\nprovider = "openai-chat"\nmodel = "qwen3:8b"\ndummy_key = "ollama"\n')
    env = {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY, ENV["connection"]: "subscription", ENV["cli"]: "claudecode"}
    settings = load(env=env, home=home)
    for role in (settings.reply, settings.compaction):
        assert role.api_key is None and role.base_url is None and role.dummy_key is None
        assert role.provider == "claudecode" and role.key_variable is None
    assert settings.compaction.model == "qwen3:8b"  # a model named is passed on as it is


def test_a_subscription_without_any_key_is_neither_the_demo_nor_a_missing_key(home, fake_cli):
    settings = load({"connection": "subscription", "cli": "claudecode"}, env={}, home=home)
    assert settings.reply.provider == "claudecode"
    assert settings.reply.connect().provider == "demo"  # the fake's connection, not MissingKey
    assert fake_cli.calls == [("claudecode", {"executable": None, "model": None, "timeout": 300.0,
                                              "concurrency": 1, "effort": None, "state_dir": home})]


def test_connect_passes_every_cli_setting(home, fake_cli):
    flags = {"connection": "subscription", "cli": "codex", "cli_executable": "/usr/local/bin/codex",
             "cli_timeout": 45, "cli_concurrency": 3, "reply.model": "gpt-5.5", "reply.effort": "low",
             "compaction.effort": "minimal"}
    settings = load(flags, env={}, home=home)
    settings.reply.connect(max_retries=0)
    settings.compaction.connect()
    common = {"executable": "/usr/local/bin/codex", "timeout": 45.0, "concurrency": 3, "state_dir": home}
    assert fake_cli.calls == [("codex", dict(common, model="gpt-5.5", effort="low")),
                              ("codex", dict(common, model=None, effort="minimal"))]


def test_without_connect_cli_a_subscription_fails_with_a_clear_model_error(home, monkeypatch):
    monkeypatch.delattr(models, "connect_cli", raising=False)
    settings = load({"connection": "subscription", "cli": "claudecode"}, env={}, home=home)
    with pytest.raises(ModelError, match="no subscription connection"):
        settings.compaction.connect()


def test_demo_wins_over_a_subscription(home):
    write(home, 'connection = "subscription"\ncli = "claudecode"\n')
    settings = load({"demo": True}, env={}, home=home)
    assert (settings.reply.provider, settings.connection) == ("demo", "api")


def test_the_repr_and_description_say_subscription_and_never_a_key(home):
    env = {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY}
    settings = load({"connection": "subscription", "cli": "claudecode", "reply.model": "opus"}, env=env, home=home)
    texts = (repr(settings), repr(settings.reply), repr(settings.compaction), str(settings.describe()))
    for text in texts:
        assert KEY not in text and "subscription (claudecode)" in text
    assert repr(settings.compaction) == "ModelSettings(subscription (claudecode), timeout=300, concurrency=1)"
    reply = settings.describe()["reply"]
    assert (reply["connection"], reply["cli"], reply["key"], reply["model"]) == (
        "subscription", "claudecode", "none needed", "opus")
    assert settings.describe()["connection"] == "subscription"


@pytest.mark.parametrize("text,message", [
    ('connection = "subscription"\n', 'connection = subscription .* needs its CLI: --cli claudecode|codex'),
    ('connection = "subscriptions"\n', "connection .* is one of api, subscription, not 'subscriptions'"),
    ('cli = "gemini"\n', "cli .* is one of claudecode, codex, not 'gemini'"),
    ('connection = "subscription"\ncli = "claude"\n', "cli .* is one of claudecode, codex, not 'claude'"),
    ('cli_concurrency = 0\n', "cli_concurrency .* must be 1 to 8, not 0"),
    ('cli_concurrency = 9\n', "cli_concurrency .* must be 1 to 8, not 9"),
    ('cli_concurrency = 2.5\n', "cli_concurrency .* must be a whole number"),
    ('cli_timeout = 0\n', "cli_timeout .* must be more than 0 seconds, not 0"),
    ('cli_timeout = -5\n', "cli_timeout .* must be more than 0 seconds, not -5"),
    ('cli_timeout = "long"\n', "cli_timeout .* must be a number, not 'long'"),
    ('cli_timeout = nan\n', "cli_timeout .* must be a number, not nan"),
    ('cli_timeout = inf\n', "cli_timeout .* must be a number, not inf"),
    ('cli_executable = 5\n', "cli_executable .* is a path"),
])
def test_a_bad_subscription_setting_is_a_clear_error_naming_the_file(home, text, message):
    path = write(home, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load(env={}, home=home)
    assert str(path) in str(caught.value)


def test_a_timeout_that_is_not_a_finite_number_is_refused_from_the_environment_too(home):
    with pytest.raises(ConfigError, match="cli_timeout .*EVERCHAT_CLI_TIMEOUT.* must be a number, not 'nan'"):
        load(env={ENV["cli_timeout"]: "nan"}, home=home)


def test_a_relative_cli_executable_is_made_absolute_where_it_was_said(home, tmp_path, monkeypatch):
    """Each CLI run starts in a folder of its own, where a relative path names nothing: the
    file's path is taken from the file's folder, a flag's from the folder the command runs
    in; a bare name stays a name for PATH."""
    write(home, 'cli_executable = "bin/claude"\n')
    assert load(env={}, home=home).reply.cli_executable == str(home / "bin" / "claude")
    monkeypatch.chdir(tmp_path)
    assert load({"cli_executable": "./tools/codex"}, env={}, home=home).reply.cli_executable == \
        str(tmp_path / "tools" / "codex")
    assert load({"cli_executable": "~/codex"}, env={}, home=home).reply.cli_executable == \
        str(Path("~/codex").expanduser())
    assert load({"cli_executable": "codex"}, env={}, home=home).reply.cli_executable == "codex"


def test_a_bad_flag_or_variable_names_itself(home):
    with pytest.raises(ConfigError, match=r"cli_concurrency \(flag --cli-concurrency\) must be 1 to 8, not 9"):
        load({"cli_concurrency": 9}, env={}, home=home)
    with pytest.raises(ConfigError, match=r"connection = subscription \(EVERCHAT_CONNECTION\) needs its CLI"):
        load(env={"EVERCHAT_CONNECTION": "subscription"}, home=home)


def test_the_flags_parse_into_subscription_settings(home):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = parser.parse_args(["--connection", "subscription", "--cli", "codex", "--cli-executable", "/bin/codex",
                               "--cli-timeout", "12.5", "--cli-concurrency", "5"])
    settings = load(flags, env={}, home=home)
    assert (settings.connection, settings.reply.cli, settings.reply.cli_executable) == (
        "subscription", "codex", "/bin/codex")
    assert (settings.reply.cli_timeout, settings.compaction.cli_concurrency) == (12.5, 5)
    with pytest.raises(SystemExit):
        parser.parse_args(["--cli", "gemini"])


def test_the_config_file_keeps_the_subscription_settings(home):
    values = {"connection": "subscription", "cli": "codex", "cli_executable": "/opt/codex", "cli_timeout": 90,
              "cli_concurrency": 2, "reply.model": "gpt-5.5"}
    save_file(home / "config.toml", values)
    assert read_file(home / "config.toml") == values
    assert load(env={}, home=home).reply.label == "gpt-5.5 via subscription (codex)"


# -- a process of its own (turn runner, agents, compactors) reloads the same settings ----------


def reloaded(settings, monkeypatch):
    """What `configured_settings` gives a process of its own started with the session's flags."""
    monkeypatch.setenv(SETTINGS_ENV, json.dumps(settings_flags(settings)))
    return configured_settings()


@pytest.fixture
def child_env(monkeypatch, home):
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "EVERCHAT_DEMO", "EVERCHAT_CONFIG", *ENV.values()):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EVERCHAT_HOME", str(home))
    return monkeypatch


@pytest.mark.parametrize("flags", [
    {"connection": "subscription", "cli": "claudecode"},
    {"connection": "subscription", "cli": "codex", "cli_executable": "/opt/codex", "cli_timeout": 12.5,
     "cli_concurrency": 8, "reply.model": "gpt-5.5", "reply.effort": "high", "compaction.model": "gpt-5.4-mini"},
], ids=["defaults", "everything"])
def test_settings_flags_give_a_process_of_its_own_the_same_subscription(child_env, home, flags):
    settings = load(flags, home=home)
    again = reloaded(settings, child_env)
    assert again == settings and again.reply.state_dir == home
    assert repr(again) == repr(settings)


def test_a_process_of_its_own_keeps_the_api_though_the_file_says_subscription(child_env, home):
    write(home, 'connection = "subscription"\ncli = "codex"\n')
    demo = load({"demo": True}, home=home)
    assert reloaded(demo, child_env).reply.provider == "demo"
    api = load({"connection": "api", "reply.provider": "openai-chat", "reply.model": "qwen3:8b",
                "reply.base_url": "http://127.0.0.1:9/v1"}, home=home)
    again = reloaded(api, child_env)
    assert again.connection == "api" and again == api


def test_a_compactor_in_its_own_process_connects_through_the_cli(child_env, home, fake_cli):
    from everchat.actors.compactor.actor import configured_summarizer

    settings = load({"connection": "subscription", "cli": "claudecode", "compaction.model": "haiku",
                     "cli_concurrency": 2}, home=home)
    child_env.setenv(SETTINGS_ENV, json.dumps(settings_flags(settings)))
    summarizer = configured_summarizer()  # settings=None: the session's, from the environment
    assert summarizer.model == "haiku"
    assert fake_cli.calls == [("claudecode", {"executable": None, "model": "haiku", "timeout": 300.0,
                                              "concurrency": 2, "effort": None, "state_dir": home})]


# -- the command line -------------------------------------------------------------------------


def test_ask_with_the_subscription_flags_reaches_connect_cli_for_replies_and_compactions(tmp_path, monkeypatch,
                                                                                        fake_cli, capsys):
    from cli_world import clean_home

    from everchat.frontends.cli.main import main

    clean_home(tmp_path, monkeypatch)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)  # never read under a subscription
    status = main(["--connection", "subscription", "--cli", "claudecode", "--cli-timeout", "60",
                   "--cli-concurrency", "2", "ask", "hi", "--reply-model", "opus", "--compaction-model", "haiku",
                   "--reply-effort", "high"])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert out.out.strip()  # the fake's (the demo's) reply
    home = tmp_path / "home"
    common = {"executable": None, "timeout": 60.0, "concurrency": 2, "state_dir": home}
    reply = ("claudecode", dict(common, model="opus", effort="high"))
    compaction = ("claudecode", dict(common, model="haiku", effort=None))
    assert reply in fake_cli.calls and compaction in fake_cli.calls
    assert all(call in (reply, compaction) for call in fake_cli.calls)  # agents: the reply's
    assert KEY not in out.out + out.err


def test_a_bad_subscription_flag_is_a_usage_error_before_anything_starts(tmp_path, monkeypatch, fake_cli, capsys):
    from cli_world import clean_home

    from everchat.frontends.cli.main import main

    clean_home(tmp_path, monkeypatch)
    assert main(["--connection", "subscription", "ask", "hi"]) == 2
    assert "needs its CLI: --cli claudecode|codex" in capsys.readouterr().err
    assert main(["--connection", "subscription", "--cli", "codex", "--cli-concurrency", "9", "ask", "hi"]) == 2
    assert "cli_concurrency (flag --cli-concurrency) must be 1 to 8, not 9" in capsys.readouterr().err
    assert fake_cli.calls == [] and not (tmp_path / "home" / "chat").exists()


def test_every_actor_in_its_own_process_connects_through_the_cli_with_the_sessions_settings(tmp_path):
    """`--processes`: the turn runner and the compactors reload the settings from the flags
    the supervisor hands them, and each connects through `connect_cli` (a fake in every
    process, tests/fake_cli_site) with the CLI's settings; no key is read, none is the demo."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    site = Path(__file__).resolve().parent / "fake_cli_site"
    calls, chat = tmp_path / "calls.jsonl", tmp_path / "chat"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    env.update(EVERCHAT_HOME=str(tmp_path / "home"), EVERCHAT_TEST_CLI_CALLS=str(calls), ANTHROPIC_API_KEY=KEY,
               PYTHONPATH=os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")])))
    long = "The launch checklist for the amber-42 probe: " + "verify the seals, " * 60
    done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "--processes", "--connection",
                           "subscription", "--cli", "codex", "--cli-executable", "/opt/codex", "--cli-timeout", "42",
                           "--cli-concurrency", "3", "--reply-model", "gpt-5.5", "ask", long, "--data-dir", str(chat)],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "amber-42" in done.stdout
    rows = [json.loads(line) for line in calls.read_text().splitlines()]
    common = {"cli": "codex", "executable": "/opt/codex", "timeout": 42.0, "concurrency": 3, "effort": None,
              "state_dir": str(tmp_path / "home")}
    assert all({k: v for k, v in row.items() if k not in ("pid", "model")} == common for row in rows), rows
    assert {row["model"] for row in rows} == {"gpt-5.5", None}  # the reply's model, the compactions' default
    assert len({row["pid"] for row in rows}) >= 3  # the session's check, the turn runner, the workers
    assert KEY not in done.stdout + done.stderr
