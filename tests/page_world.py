"""A world for the web page's browser tests (tests/test_web_browser.py): the real server
(`make_app` over a real `ChatSession`, served on a thread at a free port) in the test's own
folder, and a headless Chromium driven by Playwright. Screenshots go to docs/screenshots/
with EVERCHAT_SCREENSHOTS=1, else to the test's folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from everchat.actors.settings import Settings, load
from everchat.actors.session.session import ChatSession
from everchat.frontends.web import load_token
from everchat.frontends.web import Running, WebConfig, make_app, start_in_thread

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "Served", "demo_settings", "fake_reply_settings", "serve", "shot_folder"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"


def demo_settings(home: Path) -> Settings:
    """Both models the offline demo, the chat in `home/chat`."""
    return load({"demo": True}, env={}, home=home)


def fake_reply_settings(home: Path, base_url: str, **more) -> Settings:
    """Replies from the fake model server at `base_url` (Anthropic's API), summaries from the
    demo; `more` settings beside them."""
    return load({"reply_provider": "anthropic", "reply_base_url": base_url, "reply_model": "claude-test",
                 "compaction_provider": "demo", **more}, env={"ANTHROPIC_API_KEY": "test-key"}, home=home)


@dataclass
class Served:
    """A running server: its session, its address and the link `everchat web` prints."""

    session: ChatSession
    running: Running
    token: str

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.running.port}"

    @property
    def link(self) -> str:
        return f"{self.origin}/#{self.token}"


@contextmanager
def serve(settings: Settings) -> Iterator[Served]:
    """The chat of `settings` opened and served on 127.0.0.1 at a free port, until the end."""
    home = Path(settings.home)
    home.mkdir(parents=True, exist_ok=True)
    token = load_token(home)
    with ChatSession.open(settings) as session:
        app = make_app(session, settings, WebConfig(home=home, token=token, port=0))
        running = start_in_thread(app, "127.0.0.1", 0)
        try:
            yield Served(session, running, token)
        finally:
            running.stop()


def shot_folder(tmp_path: Path) -> Path:
    """Where screenshots go: the README's docs/screenshots/ when EVERCHAT_SCREENSHOTS=1."""
    folder = SCREENSHOTS if os.environ.get("EVERCHAT_SCREENSHOTS") == "1" else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
