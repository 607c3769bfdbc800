"""The web benchmark's real pages (issue 10): headless Chromium on the served page, for the
load to interactive and for pages watching a streamed turn. `bench_web.py` serves the chat
and hands each function its `server` (its `origin`, `port`, `cookie` and `session`).

Nothing is asked of the page: what the bench needs it adds as init scripts (Playwright's,
outside the page's CSP), a MutationObserver that notes when the page became ready and a
wrapper around `WebSocket` that notes when each `text` event arrived.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "Watchers", "load_pages", "time_api", "watchers"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGE_ROUTES = ("/api/me", "/api/history?limit=50", "/api/status")
_COOKIE = "everchat_session"  # docs/WEB.md's cookie (frontends/web/auth.COOKIE)

_READY_SCRIPT = """
(() => {
  const ready = () => {
    const app = document.getElementById("app");
    const text = document.getElementById("composer-text");
    const list = document.getElementById("messages");
    return !!(app && !app.hidden && text && !text.disabled && list &&
              list.querySelector('li[data-id="%d"]'));
  };
  const mark = () => {
    if (window.__benchReady !== undefined || !ready()) return;
    window.__benchReady = performance.now();
    document.documentElement.dataset.benchReady = "1";
  };
  new MutationObserver(mark).observe(document, {subtree: true, childList: true, attributes: true});
  document.addEventListener("focusin", mark, true);
})();
"""

_BYTES_SCRIPT = """
() => {
  const entries = [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")];
  const history = entries.find((e) => e.name.includes("/api/history"));
  const scripts = entries.filter((e) => e.name.endsWith(".js"));
  return {history_end_ms: history ? history.responseEnd : null,
          modules_end_ms: Math.max(0, ...scripts.map((e) => e.responseEnd)),
          transfer: entries.reduce((sum, e) => sum + (e.transferSize || 0), 0),
          body: entries.reduce((sum, e) => sum + (e.decodedBodySize || 0), 0),
          requests: entries.length};
}
"""

_TEXTS_SCRIPT = """
(() => {
  const Native = window.WebSocket;
  window.__benchTexts = [];
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", (message) => {
        const at = performance.timeOrigin + performance.now();
        const event = JSON.parse(message.data);
        if (event.type === "text") window.__benchTexts.push([at, event.text]);
      });
    }
  };
})();
"""


@contextmanager
def _chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def _context(browser, server):
    """A fresh browser context (no cache) holding the server's session cookie."""
    context = browser.new_context()
    context.add_cookies([{"name": _COOKIE, "value": server.cookie, "url": server.origin}])
    return context


def load_pages(server, loads: int, timeout_ms: float = 60_000) -> list[dict]:
    """Open the served chat `loads` times (after one load not counted, which warms the
    server), each in a fresh context: when it became ready, what it fetched."""
    newest = server.session.status()["messages"] - 1
    runs = []
    with _chromium() as browser:
        for n in range(loads + 1):
            context = _context(browser, server)
            context.add_init_script(_READY_SCRIPT % newest)
            page = context.new_page()
            answers: list = []
            page.on("response", lambda r: answers.append(r) if "/api/history" in r.url else None)
            page.goto(server.origin + "/")
            # (a selector, not wait_for_function: the page's CSP forbids the eval that needs)
            page.wait_for_selector("html[data-bench-ready]", state="attached", timeout=timeout_ms)
            ready_ms = page.evaluate("() => window.__benchReady")
            page.wait_for_load_state("networkidle")
            fetched = page.evaluate(_BYTES_SCRIPT)
            held = sum(len(r.json()["messages"]) for r in answers)
            context.close()
            if n:
                runs.append({"ready_ms": ready_ms, "messages_fetched": held, "history_requests": len(answers),
                             **fetched})
    return runs


def time_api(server, times: int) -> dict[str, list[float]]:
    """Milliseconds of each read the page makes at its start, asked `times` times over one
    kept-alive connection (request sent to answer read whole); the first of each not counted."""
    out: dict[str, list[float]] = {route: [] for route in PAGE_ROUTES}
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        for _ in range(times + 1):
            for route in PAGE_ROUTES:
                began = time.perf_counter()
                connection.request("GET", route, headers={"Cookie": f"{_COOKIE}={server.cookie}"})
                answer = connection.getresponse()
                answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"GET {route}: {answer.status}")
                out[route].append((time.perf_counter() - began) * 1000)
    finally:
        connection.close()
    return {route: values[1:] for route, values in out.items()}


class Watchers:
    """Chromium pages open on the chat while turns stream: `arm()` before a turn, `collect`
    after it: per page, whether it shows the whole reply, and when each delta arrived."""

    def __init__(self, pages: list) -> None:
        self.pages = pages
        self._replies: list[int] = [0] * len(pages)

    def arm(self, last_piece: str) -> None:
        """Before a turn: forget the texts noted so far; count the replies already shown."""
        for n, page in enumerate(self.pages):
            page.evaluate("() => { window.__benchTexts.length = 0; }")
            self._replies[n] = page.locator("#messages li.msg-assistant", has_text=last_piece).count()

    def collect(self, reply: str, last_piece: str, timeout_ms: float = 60_000) -> list[dict]:
        """After the turn: each page's receipts as (monotonic seconds, text) and whether its
        newest reply row holds the whole reply, word for word."""
        from playwright.sync_api import expect

        offset = time.time() - time.monotonic()  # the page stamps wall-clock milliseconds
        out = []
        for n, page in enumerate(self.pages):
            rows = page.locator("#messages li.msg-assistant", has_text=last_piece)
            expect(rows).to_have_count(self._replies[n] + 1, timeout=timeout_ms)
            shown = rows.last.locator(".text").inner_text().split()
            texts = page.evaluate("() => window.__benchTexts.splice(0)")
            out.append({"complete": shown == reply.split(),
                        "texts": [(at / 1000 - offset, text) for at, text in texts]})
        return out


@contextmanager
def watchers(server, count: int, timeout_ms: float = 60_000) -> Iterator[Watchers | None]:
    """`count` Chromium pages open on the served chat, each in its own context, their
    sockets live; None for no pages."""
    if count <= 0:
        yield None
        return
    with _chromium() as browser:
        pages = []
        for _ in range(count):
            page = _context(browser, server).new_page()
            page.add_init_script(_TEXTS_SCRIPT)
            page.goto(server.origin + "/")
            page.wait_for_selector('#conn[data-state="live"]', state="attached", timeout=timeout_ms)
            pages.append(page)
        yield Watchers(pages)
