"""/goal and /halt on the web page's server (issue 13): the routes, and the goal's events on
the live socket, over the demo chat (whose check calls a goal met after one turn)."""

from __future__ import annotations

import re

from web_world import run, until, web  # noqa: F401 (fixture)


def test_goal_runs_from_the_page_its_events_reach_the_socket_and_halt_answers(web):
    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            headers = {"Origin": web.origin}
            async with client.get(web.base + "/api/goal", headers=headers) as response:
                assert response.status == 200 and (await response.json()) == {"goal": None}
            ws = await client.ws_connect(web.base + "/api/events", headers=headers)
            seen: list = []
            async with client.post(web.base + "/api/goal", json={"text": "Remember amber-42."},
                                   headers=headers) as response:
                assert response.status == 200, await response.text()
                first = (await response.json())["id"]
            met = await until(ws, lambda f: f.get("type") == "goal" and f["event"] == "met", seen)
            assert met["text"] == "◎ Goal met. (Remember amber-42., 1 turn)" and met["level"] == "info"
            kinds = [f["event"] for f in seen if f.get("type") == "goal"]
            assert kinds == ["set", "met"]
            users = [f for f in seen if f.get("type") == "user"]
            assert users[0]["message"]["id"] == first and users[0]["message"]["text"] == "Remember amber-42."
            async with client.post(web.base + "/api/goal", json={"text": " "}, headers=headers) as response:
                assert response.status == 400
            async with client.post(web.base + "/api/halt", json={}, headers=headers) as response:
                assert response.status == 200
            async with client.get(web.base + "/api/goal", headers=headers) as response:
                assert (await response.json()) == {"goal": None}
            await ws.close()

    run(body())


def test_goal_and_halt_typed_on_the_page_show_their_lines(tmp_path):
    """The page in a real browser (headless Chromium): `/goal TEXT` sends TEXT and the goal's
    lines appear; `/goal` alone says there is none once it is met; `/halt` sends nothing."""
    import playwright.sync_api as playwright_api

    from page_world import CHROMIUM, CHROMIUM_ARGS, demo_settings, serve

    expect = playwright_api.expect
    with serve(demo_settings(tmp_path / "home")) as running, playwright_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(running.link)
            box = page.get_by_role("textbox", name="Message")
            expect(box).to_be_visible(timeout=30_000)
            box.fill("/goal Remember amber-42.")
            box.press("Enter")
            notices = page.locator("#messages li.notice")
            expect(notices.filter(has_text="◎ goal: Remember amber-42.")).to_have_count(1, timeout=30_000)
            expect(notices.filter(has_text="◎ Goal met. (Remember amber-42., 1 turn)")).to_have_count(1, timeout=30_000)
            expect(page.locator("#messages li.msg-user").first).to_have_text(re.compile("Remember amber-42."))
            expect(box).to_have_value("")
            box.fill("/goal")
            box.press("Enter")
            expect(notices.filter(has_text="No goal: /goal TEXT sets one.")).to_have_count(1, timeout=30_000)
            box.fill("/halt")
            box.press("Enter")
            expect(box).to_have_value("", timeout=30_000)
            expect(page.locator("#messages li.msg-user")).to_have_count(1)
            assert errors == []
        finally:
            browser.close()
