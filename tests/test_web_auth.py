"""Who may use the web page (docs/WEB.md), the pure cores: the token file, the session store
(the cookie's hash only, last_seen at most once a minute), pairing codes (single use, 10
minutes, on a clock the test moves) and the Host and Origin decisions."""

from __future__ import annotations

import json
import os
import stat

import pytest

from everchat.frontends.web.auth import (Pairing, SessionStore, SessionsUnreadable, allowed_hosts, host_allowed,
                                         load_token, may_revoke, origin_allowed, token_matches)

from web_world import Clock


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_token_is_256_random_bits_in_an_owner_only_file_kept_until_replaced(tmp_path):
    old = os.umask(0o022)
    try:
        token = load_token(tmp_path / "home")
    finally:
        os.umask(old)
    path = tmp_path / "home" / "web-token"
    assert mode(path) == 0o600 and path.read_text() == token + "\n"
    assert len(token) == 43 and set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert load_token(tmp_path / "home") == token
    os.chmod(path, 0o644)
    assert load_token(tmp_path / "home") == token and mode(path) == 0o600  # closed again
    new = load_token(tmp_path / "home", new=True)
    assert new != token and path.read_text() == new + "\n" and mode(path) == 0o600


def test_a_token_matches_only_itself():
    assert token_matches("abc", "abc")
    for given in ("abd", "ab", "", None, 12, ["abc"]):
        assert not token_matches(given, "abc")


def test_the_session_file_keeps_the_cookies_hash_never_the_cookie(tmp_path):
    clock = Clock()
    store = SessionStore(tmp_path, clock)
    cookie, session = store.create("Firefox on Linux")
    path = tmp_path / "web-sessions.json"
    text = path.read_text()
    assert cookie not in text and mode(path) == 0o600
    data = json.loads(text)
    assert data["version"] == 1
    [entry] = data["sessions"]
    assert set(entry) == {"id", "hash", "name", "created", "last_seen", "paired"} and entry["name"] == "Firefox on Linux"
    assert entry["paired"] is False  # made with the token
    assert store.find(cookie) is session and store.find(cookie + "x") is None and store.find(None) is None
    again = SessionStore(tmp_path, clock)  # a restart keeps the session
    assert again.find(cookie).id == session.id


def test_last_seen_is_written_at_most_once_a_minute(tmp_path):
    clock = Clock()
    store = SessionStore(tmp_path, clock)
    cookie, session = store.create("phone")
    path = tmp_path / "web-sessions.json"
    written = path.read_bytes()
    clock.now += 59
    store.find(cookie)
    assert path.read_bytes() == written
    clock.now += 2
    store.find(cookie)
    assert path.read_bytes() != written
    assert json.loads(path.read_text())["sessions"][0]["last_seen"] == session.public()["last_seen"]
    assert session.last_seen == int(clock.now)


def test_revoking_removes_the_entry_and_clearing_ends_every_session(tmp_path):
    store = SessionStore(tmp_path, Clock())
    first, one = store.create("one")
    second, two = store.create("two")
    assert [s.id for s in store.sessions()] == [one.id, two.id]
    assert store.revoke(one.id) and not store.revoke(one.id)
    assert store.find(first) is None and store.find(second) is two
    assert [s["id"] for s in json.loads((tmp_path / "web-sessions.json").read_text())["sessions"]] == [two.id]
    store.clear()
    assert store.find(second) is None and SessionStore(tmp_path).sessions() == []


def test_a_damaged_session_file_is_named_not_silently_replaced(tmp_path):
    (tmp_path / "web-sessions.json").write_text("{not json")
    with pytest.raises(ValueError, match="web-sessions.json"):
        SessionStore(tmp_path)
    assert (tmp_path / "web-sessions.json").read_text() == "{not json"


def test_p5_two_stores_on_one_home_share_every_session_and_every_revocation(tmp_path):
    clock = Clock()
    a, b = SessionStore(tmp_path, clock), SessionStore(tmp_path, clock)
    x_cookie, x = a.create("X on A")
    assert b.find(x_cookie).id == x.id  # made on A, known on B
    y_cookie, y = b.create("Y on B")
    assert [s.id for s in a.sessions()] == [x.id, y.id]  # B's write kept A's session
    assert a.revoke(y.id)
    assert b.find(y_cookie) is None  # refused on B at once
    clock.now += 61
    assert a.revoke(x.id)
    assert b.find(x_cookie) is None  # B's once-a-minute touch does not bring it back
    assert json.loads((tmp_path / "web-sessions.json").read_text())["sessions"] == []
    z_cookie, _ = b.create("Z on B")
    a.clear()
    assert b.find(z_cookie) is None


def test_p5_two_stores_creating_at_once_lose_no_session(tmp_path):
    import threading

    stores = [SessionStore(tmp_path), SessionStore(tmp_path)]
    made: list[str] = []

    def make(store) -> None:
        for n in range(25):
            made.append(store.create(f"page {n}")[0])

    threads = [threading.Thread(target=make, args=(store,)) for store in stores * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert len(json.loads((tmp_path / "web-sessions.json").read_text())["sessions"]) == 100
    assert all(stores[0].find(cookie) and stores[1].find(cookie) for cookie in made)


def test_p5_a_sessions_file_damaged_while_serving_is_named_and_lets_nobody_in(tmp_path):
    store = SessionStore(tmp_path)
    cookie, _ = store.create("page")
    (tmp_path / "web-sessions.json").write_text("{not json")
    with pytest.raises(SessionsUnreadable, match="web-sessions.json"):
        store.find(cookie)
    assert (tmp_path / "web-sessions.json").read_text() == "{not json"


def test_who_may_revoke_whom_the_token_s_sessions_any_a_paired_one_only_itself(tmp_path):
    store = SessionStore(tmp_path)
    _, owner = store.create("laptop")
    _, other = store.create("desktop")
    _, phone = store.create("phone", paired=True)
    _, tablet = store.create("tablet", paired=True)
    assert not owner.paired and phone.paired
    assert all(may_revoke(owner, s) and may_revoke(other, s) for s in (owner, other, phone, tablet))
    assert may_revoke(phone, phone)
    assert not any(may_revoke(phone, s) for s in (owner, other, tablet))
    assert SessionStore(tmp_path).get(phone.id).paired  # kept in the file


def test_a_pairing_code_is_redeemed_once_and_never_after_ten_minutes():
    clock = Clock()
    pairing = Pairing(clock)
    code, expires = pairing.make()
    assert expires == clock.now + 600 and len(code) == 22  # 128 bits
    assert pairing.redeem(code) and not pairing.redeem(code)
    late, _ = pairing.make()
    clock.now += 599
    edge, _ = pairing.make()
    assert pairing.redeem(late)  # 599 s: still good
    clock.now += 1
    assert not pairing.redeem(late)  # used
    clock.now += 599
    assert not pairing.redeem(edge)  # exactly ten minutes: expired
    for wrong in ("", None, 5, "x" * 22):
        assert not pairing.redeem(wrong)


@pytest.mark.parametrize("host, allow, ok", [
    ("127.0.0.1:8765", (), True),
    ("localhost:8765", (), True),
    ("LOCALHOST:8765", (), True),
    ("[::1]:8765", (), True),
    ("127.0.0.1", (), False),
    ("127.0.0.1:8766", (), False),
    ("localhost", (), False),
    ("evil.example:8765", (), False),
    ("evil.example", (), False),
    ("", (), False),
    (None, (), False),
    ("box.lan", ("box.lan",), True),
    ("box.lan:8765", ("box.lan",), True),
    ("box.lan:9000", ("box.lan",), False),
    ("other.lan", ("box.lan",), False),
    ("\u212aiosk.lan", ("kiosk.lan",), False),  # the Kelvin sign, which lower() makes a k
    ("127.0.0.1:8765.evil.example", (), False),
    ("127.0.0.1:8765@evil.example", (), False),
    ("evil.example/127.0.0.1:8765", (), False),
])
def test_the_host_decisions(host, allow, ok):
    assert host_allowed(host, 8765, allow) is ok


def test_the_allowed_hosts_are_the_loopback_names_and_each_allowed_name():
    assert allowed_hosts(80, ("Box.lan",)) == {"127.0.0.1:80", "localhost:80", "[::1]:80", "box.lan", "box.lan:80"}


@pytest.mark.parametrize("origin, host, https, ok", [
    ("http://127.0.0.1:8765", "127.0.0.1:8765", False, True),
    ("http://localhost:8765", "localhost:8765", False, True),
    ("http://127.0.0.1:8765", "localhost:8765", False, False),
    ("https://127.0.0.1:8765", "127.0.0.1:8765", False, False),
    ("https://box.lan", "box.lan", True, True),
    ("http://box.lan", "box.lan", True, False),
    ("http://evil.example", "127.0.0.1:8765", False, False),
    ("null", "127.0.0.1:8765", False, False),
    (None, "127.0.0.1:8765", False, False),
    ("", "127.0.0.1:8765", False, False),
    ("http://127.0.0.1:8765", None, False, False),
    ("http://127.0.0.1:8765/", "127.0.0.1:8765", False, False),
    # look-alikes of the right origin
    ("HTTP://127.0.0.1:8765", "127.0.0.1:8765", False, False),  # browsers send lower case: refused
    ("http://LOCALHOST:8765", "localhost:8765", False, False),
    ("Https://box.lan", "box.lan", True, False),
    ("http://localhost:8765", "LOCALHOST:8765", False, True),  # the Host header's case does not matter
    ("http://127.0.0.1:8765.evil.example", "127.0.0.1:8765", False, False),
    ("http://127.0.0.1:8765@evil.example", "127.0.0.1:8765", False, False),
    ("http://evil.example/127.0.0.1:8765", "127.0.0.1:8765", False, False),
    ("http://evil.example#127.0.0.1:8765", "127.0.0.1:8765", False, False),
    ("http://127.0.0.1:8765 ", "127.0.0.1:8765", False, False),
    ("http://127.0.0.1.:8765", "127.0.0.1:8765", False, False),  # a trailing dot
    ("http://127.0.0.1:08765", "127.0.0.1:8765", False, False),
    ("http://127.0.0.1", "127.0.0.1:8765", False, False),
    ("http://127。0。0。1:8765", "127.0.0.1:8765", False, False),  # ideographic full stops
    ("http://１２７.0.0.1:8765", "127.0.0.1:8765", False, False),  # full-width digits
    ("http://loca\u217chost:8765", "localhost:8765", False, False),  # ⅼ, small roman numeral fifty
    ("http://\u212aiosk.lan", "kiosk.lan", False, False),  # the Kelvin sign, which lower() makes a k
    ("http://kiosk.lan", "\u212aiosk.lan", False, False),
    ("http://xn--localhost-:8765", "localhost:8765", False, False),
])
def test_the_origin_decisions(origin, host, https, ok):
    assert origin_allowed(origin, host, https) is ok
