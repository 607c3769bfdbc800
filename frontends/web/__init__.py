"""The web page (docs/WEB.md): the aiohttp server over a `ChatSession`, its event hub, and
who may use it. The page's own files are in `static/`.

    app = make_app(session, settings, WebConfig(home=settings.home, token=load_token(settings.home)))
    running = start_in_thread(app, "127.0.0.1", 0)   # running.port
"""

from everchat.frontends.web.auth import SessionStore, load_token
from everchat.frontends.web.chat import WebChat
from everchat.frontends.web.hub import EventRing, Hub
from everchat.frontends.web.server import Running, WebConfig, make_app, start_in_thread

__all__ = ["make_app", "start_in_thread", "Running", "WebConfig", "WebChat", "Hub", "EventRing", "SessionStore",
           "load_token"]
