"""The compactor workers build with the session's settings (R33's compaction model as the
person chose it: `--demo`, `--compaction-model` …), in the session's process and in a
process of their own, never with a fresh flag-less load that would pick a key from the
environment instead."""

from __future__ import annotations

import json

import pytest

from everchat.actors.compactor.actor import CompactorWorker, configured_summarizer
from everchat.actors.settings import load
from everchat.actors.tree import Budget
from everchat.actors.supervisor.actor import build_actor
from everchat.actors.turns.actor import SETTINGS_ENV, settings_flags


@pytest.fixture
def keyed_env(monkeypatch, tmp_path):
    """An Anthropic key in the environment: a flag-less load would choose Anthropic."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-never-sent")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("EVERCHAT_DEMO", raising=False)
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    monkeypatch.setenv("EVERCHAT_HOME", str(tmp_path))
    return tmp_path


def test_r33_a_worker_given_the_session_settings_uses_their_compaction_model(keyed_env):
    demo = load({"demo": True}, home=keyed_env)
    assert configured_summarizer(settings=demo).model == "demo"
    assert configured_summarizer().model != "demo"  # what the worker used before: the key's vendor


def test_r33_a_worker_in_its_own_process_reads_the_session_settings_the_supervisor_passed(keyed_env, monkeypatch):
    demo = load({"demo": True}, home=keyed_env)
    monkeypatch.setenv(SETTINGS_ENV, json.dumps(settings_flags(demo)))
    assert configured_summarizer().model == "demo"


def test_the_supervisor_hands_the_session_settings_to_every_worker(keyed_env):
    demo = load({"demo": True}, home=keyed_env)
    cls, args = build_actor("compactor.3", keyed_env / "chat", Budget(), "configured", demo)
    assert cls is CompactorWorker and CompactorWorker(*args).settings is demo
