"""The page's Settings and issue 13's subscription: `POST /api/settings` saves `connection`
(api or subscription) and `cli` (claudecode or codex) to config.toml beside the models, with
the same protections (a session, the same origin, the file untouched by any refusal);
`/api/me` says which connection runs and which is saved. Then the selects in a real browser."""

from __future__ import annotations

import json

import pytest

from everchat.actors import models
from everchat.actors.settings import load, read_file, save_file
from everchat.actors.models import DemoConnection

from web_world import (SETTINGS_SAVED, config_bytes, config_path, me, post_settings, run,  # noqa: F401 (fixture)
                       served, web)

pytestmark = pytest.mark.timeout(180)

RESTART = SETTINGS_SAVED


config, file_bytes = config_path, config_bytes


async def post(web, client, body, headers=None):
    status, text = await post_settings(web, client, body, headers)
    return status, json.loads(text)


def test_saving_a_subscription_writes_connection_and_cli_and_keeps_the_rest(web):
    save_file(config(web), {"settle_timeout": 7.5, "reply.provider": "anthropic", "reply.effort": "low"})

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            running = (await me(web, client))["models"]
            assert (running["connection"], running["cli"]) == ("api", None)

            status, answer = await post(web, client, {"connection": "subscription", "cli": "codex"})
            assert status == 200, answer
            pending = {"reply": "", "summary": "", "reply_effort": "low", "summary_effort": None,
                       "connection": "subscription", "cli": "codex"}  # "": the CLI's own default model
            assert answer == {"saved": True, "restart": True, "models": pending}
            assert read_file(config(web)) == {"settle_timeout": 7.5, "reply.provider": "anthropic",
                                              "reply.effort": "low", "connection": "subscription", "cli": "codex"}
            assert (await me(web, client))["saved_models"] == pending
            after = load(env={}, home=web.home)  # what the next start reads
            assert after.connection == "subscription" and after.reply.label == "subscription (codex)"

            status, answer = await post(web, client, {"cli": "claudecode", "reply_model": "opus"})
            assert status == 200, answer
            assert answer["models"] == dict(pending, cli="claudecode", reply="opus")

            status, answer = await post(web, client, {"connection": "api"})  # back: the CLI stays, unused
            assert status == 200, answer
            assert answer["models"]["connection"] == "api" and answer["models"]["cli"] is None
            assert read_file(config(web))["cli"] == "claudecode"
            assert load(env={}, home=web.home).connection == "api"

    run(body())


def test_an_emptied_model_goes_back_to_the_clis_own_default_under_a_subscription_only(web):
    """The model field's placeholder says "the CLI's default": emptying it saves no model
    (the API model a setup had saved would otherwise go to the CLI, which knows no such
    name); under the API an empty model is still refused, the file untouched."""
    save_file(config(web), {"connection": "subscription", "cli": "codex", "reply.model": "claude-sonnet-5-5"})

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            status, answer = await post(web, client, {"reply_model": ""})
            assert status == 200, answer
            assert answer["models"]["reply"] == "" and answer["models"]["connection"] == "subscription"
            assert read_file(config(web)) == {"connection": "subscription", "cli": "codex"}
            assert load(env={}, home=web.home).reply.model == ""

            save_file(config(web), {"connection": "api", "reply.model": "claude-sonnet-5-5"})
            before = file_bytes(web)
            status, answer = await post(web, client, {"reply_model": ""})
            assert status == 400 and answer["error"] == "reply_model is a model's name, not empty"
            assert file_bytes(web) == before

    run(body())


REFUSED = [
    ({"connection": "subscription"}, "a subscription needs its CLI: cli is one of claudecode, codex"),
    ({"connection": "subscriptions", "cli": "codex"}, "connection is one of api, subscription"),
    ({"connection": None}, "connection is one of api, subscription"),
    ({"cli": "gemini"}, "cli is one of claudecode, codex"),
    ({"cli": ""}, "cli is one of claudecode, codex"),
    ({"cli": 5}, "cli is one of claudecode, codex"),
    ({"connection": "subscription", "cli": "codex", "cli_executable": "/tmp/evil"},
     "no setting 'cli_executable' here (known: reply_model, summary_model, reply_effort, summary_effort, "
     "connection, cli)"),
]


@pytest.mark.parametrize("with_file", [True, False], ids=["file", "no-file"])
def test_every_refused_connection_leaves_config_toml_as_it_was(web, with_file):
    if with_file:
        save_file(config(web), {"reply.provider": "demo", "cli_timeout": 30})
    before = file_bytes(web)
    good = {"connection": "subscription", "cli": "claudecode"}

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            for headers in ({}, {"Origin": "http://evil.example"}, {"Origin": "null"}):
                status, answer = await post(web, client, good, headers)
                assert (status, answer) == (403, {"error": "cross-site request refused"})
            for sent, error in REFUSED:
                status, answer = await post(web, client, sent)
                assert (status, answer) == (400, {"error": error}), sent
                assert file_bytes(web) == before, sent
        async with web.client() as stranger:  # no session
            status, answer = await post(web, stranger, good)
            assert (status, answer) == (401, {"error": "no session"})
        assert file_bytes(web) == before

    run(body())


@pytest.fixture
def subscribed(tmp_path, monkeypatch):
    """A chat that runs on a Claude Code subscription (a fake `connect_cli`: the demo's answers)."""
    calls = []

    def connect_cli(cli, **kwargs):
        calls.append((cli, kwargs))
        return DemoConnection()

    monkeypatch.setattr(models, "connect_cli", connect_cli, raising=False)
    home = tmp_path / "home"
    save_file(home / "config.toml", {"connection": "subscription", "cli": "claudecode", "compaction.model": "haiku"})
    settings = load(env={}, home=home)
    for world in served(tmp_path, settings):
        world.cli_calls = calls
        yield world


def test_me_and_status_say_the_running_subscription_and_no_demo(subscribed):
    async def body():
        async with subscribed.client() as client:
            await subscribed.sign_in(client)
            answer = await me(subscribed, client)
            assert answer["demo"] is False and "saved_models" not in answer
            assert answer["models"] == {"reply": "", "summary": "haiku", "reply_effort": None,
                                        "summary_effort": None, "connection": "subscription", "cli": "claudecode",
                                        "effort": None}
            async with client.get(subscribed.base + "/api/status") as response:
                assert (await response.json())["model"] == "subscription (claudecode)"  # status says it
            status, saved = await post(subscribed, client, {"cli": "codex"})
            assert status == 200, saved
            assert saved["models"]["cli"] == "codex" and saved["models"]["summary"] == "haiku"

    run(body())
    assert {cli for cli, _ in subscribed.cli_calls} == {"claudecode"}  # the compactors connected through it


# -- the page ----------------------------------------------------------------------------


def test_the_settings_panel_saves_a_subscription_and_its_cli(tmp_path):
    from playwright.sync_api import expect, sync_playwright  # a dev dependency: missing is a failure, not a skip
    from page_world import CHROMIUM, CHROMIUM_ARGS, demo_settings, serve

    errors: list[str] = []
    home = tmp_path / "home"
    with serve(demo_settings(home)) as served_page, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(30_000)
            page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.goto(served_page.link)
            page.get_by_role("tab", name="Settings").click()
            connection = page.get_by_label("Connection", exact=True)
            cli = page.get_by_label("Subscription CLI")
            expect(connection).to_have_value("api", timeout=30_000)
            expect(cli).to_be_disabled()  # a CLI is a choice only under a subscription
            expect(page.locator("#models")).to_contain_text("Connection in use")

            connection.select_option("subscription")
            expect(cli).to_be_enabled()
            cli.select_option("codex")
            page.get_by_role("button", name="Save").click()
            status = page.locator("#models-saved")
            expect(status).to_contain_text(RESTART, timeout=30_000)
            expect(status).to_contain_text("replies from the CLI's default (default effort)")
            expect(status).to_contain_text("through subscription (codex).")
            assert read_file(home / "config.toml") == {"connection": "subscription", "cli": "codex"}

            page.reload()  # the saved connection fills the form again, from /api/me
            page.get_by_role("tab", name="Settings").click()
            expect(page.get_by_label("Connection", exact=True)).to_have_value("subscription", timeout=30_000)
            expect(page.get_by_label("Subscription CLI")).to_have_value("codex")
        finally:
            browser.close()
    assert errors == []
