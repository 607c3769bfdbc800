"""/goal and /halt on the web page's server (issue 13): the routes, and the goal's events on
the live socket, over the demo chat (whose check calls a goal met after one turn)."""

from __future__ import annotations

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
