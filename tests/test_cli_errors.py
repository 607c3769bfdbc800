"""Model errors reach the person of `everchat ask` as one line each, distinct by cause:
missing key, bad key, quota, model not found, a broken answer (protocol). (A call that
never answers is `ModelTimeout`, tested on the connection: its limit is minutes.)"""

from __future__ import annotations

import os

import pytest

from everchat.frontends.cli.main import main
from everchat.tools.fakemodel import FakeModelServer, GarbageEvent, ModelNotFound, QuotaExceeded

WHY = {
    "quota": ("QuotaExceeded: anthropic claude-sonnet-5-5: out of credit or quota; check the account's billing",
              QuotaExceeded()),
    "not found": ("ModelNotFound: anthropic claude-sonnet-5-5: model not found; check the model name in the config",
                  ModelNotFound()),
    "protocol": ("ProtocolError: anthropic claude-sonnet-5-5: the answer broke off or could not be read",
                 GarbageEvent()),
}


@pytest.fixture
def server():
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def keyed(monkeypatch, tmp_path, server):
    for name in list(os.environ):
        if name.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("EVERCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("EVERCHAT_REPLY_PROVIDER", "anthropic")
    monkeypatch.setenv("EVERCHAT_REPLY_BASE_URL", server.base_url)
    monkeypatch.setenv("EVERCHAT_COMPACTION_PROVIDER", "demo")
    return server


def ask(capsys) -> tuple[int, str]:
    status = main(["ask", "hello?"])
    return status, capsys.readouterr().err


@pytest.mark.parametrize("case", sorted(WHY))
def test_each_model_failure_is_its_own_clear_line(keyed, capsys, case):
    words, fault = WHY[case]
    keyed.rule(lambda request: fault)
    status, err = ask(capsys)
    assert status == 1
    assert f"everchat: the turn failed: {words}" in err


def test_a_missing_key_and_a_bad_key_say_which_variable(keyed, monkeypatch, capsys):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "not-the-key")
    status, err = ask(capsys)
    assert status == 1 and "everchat: the turn failed: BadKey: anthropic claude-sonnet-5-5: the key was refused; " \
                            "check ANTHROPIC_API_KEY" in err and "not-the-key" not in err
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    status, err = ask(capsys)
    assert status == 1 and "everchat: the turn failed: MissingKey: anthropic: ANTHROPIC_API_KEY is not set" in err
