"""The web server's JSON routes (docs/WEB.md's table) and the page's files. Each handler
is small: it checks its input, runs the blocking asks to the chat in the thread pool
(`call`) and answers JSON; refusals are `Refused`, turned into JSON by the middlewares."""

from __future__ import annotations

import io
import mimetypes

from aiohttp import web

from everchat.actors.zoom import media_type
from everchat.actors.models import EFFORTS
from everchat.frontends.web._context import (ASSET_LIMIT, CHAT, CONFIG, HUB, PAIRING, SESSION, SETTINGS, SOCKETS,
                                             STORE, Close, Refused, REVOKED, call, digest_of, is_https, loose,
                                             read_body, read_json, session_answer, text_of, whole)
from everchat.frontends.web import model_settings
from everchat.frontends.web.auth import current_token, iso, may_revoke, token_matches
from everchat.frontends.web.chat import HISTORY_LIMIT
from everchat.transport import RemoteError

__all__ = ["post_session", "post_redeem", "get_me", "get_status", "get_history", "get_view", "get_zoom",
           "get_zoom_text", "get_memory", "get_date", "get_asset", "post_asset", "post_send", "post_stop",
           "post_goal", "get_goal", "post_halt", "post_note", "post_settings", "get_sessions", "delete_session", "post_pair", "static", "no_route"]

async def post_session(request: web.Request) -> web.Response:
    """Trade the token (from the link's fragment) for a session and its cookie. The token is
    the file's as it is now: `--new-token` on another server on this home ends this one's
    link too (P5)."""
    body = await read_json(request)
    config = request.app[CONFIG]
    if not token_matches(body.get("token"), current_token(config.home, config.token)):
        raise Refused(403, "wrong token")
    cookie, session = request.app[STORE].create(body.get("name") or "")
    return session_answer(request, cookie, session)


async def post_redeem(request: web.Request) -> web.Response:
    """Trade a pairing code (single use, 10 minutes) for a paired session."""
    body = await read_json(request)
    if not request.app[PAIRING].redeem(body.get("code")):
        raise Refused(403, "pairing code used or expired")
    cookie, session = request.app[STORE].create(body.get("name") or "", paired=True)
    return session_answer(request, cookie, session)


async def get_me(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    chat = request.app[CHAT]
    folder = getattr(getattr(chat.session, "supervisor", None), "chat", None) or settings.chat_dir
    answer = {
        "session": request[SESSION].public(),
        "demo": settings.reply.provider == "demo",
        "models": dict(model_settings.running_models(settings), effort=settings.reply.effort),
        "efforts": list(EFFORTS),
        "chat": str(folder),
        "version": _version(),
    }
    saved = await call(request, model_settings.saved_models, settings)
    if saved is not None:
        answer["saved_models"] = saved
    return web.json_response(answer)


async def post_settings(request: web.Request) -> web.Response:
    """Save the reply and summary models, their efforts and the connection (api, or a
    subscription and its CLI) to config.toml (as `everchat setup` does); the running chat
    keeps its models until `everchat web` starts again."""
    body = await read_json(request)
    try:
        changes = model_settings.check(body)
        models = await call(request, model_settings.save, request.app[SETTINGS], changes)
    except model_settings.SavingError as error:
        raise Refused(400, str(error)) from None
    return web.json_response({"saved": True, "restart": True, "models": models})


async def get_status(request: web.Request) -> web.Response:
    return web.json_response(await call(request, request.app[CHAT].status))


async def get_history(request: web.Request) -> web.Response:
    """A page of the log (never the whole chat): up to `limit` messages before `before`."""
    before = whole(request, "before")
    limit = whole(request, "limit", 50)
    if not 1 <= limit <= HISTORY_LIMIT:
        raise Refused(400, f"limit is 1 to {HISTORY_LIMIT}, not {limit}")
    if before is not None and before < 0:
        raise Refused(400, f"before is a message id (0 or more), not {before}")
    return web.json_response(await call(request, request.app[CHAT].history, before, limit))


async def get_view(request: web.Request) -> web.Response:
    """The view (R14, R15) or the compaction view (R21), as lines."""
    which = request.query.get("which", "turn")
    if which not in ("turn", "compaction"):
        raise Refused(400, f"which is turn or compaction, not {which!r}")
    return web.json_response(await call(request, request.app[CHAT].view, which))


async def get_zoom(request: web.Request) -> web.Response:
    """R35: a line's two halves, or a message whole."""
    first = loose(request.query.get("id"))
    if first is None:
        raise Refused(400, "zoom needs id and n (e.g. id=0&n=8)")
    count = loose(request.query.get("n"), 1)
    return web.json_response(await call(request, request.app[CHAT].zoom, first, count))


async def get_zoom_text(request: web.Request) -> web.Response:
    """R35: the zoom tool's own text, for `connect`'s /zoom."""
    first = loose(request.query.get("id"))
    if first is None:
        raise Refused(400, "zoom needs id (and n), or an agent's name")
    count = loose(request.query.get("n"), 1)
    page = loose(request.query.get("page"), 1)
    return web.json_response({"text": await call(request, request.app[CHAT].zoom_text, first, count, page)})


async def get_memory(request: web.Request) -> web.Response:
    """Where message ID is in memory now: its view line and the nodes down to it."""
    first = loose(request.query.get("id"))
    if first is None:
        raise Refused(400, "memory needs id")
    return web.json_response(await call(request, request.app[CHAT].memory, first))


async def get_date(request: web.Request) -> web.Response:
    """R35: the date tool's words."""
    first = loose(request.query.get("id"))
    if first is None:
        raise Refused(400, "date needs id")
    return web.json_response({"date": await call(request, request.app[CHAT].date, first)})


async def get_asset(request: web.Request) -> web.Response:
    """R9: a stored image, cached for good (its name is its digest)."""
    digest = request.match_info["digest"]
    try:
        digest_of(digest)
        data = await call(request, request.app[CHAT].asset, digest)
    except (Refused, RemoteError):
        raise Refused(404, "no such image") from None
    try:
        kind = media_type(data)
    except ValueError:
        raise Refused(404, "no such image") from None
    return web.Response(body=data, content_type=kind,
                        headers={"Cache-Control": "private, max-age=31536000, immutable"})


async def post_asset(request: web.Request) -> web.Response:
    """R9: store an image (PNG, JPEG, GIF, WebP by its bytes, at most 5 MB) once."""
    from everchat.actors.folder._assets import image_type

    data = await read_body(request, ASSET_LIMIT, "an image is at most 5 MB (R9)")
    if image_type(data) is None:
        raise Refused(400, "not a PNG, JPEG, GIF or WebP image (R9)")
    try:
        digest = await call(request, request.app[CHAT].put_asset, data)
    except RemoteError as error:
        raise Refused(400, error.text) from None
    return web.json_response({"digest": digest})


async def post_send(request: web.Request) -> web.Response:
    """R36: the person's message; starts a turn or joins the running one."""
    body = await read_json(request)
    text = text_of(body)
    images = body.get("images", [])
    if not isinstance(images, list):
        raise Refused(400, "images is a list of digests")
    digests = [digest_of(d) for d in images]
    if not text.strip() and not digests:
        raise Refused(400, "an empty message")
    chat = request.app[CHAT]
    for digest in digests:  # a digest of no stored image would fail the turn: refuse it now
        try:
            await call(request, chat.asset, digest)
        except RemoteError:
            raise Refused(400, f"no image {digest} (post it to /api/asset first)") from None
    try:
        logged = await call(request, chat.send, text, digests)
    except ValueError as error:  # `/agent NAME TASK` with a bad name or no task (R38)
        raise Refused(400, str(error)) from None
    except RemoteError as error:
        if error.kind == "BadInput":
            raise Refused(400, error.text) from None
        raise
    message = await call(request, chat.message, logged.ids[0])
    request.app[HUB].announce(logged.turn if logged.turn >= 0 else logged.ids[0], message)
    return web.json_response({"id": logged.ids[0]})


async def post_goal(request: web.Request) -> web.Response:
    """Issue 13 (docs/GOALS.md): `/goal TEXT`: TEXT becomes the chat's goal and is sent as
    the person's message; the chat keeps working until a check finds it met."""
    text = text_of(await read_json(request))
    if not text.strip():
        raise Refused(400, "a goal needs its text: /goal TEXT")
    chat = request.app[CHAT]
    try:
        logged = await call(request, chat.goal, text)
    except RemoteError as error:
        if error.kind in ("BadInput", "ValueError"):
            raise Refused(400, error.text) from None
        raise
    message = await call(request, chat.message, logged.ids[0])
    request.app[HUB].announce(logged.turn if logged.turn >= 0 else logged.ids[0], message)
    return web.json_response({"id": logged.ids[0]})


async def get_goal(request: web.Request) -> web.Response:
    """Issue 13: the chat's goal (`text`, `state`, `turns`, `detail`), or null."""
    return web.json_response({"goal": await call(request, request.app[CHAT].goal_status)})


async def post_halt(request: web.Request) -> web.Response:
    """Issue 13: `/halt`: drop the goal (the running reply finishes; /stop stops it)."""
    await read_json(request)
    await call(request, request.app[CHAT].halt_goal)
    return web.json_response({})


async def post_stop(request: web.Request) -> web.Response:
    """R37: end the running call; what streamed is kept, marked incomplete. With
    `{"agent": NAME}`: that agent's call and its device jobs (R38)."""
    body = await read_json(request)
    agent = body.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise Refused(400, "agent is an agent's name")
    try:
        await call(request, request.app[CHAT].stop, agent)
    except RemoteError as error:
        raise Refused(400, error.text) from None
    return web.json_response({})


async def post_note(request: web.Request) -> web.Response:
    """R3: a note, logged without a turn."""
    text = text_of(await read_json(request))
    if not text.strip():
        raise Refused(400, "an empty note")
    try:
        i = await call(request, request.app[CHAT].note, text)
    except RemoteError as error:
        if error.kind == "BadInput":
            raise Refused(400, error.text) from None
        raise
    return web.json_response({"id": i})


async def get_sessions(request: web.Request) -> web.Response:
    mine = request[SESSION].id
    return web.json_response({"sessions": [dict(s.public(), current=s.id == mine)
                                           for s in request.app[STORE].sessions()]})


async def delete_session(request: web.Request) -> web.Response:
    """Revoke a session: its entry goes, its sockets close at once (4401), here and (within
    the watch's half second) on every other server on this home (P5). A paired session may
    revoke only itself (`may_revoke`, docs/WEB.md "Who may revoke whom")."""
    public = request.match_info["id"]
    store = request.app[STORE]
    target = store.get(public)
    if target is None:
        raise Refused(404, "no such session")
    if not may_revoke(request[SESSION], target):
        raise Refused(403, "a paired device may end only its own session")
    if not store.revoke(public):
        raise Refused(404, "no such session")
    for queue in list(request.app[SOCKETS].pop(public, ())):
        queue.put_nowait(Close(REVOKED, b"session revoked"))  # its writer closes it, after what it sends
    return web.json_response({})


async def post_pair(request: web.Request) -> web.Response:
    """A single-use pairing link (10 minutes) and its QR code (segno); only a session made
    with the token may pair a device (a paired one could otherwise outlive its revocation by
    pairing a successor)."""
    import segno

    if request[SESSION].paired:
        raise Refused(403, "only a browser signed in with the link may pair a device")
    code, expires = request.app[PAIRING].make()
    scheme = "https" if is_https(request) else "http"
    link = f"{scheme}://{request.headers['Host']}/#pair={code}"
    svg = io.BytesIO()
    segno.make(link, error="m").save(svg, kind="svg", xmldecl=False, scale=4, border=2)
    return web.json_response({"link": link, "expires": iso(expires), "qr_svg": svg.getvalue().decode()})


async def static(request: web.Request) -> web.StreamResponse:
    """The page's files (frontends/web/static/); index.html for `/`. A name the file system
    cannot take (a NUL: P3, P9) or that ends in `/` (`/app.js/`) is 404 before any file is
    touched."""
    root = request.app[CONFIG].static.resolve()
    name = request.match_info.get("path") or "index.html"
    if "\x00" in name or name.endswith("/"):
        raise Refused(404, "not found")
    try:
        path = (root / name).resolve()
        found = root in path.parents and path.is_file()
    except (OSError, ValueError):  # a name too long, or one the OS refuses
        found = False
    if not found:
        raise Refused(404, "not found")
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if path.suffix in (".js", ".mjs"):
        kind = "text/javascript"
    return web.FileResponse(path, headers={"Content-Type": kind})



async def no_route(request: web.Request) -> web.Response:
    raise Refused(404, "not found")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("everchat")
    except PackageNotFoundError:
        return "unknown"
