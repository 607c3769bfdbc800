"""Issue 13: the `search` and `fetch` tools (actors/hands/web.py, docs/SEARCH.md) against a
local HTTP server: the DuckDuckGo-style fixture page (written by hand in DuckDuckGo's HTML
markup: this machine has no network), Brave's JSON API with a key, and hostile pages: huge,
slow, redirect loops, a redirect to a private address, a public-looking name that resolves
to 127.0.0.1, non-HTML types, malformed HTML, cookies."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import argparse

import pytest
from polling import wait_until

from everchat.actors.settings import add_arguments, load
from everchat.actors.hands import HandTools, web_for
from everchat.actors.turns.calls import settings_flags
from everchat.actors.hands.web import (LIMIT_BYTES, WebTools, is_public, page_text, parse_brave,
                                       parse_duckduckgo)

FIXTURE = Path(__file__).parent / "data" / "search" / "duckduckgo_python.html"


class _World:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict]] = []  # (path, headers) of every request
        self.release = threading.Event()
        self.dripped: list[int] = []  # bytes /drip sent before its client hung up

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


def _handler(world: _World):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, status: int, body: bytes, kind: str = "text/html; charset=utf-8", headers=()):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            world.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            path = urlsplit(self.path).path
            query = parse_qs(urlsplit(self.path).query)
            if path == "/hostile/" or query.get("q") == ["hostile"]:  # markup as text, a javascript: target
                self.send(200, b"<a class='result__a' href='https://ok.example/a?x=1&amp;y=2'>&lt;img src=x "
                               b"onerror=alert(1)&gt; Safe</a><a class='result__snippet'>&lt;b&gt;bold?</a>"
                               b"<a class='result__a' href='javascript:alert(2)'>Bad</a>")
            elif path == "/html/":
                self.send(200, FIXTURE.read_bytes(), headers=[("Set-Cookie", "kl=wt-wt; Path=/")])
            elif path == "/empty/":
                self.send(200, b"<html><body><div class='no-results'>No results.</div></body></html>")
            elif path == "/brave":
                if self.headers.get("X-Subscription-Token") != "brave-test-key":
                    self.send(401, b'{"error": "no key"}', "application/json")
                    return
                rows = [{"title": f"Result <strong>{n}</strong> &amp; co", "url": f"https://example.org/{n}",
                         "description": f"About <strong>{query['q'][0]}</strong> number {n}."} for n in range(12)]
                rows.insert(3, {"title": "bad scheme", "url": "javascript:alert(1)", "description": "x"})
                self.send(200, json.dumps({"type": "search", "web": {"results": rows}}).encode(), "application/json")
            elif path == "/page":
                self.send(200, b"<html><head><title>A page</title><style>p{}</style></head><body><nav>Home | About"
                               b"</nav><h2>Findings</h2><p>Basalt is <a href='/rock'>a rock</a>.</p>"
                               b"<script>alert('no')</script><p>Second paragraph.</p></body></html>",
                          headers=[("Set-Cookie", "session=secret; Path=/")])
            elif path == "/huge":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Connection", "close")
                self.end_headers()  # no length: the reader must stop by itself
                block = b"<p>" + b"x" * 65_533 + b"</p>"
                try:
                    for _ in range(LIMIT_BYTES // len(block) + 8):
                        self.wfile.write(block)
                except OSError:
                    pass
                self.close_connection = True
            elif path == "/huge-declared":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(50 * LIMIT_BYTES))
                self.end_headers()
                self.close_connection = True
            elif path == "/slow":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"<p>the start")
                self.wfile.flush()
                world.release.wait(30)  # held until the test ends
                self.close_connection = True
            elif path == "/drip":  # the head, one byte every 50 ms, never ending
                head = b"HTTP/1.1 200 OK\r\nX-Drip: "
                sent = 0
                try:
                    while not world.release.wait(0.05):  # until the test ends
                        self.wfile.write(head[sent:sent + 1] if sent < len(head) else b"a")
                        sent += 1
                except OSError:  # the client hung up: its deadline
                    pass
                world.dripped.append(sent)
                self.close_connection = True
            elif path == "/loop":
                self.send(302, b"", headers=[("Location", "/loop")])
            elif path == "/to-private":
                self.send(301, b"", headers=[("Location", "http://10.1.2.3/admin")])
            elif path == "/image":
                self.send(200, b"\x89PNG\r\n\x1a\n" + b"\0" * 100, "image/png")
            elif path == "/untyped":
                self.send_response(200)
                self.send_header("Content-Length", "6")
                self.end_headers()
                self.wfile.write(b"\0\1\2bin")
            elif path == "/plain":
                self.send(200, b"just text\nline two", "text/plain")
            elif path == "/malformed":
                self.send(200, b"<html><title>Broken</title><body><div><p>One <b>bold <i>mixed</b> up</i>"
                               b"</span></span><p>Two<table><tr><td>cell</div><script>var a = '</p>'"
                               b"<p>never closed")
            else:
                self.send(404, b"not here")

    return Handler


@pytest.fixture
def web():
    world = _World()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(world))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    world.base = f"http://127.0.0.1:{server.server_address[1]}"
    world.port = server.server_address[1]
    try:
        yield world
    finally:
        world.release.set()
        server.shutdown()
        server.server_close()


# --- the parsers ---------------------------------------------------------------------------


def test_the_fixture_gives_ten_results_in_page_order_with_decoded_targets_and_text_only():
    results = parse_duckduckgo(FIXTURE.read_text(encoding="utf-8"))
    assert len(results) == 10  # the page holds 12 and an ad: the ad is left out, ten kept
    assert [r.url for r in results[:5]] == [
        "https://www.python.org/",
        "https://docs.python.org/3/library/html.parser.html",
        "https://en.wikipedia.org/wiki/Python_(programming_language)",
        "https://realpython.com/python-web-scraping-practical-introduction/",
        "https://stackoverflow.com/questions/11709079/parsing-html-using-python?a=1&b=2",  # uddg decoded whole
    ]
    assert results[0].title == "Welcome to Python.org"  # <b> gone
    assert results[0].snippet == "The official home of the Python Programming Language."
    assert results[3].title == "A Practical Introduction to Web Scraping in Python – Real Python"  # &ndash;
    assert results[3].snippet.endswith("interact with HTML forms & more.")
    assert all("<" not in r.title + r.snippet and "duckduckgo.com" not in r.url for r in results)
    assert all(r.url.startswith("https://") for r in results)


def test_a_results_page_without_results_and_hostile_links():
    assert parse_duckduckgo("<div class='no-results'>No results.</div>") == []
    page = ("<a class='result__a' href='javascript:alert(1)'>bad</a>"
            "<a class='result__a' href='//duckduckgo.com/l/?uddg=file%3A%2F%2F%2Fetc%2Fpasswd'>file</a>"
            "<a class='result__a' href='//duckduckgo.com/l/?rut=x'>no target</a>"
            "<a class='result__a' href='https://direct.example/'>direct <script>x</script></a>"
            "<div class='result__snippet'>its <b>snippet</b></div>")
    (only,) = parse_duckduckgo(page)
    assert only.url == "https://direct.example/" and only.snippet == "its snippet"


def test_brave_json_is_read_as_text():
    data = {"web": {"results": [{"title": "A <strong>b</strong>", "url": "https://a.example/",
                                 "description": "x &amp; <strong>y</strong>"}, {"url": 3}, "junk"]}}
    (result,) = parse_brave(data)
    assert (result.title, result.url, result.snippet) == ("A b", "https://a.example/", "x & y")
    assert parse_brave({"type": "search"}) == [] and parse_brave([1]) == []


def test_page_text_keeps_headings_breaks_and_links_and_drops_the_noise():
    title, text = page_text("<title>T</title><nav>menu</nav><h1>Head</h1><p>Para <a href='/x'>link</a></p>"
                            "<ul><li>one<li>two</ul><pre>a\n  b</pre><footer>legal</footer>", "https://e.example/d/")
    assert title == "T"
    assert text == "# Head\nPara link (https://e.example/x)\n- one\n- two\na\n  b"


@pytest.mark.parametrize("address, public", [
    ("8.8.8.8", True), ("2606:4700:4700::1111", True), ("127.0.0.1", False), ("10.0.0.1", False),
    ("192.168.1.1", False), ("172.16.0.1", False), ("169.254.169.254", False), ("100.64.0.1", False),
    ("0.0.0.0", False), ("::1", False), ("fe80::1", False), ("fc00::1", False), ("::ffff:127.0.0.1", False),
    ("2002:7f00:1::", False), ("224.0.0.1", False), ("not an ip", False)])
def test_public_addresses(address, public):
    assert is_public(address) is public


# --- search against the local server -------------------------------------------------------


def test_search_reads_the_local_results_page_and_sends_no_cookie_back(web):
    tools = WebTools(search_url=web.base + "/html/")
    first = tools.call("search", {"query": "python html parser"})
    assert not first.is_error, first.text
    lines = first.text.splitlines()
    assert lines[0].startswith('Search results for "python html parser" from DuckDuckGo')
    assert lines[1:4] == ["1. Welcome to Python.org", "   https://www.python.org/",
                          "   The official home of the Python Programming Language."]
    assert "10. Learn Python - Free Interactive Python Tutorial" in lines
    tools.call("search", {"query": "again"})  # the page set a cookie: never sent back
    assert [parse_qs(urlsplit(path).query)["q"] for path in web.paths()] == [["python html parser"], ["again"]]
    assert all("cookie" not in headers for _, headers in web.requests)


def test_search_with_a_brave_key_reads_the_api(web):
    tools = WebTools(search_url=web.base + "/brave", brave_key="brave-test-key")
    assert "brave-test-key" not in repr(tools)
    outcome = tools.call("search", {"query": "basalt"})
    assert not outcome.is_error, outcome.text
    assert outcome.text.splitlines()[:4] == [
        'Search results for "basalt" from Brave Search (snippets, not the pages: fetch a URL to read it):',
        "1. Result 0 & co", "   https://example.org/0", "   About basalt number 0."]
    assert "javascript:" not in outcome.text and "10. Result 9 & co" in outcome.text and "11." not in outcome.text
    query = parse_qs(urlsplit(web.paths()[0]).query)
    assert query == {"q": ["basalt"], "count": ["10"]}
    wrong = WebTools(search_url=web.base + "/brave", brave_key="wrong").call("search", {"query": "x"})
    assert wrong.is_error and "HTTP 401" in wrong.text


def test_search_says_none_and_refuses_bad_arguments(web):
    tools = WebTools(search_url=web.base + "/empty/")
    assert tools.call("search", {"query": "zzz"}).text == 'Search results for "zzz" from DuckDuckGo: none.'
    assert tools.call("search", {"query": "  "}).is_error
    assert "only query" in tools.call("search", {"query": "x", "page": 2}).text
    redirected = WebTools(search_url=web.base + "/loop").call("search", {"query": "x"})
    assert redirected.is_error and "redirected to" in redirected.text and len(web.paths()) == 2


# --- fetch and its limits ------------------------------------------------------------------


def test_fetch_reads_a_page_as_text_with_its_title_and_no_cookie_goes_back(web):
    tools = WebTools(allow_local=True)
    outcome = tools.call("fetch", {"url": web.base + "/page"})
    assert not outcome.is_error, outcome.text
    head, _, text = outcome.text.partition("\n\n")
    assert head.splitlines()[:2] == [f"URL: {web.base}/page", "Title: A page"]
    assert text == f"## Findings\nBasalt is a rock ({web.base}/rock).\nSecond paragraph."
    tools.call("fetch", {"url": web.base + "/page"})
    assert len(web.requests) == 2 and all("cookie" not in headers for _, headers in web.requests)


def test_loopback_is_refused_without_the_flag_and_nothing_is_sent(web):
    outcome = WebTools().call("fetch", {"url": web.base + "/page"})
    assert outcome.is_error and "127.0.0.1, which is not a public address" in outcome.text
    assert "--allow-local-fetch" in outcome.text and web.requests == []


def test_a_public_looking_name_that_resolves_to_loopback_is_refused_unless_allowed(web):
    def resolve(host, port):
        assert host == "news.example.com"
        return ["127.0.0.1"]

    url = f"http://news.example.com:{web.port}/page"
    refused = WebTools(resolve=resolve).call("fetch", {"url": url})
    assert refused.is_error and "news.example.com is at 127.0.0.1" in refused.text and web.requests == []
    allowed = WebTools(resolve=resolve, allow_local=True).call("fetch", {"url": url})
    assert "Title: A page" in allowed.text
    # connected to the checked address, asking for the name
    assert web.requests[0][1]["host"] == f"news.example.com:{web.port}"


def test_a_mixed_answer_with_one_private_address_is_refused(web):
    tools = WebTools(resolve=lambda host, port: ["93.184.216.34", "10.0.0.7"])
    outcome = tools.call("fetch", {"url": "http://mixed.example/"})
    assert outcome.is_error and "10.0.0.7" in outcome.text


def test_redirects_are_reported_not_followed(web):
    tools = WebTools(allow_local=True)
    loop = tools.call("fetch", {"url": web.base + "/loop"})
    assert not loop.is_error and f"redirects (HTTP 302) to {web.base}/loop. Not followed" in loop.text
    private = tools.call("fetch", {"url": web.base + "/to-private"})
    assert "to http://10.1.2.3/admin. Not followed" in private.text
    assert web.paths() == ["/loop", "/to-private"]  # one request each, nothing more
    # and fetching the reported target without the flag is refused before any connection
    assert "not a public address" in WebTools().call("fetch", {"url": "http://10.1.2.3/admin"}).text


def test_a_huge_page_is_not_read_past_the_limit(web):
    tools = WebTools(allow_local=True)
    streamed = tools.call("fetch", {"url": web.base + "/huge"})
    assert streamed.is_error and "over the 2.0 MB limit" in streamed.text
    declared = tools.call("fetch", {"url": web.base + "/huge-declared"})
    assert declared.is_error and "100.0 MB, over the 2.0 MB limit" in declared.text


SLACK = 3.0
"""A limit of `d` seconds must end within [d, SLACK * d] (a ratio: the machine may be loaded)."""


def _timed(work, limit: float):
    """`work()`'s value and its seconds, run on a thread so a limit that does not hold fails
    the test (after 10 times the limit) instead of hanging it."""
    box: dict = {}

    def run():
        start = time.monotonic()
        box["value"] = work()
        box["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=run, name="timed-call", daemon=True)
    thread.start()
    thread.join(10 * limit)
    assert not thread.is_alive(), f"still running after 10 x the {limit} s limit"
    return box["value"], box["seconds"]


def _within_the_limit(seconds: float, limit: float) -> bool:
    return limit <= seconds <= SLACK * limit


def test_a_slow_page_ends_at_the_deadline(web):
    slow = WebTools(allow_local=True, deadline=0.3)
    outcome, seconds = _timed(lambda: slow.call("fetch", {"url": web.base + "/slow"}), 0.3)
    assert outcome.is_error and "did not answer within 0.3 seconds" in outcome.text
    assert _within_the_limit(seconds, 0.3), seconds
    slow_search, seconds = _timed(
        lambda: WebTools(search_url=web.base + "/slow", deadline=0.3).call("search", {"query": "x"}), 0.3)
    assert slow_search.is_error and "within 0.3 seconds" in slow_search.text
    assert _within_the_limit(seconds, 0.3), seconds


def test_a_server_that_drips_its_headers_is_cut_at_the_deadline(web):
    """One header byte every 50 ms, forever: each read gets a byte long before a socket
    timeout, so only the deadline's timer can end the exchange."""
    tools = WebTools(allow_local=True, deadline=0.5)
    outcome, seconds = _timed(lambda: tools.call("fetch", {"url": web.base + "/drip"}), 0.5)
    assert outcome.is_error and "did not answer within 0.5 seconds" in outcome.text, outcome.text
    assert _within_the_limit(seconds, 0.5), seconds
    wait_until(lambda: web.dripped, 10, "the dripping server saw the client hang up")
    assert web.dripped[0] >= 3  # it did drip (bytes came before the deadline)


def test_content_types_and_schemes(web):
    tools = WebTools(allow_local=True)
    image = tools.call("fetch", {"url": web.base + "/image"})
    assert image.is_error and "is image/png, not a text page" in image.text
    untyped = tools.call("fetch", {"url": web.base + "/untyped"})
    assert untyped.is_error and "no content type and is not text" in untyped.text
    plain = tools.call("fetch", {"url": web.base + "/plain"})
    assert plain.text.endswith("\n\njust text\nline two") and "text/plain" in plain.text
    for url in ("file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "gopher://x/", "//x/y",
                "http://user:pw@example.com/"):
        refused = tools.call("fetch", {"url": url})
        assert refused.is_error, url
    assert "only http and https" in tools.call("fetch", {"url": "file:///etc/passwd"}).text
    assert web.paths() == ["/image", "/untyped", "/plain"]


def test_malformed_html_still_reads(web):
    outcome = WebTools(allow_local=True).call("fetch", {"url": web.base + "/malformed"})
    assert not outcome.is_error, outcome.text
    assert "Title: Broken" in outcome.text
    text = outcome.text.partition("\n\n")[2]
    assert text.startswith("One bold mixed up\nTwo\ncell")
    assert "var a" not in text


def test_long_pages_are_cut(web):
    outcome = WebTools(allow_local=True, fetch_chars=20).call("fetch", {"url": web.base + "/page"})
    assert "only the first 20 are shown" in outcome.text
    assert len(outcome.text.partition("\n\n")[2]) == 20


def test_a_name_lookup_that_hangs_ends_at_the_deadline():
    stuck = threading.Event()

    def resolve(host, port):
        stuck.wait(30)
        return ["93.184.216.34"]

    try:
        outcome, seconds = _timed(
            lambda: WebTools(resolve=resolve, deadline=0.2).call("fetch", {"url": "https://slow-dns.example/"}), 0.2)
        assert outcome.is_error and "looking up slow-dns.example" in outcome.text
        assert _within_the_limit(seconds, 0.2), seconds
    finally:
        stuck.set()


# --- the settings --------------------------------------------------------------------------


def test_the_settings_reach_the_tools_and_another_process(monkeypatch, tmp_path):
    for name in ("EVERCHAT_SEARCH", "EVERCHAT_ALLOW_LOCAL_FETCH", "EVERCHAT_CONFIG", "BRAVE_SEARCH_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EVERCHAT_SEARCH_URL", "http://127.0.0.1:9/html/")
    default = load({}, home=tmp_path)
    assert (default.search, default.allow_local_fetch) == ("on", "off")
    assert web_for(default).allow_local is False and web_for(default).search_url == "http://127.0.0.1:9/html/"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flagged = load(parser.parse_args(["--allow-local-fetch"]), home=tmp_path)
    assert flagged.allow_local_fetch == "on" and flagged.sources["allow_local_fetch"] == "flag"
    again = load(settings_flags(flagged), home=tmp_path)  # the turn runner's own process
    assert web_for(again).allow_local is True
    off = load(parser.parse_args(["--search", "off"]), home=tmp_path)
    assert web_for(off) is None and web_for(load(settings_flags(off), home=tmp_path)) is None
    (tmp_path / "config.toml").write_text('allow_local_fetch = "on"\nsearch = "off"\n')
    from_file = load({}, home=tmp_path)
    assert (from_file.search, from_file.allow_local_fetch) == ("off", "on")
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "brave-secret-123")
    brave = web_for(default)
    assert brave.backend == "Brave Search" and "brave-secret-123" not in repr(brave)


def test_hand_tools_answer_search_off_in_words_and_pass_calls_on():
    hands = HandTools(lambda *a: None, lambda name, arguments: None)
    outcome = hands.call("search", {"query": "x"}, "key-1")
    assert outcome.is_error and outcome.text == "search is not available: this chat runs with search off."
    web = HandTools(lambda *a: None, lambda name, arguments: None, devices=False, web=WebTools())
    assert "only http and https" in web.call("fetch", {"url": "file:///etc/passwd"}, "key-2").text


def test_https_to_a_server_that_speaks_no_tls_fails_in_words(web):
    outcome = WebTools(allow_local=True, deadline=5).call("fetch", {"url": f"https://127.0.0.1:{web.port}/page"})
    assert outcome.is_error and outcome.text.startswith(f"fetch failed: https://127.0.0.1:{web.port}/page")
