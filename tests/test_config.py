"""Settings: flags win over the environment, which wins over the file, which wins over the
defaults; keys only from the environment, never shown (R33's separate compaction model)."""

from __future__ import annotations

import argparse

import pytest

from everchat.actors.settings import ENV, ConfigError, add_arguments, load
from everchat.actors.models import MissingKey

KEY = "sk-ant-secret-123"


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def write(home, text: str):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)
    return home / "config.toml"


def test_without_any_key_both_models_are_the_offline_demo(home):
    settings = load(env={}, home=home)
    assert (settings.reply.provider, settings.compaction.provider) == ("demo", "demo")
    assert (settings.settle_timeout, settings.tool_rounds, settings.compaction_jobs) == (20.0, 50, 8)
    assert settings.reply.connect().provider == "demo"


def test_r33_with_an_anthropic_key_replies_come_from_sonnet_and_compactions_from_haiku(home):
    settings = load(env={"ANTHROPIC_API_KEY": KEY}, home=home)
    assert (settings.reply.provider, settings.reply.model) == ("anthropic", "claude-sonnet-5-5")
    assert (settings.compaction.provider, settings.compaction.model) == ("anthropic", "claude-haiku-5-5")
    assert settings.reply.api_key == KEY


def test_with_only_an_openai_key_both_use_openai(home):
    settings = load(env={"OPENAI_API_KEY": "sk-o"}, home=home)
    assert (settings.reply.provider, settings.reply.model) == ("openai", "gpt-5.5")
    assert (settings.compaction.provider, settings.compaction.model) == ("openai", "gpt-5.4-mini")


def test_flags_win_over_env_which_wins_over_the_file_which_wins_over_defaults(home):
    write(home, 'settle_timeout = 5\ntool_rounds = 7\n[reply]\nmodel = "claude-from-file"\neffort = "low"\n')
    env = {"ANTHROPIC_API_KEY": KEY, "EVERCHAT_REPLY_MODEL": "claude-from-env", "EVERCHAT_TOOL_ROUNDS": "9"}
    settings = load({"reply.model": "claude-from-flag"}, env=env, home=home)
    assert settings.reply.model == "claude-from-flag" and settings.reply.effort == "low"
    assert (settings.tool_rounds, settings.settle_timeout, settings.compaction_jobs) == (9, 5.0, 8)
    assert settings.sources["reply.model"] == "flag" and settings.sources["tool_rounds"] == "env"
    assert settings.sources["settle_timeout"] == "file" and settings.sources["compaction_jobs"] == "default"
    assert load(env=env, home=home).reply.model == "claude-from-env"
    assert load(env={"ANTHROPIC_API_KEY": KEY}, home=home).reply.model == "claude-from-file"


def test_r33_the_compaction_model_and_effort_are_set_apart_from_the_replys(home):
    write(home, '[reply]\neffort = "high"\n[compaction]\nmodel = "claude-haiku-4-5"\neffort = "none"\n')
    settings = load(env={"ANTHROPIC_API_KEY": KEY}, home=home)
    assert (settings.reply.model, settings.reply.effort) == ("claude-sonnet-5-5", "high")
    assert (settings.compaction.model, settings.compaction.effort) == ("claude-haiku-4-5", "none")


def test_every_setting_has_its_environment_variable(home):
    env = {ENV["compaction.provider"]: "openai-chat", ENV["compaction.model"]: "qwen3:8b",
           ENV["compaction.base_url"]: "http://localhost:11434/v1", ENV["compaction.dummy_key"]: "ollama",
           ENV["compaction_jobs"]: "3", ENV["settle_timeout"]: "2.5", ENV["reply.effort"]: "max"}
    settings = load(env=env, home=home)
    assert ENV["reply.model"] == "EVERCHAT_REPLY_MODEL" and ENV["settle_timeout"] == "EVERCHAT_SETTLE_TIMEOUT"
    assert (settings.compaction.provider, settings.compaction.model) == ("openai-chat", "qwen3:8b")
    assert settings.compaction.base_url == "http://localhost:11434/v1" and settings.compaction.dummy_key == "ollama"
    assert (settings.compaction_jobs, settings.settle_timeout, settings.reply.effort) == (3, 2.5, "max")


def test_a_local_server_for_replies_serves_compactions_too_unless_anthropic_has_a_key(home):
    write(home, '[reply]\nprovider = "openai-chat"\nmodel = "llama3"\nbase_url = "http://127.0.0.1:8080/v1"\n'
                'dummy_key = "none"\n')
    settings = load(env={}, home=home)
    assert (settings.compaction.provider, settings.compaction.model) == ("openai-chat", "llama3")
    assert settings.compaction.base_url == "http://127.0.0.1:8080/v1" and settings.compaction.dummy_key == "none"
    assert load(env={"ANTHROPIC_API_KEY": KEY}, home=home).compaction.model == "claude-haiku-5-5"


def test_a_chat_completions_server_needs_its_model_named(home):
    with pytest.raises(ConfigError, match="reply.model is needed for openai-chat"):
        load({"reply.provider": "openai-chat"}, env={}, home=home)


def test_a_configured_provider_without_its_key_fails_and_never_falls_back_to_the_demo(home):
    settings = load({"reply.provider": "anthropic"}, env={}, home=home)
    assert settings.reply.provider == "anthropic"
    with pytest.raises(MissingKey, match="ANTHROPIC_API_KEY"):
        settings.reply.connect()
    assert load({"reply.model": "claude-opus-4-8"}, env={}, home=home).reply.provider == "anthropic"


def test_demo_forces_the_offline_models(home):
    settings = load({"demo": True}, env={"ANTHROPIC_API_KEY": KEY}, home=home)
    assert (settings.reply.provider, settings.compaction.provider) == ("demo", "demo")
    assert load(env={"EVERCHAT_DEMO": "1", "OPENAI_API_KEY": "x"}, home=home).reply.provider == "demo"


def test_a_key_never_shows_in_a_repr_or_a_description(home):
    settings = load(env={"ANTHROPIC_API_KEY": KEY}, home=home)
    for text in (repr(settings), repr(settings.reply), str(settings.describe()), str(settings)):
        assert KEY not in text
    assert "key=set" in repr(settings.reply) and settings.describe()["reply"]["key"] == "set"


@pytest.mark.parametrize("text,message", [
    ('[reply]\napi_key = "sk-1"\n', "API keys stay in the environment"),
    ('anthropic_api_key = "sk-1"\n', "API keys stay in the environment"),
    ('[reply]\nmodle = "x"\n', "has no setting 'modle'"),
    ('colour = "blue"\n', "no setting 'colour'"),
    ('compaction_jobs = 9\n', "compaction_jobs .* must be 1 to 8"),
    ('settle_timeout = "soon"\n', "settle_timeout .* must be a number"),
    ('tool_rounds = 0\n', "tool_rounds .* must be at least 1"),
    ('[reply]\neffort = "huge"\n', "reply.effort .* is one of"),
    ('[compaction]\nprovider = "acme"\n', "compaction.provider .* is one of"),
    ('[reply\n', "not valid TOML"),
])
def test_a_bad_config_file_is_a_clear_error_naming_the_file(home, text, message):
    path = write(home, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load(env={}, home=home)
    assert str(path) in str(caught.value) or "must" in str(caught.value)


def test_the_config_file_is_found_through_everchat_home_everchat_config_or_the_flag(tmp_path):
    home = tmp_path / "h"
    write(home, "tool_rounds = 11\n")
    other = tmp_path / "other.toml"
    other.write_text("tool_rounds = 12\n")
    assert load(env={"EVERCHAT_HOME": str(home)}).tool_rounds == 11
    assert load(env={"EVERCHAT_HOME": str(home), "EVERCHAT_CONFIG": str(other)}).tool_rounds == 12
    assert load({"config": str(other)}, env={"EVERCHAT_HOME": str(home)}).tool_rounds == 12
    with pytest.raises(ConfigError, match="does not exist"):
        load({"config": str(tmp_path / "missing.toml")}, env={})


def test_the_instructions_file_is_read_beside_the_config_file(home):
    write(home, 'instructions = "mine.md"\n')
    (home / "mine.md").write_text("Answer in French.\n")
    settings = load(env={}, home=home)
    assert settings.instructions_file == home / "mine.md" and settings.instructions() == "Answer in French.\n"
    assert load(env={}, home=home / "none").instructions() == ""  # no default file: no instructions
    missing = load({"instructions": str(home / "gone.md")}, env={}, home=home)
    with pytest.raises(ConfigError, match="does not exist"):
        missing.instructions()


def test_the_flags_parse_into_settings(home):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = parser.parse_args(["--reply-provider", "openai", "--reply-model", "gpt-x", "--compaction-effort", "low",
                               "--settle-timeout", "3", "--compaction-jobs", "2"])
    settings = load(flags, env={"OPENAI_API_KEY": "sk-o"}, home=home)
    assert (settings.reply.provider, settings.reply.model, settings.compaction.effort) == ("openai", "gpt-x", "low")
    assert (settings.settle_timeout, settings.compaction_jobs) == (3.0, 2)
    assert load(parser.parse_args([]), env={}, home=home).reply.provider == "demo"
