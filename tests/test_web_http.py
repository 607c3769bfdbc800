"""The web server over HTTP and its socket (docs/WEB.md), on a real aiohttp server and a
real demo chat: every refusal changes nothing in the chat folder, every answer carries the
security headers, a send streams the reply to every socket, a resume misses nothing and
repeats nothing, a revoked session's socket closes at once, history comes in pages."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import aiohttp
import pytest

from everchat.frontends.web._context import HUB
from everchat.frontends.web.server import CSP
from everchat.transport import schema

from web_world import INDEX, PNG, run, until, web  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(180)

HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY"}


def secured(response, api: bool = True) -> None:
    for name, value in HEADERS.items():
        assert response.headers.get(name) == value, name
    assert "Access-Control-Allow-Origin" not in response.headers
    if api:
        assert response.headers.get("Cache-Control") == "no-store"


async def refused(response, status: int, error: str) -> None:
    assert response.status == status, await response.text()
    assert await response.json() == {"error": error}
    secured(response, api=response.url.path.startswith("/api/"))


# -- refusals: each changes nothing --------------------------------------------------------


def test_a_foreign_host_is_refused_with_421_and_changes_nothing(web):
    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            before = web.folder()
            for host in ("evil.example", f"evil.example:{web.running.port}", "127.0.0.1:1", "localhost"):
                headers = {"Host": host, "Origin": f"http://{host}"}
                async with client.get(web.base + "/api/me", headers=headers) as response:
                    await refused(response, 421, "host not allowed")
                async with client.post(web.base + "/api/note", json={"text": "x"}, headers=headers) as response:
                    await refused(response, 421, "host not allowed")
                async with client.get(web.base + "/", headers=headers) as response:
                    await refused(response, 421, "host not allowed")
            assert web.folder() == before

    run(body())


def test_a_foreign_or_missing_origin_is_refused_on_every_state_change_and_the_socket(web):
    async def body():
        async with web.client() as client:
            me = await web.sign_in(client)
            before = web.folder()
            for origin in (None, "http://evil.example", f"https://127.0.0.1:{web.running.port}", "null"):
                headers = {} if origin is None else {"Origin": origin}
                for method, path, payload in (("POST", "/api/note", {"text": "x"}),
                                              ("POST", "/api/send", {"text": "x"}),
                                              ("POST", "/api/stop", {}),
                                              ("POST", "/api/pair", {}),
                                              ("POST", "/api/settings", {"reply_model": "x"}),
                                              ("POST", "/api/session", {"token": web.token, "name": "x"}),
                                              ("DELETE", f"/api/sessions/{me['id']}", None)):
                    async with client.request(method, web.base + path, json=payload, headers=headers) as response:
                        await refused(response, 403, "cross-site request refused")
                with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
                    await client.ws_connect(web.base + "/api/events", headers=headers)
                assert handshake.value.status == 403
            async with client.get(web.base + "/api/sessions") as response:  # still signed in, still one session
                assert [s["id"] for s in (await response.json())["sessions"]] == [me["id"]]
            assert web.folder() == before

    run(body())


def test_without_a_session_every_api_route_is_refused_with_401(web):
    async def body():
        async with web.client() as client:
            before = web.folder()
            for method, path in (("GET", "/api/me"), ("GET", "/api/status"), ("GET", "/api/history"),
                                 ("GET", "/api/view"), ("GET", "/api/zoom?id=0&n=1"), ("GET", "/api/date?id=0"),
                                 ("POST", "/api/send"), ("POST", "/api/note"), ("POST", "/api/stop"),
                                 ("POST", "/api/asset"), ("GET", "/api/sessions"), ("POST", "/api/pair"),
                                 ("POST", "/api/settings"), ("DELETE", "/api/sessions/abc")):
                async with client.request(method, web.base + path, json={"text": "hello"},
                                          headers={"Origin": web.origin}) as response:
                    await refused(response, 401, "no session")
            client.cookie_jar.update_cookies({"everchat_session": "made-up"})
            async with client.post(web.base + "/api/note", json={"text": "x"},
                                   headers={"Origin": web.origin}) as response:
                await refused(response, 401, "no session")
            with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
                await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            assert handshake.value.status == 401
            assert web.folder() == before

    run(body())


def test_a_wrong_token_is_refused_with_403_and_makes_no_session(web):
    async def body():
        async with web.client() as client:
            before = web.folder()
            for token in ("", "x" * 43, web.token[:-1], None, 42):
                async with client.post(web.base + "/api/session", json={"token": token, "name": "x"},
                                       headers={"Origin": web.origin}) as response:
                    await refused(response, 403, "wrong token")
                    assert "Set-Cookie" not in response.headers
            assert web.folder() == before
            assert not (web.home / "web-sessions.json").exists()

    run(body())


def test_a_pairing_code_works_once_and_not_after_ten_minutes(web):
    async def body():
        async with web.client() as owner, web.client() as phone, web.client() as late:
            await web.sign_in(owner)
            async with owner.post(web.base + "/api/pair", headers={"Origin": web.origin}) as response:
                pair = await response.json()
            assert pair["link"].startswith(f"{web.base}/#pair=") and pair["qr_svg"].startswith("<svg")
            code = pair["link"].split("#pair=")[1]
            async with owner.post(web.base + "/api/pair", headers={"Origin": web.origin}) as response:
                late_code = (await response.json())["link"].split("#pair=")[1]
            before = web.folder()
            redeem = {"Origin": web.origin}
            async with phone.post(web.base + "/api/pair/redeem", json={"code": code, "name": "phone"},
                                  headers=redeem) as response:
                assert response.status == 200 and (await response.json())["session"]["name"] == "phone"
            async with phone.get(web.base + "/api/me") as response:
                assert response.status == 200
            async with late.post(web.base + "/api/pair/redeem", json={"code": code, "name": "again"},
                                 headers=redeem) as response:
                await refused(response, 403, "pairing code used or expired")
            web.clock.now += 601
            async with late.post(web.base + "/api/pair/redeem", json={"code": late_code, "name": "late"},
                                 headers=redeem) as response:
                await refused(response, 403, "pairing code used or expired")
            async with late.get(web.base + "/api/me") as response:
                await refused(response, 401, "no session")
            assert web.folder() == before

    run(body())


def test_oversized_bodies_are_refused_with_413_and_change_nothing(web):
    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            before = web.folder()
            headers = {"Origin": web.origin}
            big = json.dumps({"text": "x" * (1 << 20)})
            async with client.post(web.base + "/api/note", data=big,
                                   headers=dict(headers, **{"Content-Type": "application/json"})) as response:
                await refused(response, 413, "a request body is at most 1 MB")
            async with client.post(web.base + "/api/send", data=big,
                                   headers=dict(headers, **{"Content-Type": "application/json"})) as response:
                await refused(response, 413, "a request body is at most 1 MB")
            image = PNG + b"\0" * (5 << 20)
            async with client.post(web.base + "/api/asset", data=image, headers=headers) as response:
                await refused(response, 413, "an image is at most 5 MB (R9)")

            async def chunked():  # no Content-Length: counted as it comes
                for _ in range(6):
                    yield b"\0" * (1 << 20)

            async with client.post(web.base + "/api/asset", data=chunked(), headers=headers) as response:
                await refused(response, 413, "an image is at most 5 MB (R9)")
            async with client.post(web.base + "/api/asset", data=b"not an image", headers=headers) as response:
                await refused(response, 400, "not a PNG, JPEG, GIF or WebP image (R9)")
            async with client.post(web.base + "/api/note", data=b"[1, 2]", headers=headers) as response:
                await refused(response, 400, "the body is not a JSON object")
            assert web.folder() == before

    run(body())


def test_a_revoked_session_is_refused_and_its_socket_closes_at_once_with_4401(web):
    async def body():
        async with web.client() as laptop, web.client() as phone:
            await web.sign_in(laptop, "laptop")
            other = await web.sign_in(phone, "phone")
            ws = await phone.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            assert (await ws.receive_json(timeout=30))["type"] == "hello"
            async with laptop.get(web.base + "/api/sessions") as response:
                listed = (await response.json())["sessions"]
            assert [(s["name"], s["current"]) for s in listed] == [("laptop", True), ("phone", False)]
            async with laptop.delete(web.base + f"/api/sessions/{other['id']}",
                                     headers={"Origin": web.origin}) as response:
                assert response.status == 200 and await response.json() == {}
                secured(response)
            closing = await ws.receive(timeout=30)
            while closing.type == aiohttp.WSMsgType.TEXT:  # a status event may come first
                closing = await ws.receive(timeout=30)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert ws.close_code == 4401
            before = web.folder()
            async with phone.post(web.base + "/api/note", json={"text": "x"},
                                  headers={"Origin": web.origin}) as response:
                await refused(response, 401, "no session")
            async with laptop.delete(web.base + f"/api/sessions/{other['id']}",
                                     headers={"Origin": web.origin}) as response:
                await refused(response, 404, "no such session")
            assert web.folder() == before
            await ws.close()

    run(body())


def test_a_paired_phone_cannot_revoke_the_owner_nor_pair_a_device_but_can_sign_itself_out(web):
    async def body():
        async with web.client() as owner, web.client() as phone:
            mine = await web.sign_in(owner, "laptop")
            async with owner.post(web.base + "/api/pair", headers={"Origin": web.origin}) as response:
                code = (await response.json())["link"].split("#pair=")[1]
            async with phone.post(web.base + "/api/pair/redeem", json={"code": code, "name": "phone"},
                                  headers={"Origin": web.origin}) as response:
                paired = (await response.json())["session"]
            owners_socket = await owner.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            assert (await owners_socket.receive_json(timeout=30))["type"] == "hello"
            sessions = (web.home / "web-sessions.json").read_bytes()
            # the attacker's move: the phone's cookie asks to end the owner's session
            async with phone.delete(web.base + f"/api/sessions/{mine['id']}", headers={"Origin": web.origin}) as response:
                await refused(response, 403, "a paired device may end only its own session")
            assert paired["paired"] is True and mine["paired"] is False
            async with phone.post(web.base + "/api/pair", headers={"Origin": web.origin}) as response:
                await refused(response, 403, "only a browser signed in with the link may pair a device")
            assert (web.home / "web-sessions.json").read_bytes() == sessions
            async with owner.get(web.base + "/api/me") as response:
                assert response.status == 200  # the owner is still in, its socket still open
            await owners_socket.send_json({"type": "ping"})
            while (frame := await owners_socket.receive_json(timeout=30))["type"] != "pong":
                assert frame["type"] == "status", frame
            async with phone.get(web.base + "/api/sessions") as response:
                listed = {s["name"]: (s["paired"], s["current"]) for s in (await response.json())["sessions"]}
            assert listed == {"laptop": (False, False), "phone": (True, True)}
            async with phone.delete(web.base + f"/api/sessions/{paired['id']}", headers={"Origin": web.origin}) as response:
                assert response.status == 200  # signing itself out is allowed
            async with phone.get(web.base + "/api/me") as response:
                await refused(response, 401, "no session")
            await owners_socket.close()

    run(body())


def test_the_owner_revokes_a_paired_phone(web):
    async def body():
        async with web.client() as owner, web.client() as phone:
            await web.sign_in(owner, "laptop")
            async with owner.post(web.base + "/api/pair", headers={"Origin": web.origin}) as response:
                code = (await response.json())["link"].split("#pair=")[1]
            async with phone.post(web.base + "/api/pair/redeem", json={"code": code, "name": "phone"},
                                  headers={"Origin": web.origin}) as response:
                paired = (await response.json())["session"]
            async with owner.delete(web.base + f"/api/sessions/{paired['id']}", headers={"Origin": web.origin}) as response:
                assert response.status == 200
            async with phone.get(web.base + "/api/me") as response:
                await refused(response, 401, "no session")

    run(body())


def test_every_socket_of_a_revoked_session_sees_4401_not_a_dropped_connection(web):
    """The close is a handshake: the server waits for the page's answer, so the page reads
    4401 (before, the connection could drop first and the page saw 1006)."""
    async def body():
        async with web.client() as laptop:
            await web.sign_in(laptop, "laptop")
            for _ in range(10):  # 50 sockets: the old race lost about one in twenty
                async with web.client() as phone:
                    session = await web.sign_in(phone, "phone")
                    sockets = [await phone.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
                               for _ in range(5)]
                    for ws in sockets:
                        assert (await ws.receive_json(timeout=30))["type"] == "hello"
                    async with laptop.delete(web.base + f"/api/sessions/{session['id']}",
                                             headers={"Origin": web.origin}) as response:
                        assert response.status == 200
                    for ws in sockets:
                        while (frame := await ws.receive(timeout=30)).type == aiohttp.WSMsgType.TEXT:
                            pass  # a status event may come first
                    assert [ws.close_code for ws in sockets] == [4401] * 5

    run(body())


# -- what every answer carries -------------------------------------------------------------


def test_every_answer_carries_the_csp_and_security_headers(web):
    async def body():
        async with web.client() as client:
            async with client.get(web.base + "/api/me") as response:
                await refused(response, 401, "no session")
            async with client.get(web.base + "/no-such-file.js") as response:
                await refused(response, 404, "not found")
            async with client.post(web.base + "/api/session", json={"token": web.token, "name": "t"},
                                   headers={"Origin": web.origin}) as response:
                secured(response)
                cookie = response.headers["Set-Cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
                assert "Secure" not in cookie
            for path in ("/api/me", "/api/status", "/api/history", "/api/view", "/api/sessions"):
                async with client.get(web.base + path) as response:
                    assert response.status == 200
                    secured(response)
            async with client.get(web.base + "/api/no-such-route") as response:
                await refused(response, 404, "not found")
            ws = await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            for name, value in HEADERS.items():
                assert ws._response.headers.get(name) == value
            await ws.close()

    run(body())


def documented_csp() -> str:
    """The Content-Security-Policy docs/WEB.md writes (its words joined on one line)."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "WEB.md").read_text(encoding="utf-8")
    [policy] = re.findall(r"`Content-Security-Policy: ([^`]+)`", doc)
    return " ".join(policy.split())


def test_the_csp_on_every_answer_is_the_policy_docs_web_md_writes_and_allows_no_inline_script(web):
    policy = documented_csp()
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert "script-src 'self'" in policy and "default-src 'self'" in policy

    async def body():
        async with web.client() as client:
            answers = []
            for path in ("/", "/app.js", "/api/me", "/missing.js", "/%00"):  # a page, a script, 401, 404s
                async with client.get(web.base + path) as response:
                    answers.append(response.headers.get("Content-Security-Policy"))
            async with client.get(web.base + "/", headers={"Host": "evil.example"}) as response:
                assert response.status == 421
                answers.append(response.headers.get("Content-Security-Policy"))
            await web.sign_in(client)
            ws = await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            answers.append(ws._response.headers.get("Content-Security-Policy"))
            await ws.close()
            assert answers == [policy] * len(answers)

    run(body())


def test_the_page_is_served_without_a_session_and_nothing_outside_its_folder(web):
    (web.home / "secret.txt").write_text("not for the page")

    async def body():
        async with web.client() as client:
            for path in ("/", "/index.html"):
                async with client.get(web.base + path) as response:
                    assert response.status == 200 and await response.text() == INDEX
                    assert response.content_type == "text/html"
                    secured(response, api=False)
            async with client.get(web.base + "/app.js") as response:
                assert response.status == 200 and response.content_type == "text/javascript"
                secured(response, api=False)
            for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/..%2fsecret.txt", "/missing.css", "/static"):
                async with client.get(web.base + path) as response:
                    assert response.status == 404 and await response.json() == {"error": "not found"}, path
                    secured(response, api=False)

    run(body())


def test_behind_an_https_proxy_on_this_host_the_origin_is_https_and_the_cookie_secure(web):
    async def body():
        async with web.client() as client:
            host = f"127.0.0.1:{web.running.port}"
            headers = {"X-Forwarded-Proto": "https", "Origin": f"https://{host}"}
            async with client.post(web.base + "/api/session", json={"token": web.token, "name": "proxied"},
                                   headers=headers) as response:
                assert response.status == 200
                assert "Secure" in response.headers["Set-Cookie"]
            async with client.post(web.base + "/api/session", json={"token": web.token, "name": "plain"},
                                   headers={"X-Forwarded-Proto": "https", "Origin": web.origin}) as response:
                await refused(response, 403, "cross-site request refused")

    run(body())


# -- live events -------------------------------------------------------------------------


def test_r36_a_send_over_http_streams_the_demo_reply_to_the_socket(web):
    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            ws = await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            hello = await ws.receive_json(timeout=30)
            assert hello["type"] == "hello" and hello["last"] >= 0 and hello["run"]
            async with client.post(web.base + "/api/send", json={"text": "Remember amber-42."},
                                   headers={"Origin": web.origin}) as response:
                sent = await response.json()
            assert sent == {"id": 0}
            seen: list = []
            end = await until(ws, lambda e: e["type"] == "ended", seen)
            turn = [e for e in seen if e["type"] != "status"]
            assert turn[0]["type"] == "user" and turn[0]["turn"] == 0
            assert turn[0]["message"]["text"] == "Remember amber-42." and turn[0]["message"]["kind"] == "user"
            assert turn[1] == {"id": turn[1]["id"], "type": "started", "turn": 0}
            text = "".join(e["text"] for e in turn if e["type"] == "text")
            assert "amber-42" in text
            assert end["reason"] == "done" and end["incomplete"] is False and end["reply"] == 1
            assert [e["id"] for e in seen] == list(range(seen[0]["id"], seen[0]["id"] + len(seen)))
            async with client.get(web.base + "/api/history") as response:
                history = await response.json()
            assert history["count"] == 2
            assert [(m["id"], m["kind"], m["text"]) for m in history["messages"]] == [
                (0, "user", "Remember amber-42."), (1, "assistant", text)]
            await ws.close()

    run(body())


def test_two_sockets_see_the_same_events(web):
    async def body():
        async with web.client() as one, web.client() as two:
            await web.sign_in(one)
            await web.sign_in(two)
            first = await one.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            second = await two.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            hellos = [await first.receive_json(timeout=30), await second.receive_json(timeout=30)]
            assert hellos[0]["run"] == hellos[1]["run"]
            async with two.post(web.base + "/api/send", json={"text": "Hello there."},
                                headers={"Origin": web.origin}) as response:
                assert response.status == 200
            seen_one: list = []
            seen_two: list = []
            end = await until(first, lambda e: e["type"] == "ended", seen_one)
            await until(second, lambda e: e["id"] == end["id"], seen_two)
            after = max(hellos[0]["last"], hellos[1]["last"])
            assert [e for e in seen_one if e["id"] > after] == [e for e in seen_two if e["id"] > after]
            await first.close()
            await second.close()

    run(body())


def test_a_socket_that_resumes_after_an_id_gets_exactly_the_events_it_missed(web):
    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            watcher = await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            hello = await watcher.receive_json(timeout=30)
            page = await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            await page.receive_json(timeout=30)
            async with client.post(web.base + "/api/send", json={"text": "Tell me something."},
                                   headers={"Origin": web.origin}) as response:
                assert response.status == 200
            saw = await until(page, lambda e: e["type"] == "text")  # the page drops mid-reply
            await page.close()
            everything: list = []
            await until(watcher, lambda e: e["type"] == "ended", everything)
            again = await client.ws_connect(web.base + f"/api/events?after={saw['id']}&run={hello['run']}",
                                            headers={"Origin": web.origin})
            hello_again = await again.receive_json(timeout=30)
            assert hello_again["type"] == "hello" and hello_again["run"] == hello["run"]
            resumed: list = []
            if hello_again["last"] > saw["id"]:
                await until(again, lambda e: e["id"] == hello_again["last"], resumed)
            if everything[-1]["id"] < hello_again["last"]:  # status events after the end
                await until(watcher, lambda e: e.get("id") == hello_again["last"], everything)
            missed = [e for e in everything if saw["id"] < e["id"] <= hello_again["last"]]
            assert resumed == missed and missed and missed[-1]["type"] in ("ended", "status")
            assert [e["id"] for e in resumed] == list(range(saw["id"] + 1, hello_again["last"] + 1))
            await again.close()
            for query in (f"after={saw['id']}&run=another-run", f"after={hello_again['last'] + 5}&run={hello['run']}",
                          f"after={saw['id']}"):
                other = await client.ws_connect(web.base + f"/api/events?{query}", headers={"Origin": web.origin})
                assert (await other.receive_json(timeout=30))["type"] == "hello"
                assert await other.receive_json(timeout=30) == {"type": "reset"}
                await other.close()
            await watcher.send_json({"type": "ping"})
            await until(watcher, lambda e: e == {"type": "pong"})
            await watcher.close()

    run(body())


# -- reading the chat --------------------------------------------------------------------


def output_flood(web, chunks: int) -> None:
    """`chunks` shell output events of 64 KB each (JobOutput's largest) into the server's ring."""
    ring = web.running.app[HUB].ring
    for n in range(chunks):
        ring.publish({"type": "output", "job": f"turn-0-{n}", "caller": "main", "text": "B" * (64 * 1024)})


def test_p4_a_page_resuming_from_an_event_the_ring_dropped_for_its_bytes_gets_a_reset(web):
    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            ws = await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            hello = await ws.receive_json(timeout=30)
            await ws.close()
            output_flood(web, 100)  # 6.4 MB: more than the ring's bytes, far fewer than its 20,000 events
            ws = await client.ws_connect(web.base + f"/api/events?after={hello['last']}&run={hello['run']}",
                                         headers={"Origin": web.origin})
            assert (await ws.receive_json(timeout=30))["type"] == "hello"
            assert (await ws.receive_json(timeout=30)) == {"type": "reset"}  # the page reloads its history
            await ws.close()
            last = web.running.app[HUB].ring.last
            ws = await client.ws_connect(web.base + f"/api/events?after={last - 1}&run={hello['run']}",
                                         headers={"Origin": web.origin})
            assert (await ws.receive_json(timeout=30))["type"] == "hello"
            kept = await ws.receive_json(timeout=30)
            assert kept["id"] == last  # a recent one is still kept
            await ws.close()

    run(body())


def test_p4_a_socket_that_does_not_keep_up_with_a_shells_output_is_closed_1013_not_buffered(web):
    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            ws = await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            assert (await ws.receive_json(timeout=30))["type"] == "hello"
            # the socket reads nothing while 64 MB of output is published
            await asyncio.get_running_loop().run_in_executor(None, output_flood, web, 1000)
            outputs = 0
            while (frame := await ws.receive(timeout=60)).type == aiohttp.WSMsgType.TEXT:
                outputs += json.loads(frame.data)["type"] == "output"
            assert frame.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert ws.close_code == 1013 and outputs < 1000

    run(body())


def test_history_pages_from_the_log_newest_page_first(web):
    items = [schema.Append(kind="note", text=f"note number {n}", key=f"n-{n}", images=[], meta=None)
             for n in range(500)]
    web.session.append_many(items, timeout=120)

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            async with client.get(web.base + "/api/history") as response:
                page = await response.json()
            assert page["count"] == 500
            assert [m["id"] for m in page["messages"]] == list(range(450, 500))
            assert page["messages"][0]["text"] == "note number 450" and page["messages"][0]["kind"] == "note"
            async with client.get(web.base + "/api/history?before=450") as response:
                assert [m["id"] for m in (await response.json())["messages"]] == list(range(400, 450))
            async with client.get(web.base + "/api/history?before=30&limit=200") as response:
                assert [m["id"] for m in (await response.json())["messages"]] == list(range(30))
            async with client.get(web.base + "/api/history?limit=200") as response:
                assert len((await response.json())["messages"]) == 200
            async with client.get(web.base + "/api/history?limit=201") as response:
                await refused(response, 400, "limit is 1 to 200, not 201")
            async with client.get(web.base + "/api/history?before=x") as response:
                await refused(response, 400, "before must be a whole number, not 'x'")

    run(body())


def test_r35_the_memory_routes_say_what_the_tools_say(web):
    web.session.note("an old memory")
    web.session.note("x" * 2000)
    web.session.compact(timeout=60)

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            async with client.get(web.base + "/api/view") as response:
                view = await response.json()
            assert [(line["first"], line["count"], line["built"]) for line in view["lines"]] == [(0, 1, True),
                                                                                                 (1, 1, True)]
            assert view["lines"][0]["text"] == "note: an old memory" and view["lines"][0]["bytes"] == 24
            assert view["bytes"] == web.session.status()["view_bytes"]
            assert (view["ceiling"], view["floor"]) == (128_000, 64_000)
            async with client.get(web.base + "/api/view?which=compaction") as response:
                assert [line["first"] for line in (await response.json())["lines"]] == [0, 1]
            async with client.get(web.base + "/api/view?which=other") as response:
                await refused(response, 400, "which is turn or compaction, not 'other'")
            async with client.get(web.base + "/api/zoom?id=0&n=2") as response:
                zoom = await response.json()
            assert zoom["first"] == 0 and zoom["count"] == 2
            assert [h["text"] for h in zoom["halves"]] == [line["text"] for line in view["lines"]]
            async with client.get(web.base + "/api/zoom?id=1&n=1") as response:
                message = (await response.json())["message"]
            assert message["id"] == 1 and message["text"] == "x" * 2000 and message["kind"] == "note"
            async with client.get(web.base + "/api/zoom?id=2&n=2") as response:
                await refused(response, 400, "No line 2+2. The chat has 2 messages (ids 0 to 1).")
            async with client.get(web.base + "/api/zoom_text?id=0&n=2") as response:
                assert (await response.json())["text"] == web.session.zoom(0, 2)
            async with client.get(web.base + "/api/zoom_text?id=Ada") as response:
                await refused(response, 400, "No agent named 'Ada' in this chat.")
            async with client.get(web.base + "/api/date?id=0") as response:
                assert (await response.json())["date"] == web.session.date(0)
            async with client.get(web.base + "/api/date?id=9") as response:
                await refused(response, 400, "No message 9: the chat has 2 messages (ids 0 to 1).")
            async with client.get(web.base + "/api/memory?id=1") as response:
                memory = await response.json()
            assert memory["line"] == view["lines"][1] and memory["path"] == [view["lines"][1]]
            async with client.get(web.base + "/api/status") as response:
                status = await response.json()
            assert status["messages"] == 2 and status["view_floor"] == 64_000

    run(body())


def test_r9_an_image_is_stored_once_served_back_and_sent_with_a_message(web):
    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            async with client.post(web.base + "/api/asset", data=PNG, headers={"Origin": web.origin}) as response:
                digest = (await response.json())["digest"]
            async with client.get(web.base + f"/api/asset/{digest}") as response:
                assert await response.read() == PNG and response.content_type == "image/png"
                assert response.headers["Cache-Control"] == "private, max-age=31536000, immutable"
                secured(response, api=False)
            async with client.get(web.base + "/api/asset/" + "0" * 64) as response:
                await refused(response, 404, "no such image")
            async with client.post(web.base + "/api/send", json={"text": "", "images": ["0" * 64]},
                                   headers={"Origin": web.origin}) as response:
                await refused(response, 400, f"no image {'0' * 64} (post it to /api/asset first)")
            ws = await client.ws_connect(web.base + "/api/events", headers={"Origin": web.origin})
            await ws.receive_json(timeout=30)
            async with client.post(web.base + "/api/send", json={"text": "A picture.", "images": [digest]},
                                   headers={"Origin": web.origin}) as response:
                sent = await response.json()
            user = await until(ws, lambda e: e["type"] == "user")
            assert user["message"]["id"] == sent["id"] and user["message"]["images"] == [digest]
            await until(ws, lambda e: e["type"] == "ended")
            await ws.close()
            async with client.post(web.base + "/api/note", json={"text": "a note"},
                                   headers={"Origin": web.origin}) as response:
                assert await response.json() == {"id": sent["id"] + 2}

    run(body())


def test_r21_the_compaction_view_is_served_apart_from_the_view(web):
    # 200 notes of 200 bytes: free leaves and free parents (R11), 42 KB of view lines, so the
    # compaction view (over its 32,000, R21) merges pairs while the view (128,000) does not.
    items = [schema.Append(kind="note", text=f"{n:03} " + "y" * 196, key=f"c-{n}", images=[], meta=None)
             for n in range(200)]
    web.session.append_many(items, timeout=120)
    assert web.session.status()["messages"] == 200  # the planner answers after planning what was logged

    async def body():
        async with web.client() as client:
            await web.sign_in(client)
            async with client.get(web.base + "/api/view?which=turn") as response:
                view = await response.json()
            async with client.get(web.base + "/api/view?which=compaction") as response:
                compaction = await response.json()
            assert [(line["first"], line["count"]) for line in view["lines"]] == [(n, 1) for n in range(200)]
            spans = [(line["first"], line["count"]) for line in compaction["lines"]]
            assert len(spans) < 200 and compaction["bytes"] < view["bytes"]  # merged by R18, the view not
            assert [first for first, _ in spans] == [0] + [f + c for f, c in spans[:-1]]  # contiguous, R13
            assert spans[-1][0] + spans[-1][1] == 200
            assert compaction["bytes"] == sum(line["bytes"] for line in compaction["lines"])

    run(body())
