"""R34 with hands (issue 11): one prompt a run, the device tools and the computers paragraph
in it or out of it for the whole run (`tools = "off"`), and the turn header naming the
computers joined now (R36)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from everchat.actors.settings import ConfigError, load
from everchat.actors.prompt import COMPUTERS, WEB, chat_prompt, turn_header


def _settings(monkeypatch, tmp_path, **flags):
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "EVERCHAT_CONFIG", "EVERCHAT_TOOLS", "EVERCHAT_SEARCH"):
        monkeypatch.delenv(name, raising=False)
    return load(flags, home=tmp_path)


def test_r34_tools_on_offers_the_device_tools_and_the_computers_paragraph(monkeypatch, tmp_path):
    prompt = chat_prompt(_settings(monkeypatch, tmp_path))
    assert [t.name for t in prompt.tools] == ["zoom", "date", "search", "fetch", "spawn", "tell", "shell", "read",
                                              "write", "edit"]
    assert COMPUTERS in prompt.system and WEB in prompt.system


def test_r34_tools_off_drops_the_device_tools_and_the_paragraph_and_keeps_the_agents(monkeypatch, tmp_path):
    settings = _settings(monkeypatch, tmp_path, tools="off")
    prompt = chat_prompt(settings)
    assert [t.name for t in prompt.tools] == ["zoom", "date", "search", "fetch", "spawn", "tell"]  # web stays
    assert COMPUTERS not in prompt.system and "# Computers" not in prompt.system and WEB in prompt.system


def test_search_off_drops_the_web_tools_and_their_paragraph_for_the_run(monkeypatch, tmp_path):
    prompt = chat_prompt(_settings(monkeypatch, tmp_path, search="off", tools="off"))
    assert [t.name for t in prompt.tools] == ["zoom", "date", "spawn", "tell"]
    assert "# The web" not in prompt.system
    monkeypatch.setenv("EVERCHAT_SEARCH", "maybe")
    with pytest.raises(ConfigError, match="EVERCHAT_SEARCH"):
        load(home=tmp_path)


def test_r34_the_setting_comes_from_the_environment_and_a_bad_value_is_refused(monkeypatch, tmp_path):
    _settings(monkeypatch, tmp_path)
    monkeypatch.setenv("EVERCHAT_TOOLS", "off")
    assert not load(home=tmp_path).devices
    monkeypatch.setenv("EVERCHAT_TOOLS", "maybe")
    with pytest.raises(ConfigError, match="EVERCHAT_TOOLS"):
        load(home=tmp_path)


def test_r34_a_run_builds_the_same_bytes_every_time(monkeypatch, tmp_path):
    settings = _settings(monkeypatch, tmp_path)
    assert chat_prompt(settings) == chat_prompt(settings)


def test_r36_the_header_names_the_computers_joined_now_and_only_this_one_when_none_joined():
    now = datetime(2026, 12, 3, 21, 0, tzinfo=timezone.utc)
    alone = turn_header(now, ["vm (this computer, the default)"])
    assert alone.splitlines()[-1] == "Computers joined now: vm (this computer, the default)"
    joined = turn_header(now, ["vm (this computer, the default)", "laptop"])
    assert joined.splitlines()[-1] == "Computers joined now: vm (this computer, the default), laptop"
    assert "Computers" not in turn_header(now, None)  # tools off: no computers at all
