"""ChatSession: what every front end and one-shot command holds (R35-R37).

    session = ChatSession.open(settings)            # starts every actor, takes the chat's lock
    turn = session.send("Remember amber-42.")       # R36: returns the user message's id
    while (event := session.next_event(timeout=60)) is not None:
        ...                                         # TurnText, TurnToolCall, …, TurnEnded
        if isinstance(event, schema.TurnEnded) and event.turn == turn:
            break
    session.close()

`ChatSession.attach(chat, settings)` joins a chat another process serves instead (issue
10, actors/session/attached.py: its own node, the same actors and events; closing it leaves the chat
running). Otherwise a session runs the supervisor (single process by default, or a
`Placement`) and hosts a small listener actor in the supervisor's node that subscribes to
the turn runner's events (topic "turn") and to failed compactions (topic "failed", turned
into `Notice`s, R30); `next_event` hands them out in order. Everything else is an ask to
an actor: `send` and `stop` to the turn runner, `note` to the log writer, `status` and
`view` to the planner, `zoom` and `date` read through the log writer (`turns.MemoryTools`,
the same code the model's tools run; `zoom("Name")` reads an agent's transcript there,
R38), `agent` (/agent NAME TASK: a spawn, then the person's line, P15), `agents` and
`stop_agent` to the agents actor.

P4: the supervisor restarts an actor process that dies (kill -9, a crash), so every ask
the session makes goes through one retry policy (`_ask`): when the answer is that the
actor was lost (`PeerLost`, `ActorStopped`, or the same relayed by the actor it asked,
or a timeout while it died), the session waits until the supervisor runs it again and
repeats the request, for up to `RESTART_SECONDS` per loss. Only idempotent requests are
made this way: appends carry keys (the store answers a resent key with the ids it gave
it), `UserInput` too (the turn runner logs it with its key), and the rest read or wait
(`CountMessages`, `SettleView`, `PoolIdle`, `WaitBacklog`, `PlannerStatus`,
`TurnStatus`, reads). An actor the supervisor gave up on ends the request with `GaveUp`,
one line naming it. The import asks through `append_many`, `count_messages` and
`wait_backlog`.

Events (all in `transport.schema`, `turn` = the id of the user message that opened it):
`TurnStarted(turn)`, `TurnText(turn, text)`, `TurnThinking(turn, text)`,
`TurnThinkingDone(turn)`, `TurnToolCall(turn, call_id, name, arguments_json)`,
`TurnToolResult(turn, call_id, name, is_error, preview)`, `TurnJoined(turn, message)`,
`TurnEnded(turn, reason, incomplete, detail)` with reason "done" | "stopped" | "error" |
"round_limit", and `Notice(level, text)`.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from everchat.actors.compactor.compaction import FAILURE_CAP
from everchat.actors.planner.planning import ZoomError
from everchat.actors.turns.actor import AskReader
from everchat.actors.zoom import MemoryTools
from everchat.transport import Actor, ActorStopped, AskTimeout, PeerLost, RemoteError, TransportError, schema

__all__ = ["ChatSession", "AttachedSession", "TurnEvent", "ZoomError", "EVENT_TYPES", "settle_down"]

TurnEvent = (schema.TurnStarted | schema.TurnText | schema.TurnThinking | schema.TurnThinkingDone
             | schema.TurnToolCall | schema.TurnToolResult | schema.TurnJoined | schema.TurnEnded | schema.Notice
             | schema.AgentEvent | schema.JobOutput | schema.GoalEvent | schema.AfterTurnFailed)

EVENT_TYPES = (schema.TurnStarted, schema.TurnText, schema.TurnThinking, schema.TurnThinkingDone,
               schema.TurnToolCall, schema.TurnToolResult, schema.TurnJoined, schema.TurnEnded, schema.Notice,
               schema.AgentEvent, schema.JobOutput, schema.GoalEvent, schema.AfterTurnFailed)
"""What `next_event` hands out: the turn's events, notices, the agents' news (topic "agent",
R38), shell output as it comes (topic "device", R39), and the goal's news and failed
after-turn commands (topic "turn", issue 13)."""

log = logging.getLogger("everchat.session")

_ASK_SECONDS = 30.0
_sessions = itertools.count(1)

RESTART_SECONDS = 120.0
"""How long one request waits for a lost actor to run again (the supervisor's backoff
is at most 5 s; a restarted planner first recovers from the folder)."""
_GRACE_SECONDS = 2.0  # a loss with every actor still up: how long to look for it going down
_BLIND_REPEATS = 3  # repeats per request after losses that no restart explained
_POLL_SECONDS = 0.05

_NEEDS = {  # whom an actor asks while it answers: losing any of them fails the request
    "log_writer": ("log_writer",),
    "planner": ("planner", "log_writer"),
    "turn_runner": ("turn_runner", "planner", "log_writer"),
    "agents": ("agents", "log_writer"),
}
_LOST = (PeerLost, ActorStopped, AskTimeout)
_LOST_KINDS = frozenset(cls.__name__ for cls in _LOST)  # the same, relayed by the actor asked


class _Listener(Actor):
    """Hosted in the session's node: hands turn events to `next_event`, turns failed
    compactions into notices (R30: never silent) and counts them."""

    def __init__(self, events: queue.Queue, counts: dict) -> None:
        super().__init__()
        self.events = events
        self.counts = counts

    def _take(self, msg: schema.Message, delivery) -> None:
        self.events.put(msg)

    def on_compaction_failed(self, msg: schema.CompactionFailed, delivery) -> None:
        self.counts["failures"] += 1
        first, count = msg.i << msg.l, 1 << msg.l
        self.events.put(schema.Notice("warning", f"Summarizing {first}+{count} failed ({msg.failures} of {FAILURE_CAP}): "
                                                 f"{msg.reason}"))

    def on_events_missed(self, topic: str, count: int) -> None:
        self.events.put(schema.Notice("warning", f"{count} {topic} event(s) were lost on the way; "
                                                 f"the log has everything"))


for _cls in EVENT_TYPES:
    setattr(_Listener, _cls.handler, _Listener._take)


def _lost(error: TransportError) -> bool:
    """The target, or an actor it asked on our behalf, was lost (or may have been)."""
    if isinstance(error, RemoteError):
        return error.kind in _LOST_KINDS
    return isinstance(error, _LOST)


class _Retrying:
    """A node whose `ask` follows the session's retry policy (for `AskReader`)."""

    def __init__(self, session: "ChatSession") -> None:
        self.session = session

    def ask(self, target: str, msg: schema.Message, timeout: float) -> schema.Message:
        return self.session._ask(target, msg, timeout)


class ChatSession:
    """One open chat with its actors running. Methods are safe to call from any one thread
    at a time (a front end's loop); `stop` may be called from another thread (Ctrl-C)."""

    attached = False  # True for a session attached to another process's chat (actors/session/attached.py)

    def __init__(self, supervisor, settings) -> None:
        self.supervisor = supervisor
        self.settings = settings
        self.node = supervisor.node
        self.events: queue.Queue = queue.Queue()
        self.counts = {"failures": 0}
        self.listener = f"session.{os.getpid()}.{next(_sessions)}"
        self.node.host(self.listener, _Listener, self.events, self.counts)
        for topic in ("turn", "failed", "agent", "device"):
            self.node.subscribe(topic, self.listener)
        self.memory = MemoryTools(AskReader(_Retrying(self)), agents=self._transcript)
        self._closed = False
        self._failed_turns: set[int] = set()  # the turns whose after-turn failure next_event gave

    def __repr__(self) -> str:
        return f"<ChatSession {self.supervisor.chat} pid={os.getpid()}>"

    @classmethod
    def attach(cls, chat: str | Path, settings, *, timeout: float = 30.0) -> "ChatSession":
        """Join the chat that another process of this computer serves (`serve`, the
        terminal chat, the web page; issue 10): an `AttachedSession` with a node of its
        own that asks the server's actors and takes their events. The server keeps the
        chat's lock (R5); `close()` only leaves. `NotAttachable` when no server runs
        `chat` (actors/session/attached.py)."""
        from everchat.actors.session.attached import dial

        remote = dial(chat, timeout=timeout)  # returns once the server runs every actor we ask
        try:
            session = AttachedSession(remote, settings)
            # Our first turn's events must not be missed: wait until our subscription
            # reached the turn runner, which runs in another process (the server's).
            session._await_subscription(timeout=max(1.0, timeout))
        except BaseException:
            remote.stop()
            raise
        return session

    @classmethod
    def open(cls, settings, *, placement=None, extra_tools=(), chat: str | Path | None = None,
             attachable: bool = True) -> "ChatSession":
        """Start the supervisor and every actor, the turn runner included (single process
        by default). The supervisor takes the chat before any actor starts (R5, P6): a
        second session on the same folder fails with `ChatLocked` naming the owner, a chat
        that does not open with the store's error. `chat` defaults to
        `settings.chat_dir` (else `settings.home / "chat"`). `extra_tools`: `(ToolSpec,
        handler)` pairs offered to the model after the memory tools (benchmarks, devices);
        `handler(arguments: dict) -> str | ToolOutcome` runs in the turn runner's thread
        (single placement only). `attachable`: other commands of this computer may attach
        to this chat while it is open (issue 10); a one-shot command, which ends soon and
        takes its actors with it, passes False."""
        from everchat.actors.tree import Budget
        from everchat.actors.supervisor.actor import Placement, Supervisor

        if chat is None:
            chat = getattr(settings, "chat_dir", None) or Path(settings.home) / "chat"
        settings.instructions()  # a named instructions file that cannot be read fails here, not in a turn
        placement = placement or Placement(workers=settings.compaction_jobs)
        if extra_tools and placement.mode != "single":
            raise ValueError("extra tools are Python callables: they run in the single placement only")
        supervisor = Supervisor(chat, placement, Budget(jobs=placement.workers), settings=settings,
                                extra_tools=tuple(extra_tools), attachable=attachable)
        supervisor.start()
        try:
            session = cls(supervisor, settings)
            if placement.mode != "single":
                session._await_subscription()
        except BaseException:
            supervisor.stop()
            raise
        return session

    def _await_subscription(self, timeout: float = 10.0) -> None:
        """The turn runner publishes from another process: wait until our subscription
        reached it, or the first turn's events could be missed. Our node sends its
        subscriptions to each peer in order, so once a topic of our own (nobody else's)
        arrived there, "turn" and "failed", subscribed before it, arrived too; a count of
        "turn" subscribers would be fooled by other clients of the same chat (issue 10)."""
        hello = f"hello.{socket.gethostname()}.{self.listener}"
        self.node.subscribe(hello, self.listener)
        self.node.ask("turn_runner", schema.AwaitSubscriber(topic=hello, timeout=timeout), timeout=timeout + 5.0)

    # -- asking across restarts (P4) ------------------------------------------------------

    def _ask(self, target: str, msg: schema.Message, timeout: float) -> schema.Message:
        """`node.ask(target, msg, timeout)`, repeated (`_repeat`) when the actor is lost
        and the supervisor runs it again. Only for idempotent requests (module docstring)."""
        return self._repeat(target, lambda: self.node.ask(target, msg, timeout=timeout))

    def _repeat(self, target: str, attempt):
        """`attempt()`, repeated after each loss of `target` (or of an actor it asks on
        our behalf, `_NEEDS`) once the supervisor runs every one of them again. Gives up
        with `GaveUp` when the supervisor did, and with the loss itself when nothing runs
        again within `RESTART_SECONDS` or losses come that no restart explains."""
        needs = _NEEDS.get(target, (target,))
        blind = 0
        while True:
            seen = self._incarnations(needs)
            try:
                return attempt()
            except TransportError as error:
                if not _lost(error) or self._stopping():
                    raise
                restarted = self._await_running(target, needs, seen, error)
                if not restarted:
                    if isinstance(error, AskTimeout) or blind >= _BLIND_REPEATS:
                        raise  # a timeout of a live actor is a timeout
                    blind += 1
                log.info("%s: %s was lost (%s); asking again", self, target, error)

    def _stopping(self) -> bool:
        """We are closing: a stopped actor is no loss then."""
        return self._closed or self.supervisor.stopping

    def _incarnations(self, names) -> dict:
        """Which run of each actor serves us now: (restarts, pid)."""
        return {name: self.supervisor.incarnation(name) for name in names}

    def _await_running(self, target: str, needs, seen: dict, error: TransportError) -> bool:
        """After a loss: wait until every actor in `needs` runs; True if any of them was
        restarted since `seen`, False if all kept running unchanged for a grace period (the
        loss was not a crash, or one not noticed yet). PeerLost after RESTART_SECONDS."""
        start = time.monotonic()
        while True:
            down = [name for name in needs if not self.supervisor.running(name)]  # GaveUp: said at once
            if not down:
                if self._incarnations(needs) != seen:
                    return True
                if time.monotonic() - start >= _GRACE_SECONDS:
                    return False
            if self._stopping():
                raise error
            if time.monotonic() - start >= RESTART_SECONDS:
                raise PeerLost(f"{self}: {', '.join(down)} did not run again within {RESTART_SECONDS:g} s "
                               f"after asking {target!r} failed: {error}")
            time.sleep(_POLL_SECONDS)  # polling the supervisor's view of its children

    # -- turns -----------------------------------------------------------------------

    def send(self, text: str, images: Sequence[Path] = ()) -> int:
        """R36: the person's message. Returns its id once it is logged. While a turn runs,
        the message is logged at once and handed to the call between tool calls; otherwise
        a fresh turn starts: its view is rendered (and settled, up to `settle_timeout`)
        before the message is logged, so this may wait that long."""
        return self.send_input(text, images).ids[0]

    def send_input(self, text: str, images: Sequence[Path] = ()) -> schema.InputLogged:
        """`send`, answered with the turn runner's whole reply: the message's `ids`, and
        `turn`, the turn it opened or joined (`joined`: one already running, maybe another
        client's, R36), whose events carry that id."""
        digests = [self._ask("log_writer", schema.PutAsset(data=Path(path).read_bytes()),
                             timeout=_ASK_SECONDS).digest for path in images]
        # Keyed: repeated after a lost actor, the message is still logged once.
        msg = schema.UserInput(text=text, images=digests, key=f"input-{uuid.uuid4().hex}")
        return self._ask("turn_runner", msg, timeout=self.settings.settle_timeout + 2 * _ASK_SECONDS)

    def stop(self) -> None:
        """/stop, Ctrl-C: end the running call. What was streamed is kept, logged marked
        incomplete (R37); the chat is ready for the next input. No turn: nothing happens."""
        self._ask("turn_runner", schema.StopTurn(), timeout=_ASK_SECONDS)

    # -- goals (issue 13, docs/GOALS.md) -------------------------------------------------

    def goal(self, text: str) -> schema.InputLogged:
        """/goal TEXT: make TEXT the chat's goal and send it as a message (a turn, or input
        joining the running one). The turn runner then checks after each turn and goes on
        until the goal is met, /halt, or 30 turns in a row."""
        msg = schema.SetGoal(text=text, key=f"input-{uuid.uuid4().hex}")
        return self._ask("turn_runner", msg, timeout=self.settings.settle_timeout + 2 * _ASK_SECONDS)

    def halt_goal(self) -> None:
        """/halt: drop the goal; a running reply finishes (/stop stops it)."""
        self._ask("turn_runner", schema.HaltGoal(), timeout=_ASK_SECONDS)

    def goal_status(self) -> dict | None:
        """The chat's goal (`goals.Goal.to_record()`: text, state, turns, detail), or None."""
        return self._ask("turn_runner", schema.GoalStatus(), timeout=_ASK_SECONDS).goal

    def next_event(self, timeout: float | None = None) -> TurnEvent | None:
        """The next turn event or notice, in order; None after `timeout` seconds. Each
        after-turn failure comes once, though the close may bring it a second time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                return None
            if not isinstance(event, schema.AfterTurnFailed):
                return event
            if event.turn not in self._failed_turns:
                self._failed_turns.add(event.turn)
                return event

    # -- memory ----------------------------------------------------------------------

    def _planner_state(self) -> schema.PlannerState:
        return self._ask("planner", schema.PlannerStatus(), timeout=_ASK_SECONDS)

    def count_messages(self) -> int:
        """How many messages the chat has logged."""
        return self._ask("log_writer", schema.CountMessages(), timeout=_ASK_SECONDS).messages

    def append_many(self, items: Sequence[schema.Append], timeout: float = _ASK_SECONDS) -> list[list[int]]:
        """Log `items` (each keyed) in one write; their id lists, in order. A part whose
        key was logged before gets the ids it has (also when this is a repeat after a
        lost log writer), so its first id lies before `count_messages()` of the call."""
        return self._ask("log_writer", schema.AppendMany(items=list(items)), timeout=timeout).ids

    def put_asset(self, data: bytes) -> str:
        """Store an image (R9: PNG, JPEG, GIF or WebP, at most 5 MB) and return its digest, to
        name in an append's `images`; storing the same bytes again changes nothing."""
        return self._ask("log_writer", schema.PutAsset(data=data), timeout=_ASK_SECONDS).digest

    def wait_backlog(self, at_most: int, timeout: float) -> schema.Idle:
        """Once at most `at_most` compactions are ready but not handed out (a bulk
        import's flow control); `Idle` says how many run and wait."""
        return self._ask("planner", schema.WaitBacklog(at_most=at_most), timeout=timeout)

    def status(self) -> dict:
        """messages, view_lines, view_bytes, view_budget (its ceiling), pending (summaries
        to build: unbuilt view lines plus merges whose halves are built, R31; the same
        figure as `everchat status`), pending_lines and pending_merges apart, failures
        (compaction calls failed this run), model, running (a turn is on), turn (its
        message id, -1 before it is logged or without a turn), cache_share (cache reads /
        prompt tokens), usage; plus the planner's own figures under `planner`."""
        planner = self._planner_state().status
        turn = self._ask("turn_runner", schema.TurnStatus(), timeout=_ASK_SECONDS)
        usage = turn.usage
        prompt = usage.get("input", 0) + usage.get("cache_read", 0) + usage.get("cache_write", 0)
        return {
            "messages": planner["messages"],
            "view_lines": planner["view_lines"],
            "view_bytes": planner["view_bytes"],
            "view_budget": planner["ceiling"],
            "pending": planner["unbuilt_lines"] + planner["ready_merges"],
            "pending_lines": planner["unbuilt_lines"],
            "pending_merges": planner["ready_merges"],
            "failures": self.counts["failures"],
            "model": turn.model,
            "turn": turn.turn,
            "running": turn.running,
            "cache_share": usage.get("cache_read", 0) / prompt if prompt else 0.0,
            "usage": usage,
            "planner": planner,
        }

    def note(self, text: str) -> int:
        """Log a `note` (a memory from before the chat, R3); returns its (first) id."""
        msg = schema.Append(kind="note", text=text, key=f"note-{uuid.uuid4().hex}", images=[], meta=None)
        return self._ask("log_writer", msg, timeout=_ASK_SECONDS).ids[0]

    def view(self) -> str:
        """The view as it stands (R14, placeholders for unbuilt lines, R15)."""
        return self._planner_state().view

    def zoom(self, id: int | str, n: int = 1, page: int = 1) -> str:
        """R35: zoom(id, n), zoom(id, 1) (the message whole, paged), zoom("Name") (an
        agent's transcript). Wrong arguments raise `ZoomError` with the tool's words."""
        if isinstance(id, str):
            return self.memory.transcript(id, page)
        return self.memory.zoom(id, n, page).text

    def date(self, id: int) -> str:
        """R35: the local date and time message `id` was logged (`ZoomError` if none)."""
        return self.memory.date(id)

    # -- agents (R38) ----------------------------------------------------------------------

    def _transcript(self, name: str, page: int) -> str:
        """R35's zoom("Name") through the log writer, with the model's tool's words."""
        from everchat.actors.agents.actor import transcript_page

        return transcript_page(lambda msg: self._ask("log_writer", msg, timeout=_ASK_SECONDS), name, page)

    def agents(self) -> list[dict]:
        """The chat's agents: rows `{name, state, task, position}` (R38)."""
        return self._ask("agents", schema.ListAgents(), timeout=_ASK_SECONDS).agents

    def agent(self, name: str, task: str) -> tuple[schema.AgentAccepted, int]:
        """R38, P15: `/agent NAME TASK` starts agent NAME at once, through the agents actor
        as the model's `spawn` tool does, whatever turn runs (sent to the model instead, a
        second /agent joined the first one's turn, R36, and no agent came of it). Then the
        person's words, `/agent NAME TASK`, are logged as their message (no turn: the model
        is not asked). Returns the agent's state (`working`, or `queued` behind
        `agent_jobs` others) and the message's id. A bad name or task is a ValueError, a
        name taken a RemoteError naming it; either way nothing is started or logged."""
        from everchat.actors.prompt.tasks import agent_command
        from everchat.actors.hands import check_agent_name

        check_agent_name(name)
        if not task.strip():
            raise ValueError("/agent NAME TASK: the task is missing")
        key = f"agent-{uuid.uuid4().hex}"  # keyed both: repeated after a lost actor, still one agent, one line
        accepted = self._ask("agents", schema.SpawnAgent(name=name, task=task.strip(), key=key), timeout=_ASK_SECONDS)
        text = agent_command(name, task)
        msg = schema.Append(kind="user", text=text, key=key, images=[], meta={"spawned": name})
        return accepted, self._ask("log_writer", msg, timeout=_ASK_SECONDS).ids[0]

    def stop_agent(self, name: str) -> None:
        """/stop NAME: end agent `name`'s call and its device jobs; its report says it was
        stopped. An unknown name is a RemoteError naming it."""
        self._ask("agents", schema.StopAgent(name=name), timeout=_ASK_SECONDS)

    def compact(self, timeout: float | None = None) -> None:
        """Wait until every pending summary is built (TimeoutError after `timeout`): the
        view's lines (failed ones are retried every 10 s meanwhile, R30), then whatever
        else the pool is building; then fit the view (`FitView`: the one batch that runs
        without a new message)."""
        limit = 3600.0 if timeout is None else timeout
        deadline = time.monotonic() + limit

        def left() -> float:  # a wait repeated after a restart waits only what is left
            return max(0.001, deadline - time.monotonic())

        def settle() -> schema.SettledView:
            wait = left()
            return self.node.ask("planner", schema.SettleView(until=count, timeout=wait), timeout=wait + _ASK_SECONDS)

        count = self.count_messages()
        settled = self._repeat("planner", settle)
        if settled.unbuilt:
            raise TimeoutError(f"{self}: {settled.unbuilt} line(s) still unbuilt after {limit:g} s")
        self._repeat("planner", lambda: self.node.ask("planner", schema.PoolIdle(), timeout=left()))
        # Issue 8: the batch R19 would run at the next message, run now, so a view left far
        # over its ceiling by logged-only notes does not wait for one (nor go out whole).
        self._ask("planner", schema.FitView(), timeout=_ASK_SECONDS)

    def settle_since(self, since: int, timeout: float = 3600.0) -> None:
        """Wait until every view line of messages `since` … the last logged one is built
        (TimeoutError after `timeout`): `ask` waits for its own turn's lines only, not for a
        backlog logged before it (P18)."""
        deadline = time.monotonic() + timeout
        until = self.count_messages()

        def settle() -> schema.SettledView:
            wait = max(0.001, deadline - time.monotonic())
            msg = schema.SettleView(until=until, timeout=wait, since=min(since, until))
            return self.node.ask("planner", msg, timeout=wait + _ASK_SECONDS)

        if self._repeat("planner", settle).unbuilt:
            raise TimeoutError(f"{self}: the lines of messages {since} ... {until - 1} are not all built "
                               f"after {timeout:g} s")

    def close(self) -> None:
        """Stop a running turn (its streamed part is logged, marked incomplete, R37), let
        the planner save what it planned, let the queued after-turn commands run (issue 13:
        the failures of those that end meanwhile are events still, for `next_event` after
        the close), stop every actor and release the chat's lock. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._settle_down()
        except TransportError as error:  # an actor already gone: stopping is all that is left
            log.info("%s: closing without settling down: %s", self, error)
        self._close_after_turn()
        self.supervisor.stop()

    def _close_after_turn(self) -> None:
        """The after-turn commands queued at the close run before the actors stop; the turn
        runner, perhaps in another process, answers with those that failed meanwhile. Their
        events may come too, or not (another socket, no order between them): `next_event`
        hands each failure out once."""
        from everchat.actors.turns.after_turn import STOP_SECONDS
        from everchat.actors.supervisor.actor import GaveUp

        try:
            if not self.supervisor.running("turn_runner"):
                return  # lost (an ask would wait for it): its queued commands went with it
        except GaveUp:
            return
        try:
            closed = self.node.ask("turn_runner", schema.CloseAfterTurn(), timeout=STOP_SECONDS)
        except TransportError as error:  # lost, or too slow: its own stop still waits for the commands
            log.warning("%s: the turn runner did not close its after-turn commands (what fails now is in its "
                        "log only): %s", self, error)
            return
        for turn, detail in closed.failures:
            self.events.put(schema.AfterTurnFailed(turn=turn, detail=detail))

    def _settle_down(self, timeout: float = 5.0) -> None:
        settle_down(self.node, timeout)

    def __enter__(self) -> "ChatSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def settle_down(node, timeout: float = 5.0) -> None:
    """Before a chat's actors stop (a session's close, `serve` interrupted): a running turn
    is stopped (its streamed part logged, R37) and the planner has planned and saved every
    message logged (its mailbox answers PlannerStatus after the Logged tells before it).
    Plain asks: stopping does not wait for lost actors to come back."""
    deadline = time.monotonic() + timeout
    if node.ask("turn_runner", schema.TurnStatus(), timeout=timeout).running:
        node.ask("turn_runner", schema.StopTurn(), timeout=timeout)
        while time.monotonic() < deadline:
            if not node.ask("turn_runner", schema.TurnStatus(), timeout=timeout).running:
                break
            time.sleep(0.02)  # polling a local actor while a stopped stream winds down
    node.ask("planner", schema.PlannerStatus(), timeout=timeout)


class AttachedSession(ChatSession):
    """A ChatSession on the chat another process serves (`ChatSession.attach`, issue 10):
    its `supervisor` is an `attach.RemoteSupervisor` (the server's `running`,
    `incarnation` and `stopping`, asked over the socket), so every request follows the
    same retry policy (P4). Everything but closing is ChatSession's own code."""

    attached = True

    def __repr__(self) -> str:
        return f"<AttachedSession {self.supervisor.chat} server pid={self.supervisor.pid} pid={os.getpid()}>"

    @property
    def server_pid(self) -> int:
        """The pid of the process that serves the chat (and holds its lock, R5)."""
        return self.supervisor.pid

    @property
    def placement_mode(self) -> str:
        """The running chat's placement: "single" or "processes"."""
        return self.supervisor.placement_mode

    def close(self) -> None:
        """Leave the chat: our subscriptions end with our node. The server's actors, and a
        turn that runs (ours or another client's, R36), go on. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.supervisor.stop()
