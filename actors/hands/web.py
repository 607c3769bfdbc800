"""Web search and page reading for the model (issue 13, docs/SEARCH.md): the `search(query)`
and `fetch(url)` tools.

Read-only and network-only, so they run where the call runs (the turn runner's process, the
agents'): `HandTools.call` hands them to `WebTools.call`. Every request has the same limits:
one deadline for the whole exchange (20 s), at most 2 MB of body, no redirect followed (the
target is reported instead), no cookie ever sent (nothing keeps one), identity encoding.

`fetch` also refuses every address that is not public (private, loopback, link-local,
shared, reserved, multicast, and the IPv6 forms that embed one: `web_addresses.is_public`,
review P7), checked on the IPs the host name resolves to, and then
connects to exactly those IPs (no second lookup a DNS answer could change), unless the run
allows local fetches (`--allow-local-fetch`). The search backend's own URL is the operator's
setting, not the model's, so it is not checked.

HTML is read with the standard library's `html.parser`, never with regular expressions.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

from everchat.actors.zoom import ToolOutcome
from everchat.actors.models import ToolSpec
from everchat.actors.hands.addresses import is_public

__all__ = [
    "BRAVE_URL",
    "DEADLINE_SECONDS",
    "DUCKDUCKGO_URL",
    "FETCH_CHARS",
    "FETCH_TOOL",
    "LIMIT_BYTES",
    "MAX_RESULTS",
    "SEARCH_TOOL",
    "WEB_TOOLS",
    "WEB_TOOL_NAMES",
    "Result",
    "WebError",
    "WebTools",
    "is_public",
    "page_text",
    "parse_brave",
    "parse_duckduckgo",
]

DEADLINE_SECONDS = 20.0
"""The whole exchange of one request: connecting, sending, the answer's head and body."""

LIMIT_BYTES = 2 * 1024 * 1024
"""A body larger than this (2 MB) is not read."""

MAX_RESULTS = 10
FETCH_CHARS = 20_000
"""Characters of a page's text `fetch` returns at most (R7 clips an echo at 30,000)."""

DUCKDUCKGO_URL = "https://html.duckduckgo.com/html/"
BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
SEARCH_URL_ENV = "EVERCHAT_SEARCH_URL"
"""Overrides the search backend's URL (the one in use: DuckDuckGo's page, or Brave's API)."""
BRAVE_KEY_ENV = "BRAVE_SEARCH_API_KEY"

_AGENT = "Everchat/0.1"
_CHUNK = 64 * 1024

SEARCH_TOOL = ToolSpec(
    name="search",
    description=(
        "Search the web. Returns up to ten results in the engine's order, each a title, a URL and a "
        "snippet: the engine's excerpt, not the page itself (fetch a URL to read it)."
    ),
    schema={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to search for."}},
        "required": ["query"],
        "additionalProperties": False,
    },
)

FETCH_TOOL = ToolSpec(
    name="fetch",
    description=(
        "Read one web page (http or https) as text, with its title. Redirects are not followed: the "
        "target is reported, fetch it if you want it. Long pages are cut."
    ),
    schema={
        "type": "object",
        "properties": {"url": {"type": "string", "description": "The page's full URL."}},
        "required": ["url"],
        "additionalProperties": False,
    },
)

WEB_TOOLS = (SEARCH_TOOL, FETCH_TOOL)
WEB_TOOL_NAMES = frozenset(spec.name for spec in WEB_TOOLS)


class WebError(Exception):
    """A request that gave nothing usable; the text is what the model reads."""


@dataclass(frozen=True)
class Result:
    """One search result: text only (no markup), the target's own URL."""

    title: str
    url: str
    snippet: str


@dataclass(frozen=True)
class _Answer:
    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes
    location: str | None

    def text(self) -> str:
        try:
            return self.body.decode(self.charset or "utf-8", errors="replace")
        except LookupError:  # a charset Python does not know
            return self.body.decode("utf-8", errors="replace")


# --- addresses ---------------------------------------------------------------------------


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        address = info[4][0]
        if address not in seen:
            seen.append(address)
    return seen


def _within(seconds: float, work: Callable):
    """`work()`'s value, or TimeoutError after `seconds` (a name lookup has no timeout of its
    own; the thread left behind ends when the lookup does)."""
    done = threading.Event()
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as error:  # handed to the caller
            box["error"] = error
        done.set()

    threading.Thread(target=run, name="web-lookup", daemon=True).start()
    if not done.wait(seconds):
        raise TimeoutError()
    if "error" in box:
        raise box["error"]
    return box["value"]


# --- HTML ----------------------------------------------------------------------------------

_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())


class _Tree(HTMLParser):
    """An HTML parser that keeps the stack of open elements, forgiving of bad markup: an end
    tag closes up to its open element, or nothing when none is open."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        attributes = {name: value or "" for name, value in attrs}
        self.opened(tag, attributes)
        if tag not in _VOID:
            self.stack.append((tag, attributes))

    def handle_startendtag(self, tag, attrs):
        self.opened(tag, {name: value or "" for name, value in attrs})

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, -1, -1):
            if self.stack[depth][0] == tag:
                while len(self.stack) > depth:
                    self.closed(*self.stack.pop())
                return

    def opened(self, tag: str, attributes: dict) -> None:
        pass

    def closed(self, tag: str, attributes: dict) -> None:
        pass

    def read(self, html: str) -> None:
        self.feed(html)
        self.close()
        while self.stack:
            self.closed(*self.stack.pop())


def _classes(attributes: dict) -> set[str]:
    return set(attributes.get("class", "").split())


def _squeeze(text: str) -> str:
    return " ".join(text.split())


class _Plain(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def _plain(fragment: str) -> str:
    """A fragment's text without its markup (Brave's `<strong>` highlights)."""
    parser = _Plain()
    parser.feed(fragment)
    parser.close()
    return _squeeze("".join(parser.parts))


def _target(href: str, base: str) -> str | None:
    """A result link's target: DuckDuckGo's `//duckduckgo.com/l/?uddg=<target>` decoded,
    another link as it is; None unless http or https."""
    url = urljoin(base, href.strip())
    parts = urlsplit(url)
    if parts.hostname and parts.hostname.endswith("duckduckgo.com") and parts.path == "/l/":
        found = parse_qs(parts.query).get("uddg")
        if not found:
            return None
        url = found[0].strip()
    return url if urlsplit(url).scheme in ("http", "https") else None


class _DuckDuckGo(_Tree):
    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base
        self.results: list[dict] = []
        self.capture: str | None = None  # "title" or "snippet"
        self.capture_depth = 0
        self.ad_depth: int | None = None

    def opened(self, tag, attributes):
        classes = _classes(attributes)
        depth = len(self.stack)
        if self.ad_depth is None and "result--ad" in classes and tag not in _VOID:
            self.ad_depth = depth
        if self.ad_depth is not None or self.capture is not None or tag in _VOID:
            return
        if "result__a" in classes:
            self.results.append({"href": attributes.get("href", ""), "title": [], "snippet": []})
            self.capture, self.capture_depth = "title", depth
        elif "result__snippet" in classes and self.results and not self.results[-1]["snippet"]:
            self.capture, self.capture_depth = "snippet", depth

    def closed(self, tag, attributes):
        depth = len(self.stack)
        if self.capture is not None and depth == self.capture_depth:
            self.capture = None
        if self.ad_depth is not None and depth == self.ad_depth:
            self.ad_depth = None

    def handle_data(self, data):
        if self.capture is not None and self.ad_depth is None:
            self.results[-1][self.capture].append(data)


def parse_duckduckgo(html: str, base: str = DUCKDUCKGO_URL, limit: int = MAX_RESULTS) -> list[Result]:
    """The organic results of DuckDuckGo's HTML results page, in page order (ads left out):
    each `result__a` link's text and decoded target, and the `result__snippet` after it."""
    parser = _DuckDuckGo(base)
    parser.read(html)
    out: list[Result] = []
    for found in parser.results:
        url = _target(found["href"], base)
        title = _squeeze("".join(found["title"]))
        if url is None or not title:
            continue
        out.append(Result(title, url, _squeeze("".join(found["snippet"]))))
        if len(out) == limit:
            break
    return out


def parse_brave(data, limit: int = MAX_RESULTS) -> list[Result]:
    """Brave Search API's `web.results[]` (title, url, description) as results, text only."""
    rows = ((data or {}).get("web") or {}).get("results") if isinstance(data, dict) else None
    out: list[Result] = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        url, title = row.get("url"), row.get("title")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not isinstance(title, str):
            continue
        description = row.get("description")
        out.append(Result(_plain(title), url, _plain(description) if isinstance(description, str) else ""))
        if len(out) == limit:
            break
    return out


_SKIP = frozenset("script style noscript template svg nav iframe object canvas select button head aside footer "
                  "form".split())
_BLOCK = frozenset("p div section article main header br li ul ol dl dt dd tr table blockquote figure figcaption "
                   "hr address details summary h1 h2 h3 h4 h5 h6 pre".split())


class _Text(_Tree):
    """A page's text: blocks on lines of their own, headings as `#` lines, list items as
    `- `, links as `text (URL)`; scripts, styles, navigation and forms left out."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base
        self.title: list[str] | None = None
        self.title_done = False
        self.lines: list[str] = []
        self.line: list[str] = []
        self.skip = 0
        self.pre = 0
        self.links: list[tuple[str, int]] = []  # (href, where its text starts in self.line)

    def _break(self) -> None:
        text = "".join(self.line)
        text = text.strip("\n") if self.pre else _squeeze(text)
        if text:
            self.lines.append(text)
        self.line = []
        self.links = []

    def opened(self, tag, attributes):
        if tag == "title" and not self.title_done:
            self.title = []
        if tag in _SKIP and tag not in _VOID:
            self.skip += 1
        if self.skip:
            return
        if tag in _BLOCK:
            self._break()
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.line.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self.line.append("- ")
        elif tag == "pre":
            self.pre += 1
        elif tag == "a":
            self.links.append((attributes.get("href", ""), len(self.line)))
        elif tag == "img" and attributes.get("alt", "").strip():
            self.line.append(f" [image: {attributes['alt'].strip()}] ")

    def closed(self, tag, attributes):
        if tag == "title" and self.title is not None and not self.title_done:
            self.title_done = True
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if tag == "a" and self.links:
            href, start = self.links.pop()
            url = urljoin(self.base, href.strip()) if href.strip() else ""
            label = _squeeze("".join(self.line[start:]))
            if urlsplit(url).scheme in ("http", "https") and label and label != url:
                self.line.append(f" ({url})")
        if tag in _BLOCK:
            self._break()
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data):
        if self.title is not None and not self.title_done:
            self.title.append(data)
            return
        if not self.skip:
            self.line.append(data)

    def finish(self) -> tuple[str, str]:
        self._break()
        return _squeeze("".join(self.title or [])), "\n".join(self.lines)


def page_text(html: str, base: str = "") -> tuple[str, str]:
    """(title, text) of an HTML page, read with the standard parser."""
    parser = _Text(base)
    parser.read(html)
    return parser.finish()


# --- HTTP ----------------------------------------------------------------------------------

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/rss+xml", "application/atom+xml",
               "application/javascript", "application/x-yaml", "application/yaml")
_HTML_TYPES = ("text/html", "application/xhtml+xml")


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB" if n >= 1024 * 1024 else f"{n:,} bytes"


class WebTools:
    """`search` and `fetch` with their limits. `deadline` (seconds) and `limit` (bytes) are
    parameters so tests use short ones; `resolve(host, port) -> [ip, …]` is the name lookup
    (tests map a public-looking name to 127.0.0.1); `allow_local` lets `fetch` read private
    and loopback addresses (`--allow-local-fetch`). `search_url` overrides the backend's URL;
    with `brave_key` the backend is Brave Search's API, else DuckDuckGo's HTML page."""

    def __init__(self, *, deadline: float = DEADLINE_SECONDS, limit: int = LIMIT_BYTES, allow_local: bool = False,
                 search_url: str | None = None, brave_key: str | None = None,
                 resolve: Callable[[str, int], list[str]] | None = None, fetch_chars: int = FETCH_CHARS) -> None:
        self.deadline = deadline
        self.limit = limit
        self.allow_local = allow_local
        self.brave_key = brave_key or None
        self.search_url = search_url or (BRAVE_URL if self.brave_key else DUCKDUCKGO_URL)
        self.resolve = resolve or _resolve
        self.fetch_chars = fetch_chars

    @classmethod
    def from_environment(cls, allow_local: bool = False, env=None) -> WebTools:
        """The run's web tools: `EVERCHAT_SEARCH_URL` and `BRAVE_SEARCH_API_KEY` from the
        environment (a key stays there, as the model keys do), `allow_local` from the settings."""
        env = os.environ if env is None else env
        return cls(allow_local=allow_local, search_url=env.get(SEARCH_URL_ENV) or None,
                   brave_key=env.get(BRAVE_KEY_ENV) or None)

    @property
    def backend(self) -> str:
        return "Brave Search" if self.brave_key else "DuckDuckGo"

    def __repr__(self) -> str:  # never the key
        key = "set" if self.brave_key else "unset"
        return f"WebTools({self.backend}, {self.search_url!r}, key={key}, allow_local={self.allow_local})"

    # the tools as the model calls them

    def call(self, name: str, arguments: dict) -> ToolOutcome:
        field = {"search": "query", "fetch": "url"}.get(name)
        if field is None:
            return ToolOutcome(f"No tool called {name!r}.", is_error=True)
        extra = sorted(set(arguments) - {field})
        value = arguments.get(field)
        if extra:
            return ToolOutcome(f"{name} takes only {field}, not {', '.join(extra)}.", is_error=True)
        if not isinstance(value, str) or not value.strip():
            return ToolOutcome(f"{name} needs {field}: a text that is not empty.", is_error=True)
        try:
            return ToolOutcome(self.search_text(value) if name == "search" else self.fetch_text(value))
        except WebError as error:
            return ToolOutcome(f"{name} failed: {error}", is_error=True)

    # search

    def search(self, query: str) -> list[Result]:
        query = query.strip()
        if len(query) > 1000:
            raise WebError("the query is longer than 1,000 characters")
        glue = "&" if "?" in self.search_url else "?"
        if self.brave_key:
            url = self.search_url + glue + urlencode({"q": query, "count": MAX_RESULTS})
            answer = self._get(url, {"Accept": "application/json", "X-Subscription-Token": self.brave_key},
                               check=False)
        else:
            url = self.search_url + glue + urlencode({"q": query})
            answer = self._get(url, {"Accept": "text/html"}, check=False)
        if answer.location is not None:
            raise WebError(f"{self.backend} redirected to {answer.location} (not followed)")
        if answer.status != 200:
            raise WebError(f"{self.backend} answered HTTP {answer.status}")
        if self.brave_key:
            try:
                return parse_brave(json.loads(answer.text()))
            except ValueError:
                raise WebError(f"{self.backend} answered something that is not JSON") from None
        if not answer.content_type.startswith(_HTML_TYPES):
            raise WebError(f"{self.backend} answered {answer.content_type or 'no content type'}, not HTML")
        return parse_duckduckgo(answer.text(), base=answer.url)

    def search_text(self, query: str) -> str:
        results = self.search(query)
        head = f"Search results for {json.dumps(query.strip(), ensure_ascii=False)} from {self.backend}"
        if not results:
            return head + ": none."
        lines = [head + " (snippets, not the pages: fetch a URL to read it):"]
        for n, result in enumerate(results, 1):
            lines.append(f"{n}. {result.title}")
            lines.append(f"   {result.url}")
            if result.snippet:
                lines.append(f"   {result.snippet}")
        return "\n".join(lines)

    # fetch

    def fetch_text(self, url: str) -> str:
        url = url.strip()
        answer = self._get(url, {"Accept": "text/html, text/plain;q=0.9, */*;q=0.1"}, check=not self.allow_local,
                           content=True)
        if answer.location is not None:
            return (f"{url} redirects (HTTP {answer.status}) to {answer.location}. Not followed: fetch that URL "
                    f"if you want it.")
        if not answer.content_type and b"\0" in answer.body[:4096]:
            raise WebError(f"{url} has no content type and is not text: not read")
        html = answer.content_type.startswith(_HTML_TYPES)
        title, text = page_text(answer.text(), base=url) if html else ("", answer.text().strip())
        head = [f"URL: {url}"]
        if title:
            head.append(f"Title: {title}")
        status = f"HTTP {answer.status}, {answer.content_type or 'no content type'}, {len(text):,} characters"
        if len(text) > self.fetch_chars:
            status += f"; only the first {self.fetch_chars:,} are shown"
            text = text[:self.fetch_chars]
        head.append(f"({status})")
        return "\n".join(head) + "\n\n" + text

    # one GET, with every limit

    def _get(self, url: str, headers: dict, *, check: bool, content: bool = False) -> _Answer:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise WebError(f"only http and https URLs are read, not {parts.scheme or 'this'}: {url!r}")
        try:
            host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise WebError(f"{url!r} has a port that is not a number") from None
        if not host:
            raise WebError(f"{url!r} names no host")
        if parts.username is not None or parts.password is not None:
            raise WebError("a URL with a user name or password is not read")
        ends = time.monotonic() + self.deadline
        try:
            addresses = _within(self.deadline, lambda: self.resolve(host, port))
        except TimeoutError:
            raise WebError(f"{url} did not answer within {self.deadline:g} seconds (looking up {host})") from None
        except (OSError, UnicodeError) as error:
            raise WebError(f"cannot find {host}: {error}") from None
        if not addresses:
            raise WebError(f"cannot find {host}")
        if check:
            for address in addresses:
                if not is_public(address):
                    raise WebError(f"{host} is at {address}, which is not a public address: refused (a run started "
                                   f"with --allow-local-fetch reads local and private addresses)")
        fired = threading.Event()
        sockets: list[socket.socket] = []

        def cut() -> None:  # the deadline: ends a read that waits, whatever it waits for
            fired.set()
            for sock in sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(max(0.0, ends - time.monotonic()), cut)
        timer.daemon = True
        timer.start()
        connection = None
        try:
            sock = self._connect(addresses, port, ends)
            sockets.append(sock)
            if fired.is_set():
                cut()
            if parts.scheme == "https":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
                sockets.append(sock)
            connection = http.client.HTTPConnection(host, port, timeout=self.deadline)
            connection.sock = sock
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            sent = {"User-Agent": _AGENT, "Accept-Encoding": "identity", **headers}
            connection.request("GET", path, headers=sent)
            response = connection.getresponse()
            kind = response.headers.get_content_type() if response.headers.get("Content-Type") else ""
            charset = response.headers.get_content_charset()
            location = response.headers.get("Location")
            if 300 <= response.status < 400 and location:
                return _Answer(url, response.status, kind, charset, b"", urljoin(url, location.strip()))
            if content and response.status == 200 and kind and not kind.startswith(_TEXT_TYPES):
                raise WebError(f"{url} is {kind}, not a text page: not read")
            length = response.headers.get("Content-Length", "")
            if length.strip().isdigit() and int(length) > self.limit:
                raise WebError(f"{url} is {_size(int(length))}, over the {_size(self.limit)} limit: not read")
            body = bytearray()
            while True:
                if fired.is_set():
                    raise socket.timeout()
                sock.settimeout(max(0.001, ends - time.monotonic()))
                chunk = response.read1(_CHUNK)
                if not chunk:
                    break
                body += chunk
                if len(body) > self.limit:
                    raise WebError(f"{url} is over the {_size(self.limit)} limit: not read")
            if fired.is_set():
                raise socket.timeout()
            return _Answer(url, response.status, kind, charset, bytes(body), None)
        except WebError:
            raise
        except (TimeoutError, socket.timeout):
            raise WebError(f"{url} did not answer within {self.deadline:g} seconds") from None
        except ssl.SSLError as error:
            raise WebError(f"{url}: TLS failed: {error}") from None
        except (OSError, http.client.HTTPException, ValueError) as error:
            if fired.is_set():
                raise WebError(f"{url} did not answer within {self.deadline:g} seconds") from None
            raise WebError(f"{url}: {type(error).__name__}: {error}") from None
        finally:
            timer.cancel()
            if connection is not None:
                connection.close()
            for sock in sockets:
                try:
                    sock.close()
                except OSError:
                    pass

    @staticmethod
    def _connect(addresses: list[str], port: int, ends: float) -> socket.socket:
        """A connection to the first of the checked addresses that answers."""
        last: Exception | None = None
        for address in addresses:
            remaining = ends - time.monotonic()
            if remaining <= 0:
                raise socket.timeout()
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(remaining)
            try:
                sock.connect((address, port))
                return sock
            except OSError as error:
                sock.close()
                last = error
        raise last if last is not None else OSError("no address")
