"""`POST /api/settings` (docs/WEB.md, issue 10): the page saves the reply and summary models
and their efforts to config.toml the way `everchat setup` does (the rest of the file stays
as it was, keys never go in it); `/api/me` then reports the pending `saved_models`; every
refusal leaves the file byte for byte as it was (or absent). Then the Settings panel in a
real browser."""

from __future__ import annotations

import json

import pytest

from everchat.actors.settings import read_file, save_file
from everchat.actors.models import EFFORTS

from web_world import (SETTINGS_SAVED, config_bytes, config_path, me, post_settings, run,  # noqa: F401 (fixture)
                       web)

pytestmark = pytest.mark.timeout(180)

RESTART = SETTINGS_SAVED
KEPT = {"settle_timeout": 7.5, "tool_rounds": 12, "reply.provider": "openai-chat", "reply.model": "qwen3:8b",
        "reply.base_url": "http://localhost:11434/v1", "reply.dummy_key": "ollama", "reply.effort": "low",
        "compaction.provider": "demo"}
"""A config file as setup may have left it."""
API = {"connection": "api", "cli": None}
"""The connection the demo runs on (issue 13's subscription unset)."""


config, file_bytes, post = config_path, config_bytes, post_settings


def test_saving_writes_the_models_and_efforts_and_nothing_else(web):
    save_file(config(web), KEPT)
    before = read_file(config(web))

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            status, text = await post(web, client, {"reply_model": "claude-opus-9", "summary_model": "haiku-x",
                                                    "reply_effort": "high", "summary_effort": "minimal"})
            assert status == 200, text
            new = {"reply": "claude-opus-9", "summary": "haiku-x", "reply_effort": "high",
                   "summary_effort": "minimal", **API}
            assert json.loads(text) == {"saved": True, "restart": True, "models": new}
            after = read_file(config(web))
            assert after == dict(before, **{"reply.model": "claude-opus-9", "compaction.model": "haiku-x",
                                            "reply.effort": "high", "compaction.effort": "minimal"})
            answer = await me(web, client)
            assert answer["saved_models"] == new
            assert answer["models"]["reply"] == "demo" and answer["models"]["summary"] == "demo"  # still running
            assert answer["efforts"] == list(EFFORTS)

            # One field alone changes only its setting; an empty effort is the model's own default.
            status, text = await post(web, client, {"reply_effort": ""})
            assert status == 200, text
            assert json.loads(text)["models"] == dict(new, reply_effort=None)
            assert read_file(config(web)) == {k: v for k, v in after.items() if k != "reply.effort"}

    run(body())


def test_without_a_file_saving_makes_one_with_only_the_models(web):
    assert not config(web).exists()

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            assert "saved_models" not in await me(web, client)
            status, text = await post(web, client, {"reply_model": "gpt-9", "summary_effort": "max"})
            assert status == 200, text
            assert read_file(config(web)) == {"reply.model": "gpt-9", "compaction.effort": "max"}
            saved = (await me(web, client))["saved_models"]
            assert saved == {"reply": "gpt-9", "summary": "demo", "reply_effort": None, "summary_effort": "max", **API}

    run(body())


REFUSED = [
    ({"reply_model": ""}, 400, "reply_model is a model's name, not empty"),
    ({"summary_model": "   "}, 400, "summary_model is a model's name, not empty"),
    ({"reply_model": 5}, 400, "reply_model is a model's name, not empty"),
    ({"reply_model": None}, 400, "reply_model is a model's name, not empty"),
    ({"reply_model": "m" * 201}, 400, "reply_model is at most 200 characters"),
    ({"reply_model": "gpt\n[reply]"}, 400, "reply_model has a control character"),
    ({"summary_model": "a\x00b"}, 400, "summary_model has a control character"),
    ({"summary_model": "a\x7fb"}, 400, "summary_model has a control character"),
    ({"reply_model": " gpt-9"}, 400, "reply_model starts or ends with a space"),
    ({"reply_effort": "extreme"}, 400, "reply_effort is one of " + ", ".join(EFFORTS)
     + " (or empty for the model's own default)"),
    ({"summary_effort": "HIGH"}, 400, "summary_effort is one of " + ", ".join(EFFORTS)
     + " (or empty for the model's own default)"),
    ({"summary_effort": 3}, 400, "summary_effort is one of " + ", ".join(EFFORTS)
     + " (or empty for the model's own default)"),
    ({"reply_model": "gpt-9", "reply_base_url": "http://evil.example"}, 400,
     "no setting 'reply_base_url' here (known: reply_model, summary_model, reply_effort, summary_effort, connection, cli)"),
    ({"temperature": 1}, 400,
     "no setting 'temperature' here (known: reply_model, summary_model, reply_effort, summary_effort, connection, cli)"),
    ({}, 400, "nothing to save"),
    ([1, 2], 400, "the body is not a JSON object"),
    (b"{not json", 400, "the body is not JSON"),
    (json.dumps({"reply_model": "x" * (1 << 20)}), 413, "a request body is at most 1 MB"),
]
KEY_FIELDS = ["api_key", "ANTHROPIC_API_KEY", "reply_api_key", "openai_key"]


@pytest.mark.parametrize("with_file", [True, False], ids=["file", "no-file"])
def test_every_refusal_leaves_config_toml_as_it_was(web, with_file):
    if with_file:
        save_file(config(web), KEPT)
    before = file_bytes(web)

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            good = {"reply_model": "gpt-9"}
            for headers in ({}, {"Origin": "http://evil.example"}, {"Origin": "null"}):
                status, text = await post(web, client, good, headers)
                assert (status, json.loads(text)) == (403, {"error": "cross-site request refused"})
                assert file_bytes(web) == before
            for sent, code, error in REFUSED:
                status, text = await post(web, client, sent)
                assert (status, json.loads(text)) == (code, {"error": error}), sent
                assert file_bytes(web) == before, sent
            for name in KEY_FIELDS:
                secret = "sk-test-" + name
                status, text = await post(web, client, {"reply_model": "gpt-9", name: secret})
                assert (status, json.loads(text)) == (
                    400, {"error": "API keys stay in the environment, never in the config file"})
                assert secret not in text
                assert file_bytes(web) == before, name
            assert "saved_models" not in await me(web, client) or with_file
        async with web.client() as stranger:  # no session
            status, text = await post(web, stranger, good)
            assert (status, json.loads(text)) == (401, {"error": "no session"})
        assert file_bytes(web) == before

    run(body())


# -- the page ----------------------------------------------------------------------------


def test_the_settings_panel_saves_the_reply_model_and_shows_the_pending_change(tmp_path):
    from playwright.sync_api import expect, sync_playwright  # a dev dependency: missing is a failure, not a skip
    from page_world import CHROMIUM, CHROMIUM_ARGS, demo_settings, serve

    errors: list[str] = []

    def noted(message) -> None:  # the browser's own line for the 400 the test asks for is expected
        if message.type == "error" and not ("Failed to load resource" in message.text and "400" in message.text):
            errors.append(message.text)

    home = tmp_path / "home"
    with serve(demo_settings(home)) as served, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(30_000)
            page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
            page.on("console", noted)
            page.goto(served.link)
            page.get_by_role("tab", name="Settings").click()
            reply = page.get_by_label("Reply model", exact=True)
            expect(reply).to_have_value("demo", timeout=30_000)

            reply.fill("   ")  # refused by the server: its words show
            page.get_by_role("button", name="Save").click()
            expect(page.get_by_role("alert")).to_have_text("Not saved: reply_model is a model's name, not empty",
                                                         timeout=30_000)
            assert not (home / "config.toml").exists()

            reply.fill("claude-opus-9")
            page.get_by_role("tab", name="Chat").click()  # an unsaved edit survives a tab switch
            page.get_by_role("tab", name="Settings").click()
            expect(reply).to_have_value("claude-opus-9")
            reply.focus()
            page.keyboard.press("Tab")  # focus order: the model, then its effort
            expect(page.get_by_label("Reply reasoning effort")).to_be_focused()
            page.get_by_label("Reply reasoning effort").select_option("high")
            page.get_by_role("button", name="Save").click()
            status = page.locator("#models-saved")
            expect(status).to_contain_text(RESTART, timeout=30_000)
            expect(status).to_contain_text("replies from claude-opus-9 (high)")
            expect(status).to_contain_text("The demo models stay in use while no API key is set.")
            expect(page.locator("#models-error")).to_be_hidden()
            assert read_file(home / "config.toml") == {"reply.model": "claude-opus-9", "reply.effort": "high"}

            page.reload()  # the pending change is still shown, from /api/me
            page.get_by_role("tab", name="Settings").click()
            expect(page.locator("#models-saved")).to_contain_text(RESTART, timeout=30_000)
            expect(page.get_by_label("Reply model", exact=True)).to_have_value("claude-opus-9")
        finally:
            browser.close()
    assert errors == []
