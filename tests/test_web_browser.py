"""The web page in a real browser (docs/WEB.md): headless Chromium, driven by Playwright,
against the real server (`make_app` over a real ChatSession) in the test's own folder.
What a person sees is found by role and label; every wait is on a condition."""

from __future__ import annotations

import re

import playwright.sync_api as playwright_api
import pytest

from everchat.tools.fakemodel import FakeModelServer, Gate, Reply, Text, ToolCall
from page_world import CHROMIUM, CHROMIUM_ARGS, demo_settings, fake_reply_settings, serve, shot_folder
from test_web_search import web  # noqa: F401 (fixture: the local search server)

expect = playwright_api.expect
expect.set_options(timeout=30_000)

LOCKED = "Open the link everchat web printed."
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")
"""A 1x1 PNG."""


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


def _refused(text: str) -> bool:
    """The browser's own line for a request the test means to be refused (no session, used code)."""
    return text.startswith("Failed to load resource") and ("401" in text or "403" in text)


class Pages:
    """The test's browser contexts (each its own cookies, as separate browsers), and what
    went wrong in them: uncaught errors and console errors (a CSP refusal is one)."""

    def __init__(self, browser) -> None:
        self.browser = browser
        self.contexts = []
        self.errors: list[str] = []

    def new(self, **options):
        context = self.browser.new_context(**options)
        self.contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        page.on("console", lambda message: self.errors.append(f"console: {message.text}")
                if message.type == "error" and not _refused(message.text) else None)
        return page

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture
def pages(browser):
    opened = Pages(browser)
    yield opened
    opened.close()
    assert opened.errors == []


@pytest.fixture
def served(tmp_path):
    with serve(demo_settings(tmp_path / "home")) as running:
        yield running


def open_chat(page, link: str) -> None:
    page.goto(link)
    expect(page.get_by_role("tab", name="Chat")).to_be_visible()
    expect(page.get_by_role("tab", name="Chat")).to_have_attribute("aria-selected", "true")


def message_box(page):
    return page.get_by_role("textbox", name="Message")


def send(page, text: str) -> None:
    message_box(page).fill(text)
    message_box(page).press("Enter")


def assistant(page):
    return page.locator("#messages li.msg-assistant")


def ended(page, replies: int | None = None) -> None:
    """The turn is over (after `replies` replies, when given: right after a send the turn may
    not have started yet) and its rows carry their logged ids (checked against the log)."""
    if replies is not None:
        expect(assistant(page)).to_have_count(replies)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    expect(page.locator("#messages li.live")).to_have_count(0)


def test_a_page_without_a_session_is_locked_and_the_link_opens_it_and_leaves_the_address(served, pages):
    page = pages.new()
    page.goto(served.origin + "/")
    expect(page.get_by_role("heading", name="Everchat is locked")).to_be_visible()
    expect(page.get_by_text(LOCKED)).to_be_visible()
    expect(page.get_by_role("tab", name="Chat")).to_be_hidden()

    open_chat(page, served.link)
    expect(page.get_by_role("heading", name="Everchat is locked")).to_be_hidden()
    assert "#" not in page.url and served.token not in page.url
    expect(message_box(page)).to_be_focused()
    page.reload()  # the cookie keeps the session
    expect(page.get_by_role("tab", name="Chat")).to_be_visible()

    manifest = page.locator('link[rel="manifest"]').get_attribute("href")
    answer = page.request.get(f"{served.origin}/{manifest}")
    assert answer.ok and answer.json()["name"] == "Everchat"
    icon = answer.json()["icons"][0]
    assert page.request.get(f"{served.origin}/{icon['src']}").headers["content-type"] == "image/svg+xml"


def test_a_message_to_the_demo_model_streams_its_reply_and_a_question_zooms_one_line(served, pages, tmp_path):
    page = pages.new(viewport={"width": 1100, "height": 1150})
    open_chat(page, served.link)
    page.evaluate("""() => {
        window.pieces = 0;
        new MutationObserver((changes) => {
            window.pieces += changes.filter((c) => c.type === "characterData").length;
        })
            .observe(document.getElementById("messages"), {subtree: true, characterData: true});
    }""")
    message_box(page).type("Remember that")
    message_box(page).press("Shift+Enter")  # a new line, not a send
    message_box(page).type("the code word is amber-42.")
    assert message_box(page).input_value() == "Remember that\nthe code word is amber-42."
    message_box(page).press("Enter")
    expect(assistant(page).first).to_contain_text("Noted as message 0.")
    expect(message_box(page)).to_have_value("")
    ended(page)
    assert page.evaluate("window.pieces") > 1  # it came in pieces, as streamed
    first = page.locator("#messages li.msg-user").first
    expect(first).to_have_text(re.compile("Remember that\nthe code word is amber-42."))
    expect(page.get_by_role("separator", name="Today")).to_have_count(1)

    send(page, "What is the code word?")
    answer = re.compile(r'In message 0 you wrote: ".*the code word is amber-42\."')
    expect(assistant(page).nth(1)).to_contain_text(answer)
    thought = page.locator("#messages li.thinking details")
    expect(thought.locator("summary")).to_have_text(re.compile(r"^Thought for \d+s$"))
    expect(thought).not_to_have_attribute("open", "")
    thought.locator("summary").click()  # it opens to what the model thought
    expect(thought.locator(".thinking-text")).to_be_visible()
    tool = page.locator("#messages li.tool")
    expect(tool).to_have_count(1)
    expect(tool.locator("summary")).to_have_text(re.compile(r"Read message 0$"))
    ended(page)
    tool.locator("summary").click()
    expect(tool.locator(".args")).to_contain_text('"id": 0')
    expect(tool.locator(".result")).to_contain_text("the code word is amber-42.")

    labels = page.evaluate("""async () => {
        const { toolLabel } = await import("/messages.js");
        return [toolLabel("zoom", '{"id": 4096, "n": 4096}'), toolLabel("zoom", '{"id": 12, "n": 1}'),
                toolLabel("date", '{"id": 12}'), toolLabel("zoom", '{"id": "Scout"}')];
    }""")
    assert labels == ["Looked back at 4,096 messages", "Read message 12", "Checked the date of 12",
                      "Read Scout's transcript"]

    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=served.origin)
    page.get_by_role("button", name="Copy message 0").click()
    copied = ""
    for _ in range(300):  # the copy is written asynchronously: read until it is there
        copied = page.evaluate("() => navigator.clipboard.readText()")
        if copied:
            break
        page.wait_for_timeout(100)
    assert copied == "Remember that\nthe code word is amber-42."

    page.get_by_role("button", name="Memory of message 0").click()
    expect(page.get_by_role("region", name="Where message 0 is kept")).to_contain_text("Kept now by the view line 0+1")
    page.screenshot(path=str(shot_folder(tmp_path) / "chat.png"))


def test_an_image_pasted_shows_a_preview_can_be_removed_and_goes_with_the_message(served, pages):
    page = pages.new()
    open_chat(page, served.link)
    paste = """async () => {
        const canvas = document.createElement("canvas");
        canvas.width = 8; canvas.height = 6;
        const pen = canvas.getContext("2d");
        pen.fillStyle = "#0b57d0"; pen.fillRect(0, 0, 8, 6);
        const blob = await new Promise((done) => canvas.toBlob(done, "image/png"));
        const data = new DataTransfer();
        data.items.add(new File([blob], "dot.png", {type: "image/png"}));
        const box = document.getElementById("composer-text");
        box.focus();
        box.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data, bubbles: true, cancelable: true}));
    }"""
    page.evaluate(paste)
    previews = page.get_by_role("list", name="Images to send")
    expect(previews.get_by_role("img", name="Image 1 to send: dot.png")).to_be_visible()
    page.get_by_role("button", name="Remove image 1").click()
    expect(previews.get_by_role("img")).to_have_count(0)

    drop = paste.replace('box.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data,',
                         'document.getElementById("panel-chat")'
                         '.dispatchEvent(new DragEvent("drop", {dataTransfer: data,')
    page.evaluate(drop)  # dragged and dropped on the chat
    expect(previews.get_by_role("img", name="Image 1 to send: dot.png")).to_be_visible()
    with page.expect_file_chooser() as chosen:  # and by the button
        page.get_by_role("button", name="Attach an image").click()
    chosen.value.set_files([{"name": "one.png", "mimeType": "image/png", "buffer": PNG}])
    expect(previews.get_by_role("img", name="Image 2 to send: one.png")).to_be_visible()
    page.get_by_role("button", name="Remove image 2").click()
    expect(previews.get_by_role("img")).to_have_count(1)
    send(page, "What is in this picture?")
    sent = page.locator("#messages li.msg-user").first
    expect(sent).to_contain_text("What is in this picture?")
    image = sent.get_by_role("img", name="Image 1 of 1")
    expect(image).to_have_attribute("src", re.compile(r"^/api/asset/[0-9a-f]{64}$"))
    page.wait_for_function("(img) => img.complete && img.naturalWidth === 8", arg=image.element_handle())
    expect(previews.get_by_role("img")).to_have_count(0)
    ended(page, replies=1)


@pytest.fixture
def held(tmp_path):
    """A chat whose replies come from the fake model server: a first answer that streams
    and calls zoom, then a second held at a gate until the test opens it."""
    gate = Gate()
    with FakeModelServer() as fake:
        fake.script(Reply(Text("First I look back. "), ToolCall("zoom", {"id": 0, "n": 1})),
                    Reply(Text("The answer is forty-two."), gate=gate),
                    Reply(Text("Held again."), gate=gate))
        with serve(fake_reply_settings(tmp_path / "home", fake.base_url)) as running:
            try:
                yield running, gate
            finally:
                gate.open()  # before the chat closes: nothing waits on it any more


def test_r37_stop_ends_the_reply_and_keeps_what_streamed(held, pages):
    served, gate = held
    page = pages.new()
    open_chat(page, served.link)
    send(page, "Tell me the answer.")
    expect(assistant(page).first).to_have_text(re.compile("First I look back."))
    expect(page.locator("#messages li.tool summary")).to_have_text(re.compile("Read message 0"))
    stop = page.get_by_role("button", name="Stop")
    expect(stop).to_be_visible()
    stop.click()
    expect(page.get_by_text("Stopped. The reply so far is kept, marked incomplete.")).to_be_visible()
    ended(page)
    expect(page.get_by_text("The answer is forty-two.")).to_have_count(0)
    expect(assistant(page)).to_have_count(1)

    send(page, "And now?")  # held before its first word; Esc stops it
    expect(stop).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_text("Stopped. The reply so far is kept, marked incomplete.")).to_have_count(2)
    ended(page)
    expect(page.get_by_text("Held again.")).to_have_count(0)


def test_r36_a_reload_in_the_middle_of_a_reply_loses_nothing_and_doubles_nothing(held, pages):
    served, gate = held
    page = pages.new()
    open_chat(page, served.link)
    send(page, "Tell me the answer.")
    expect(page.locator("#messages li.tool summary")).to_have_text(re.compile("Read message 0"))
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    page.reload()
    expect(page.get_by_role("tab", name="Chat")).to_be_visible()
    expect(page.get_by_text("First I look back.")).to_have_count(1)
    gate.open()
    expect(page.get_by_text("The answer is forty-two.")).to_be_visible()
    ended(page)
    expect(page.get_by_text("The answer is forty-two.")).to_have_count(1)
    expect(page.get_by_text("First I look back.")).to_have_count(1)
    expect(page.locator("#messages li.msg-user")).to_have_text([re.compile("Tell me the answer.")])
    expect(page.locator("#messages li.tool")).to_have_count(1)
    expect(assistant(page).last.get_by_role("button", name=re.compile(r"^Copy message \d+$"))).to_be_visible()


@pytest.fixture
def long_chat(tmp_path):
    """A chat of 300 notes, summarized and merged (R19), so its view lines cover several messages."""
    settings = demo_settings(tmp_path / "home")
    with serve(settings) as running:
        for n in range(300):
            running.session.note(f"Note {n}: " + " ".join(f"word{n}x{k} topic{k % 17}" for k in range(60)))
        running.session.compact(timeout=600)
        yield running


def test_the_inspector_shows_the_view_as_slips_and_opens_one_down_to_its_message(long_chat, pages, tmp_path):
    page = pages.new(viewport={"width": 1280, "height": 1000})
    open_chat(page, long_chat.link)
    expect(page.locator("#messages li.msg-note").last).to_contain_text("Note 299:")
    rows = page.locator("#messages li[data-id]")
    expect(rows).to_have_count(50)  # the newest page only, never the whole chat
    expect(rows.first).to_contain_text("Note 250:")
    page.locator("#scroller").evaluate("(box) => { box.scrollTop = 0; }")
    expect(rows).to_have_count(100)  # scrolling up loads the page before
    expect(rows.first).to_contain_text("Note 200:")
    send(page, "What did Note 7 say about topic3?")  # a turn, for the usage figures
    ended(page, replies=1)

    page.get_by_role("tab", name="Memory").click()
    slips = page.get_by_role("list", name="Turn view lines")
    first = slips.get_by_role("button", name=re.compile(r"^0\+(\d+): \d+ messages"))
    expect(first).to_be_visible()
    count = int(re.match(r"0\+(\d+)", first.get_attribute("aria-label")).group(1))
    assert count >= 2
    expect(page.get_by_role("meter", name="View size")).to_have_attribute("aria-valuenow", re.compile(r"^\d+$"))

    first.click()  # open 0+count, then its first half each time, down to message 0
    opened = [f"0+{count}"]
    while count > 1:
        count //= 2
        half = page.get_by_role("list", name=f"The two halves of {opened[-1]}")
        expect(half.get_by_role("button", name=re.compile(rf"^\d+\+{count}: "))).to_have_count(2)
        half.get_by_role("button", name=re.compile(rf"^0\+{count}: ")).click()
        opened.append(f"0+{count}")
    original = page.get_by_role("article", name="Message 0")
    expect(original).to_contain_text("Note 0: word0x0 topic0")
    page.locator("#panel-memory").evaluate("(panel) => { panel.scrollTop = 0; }")
    page.screenshot(path=str(shot_folder(tmp_path) / "inspector.png"))
    page.get_by_role("button", name=f"Fold {opened[0]} back").click()
    expect(original).to_be_hidden()
    expect(first).to_have_attribute("aria-expanded", "false")

    page.get_by_role("button", name="Compaction view").click()
    expect(page.get_by_role("list", name="Compaction view lines").get_by_role("button").first).to_be_visible()


def test_a_second_browser_pairs_with_the_pairing_link_and_sees_the_same_chat(served, pages, tmp_path):
    first = pages.new(viewport={"width": 1000, "height": 1400})
    open_chat(first, served.link)
    send(first, "Remember that the code word is amber-42.")
    ended(first, replies=1)
    first.get_by_role("tab", name="Settings").click()
    expect(first.get_by_text("Demo mode: replies and summaries come from the built-in demo model")).to_be_visible()
    first.get_by_role("button", name="Make a pairing link").click()
    qr = first.get_by_role("img", name="QR code of the pairing link")
    expect(qr).to_be_visible()
    first.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=qr.element_handle())
    link = first.get_by_label("Pairing link").input_value()
    assert re.fullmatch(re.escape(served.origin) + r"/#pair=[\w-]+", link)
    expect(first.get_by_text(re.compile(r"valid until"))).to_be_visible()
    first.screenshot(path=str(shot_folder(tmp_path) / "settings.png"))

    second = pages.new()
    open_chat(second, link)
    assert "pair=" not in second.url
    expect(second.get_by_text("Remember that the code word is amber-42.")).to_be_visible()
    third = pages.new()  # the code was single use
    third.goto(link)
    expect(third.get_by_text("This pairing link was used already or has expired.")).to_be_visible()

    send(second, "What is the code word?")  # the first page sees it too
    expect(first.get_by_role("tab", name="Chat")).to_be_visible()
    first.get_by_role("tab", name="Chat").click()
    expect(first.get_by_text("What is the code word?")).to_be_visible()
    expect(assistant(first).nth(1)).to_contain_text("amber-42")

    second.get_by_role("tab", name="Settings").click()  # paired: it may end only itself, and pairs no one
    expect(second.locator("#sessions li")).to_have_count(2)
    expect(second.locator("#sessions li.current").get_by_role("button", name=re.compile("^Revoke"))).to_be_visible()
    expect(second.locator("#sessions li:not(.current)").get_by_role("button")).to_have_count(0)
    expect(second.get_by_role("button", name="Make a pairing link")).to_be_hidden()
    expect(second.get_by_text("This device was paired")).to_be_visible()


def test_revoking_a_session_locks_its_page_at_once(served, pages):
    first = pages.new()
    open_chat(first, served.link)
    second = pages.new()
    open_chat(second, served.link)
    second.get_by_role("tab", name="Settings").click()
    sessions = second.locator("#sessions li")
    expect(sessions).to_have_count(2)
    expect(second.locator("#sessions li.current")).to_contain_text("this browser")
    second.locator("#sessions li:not(.current)").get_by_role("button", name=re.compile("^Revoke")).click()
    expect(sessions).to_have_count(1)
    expect(first.get_by_role("heading", name="Everchat is locked")).to_be_visible()
    expect(first.get_by_text("This session was revoked.")).to_be_visible()
    first.reload()
    expect(first.get_by_role("heading", name="Everchat is locked")).to_be_visible()
    expect(second.get_by_role("tab", name="Chat")).to_be_visible()


def test_the_theme_choice_is_kept_across_a_reload(served, pages):
    page = pages.new(color_scheme="light")
    open_chat(page, served.link)
    page.get_by_role("tab", name="Settings").click()
    page.get_by_role("radio", name="Dark").check()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.reload()
    expect(page.get_by_role("tab", name="Chat")).to_be_visible()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(20, 20, 20)"
    page.get_by_role("tab", name="Settings").click()
    page.get_by_role("radio", name="System").check()
    assert page.evaluate("document.documentElement.dataset.theme") is None


def test_a_phone_375_pixels_wide_never_scrolls_sideways(served, pages, tmp_path):
    page = pages.new(viewport={"width": 375, "height": 740}, is_mobile=True, has_touch=True, device_scale_factor=2)
    open_chat(page, served.link)
    send(page, "Remember https://example.com/" + "a-very-long-path-without-spaces-" * 4 + " please.")
    expect(assistant(page).first).to_contain_text("Noted as message 0.")
    ended(page)
    send(page, "What did I ask you to remember?")
    expect(page.locator("#messages li.tool")).to_have_count(1)
    ended(page, replies=2)
    wide = "document.documentElement.scrollWidth"
    assert page.evaluate(wide) <= 375
    page.screenshot(path=str(shot_folder(tmp_path) / "phone.png"))
    for tab in ("Memory", "Settings"):
        page.get_by_role("tab", name=tab).click()
        expect(page.get_by_role("tabpanel", name=tab)).to_be_visible()
        assert page.evaluate(wide) <= 375, tab
    page.get_by_role("button", name="Make a pairing link").click()
    expect(page.get_by_role("img", name="QR code of the pairing link")).to_be_visible()
    assert page.evaluate(wide) <= 375


CONTRAST = """() => {
    const rgb = (text) => text.match(/[\\d.]+/g).map(Number);
    const light = ([r, g, b]) => {
        const [R, G, B] = [r, g, b].map((c) => {
            c /= 255;
            return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * R + 0.7152 * G + 0.0722 * B;
    };
    const behind = (node) => {
        for (; node; node = node.parentElement) {
            const color = rgb(getComputedStyle(node).backgroundColor);
            if (color.length < 4 || color[3] > 0) return color;
        }
        return [255, 255, 255];
    };
    const found = {};
    const pick = {
        "reply text": "#messages li.msg-assistant .text", "your text": "#messages li.msg-user .text",
        "time": "#messages li.msg-user .when", "Copy": "#messages li.msg-user button.link",
        "tool line": "#messages li.tool summary", "day": "#messages li.day", "Send": "#send",
        "tab": "#tab-memory", "selected tab": "#tab-chat", "placeholder box": "#composer-text",
    };
    for (const [name, selector] of Object.entries(pick)) {
        const node = document.querySelector(selector);
        if (!node) { found[name] = 0; continue; }
        const [a, b] = [light(rgb(getComputedStyle(node).color)), light(behind(node))];
        found[name] = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    }
    return found;
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_and_controls_meet_wcag_aa_contrast_in_both_themes(served, pages, scheme):
    page = pages.new(color_scheme=scheme)  # the system's theme, followed by default
    open_chat(page, served.link)
    send(page, "Remember that the code word is amber-42.")
    ended(page, replies=1)
    send(page, "What is the code word?")
    expect(page.locator("#messages li.tool")).to_have_count(1)
    ended(page, replies=2)
    ratios = page.evaluate(CONTRAST)
    assert all(ratio >= 4.5 for ratio in ratios.values()), ratios
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(20, 20, 20)"
    assert dark == (scheme == "dark")


def test_a_lost_socket_reconnects_with_its_place_and_misses_nothing(served, pages):
    page = pages.new()
    sockets, held = [], []

    def route(socket):  # the first socket goes through; the next one waits until the test lets it
        if sockets:
            held.append(socket)
        else:
            socket.connect_to_server()
        sockets.append(socket)

    page.route_web_socket(re.compile(r"/api/events"), route)
    open_chat(page, served.link)
    send(page, "Remember that the code word is amber-42.")
    ended(page, replies=1)
    sockets[0].close(code=1011, reason="lost")
    page.wait_for_function("() => document.getElementById('conn').dataset.state !== 'live'")
    other = pages.new()
    open_chat(other, served.link)
    send(other, "Remember that the door code is 1234.")  # while the first page is away
    ended(other, replies=2)
    expect(page.get_by_text("Remember that the door code is 1234.")).to_have_count(0)
    for _ in range(300):  # the page dials again (after its backoff); the route hears of it as events pass
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the page never dialed again"
    assert re.search(r"[?&]after=\d+&run=\w+", held[0].url), held[0].url  # from where it was
    held[0].connect_to_server()
    expect(page.locator("#messages li.msg-user").last).to_have_text(re.compile("the door code is 1234"))
    expect(assistant(page)).to_have_count(2)
    expect(page.locator("#messages li.msg-user")).to_have_count(2)


def test_a_fetched_page_shows_as_a_link_to_it(tmp_path, pages, web):
    """Issue 13: a fetch tool row links the page it read (its title, the URL as href,
    rel=noopener noreferrer), live and after a reload; a redirect note links nothing."""
    with FakeModelServer() as fake:
        fake.script(Reply(ToolCall("fetch", {"url": web.base + "/page"})), Reply(Text("Read it.")),
                    Reply(ToolCall("fetch", {"url": web.base + "/loop"})), Reply(Text("Not followed.")))
        with serve(fake_reply_settings(tmp_path / "home", fake.base_url, allow_local_fetch="on")) as served:
            page = pages.new()
            open_chat(page, served.link)
            send(page, "Read the page.")
            ended(page, replies=1)
            for _ in range(2):
                link = page.get_by_role("list", name="Page read").get_by_role("link")
                expect(link).to_have_count(1)
                expect(link).to_have_text("A page")
                expect(link).to_have_attribute("href", web.base + "/page")
                expect(link).to_have_attribute("rel", "noopener noreferrer")
                page.reload()
                open_chat(page, served.link)
            send(page, "Now the loop.")
            ended(page, replies=2)
            expect(page.locator("li.tool")).to_have_count(2)
            expect(page.get_by_role("list", name="Page read")).to_have_count(1)


def test_search_results_show_as_links_to_their_sources(tmp_path, pages, monkeypatch, web):
    """Issue 13: a search tool row lists its results as links (text only, http(s) hrefs,
    rel=noopener noreferrer), both live and from the log after a reload."""
    monkeypatch.setenv("EVERCHAT_SEARCH_URL", web.base + "/html/")
    monkeypatch.delenv("BRAVE_SEARCH_API_KEY", raising=False)
    with FakeModelServer() as fake:
        fake.script(Reply(ToolCall("search", {"query": "python"})), Reply(Text("See https://www.python.org/")),
                    Reply(ToolCall("search", {"query": "hostile"})), Reply(Text("Done.")))
        with serve(fake_reply_settings(tmp_path / "home", fake.base_url)) as served:
            page = pages.new()
            open_chat(page, served.link)
            send(page, "Search for python.")
            ended(page, replies=1)
            for _ in range(2):
                links = page.get_by_role("list", name="Search results").get_by_role("link")
                expect(links).to_have_count(10)
                expect(links.first).to_have_text("Welcome to Python.org")
                expect(links.first).to_have_attribute("href", "https://www.python.org/")
                expect(links.first).to_have_attribute("rel", "noopener noreferrer")
                page.reload()
                open_chat(page, served.link)
            send(page, "Now the hostile one.")
            ended(page, replies=2)
            hostile = page.get_by_role("list", name="Search results").nth(1).get_by_role("link")
            expect(hostile).to_have_count(1)  # the javascript: target never became a result
            expect(hostile).to_have_text("<img src=x onerror=alert(1)> Safe")
            expect(hostile).to_have_attribute("href", "https://ok.example/a?x=1&y=2")
            expect(page.locator("#messages img")).to_have_count(0)
