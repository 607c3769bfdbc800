"""Issue 13: `search` and `fetch` over https, as the real backends are reached. `_get`
connects to the address it checked (a name is looked up once, so a second lookup cannot swap
in a private address) and then speaks TLS to it under the URL's host name: the certificate is
verified against that name, SNI and Host carry it. A local TLS server with a certificate from
a test CA (trustme) stands in for the site; `SSL_CERT_FILE` makes the default context trust
that CA, so the production code path runs unchanged."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trustme

from everchat.actors.hands.web import WebTools

FIXTURE = Path(__file__).parent / "data" / "search" / "duckduckgo_python.html"
PAGE = b"<html><head><title>Over TLS</title></head><body><p>Basalt, read securely.</p></body></html>"


class _Site:
    """A TLS web server on 127.0.0.1 with a certificate for `names`; it records each
    request's SNI name, path and Host header."""

    def __init__(self, ca: trustme.CA, names: list[str]) -> None:
        self.requests: list[tuple[str | None, str, str | None]] = []
        self.handshakes: list[str | None] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert(*names).configure_cert(context)
        context.sni_callback = lambda sock, name, ctx: self.handshakes.append(name)
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                site.requests.append((site.handshakes[-1] if site.handshakes else None, self.path,
                                      self.headers.get("Host")))
                body = FIXTURE.read_bytes() if self.path.startswith("/html/") else PAGE
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ca():
    return trustme.CA()


@pytest.fixture
def trusted(ca, tmp_path, monkeypatch):
    """The default context trusts the test CA (and only it) for this test."""
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return path


@pytest.fixture
def site(ca):
    server = _Site(ca, ["pages.example"])
    try:
        yield server
    finally:
        server.close()


def _to_loopback(seen: list[str]):
    def resolve(host, port):
        seen.append(host)
        return ["127.0.0.1"]
    return resolve


def test_fetch_over_https_verifies_the_name_on_the_checked_address(trusted, site):
    looked_up: list[str] = []
    tools = WebTools(allow_local=True, deadline=10, resolve=_to_loopback(looked_up))
    outcome = tools.call("fetch", {"url": f"https://pages.example:{site.port}/rock"})
    assert not outcome.is_error, outcome.text
    assert "Title: Over TLS" in outcome.text and outcome.text.endswith("Basalt, read securely.")
    assert looked_up == ["pages.example"]  # one lookup: the connection goes to the address checked
    assert site.requests == [("pages.example", "/rock", f"pages.example:{site.port}")]


def test_search_over_https_reads_the_results_page(trusted, site):
    tools = WebTools(search_url=f"https://pages.example:{site.port}/html/", deadline=10,
                     resolve=_to_loopback([]))
    outcome = tools.call("search", {"query": "python html parser"})
    assert not outcome.is_error, outcome.text
    assert "1. Welcome to Python.org" in outcome.text and "10. " in outcome.text
    assert [name for name, _, _ in site.requests] == ["pages.example"]


def test_a_certificate_for_another_name_is_refused_before_anything_is_sent(trusted, ca):
    other = _Site(ca, ["someone-else.example"])
    try:
        tools = WebTools(allow_local=True, deadline=10, resolve=_to_loopback([]))
        outcome = tools.call("fetch", {"url": f"https://pages.example:{other.port}/rock"})
    finally:
        other.close()
    assert outcome.is_error and "TLS failed" in outcome.text and "pages.example" in outcome.text
    assert other.requests == []


def test_a_certificate_from_an_untrusted_authority_is_refused(ca, site, tmp_path, monkeypatch):
    stranger = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger))  # trusted: a CA that did not sign the site
    monkeypatch.setenv("SSL_CERT_FILE", str(stranger))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    tools = WebTools(allow_local=True, deadline=10, resolve=_to_loopback([]))
    outcome = tools.call("fetch", {"url": f"https://pages.example:{site.port}/rock"})
    assert outcome.is_error and "TLS failed" in outcome.text and "certificate verify failed" in outcome.text
    assert site.requests == []


def test_https_to_a_private_address_is_refused_before_any_handshake(trusted, site):
    outcome = WebTools(deadline=10, resolve=_to_loopback([])).call(
        "fetch", {"url": f"https://pages.example:{site.port}/rock"})
    assert outcome.is_error and "not a public address" in outcome.text
    assert site.handshakes == [] and site.requests == []
