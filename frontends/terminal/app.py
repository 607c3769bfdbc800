"""`everchat` / `everchat chat`: the terminal chat (prompt_toolkit).

Finished lines scroll up into the terminal's own scrollback; below them a live
block shows what is still being written (the thinking dimmed, tool calls waiting
for their result, the reply's unfinished line), then the input line, then the
status bar (`mem 97K/128K · summarizing 3 · demo · cache 98%`). The input stays
usable while the model works: what you send then joins the running turn (R36).
Ctrl-C once stops the reply (kept, marked incomplete: R37); Ctrl-C twice, Ctrl-D
on an empty line or /quit leaves.

The terminal is a thin shell: `slash` parses the commands, `chat_view` turns the
turn events into lines; every call on the `ChatSession` runs off the event loop, in
order of typing, so a slow one never freezes the input. `everchat connect` runs the same
terminal on a `RemoteSession` (frontends/connect/remote.py, `run(session=…)`): a session whose
`next_event` raises is over (revoked), and the chat closes with its words.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prompt_toolkit.application import Application
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, Window
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.layout.menus import CompletionsMenu
from prompt_toolkit.layout.processors import BeforeInput
from prompt_toolkit.styles import Style

from everchat.frontends.terminal.transcript import Transcript, plain, status_lines, status_text
from everchat.frontends.cli.edge import hold_log_lines, say
from everchat.frontends.terminal.slash import Command, CommandCompleter, Send, UsageError, agent_line, help_lines, parse
from everchat.transport import AskTimeout, RemoteError

__all__ = ["Terminal", "run"]

HISTORY_SHOWN = 6
"""Messages shown from the log when the chat opens, so a reopened chat reads on."""

STATUS_EVERY = 0.5
"""Seconds between status bar refreshes."""

MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""R9's 5 MB, as the store reads it (5 MiB); the store checks the type from the bytes."""

COMPACT_WAIT = 0.5
"""/compact waits in steps this long, leaving the session to other calls between them."""

STYLE = Style.from_dict({
    "thinking": "#8a8a8a italic",
    "tool": "#5f87af",
    "tool.error": "#d75f5f",
    "diff.add": "#5faf5f",
    "diff.remove": "#d75f5f",
    "user": "bold",
    "user.prompt": "bold #5fafff",
    "reply": "",
    "info": "#8a8a8a",
    "warning": "#d7af00",
    "error": "#ff5f5f",
    "status": "reverse",
    "prompt": "bold #5fafff",
})


class Terminal:
    """The chat in a terminal, on an open session (anything with ChatSession's methods).

    `input` and `output` default to the terminal; tests pass a pipe input and a
    recording output. `printed` holds every line sent to the scrollback, as text.
    """

    def __init__(self, session, *, input=None, output=None, title: str = "") -> None:
        self.session = session
        self.transcript = Transcript()
        self.printed: list[str] = []
        self.status: dict[str, Any] = {}
        self.title = title
        self._changed = threading.Condition()
        self._attachments: list[Path] = []
        self._armed = False       # Ctrl-C pressed once: the next one quits
        self._sending = 0         # sends not yet logged (a fresh turn settles its view first)
        self._idle_looks = 0      # status polls that found no turn while a reply shows
        self._session_lock = threading.Lock()  # one session call at a time, but `stop`
        self._closing = threading.Event()
        self.ended: Exception | None = None  # what ended the session from outside, if it did
        self._events: list = []   # from the event thread, for `_drain` on the loop
        self._events_lock = threading.Lock()
        self._typed: asyncio.Queue = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.buffer = Buffer(
            multiline=False,
            completer=CommandCompleter(),
            complete_while_typing=True,
            history=InMemoryHistory(),
            accept_handler=self._accept,
            on_text_changed=lambda _: self._disarm(),
        )
        self.app: Application[int] = Application(
            layout=self._layout(),
            key_bindings=self._keys(),
            style=STYLE,
            full_screen=False,
            input=input,
            output=output,
            erase_when_done=True,
        )

    # ---- running -------------------------------------------------------------------------

    def run(self) -> int:
        """Run until /quit, Ctrl-D or Ctrl-C twice; returns the exit status."""
        return asyncio.run(self.run_async())

    async def run_async(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._opening()
        pump = threading.Thread(target=self._pump, name="terminal-events", daemon=True)
        pump.start()
        try:
            with hold_log_lines(sink=self._log_line):  # warnings go to the transcript, not over the screen
                return await self.app.run_async(pre_run=self._started, handle_sigint=False)
        finally:
            self._closing.set()
            await asyncio.to_thread(pump.join)
            self._notify()

    def _started(self) -> None:
        self.app.create_background_task(self._poll_status())
        self.app.create_background_task(self._work())
        self._emit()

    def _log_line(self, line: str) -> None:
        """A log record of this process's actors (`everchat: warning: …`), from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._show_log_line, line)
        except RuntimeError:  # the loop closed meanwhile: the chat is over
            return

    def _show_log_line(self, line: str) -> None:
        self.transcript.info(f"! {line.removeprefix('everchat: ')}", "class:warning")
        self._emit()

    def _pump(self) -> None:
        """The event thread: the session's turn events onto the loop, in order. Events
        that arrive while the loop is busy are drawn together (one scrollback write)."""
        while not self._closing.is_set():
            try:
                event = self.session.next_event(timeout=0.2)
            except Exception as error:  # the session ended from outside (a revoked `connect`)
                if self._loop is not None:
                    self._loop.call_soon_threadsafe(self._session_ended, error)
                return
            if event is None or self._loop is None or self._closing.is_set():
                continue
            with self._events_lock:
                self._events.append(event)
                wake = len(self._events) == 1
            if wake:
                self._loop.call_soon_threadsafe(self._drain)

    def _session_ended(self, error: Exception) -> None:
        """The session said it is over: the chat closes, and `run` says why (exit 1)."""
        self.ended = error
        if self.app.is_running and not self.app.is_done:
            self.app.exit(result=1)

    async def _poll_status(self) -> None:
        while True:
            await self._refresh_status()
            await asyncio.sleep(STATUS_EVERY)

    async def _refresh_status(self) -> None:
        try:
            self.status = await self._ask(self.session.status)
        except Exception as error:  # shown in the bar; the chat goes on
            self.status = {"error": f"status unavailable: {error}"}
        # Turn events may be dropped on the way: two looks at an idle turn runner while
        # the screen still shows a reply mean its end was lost.
        idle = not self.status["running"] if "running" in self.status else self.status.get("turn") == -1
        if idle and self.transcript.running and not self._sending:
            self._idle_looks += 1
            if self._idle_looks >= 2:
                self.transcript.lost_end()
                self._emit()
        else:
            self._idle_looks = 0
        self.app.invalidate()
        self._notify()

    def wait_until(self, condition: Callable[["Terminal"], bool], timeout: float = 10.0) -> bool:
        """Block (another thread) until `condition(self)` holds; False on timeout. For tests."""
        with self._changed:
            return self._changed.wait_for(lambda: condition(self), timeout)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # ---- the screen ----------------------------------------------------------------------

    def _layout(self) -> Layout:
        live = Window(FormattedTextControl(self._live_text), wrap_lines=True, dont_extend_height=True)
        prompt = BeforeInput(lambda: [("class:prompt", "… " if self.busy else "› ")])
        entry = Window(BufferControl(self.buffer, input_processors=[prompt]), dont_extend_height=True,
                       wrap_lines=True)
        bar = Window(FormattedTextControl(lambda: [("class:status", " " + self.status_bar() + " ")]),
                     height=1, style="class:status")
        return Layout(HSplit([
            ConditionalContainer(live, filter=Condition(lambda: bool(self.transcript.live()))),
            entry,
            CompletionsMenu(max_height=8, scroll_offset=1),
            bar,
        ]), focused_element=entry)

    def _live_text(self) -> FormattedText:
        rows = max(3, self.app.output.get_size().rows - 6)
        fragments: list[tuple[str, str]] = []
        for at, line in enumerate(self.transcript.live(rows)):
            if at:
                fragments.append(("", "\n"))
            fragments.extend(line)
        return FormattedText(fragments)

    @property
    def busy(self) -> bool:
        """A reply is running, or a sent message waits for its turn to start."""
        return self.transcript.running or self._sending > 0

    async def _ask(self, call: Callable[..., Any], *args: Any) -> Any:
        """A session call in a worker thread: the loop stays free, and the session sees one
        caller at a time (its rule; only `stop` may come from anywhere)."""

        def locked() -> Any:
            with self._session_lock:
                return call(*args)

        return await asyncio.to_thread(locked)

    def status_bar(self) -> str:
        extra = []
        if self.status.get("error"):
            extra.append(self.status["error"])
        if self.transcript.running:
            extra.append("replying")
        elif self.busy:
            extra.append("waiting for the memory")
        if self._attachments:
            count = len(self._attachments)
            extra.append(f"{count} image{'s' if count > 1 else ''} attached")
        if self._armed:
            extra.append("Ctrl-C again to quit")
        return status_text({k: v for k, v in self.status.items() if k != "error"}, tuple(extra))

    def _emit(self) -> None:
        """Send the transcript's finished lines to the scrollback, above the app."""
        size = self.app.output.get_size()
        self.transcript.width = max(20, size.columns)
        lines = self.transcript.take()
        if lines:
            self.printed.extend(plain(line) for line in lines)
            fragments: list[tuple[str, str]] = []
            for line in lines:
                fragments.extend(line)
                fragments.append(("", "\n"))
            self._print_above(FormattedText(fragments))
        self.app.invalidate()
        self._notify()

    def _print_above(self, text: FormattedText) -> None:
        """Write into the scrollback, then draw the app again below.

        Not `run_in_terminal`: it puts the tty in cooked mode while it prints, and a
        Ctrl-C or Ctrl-D typed in that instant becomes a signal or an end of file
        instead of a key — a streaming reply prints often enough to lose a Ctrl-C.
        """
        app = self.app
        if not app.is_running or app.is_done:  # not drawn yet, or erased for good on the way out
            app.print_text(text, style=STYLE)
            return
        app.renderer.erase()  # the app's lines go; the cursor is where they began
        app.print_text(text, style=STYLE)
        app.renderer.reset()
        if not app.key_processor.input_queue and not app.is_done:
            app.renderer.request_absolute_cursor_position()  # how much room is below, again
        app.invalidate()

    def _opening(self) -> None:
        """The title and the last messages of the log, so a reopened chat reads on."""
        self.transcript.width = max(20, self.app.output.get_size().columns)
        try:
            status = self.session.status()
            count = status.get("messages", 0)
            self.status = status
            if self.title:
                self.transcript.info(self.title)
            self.transcript.info(f"{count} message{'s' if count != 1 else ''} so far · /help lists the commands")
            for message in range(max(0, count - HISTORY_SHOWN), count):
                self.transcript.logged(message, self.session.zoom(message, 1))
        except Exception as error:  # an unreadable history must not keep the chat closed
            self.transcript.error(f"could not show the last messages: {error}")
        self._show_goal()

    def _show_goal(self, alone: bool = False) -> None:
        """Issue 13: the chat's goal, at the start (one saved before a restart goes on, or
        waits for the person's word) and for /goal alone."""
        asking = getattr(self.session, "goal_status", None)
        if asking is None:
            return
        try:
            goal = asking()
        except Exception as error:
            self.transcript.error(f"could not read the goal: {_words(error)}")
            return
        if goal is None:
            if alone:
                self.transcript.info("no goal: /goal TEXT sets one")
            return
        if goal["state"] == "paused":
            self.transcript.info(f"◎ goal (paused: {goal['detail']}; send a message to go on, /halt drops it): "
                                 f"{goal['text']}", "class:warning")
        else:
            self.transcript.info(f"◎ goal ({goal['turns']} turns in a row so far; /halt drops it): {goal['text']}",
                                 "class:tool")

    # ---- keys ------------------------------------------------------------------------------

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        empty = Condition(lambda: not self.buffer.text)

        @keys.add("c-c")
        def _(event) -> None:
            if self._armed:
                event.app.exit(result=0)
                return
            self._stop()
            self.buffer.reset()
            self._armed = True  # after reset: clearing the text disarms
            self.app.invalidate()

        @keys.add("c-d", filter=empty)
        def _(event) -> None:
            event.app.exit(result=0)

        @keys.add("escape", "enter")
        def _(event) -> None:
            self.buffer.insert_text("\n")

        return keys

    def _disarm(self) -> None:
        self._armed = False

    # ---- input -----------------------------------------------------------------------------

    def _accept(self, buffer: Buffer) -> bool:
        self.submit(buffer.text)
        return False

    def submit(self, text: str) -> None:
        """Act on one typed line (on the loop). /stop acts at once; everything else
        takes its turn after what was typed before, so answers print in typing order."""
        self._armed = False
        parsed = parse(text)
        if parsed is None:
            return
        if parsed == Command("stop"):
            self.transcript.info("› " + text)
            self._cmd_stop()
        else:
            self._typed.put_nowait((text, parsed))

    async def _work(self) -> None:
        """One typed line after another: each waits for its session call to return."""
        while True:
            text, parsed = await self._typed.get()
            if not isinstance(parsed, Send):
                self.transcript.info("› " + text)  # the command stays readable above its answer
            try:
                if isinstance(parsed, UsageError):
                    self.transcript.error(parsed.text)
                elif isinstance(parsed, Send):
                    await self._send(parsed.text)
                else:
                    await getattr(self, "_cmd_" + parsed.name)(*parsed.args)
            except Exception as error:  # the edge: an error becomes a line for the person
                self.transcript.error(_words(error))
            self._emit()

    async def _send(self, text: str) -> None:
        images, self._attachments = tuple(self._attachments), []
        self.transcript.user(text, tuple(image.name for image in images))
        self._emit()
        self._sending += 1
        try:
            await self._ask(self.session.send, text, images)
        except Exception as error:
            dropped = " (the attached images were dropped: /attach them again)" if images else ""
            self.transcript.error(f"not sent: {_words(error)}{dropped}")
        finally:
            self._sending -= 1

    # ---- events ----------------------------------------------------------------------------

    def _drain(self) -> None:
        with self._events_lock:
            events, self._events = self._events, []
        ended = False
        for event in events:
            try:
                self.transcript.on_event(event)
            except Exception as error:  # a bad event is a line on screen, never a stuck loop
                self.transcript.error(f"could not show {type(event).__name__}: {_words(error)}")
            ended = ended or type(event).__name__ == "TurnEnded"
        if ended:
            self.app.create_background_task(self._refresh_status())
        self._emit()

    # ---- commands --------------------------------------------------------------------------

    async def _cmd_help(self, name: str | None = None) -> None:
        for line in help_lines(name):
            self.transcript.info(line)

    async def _cmd_quit(self) -> None:
        self.app.exit(result=0)

    def _cmd_stop(self, name: str | None = None) -> None:
        if name is not None:  # /stop NAME: an agent (R38)
            self.app.create_background_task(self._stop_agent(name))
            return
        if not self.busy:
            self.transcript.info("nothing to stop")
            self._emit()
        self._stop()  # a turn about to start is stopped too; with none, stop does nothing

    def _stop(self) -> None:
        async def stop() -> None:
            try:
                await asyncio.to_thread(self.session.stop)
            except Exception as error:
                self.transcript.error(f"could not stop: {_words(error)}")
                self._emit()

        self.app.create_background_task(stop())

    async def _stop_agent(self, name: str) -> None:
        try:
            await self._ask(self.session.stop_agent, name)
            self.transcript.info(f"{name} is asked to stop; its report says so")
        except Exception as error:
            self.transcript.error(f"could not stop {name}: {_words(error)}")
        self._emit()

    async def _cmd_agent(self, name: str, task: str) -> None:
        """R38, P15: the person asks for an agent, and it starts at once, whatever turn runs
        (`session.agent`: a spawn, then their line logged); a refusal is said, and nothing
        started."""
        try:
            accepted, _ = await self._ask(self.session.agent, name, task)
        except RemoteError as error:  # the agents actor's own words (a name taken)
            self.transcript.error(f"no agent started: {error.text}")
            return
        except Exception as error:
            self.transcript.error(f"no agent started: {_words(error)}")
            return
        self.transcript.info(agent_line(accepted))

    async def _cmd_goal(self, text: str | None = None) -> None:
        """Issue 13: /goal TEXT sends TEXT and keeps the chat working on it; /goal alone shows it."""
        if text is None:
            await asyncio.to_thread(self._show_goal, True)
            return
        if getattr(self.session, "goal", None) is None:
            self.transcript.error("/goal is not offered by this session (a server without goals): type it on the chat's own page")
            return
        self.transcript.user(text)
        self._emit()
        self._sending += 1
        try:
            await self._ask(self.session.goal, text)
        except Exception as error:
            self.transcript.error(f"not sent: {_words(error)}")
        finally:
            self._sending -= 1

    async def _cmd_halt(self) -> None:
        """Issue 13: drop the goal; its GoalEvent says so."""
        if getattr(self.session, "halt_goal", None) is None:
            self.transcript.error("/halt is not offered by this session (a server without goals): type it on the chat's own page")
            return
        if await self._ask(self.session.goal_status) is None:
            self.transcript.info("no goal to drop")
            return
        await self._ask(self.session.halt_goal)

    async def _cmd_agents(self) -> None:
        rows = await self._ask(self.session.agents)
        if not rows:
            self.transcript.info("no agents yet: /agent NAME TASK asks for one")
        for row in rows:
            place = f" ({row['position']} in line)" if row.get("position") else ""
            self.transcript.info(f"{row['name']}: {row['state']}{place} — {row['task']}")

    async def _cmd_status(self) -> None:
        self.status = await self._ask(self.session.status)
        self.transcript.info("\n".join(status_lines(self.status)))

    async def _cmd_memory(self) -> None:
        self.status = await self._ask(self.session.status)
        view = await self._ask(self.session.view)
        self.transcript.info("\n".join(status_lines(self.status)))
        self.transcript.info(view, "class:reply")

    async def _cmd_zoom(self, first: int | str, n: int = 1, page: int = 1) -> None:
        self.transcript.info(await self._ask(self.session.zoom, first, n, page), "class:reply")

    async def _cmd_date(self, message: int) -> None:
        date = await self._ask(self.session.date, message)
        self.transcript.info(f"message {message}: {date}")

    async def _cmd_note(self, text: str) -> None:
        message = await self._ask(self.session.note, text)
        self.transcript.info(f"noted as message {message}")

    async def _cmd_attach(self, path: str) -> None:
        image = Path(path).expanduser()
        if not image.is_file():
            self.transcript.error(f"/attach: no file {image}")
            return
        if image.stat().st_size > MAX_IMAGE_BYTES:
            self.transcript.error(f"/attach: {image} is over 5 MB (R9)")
            return
        self._attachments.append(image)
        self.transcript.info(f"{image.name} goes with your next message")

    async def _cmd_compact(self) -> None:
        if getattr(self.session, "compact", None) is None:  # a `connect` session: the server summarizes
            self.transcript.error("/compact works only where the chat runs (`everchat compact` there, with the "
                                  "web server stopped); here the server builds every summary on its own, and "
                                  "the status bar counts what is pending")
            return
        pending = self.status.get("pending") or 0
        self.transcript.info(f"building every pending summary ({pending} now) …")

        async def wait() -> None:  # beside the typed input: sending goes on meanwhile
            try:
                while True:  # in short waits, so the session is free for sends between them
                    try:
                        await self._ask(self.session.compact, COMPACT_WAIT)
                        break
                    except (TimeoutError, AskTimeout):  # not yet: wait another step
                        continue
            except Exception as error:
                self.transcript.error(f"/compact: {_words(error)}")
            else:
                self.transcript.info("every summary is built")
            self._emit()

        self.app.create_background_task(wait())


def _words(error: Exception) -> str:
    """An exception as a line for the person: our own errors say enough by their text."""
    text = str(error) or type(error).__name__
    if type(error).__module__.startswith("everchat."):
        return text
    return f"{type(error).__name__}: {text}"


def run(settings=None, *, stdin=None, placement=None, session=None, title: str | None = None) -> int:
    """`everchat` / `everchat chat`: open the chat in `settings` and talk in this terminal;
    with `session` (a `RemoteSession` of `everchat connect`), talk on it instead, and close it.

    Returns 0 after /quit, Ctrl-D or Ctrl-C twice; 1 when the chat cannot open (locked by
    another Everchat, R5; a bad folder; a model that cannot connect) or the session ended
    from outside (revoked), with one line on stderr; 2 when standard input is not a terminal.
    """
    if not (stdin or sys.stdin).isatty():
        say("everchat: the terminal chat needs a terminal; `everchat ask MESSAGE` works without one")
        if session is not None:
            session.close()
        return 2
    own = session is None  # a ChatSession of ours, not `connect`'s RemoteSession
    if own:
        session = _open(settings, placement)
        if session is None:
            return 1
        title = title or f"Everchat · {settings.reply.label}"
    try:
        terminal = Terminal(session, title=title or "")
        code = terminal.run()
        if terminal.ended is not None:
            say(f"everchat: {_words(terminal.ended)}")
            return 1
        return code
    finally:
        try:
            session.close()
        except Exception as error:  # the chat is left; say what did not close cleanly
            say(f"everchat: closing the chat: {_words(error)}")
        else:
            if own:  # issue 13: the after-turn commands the close waited for, after the screen is gone
                from everchat.frontends.cli.ask import drain_notices

                drain_notices(session, sys.stderr)


def _open(settings, placement):
    """The chat's session: its own actors started, or attached to the server that runs it
    (issue 10); None (after one line) when it cannot open."""
    from everchat.frontends.cli.commands import CommandError
    from everchat.frontends.cli.ask import start_session

    try:
        # P10: a damaged folder is named before any actor starts. Issue 10: while another
        # server (`serve`) runs the chat, this one attaches to it; else it is the server.
        session = start_session(settings, placement, attachable=True)
    except CommandError as error:
        say(f"everchat: {error}")
        return None
    return session
