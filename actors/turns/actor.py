"""The turn runner actor: one turn at a time; input arriving mid-turn joins it (R36, R37).

A thin shell around `turns.TurnRunner`. The actor's own thread answers messages
(`UserInput`, `StopTurn`, `TurnStatus`); one worker thread runs turns, so a turn that
streams for a minute never keeps the actor from taking the next input or a stop.
Everything a turn logs goes to the log writer as an `Append` with an idempotency key;
the view comes from the planner (`SettleView`); events go out on topic "turn".

Input while a turn is on (R36): once the turn's own message is logged, a new message
is logged at once (its sender gets its id) and handed to the call at the next boundary;
a message that arrives while the turn still settles its view is logged right after the
turn's own, so the log keeps the order the person typed in. Inputs are known by their
key while the turn runs: one sent again (the session repeats a keyed input after a lost
actor, P4) gets the ids it has and reaches the model once.

A turn that fails before its message is logged (the planner or the log writer lost while
it settles) publishes nothing: no turn began, and the sender's ask gets the error (the
session repeats it once the actor runs again). A lost actor is one error line in the
log; only an unexpected failure is logged with its traceback.

Goals and the after-turn command (issue 13, docs/GOALS.md): the chat's goal lives here, in
a `goals.GoalBook` (its file `goal.json` written by the log writer: `SaveGoal`), so every
front end sees the same goal and it runs with any or none of them. After each turn the
worker thread makes the goal's check (one tool-less call of the reply model) and, while
the goal is not met, starts the next turn with `goals.CONTINUE`, as input of the person's
would (a person's input that came first takes its place). The after-turn command runs on
a thread of its own (`after_turn.HookRunner`), so a slow one never delays the next turn.
The session that owns the chat closes that queue before the actors stop (`CloseAfterTurn`)
and gets the failures of the commands it waited for in the reply.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime

from everchat.actors.models import ImageBlock, Message, ModelError, Request, TextBlock, TextDelta, Usage
from everchat.actors.turns.after_turn import HookRunner
from everchat.actors.turns.goals import (CHECK_MAX_TOKENS, CHECK_SYSTEM, CONTINUE, TURN_LIMIT, Goal, GoalBook, Step,
                                   check_text)
from everchat.actors.hands import MAIN, HandTools, web_for
from everchat.actors.prompt import chat_prompt
from everchat.actors.zoom import MemoryTools, ToolOutcome, media_type
from everchat.actors.turns.turn import Input, TurnRunner
from everchat.actors.folder.usage import metered
from everchat.actors.turns.calls import (SETTINGS_ENV, AskReader, computers_joined, configured_settings, interruptible,
                                          settings_flags)
from everchat.transport import Actor, TransportError, schema

__all__ = ["TurnRunnerActor", "AskReader", "SETTINGS_ENV", "settings_flags", "configured_settings"]

log = logging.getLogger("everchat.turn_runner")

_ASK_SECONDS = 30.0


class _Pending:
    """An input of the running turn and the asks waiting for its ids: one, or more when
    the sender repeated it (same key) before it was logged. `ids` once logged."""

    def __init__(self, msg: schema.UserInput, delivery, joined: bool, meta: dict | None = None) -> None:
        self.msg = msg
        self.meta = meta  # {"goal": "set" | "continue"}: the message came from the goal
        self.deliveries = [delivery] if delivery is not None else []
        self.joined = joined
        self.ids: list[int] | None = None

    def logged(self, ids: list[int], turn: int) -> None:
        """It is on disk: every ask waiting for it gets its ids."""
        self.ids = ids
        waiting, self.deliveries = self.deliveries, []
        for delivery in waiting:
            delivery.reply(schema.InputLogged(ids=ids, turn=turn, joined=self.joined))

    def fail(self, error: Exception) -> None:
        waiting, self.deliveries = self.deliveries, []
        for delivery in waiting:
            delivery.fail(type(error).__name__, str(error))


class TurnRunnerActor(Actor):
    """Runs the chat's turns. `settings`: a `config.Settings`, or "configured" (read in
    `on_start`, see `configured_settings`). `extra_tools`: `(ToolSpec, handler)` pairs,
    `handler(arguments: dict) -> str | ToolOutcome`, run in the turn's thread."""

    def __init__(self, settings="configured", extra_tools: Sequence = (), log_writer: str = "log_writer",
                 planner: str = "planner", goal_limit: int = TURN_LIMIT, hook_limit: float | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.extra_tools = tuple(extra_tools)
        self.log_writer = log_writer
        self.planner = planner
        self.core: TurnRunner | None = None
        self.connection = None
        self.memory: MemoryTools | None = None
        self._lock = threading.Lock()
        self._active = False  # a turn is on: new input joins it
        self._turn = -1  # the running turn's message id, once logged
        self._unlogged: list[_Pending] = []  # arrived while the turn settled its view
        self._joined: list[Input] = []  # logged, not yet handed to the call
        self._inputs: dict[str, _Pending] = {}  # the running turn's inputs by key: a resent one joins once
        self._until: int | None = None  # the running turn's view covers the messages before this
        self._halt = threading.Event()
        self._work: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self.goals = GoalBook(limit=goal_limit)  # issue 13: the chat's goal, under _goal_lock
        self._goal_lock = threading.RLock()
        self._goal_halt = threading.Event()  # a /halt ends a running goal check
        self._goal_loaded = False
        self._goal_resumed = threading.Event()  # the saved goal's restart step is taken (GoalStatus waits)
        self._goal_saved: Goal | None = None
        self._checking = False  # the worker makes a goal's check: input abandons it (`_goal_halt`)
        self.hook_limit = hook_limit
        self.hooks: HookRunner | None = None

    def on_start(self) -> None:
        """Runs in the actor's thread: read the settings, build the chat's one prompt
        (R34: the same bytes for every turn of this run), connect the reply model, start
        the worker thread. A connection that cannot be made (a missing key) is tried
        again at each turn, whose error it then is."""
        super().on_start()
        if self.settings == "configured":
            self.settings = configured_settings()
        specs = tuple(spec for spec, _ in self.extra_tools)
        self.prompt = chat_prompt(self.settings, specs)
        reply = self.settings.reply
        self.core = TurnRunner(self.prompt, reply.model, effort=reply.effort, tool_rounds=self.settings.tool_rounds)
        from everchat.actors.agents.actor import transcript_page

        def transcript(name: str, page: int) -> str:  # R35: zoom("Name")
            return transcript_page(lambda msg: self.node.ask(self.log_writer, msg, timeout=_ASK_SECONDS), name, page)

        self.memory = MemoryTools(AskReader(self.node, self.log_writer), agents=transcript)
        if self.settings.devices:
            self.core.computers = self._computers
        self.hands = HandTools(self.node.ask, self.memory.call, MAIN, devices=self.settings.devices,
                               extra={spec.name: handler for spec, handler in self.extra_tools},
                               web=web_for(self.settings))
        try:
            # Made now, not at the first turn: importing an SDK and building its client
            # took seconds in a fresh process on a busy machine (bench_turn's first turn).
            self.connection = self.settings.reply.connect()
        except ModelError as error:  # a missing key is the first turn's error, in its words
            log.warning("%s: no reply model yet: %s", self, error)
        command = getattr(self.settings, "after_turn", "")
        if command:
            from everchat.actors.turns.after_turn import LIMIT

            self.hooks = HookRunner(command, chat=self.settings.chat_dir, home=self.settings.home,
                                    on_failure=self._hook_failed,
                                    limit=self.hook_limit if self.hook_limit is not None else LIMIT)
        self._worker = threading.Thread(target=self._run_turns, name=f"{self.name}-turns", daemon=True)
        self._worker.start()

    def on_stop(self) -> None:
        """Runs in the actor's thread: stop the running call and the worker; the after-turn
        commands already queued (the last turn's too) run to their end before it returns
        (`HookRunner.close`: at most `after_turn.STOP_SECONDS` in all, which the supervisor
        waits for)."""
        self._end_turns()
        if self.hooks is not None:
            self.hooks.close()
        super().on_stop()

    def _end_turns(self) -> None:
        """Stop the running call, a goal's check and the worker (which submits its last
        turn's after-turn command before it ends). Idempotent."""
        self._halt.set()
        self._goal_halt.set()
        self._work.put(None)
        if self._worker is not None:
            self._worker.join(timeout=5)

    def on_close_after_turn(self, msg: schema.CloseAfterTurn, delivery) -> schema.AfterTurnClosed:
        """The closing session's last ask, before the actors stop (issue 13): end the turns,
        close the after-turn queue and wait while its commands run, as `on_stop` would (this
        actor's thread waits with them, at most `after_turn.STOP_SECONDS`: the chat is
        closing). The reply carries the failures that ended meanwhile, which the session,
        perhaps in another process, says: events may no longer reach it."""
        self._end_turns()
        if self.hooks is None:
            return schema.AfterTurnClosed(failures=[])
        self.hooks.close()
        return schema.AfterTurnClosed(failures=self.hooks.failed_since_close())

    # -- messages ----------------------------------------------------------------------

    def on_user_input(self, msg: schema.UserInput, delivery, meta: dict | None = None):
        """R36: start a turn, or join the running one (answered once the input is logged).
        An input resent with the key of one the running turn already has (P4: the session
        repeats its asks after a lost actor) gets that one's ids and is handed to the
        call once. A goal counts its turns in a row from the person's last word."""
        if meta is None:
            self._goal_step(lambda book: book.person_spoke())
            if self._checking:  # the person's turn starts now; it is checked when it ends
                self._goal_halt.set()
        with self._lock:
            if not self._active:
                self._active = True
                self._turn = -1
                self._halt.clear()
                pending = _Pending(msg, delivery, joined=False, meta=meta)
                self._inputs = {msg.key: pending} if msg.key else {}
                self._work.put(pending)
                return None
            same = self._inputs.get(msg.key) if msg.key else None
            if same is not None:
                if same.ids is None:
                    same.deliveries.append(delivery)
                    return None
                return schema.InputLogged(ids=same.ids, turn=self._turn, joined=same.joined)
            if self._turn < 0:  # the turn settles its view: logged right after its own message
                pending = _Pending(msg, delivery, joined=True, meta=meta)
                self._unlogged.append(pending)
                reply = None
            else:
                pending = _Pending(msg, None, joined=True, meta=meta)
                pending.ids = self._append("user", msg.text, msg.key, msg.images, meta)
                self._joined.append(Input(tuple(pending.ids), msg.text, tuple(msg.images)))
                reply = schema.InputLogged(ids=pending.ids, turn=self._turn, joined=True)
            if msg.key:
                self._inputs[msg.key] = pending
            return reply

    # -- goals (issue 13) ------------------------------------------------------------------

    def on_set_goal(self, msg: schema.SetGoal, delivery):
        """Make `text` the goal (replacing any other) and send it as the person's message."""
        self._load_goal()
        step = self._goal_step(lambda book: book.set(msg.text))
        if self._checking:  # a check of the goal it replaces: abandoned
            self._goal_halt.set()
        self._goal_event("set", step.goal)
        return self.on_user_input(schema.UserInput(text=msg.text, images=[], key=msg.key), delivery,
                                  meta={"goal": "set"})

    def on_halt_goal(self, msg: schema.HaltGoal, delivery) -> schema.GoalState:
        """Drop the goal: no check and no continuation after the running turn, which
        finishes (/stop stops it); a running check ends at once."""
        self._load_goal()
        with self._goal_lock:
            had = self.goals.goal
            self._goal_step(lambda book: book.halt())
            self._goal_halt.set()
        if had is not None:
            self._goal_event("halted", had, "Goal dropped.")
        return schema.GoalState(goal=None)

    def on_goal_status(self, msg: schema.GoalStatus, delivery) -> schema.GoalState:
        """The goal, as the worker's start left it (a goal saved mid-turn is paused by then:
        the terminal shows it paused when it opens, never as it was before the restart)."""
        self._goal_resumed.wait(_ASK_SECONDS)
        self._load_goal()
        with self._goal_lock:
            goal = self.goals.goal
        return schema.GoalState(goal=goal.to_record() if goal else None)

    def _load_goal(self) -> None:
        """The saved goal, once (the worker's start, or the first goal message before it)."""
        with self._goal_lock:
            if self._goal_loaded:
                return
            record = self.node.ask(self.log_writer, schema.LoadGoal(), timeout=_ASK_SECONDS).goal
            self.goals.goal = Goal.from_record(record) if record else None
            self._goal_saved = self.goals.goal  # as it was before this start: `_resume_goal`'s business
            self._goal_loaded = True

    def _goal_step(self, change) -> Step:
        """Apply `change(book)` and save the goal when it changed (through the log writer,
        the chat folder's one writer)."""
        with self._goal_lock:
            if not self._goal_loaded:
                self._load_goal()
            before = self.goals.goal
            step = change(self.goals)
            if self.goals.goal != before:
                record = self.goals.goal.to_record() if self.goals.goal else None
                self.node.ask(self.log_writer, schema.SaveGoal(goal=record), timeout=_ASK_SECONDS)
            if step.detail == "resumed":
                self._goal_event("resumed", step.goal, "")
            return step

    def _goal_event(self, event: str, goal: Goal | None, detail: str = "") -> None:
        try:
            self.node.publish("turn", schema.GoalEvent(event=event, goal=goal.text if goal else "",
                                                       turns=goal.turns if goal else 0, detail=detail))
        except TransportError as error:
            log.warning("%s: goal event %s not published: %s", self, event, error)

    def _hook_failed(self, turn: int, detail: str) -> None:
        """Runs in the after-turn thread: shown apart from the reply, which stays saved."""
        try:
            self.node.publish("turn", schema.AfterTurnFailed(turn=turn, detail=detail))
        except TransportError as error:
            log.warning("%s: after-turn failure of turn %d not published: %s", self, turn, error)

    def on_report_logged(self, msg: schema.ReportLogged, delivery) -> None:
        """R34, R38: an agent's report, logged meanwhile, joins the running call between its
        tool calls unless the turn's view already holds it; with no turn running, the next
        turn's view will."""
        if not msg.ids:
            return None
        with self._lock:
            if self._active and self._until is not None and msg.ids[0] >= self._until:
                self._joined.append(Input(tuple(msg.ids), msg.text, (), origin="report"))
        return None

    def on_stop_turn(self, msg: schema.StopTurn, delivery) -> schema.Ack:
        """R37: end the running call; what streamed is kept, marked incomplete. Its device
        jobs end too (issue 11: a running shell's whole process group is killed)."""
        with self._lock:
            active = self._active
            if active:
                self._halt.set()
        if active and self.settings.devices:
            try:
                self.node.tell("devices", schema.StopJobs(caller=MAIN))
            except TransportError as error:
                log.warning("%s: the turn's device jobs were not stopped: %s", self, error)
        return schema.Ack()

    def on_await_subscriber(self, msg: schema.AwaitSubscriber, delivery) -> schema.Ack:
        """A session in another process waits for its subscription to reach us."""
        if not self.node.wait_subscribed(msg.topic, 1, timeout=msg.timeout):
            raise TimeoutError(f"{self}: no subscriber to {msg.topic!r} reached this process in {msg.timeout:g} s")
        return schema.Ack()

    def on_turn_status(self, msg: schema.TurnStatus, delivery) -> schema.TurnState:
        with self._lock:
            running, turn = self._active, self._turn if self._active else -1
        return schema.TurnState(running=running, turn=turn, model=self.settings.reply.label,
                                usage=self.core.usage.to_dict())

    # -- the worker thread --------------------------------------------------------------

    def _run_turns(self) -> None:
        try:
            self._resume_goal()
        except TransportError as error:  # the log writer is not there yet: the first goal message loads it
            log.warning("%s: the saved goal was not read at start: %s", self, error)
        finally:
            self._goal_resumed.set()
        while True:
            pending = self._work.get()
            if pending is None:
                return
            io = _ShellIO(self, pending)
            end = None
            try:
                self._goal_step(lambda book: book.turn_started())
                end = self.core.run(io)
            except TransportError as error:  # the planner or the log writer was lost: no bug of ours
                log.error("%s: the turn for %r failed: %s: %s", self, pending.msg.text[:40], type(error).__name__,
                          error)
                io.failed(error)
            except Exception as error:  # the turn is over; the person hears why
                log.exception("%s: the turn for %r failed", self, pending.msg.text[:40])
                io.failed(error)
            if io.turn >= 0 and self.hooks is not None:
                self.hooks.submit(io.turn)
            try:
                self._after_turn(end.reason if end is not None else "error", io.messages)
            except Exception:  # the goal pauses no later than the next turn's end; the worker goes on
                log.exception("%s: the goal's step after turn %d failed", self, io.turn)

    # -- the goal's loop (the worker thread) ------------------------------------------------

    def _resume_goal(self) -> None:
        """At start, a saved goal: shown, and continued unless its turn was cut short."""
        self._load_goal()
        with self._goal_lock:
            if self.goals.goal is None or self.goals.goal is not self._goal_saved:
                return  # none, or a goal message came first and changed it: nothing to resume
            step = self._goal_step(lambda book: book.restarted())
        self._goal_resumed.set()  # before the check, which may take a while
        if step.action == "check":
            self._goal_event("resumed", step.goal, "after a restart")
        elif step.goal is not None:  # paused now, or before the restart: it waits for the person
            self._goal_event("paused", step.goal, step.goal.detail)
        if step.action == "check":
            self._check_and_go_on(self._last_turn())

    def _last_turn(self) -> list[tuple[str, str]]:
        """The messages of the log's last turn (from its last `user` message on), for a
        check made after a restart."""
        count = self.node.ask(self.log_writer, schema.CountMessages(), timeout=_ASK_SECONDS).messages
        messages: list[tuple[str, str]] = []
        for i in range(count - 1, max(-1, count - 200), -1):
            record = self.node.ask(self.log_writer, schema.ReadMessage(i=i), timeout=_ASK_SECONDS)
            messages.insert(0, (record.kind, record.text))
            if record.kind == "user":
                break
        return messages

    def _after_turn(self, reason: str, messages: list[tuple[str, str]]) -> None:
        step = self._goal_step(lambda book: book.turn_ended(reason))
        if step.action == "pause":
            self._goal_event("paused", step.goal, step.detail)
        elif step.action == "check":
            self._check_and_go_on(messages)

    def _check_and_go_on(self, messages: list[tuple[str, str]]) -> None:
        with self._goal_lock:
            goal = self.goals.goal
            self._goal_halt.clear()
        if goal is None or goal.state != "active":
            return
        try:
            self._checking = True
            answer = self._check(goal, messages)
        except Exception as error:  # a failed check pauses the goal: it never loops
            self._checking = False
            if self._goal_halt.is_set():
                return
            log.warning("%s: the goal check failed: %s: %s", self, type(error).__name__, error)
            step = self._goal_step(lambda book: book.check_failed(f"{type(error).__name__}: {error}"))
        else:
            self._checking = False
            if self._goal_halt.is_set():
                return  # halted, or the person wrote (their turn is checked), while it checked
            step = self._goal_step(lambda book: book.checked(answer))
        if step.action == "met":
            self._goal_event("met", goal, step.detail)
        elif step.action == "pause":
            self._goal_event("paused", step.goal, step.detail)
        elif step.action == "continue":
            self._continue(step.goal, step.detail)

    def _check(self, goal: Goal, messages: list[tuple[str, str]]) -> str:
        """The goal's check: one call of the reply model, no tools, a short answer."""
        request = Request(model=self.settings.reply.model, system=CHECK_SYSTEM, cache_system=False,
                          messages=(Message("user", (TextBlock(check_text(goal.text, messages)),)),),
                          max_tokens=CHECK_MAX_TOKENS, timeout=120.0, label="goal-check")
        text: list[str] = []
        for event in interruptible(lambda: self._connection().stream(request), self._goal_halt, name="goal-check"):
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, Usage):
                self.core.usage.count(event)
                try:
                    self.node.tell(self.log_writer, schema.RecordUsage.of("turns", event))
                except TransportError as error:
                    log.warning("%s: usage not recorded: %s", self, error)
        if self._goal_halt.is_set():
            raise ModelError("the check was stopped")
        return "".join(text)

    def _continue(self, goal: Goal, why: str) -> None:
        """The next turn starts with the continuation message, unless input of the
        person's started one meanwhile (that turn is checked when it ends)."""
        msg = schema.UserInput(text=CONTINUE, images=[], key=f"goal-{uuid.uuid4().hex}")
        with self._lock:
            if self._active:
                return
            self._active = True
            self._turn = -1
            self._halt.clear()
            pending = _Pending(msg, None, joined=False, meta={"goal": "continue"})
            self._inputs = {msg.key: pending}
            self._work.put(pending)
        self._goal_event("continuing", goal, why)

    def _append(self, kind: str, text: str, key: str, images: Sequence[str] = (),
                meta: dict | None = None) -> list[int]:
        msg = schema.Append(kind=kind, text=text, key=key, images=list(images), meta=meta)
        return self.node.ask(self.log_writer, msg, timeout=_ASK_SECONDS).ids

    def _computers(self) -> list[str]:
        """R36: the turn header's computers joined now (`model_calls.computers_joined`)."""
        return computers_joined(self.node)

    def _connection(self):
        if self.connection is None:
            self.connection = self.settings.reply.connect()
        return self.connection


class _ShellIO:
    """`turns.TurnIO` for one turn: asks, the stream, the tools, the join queue."""

    def __init__(self, actor: TurnRunnerActor, pending: _Pending) -> None:
        self.actor = actor
        self.pending = pending
        self.node = actor.node
        self.turn = -1
        self.answered = False
        self.messages: list[tuple[str, str]] = []  # (kind, text) of what this turn logged: the goal's check reads them

    def settle(self) -> schema.SettledView:
        actor = self.actor
        count = self.node.ask(actor.log_writer, schema.CountMessages(), timeout=_ASK_SECONDS).messages
        with actor._lock:
            actor._until = count  # a report logged from here on is not in this turn's view
        timeout = actor.settings.settle_timeout
        return self.node.ask(actor.planner, schema.SettleView(until=count, timeout=timeout),
                             timeout=timeout + _ASK_SECONDS)

    def begin(self) -> Input:
        actor, msg = self.actor, self.pending.msg
        ids = actor._append("user", msg.text, msg.key, msg.images, self.pending.meta)
        self.messages.append(("user", msg.text))
        self.turn = ids[0]
        with actor._lock:
            self.pending.logged(ids, self.turn)
            self.answered = True
            actor._turn = self.turn
            while actor._unlogged:  # each leaves the list once logged: a failure fails the rest
                later = actor._unlogged[0]
                later_ids = actor._append("user", later.msg.text, later.msg.key, later.msg.images, later.meta)
                actor._unlogged.pop(0)
                actor._joined.append(Input(tuple(later_ids), later.msg.text, tuple(later.msg.images)))
                later.logged(later_ids, self.turn)
        return Input(tuple(ids), msg.text, tuple(msg.images))

    def log(self, kind, text, key, images=(), meta=None) -> list[int]:
        self.messages.append((kind, text))
        return self.actor._append(kind, text, key, images, meta)

    def save_draft(self, key, text, meta) -> None:
        self.node.ask(self.actor.log_writer, schema.SaveDraft(key=key, text=text, meta=meta), timeout=_ASK_SECONDS)

    def stream(self, request: Request) -> Iterator:
        """The call's events; its `Usage` goes to the log writer's usage.json as it passes."""
        events = interruptible(lambda: self.actor._connection().stream(request), self.actor._halt, name="turn-stream")
        return metered(events, self._record_usage)

    def _record_usage(self, usage) -> None:
        try:
            self.node.tell(self.actor.log_writer, schema.RecordUsage.of("turns", usage))
        except TransportError as error:  # figures only: the turn goes on
            log.warning("%s: usage not recorded: %s", self.actor, error)

    def tool(self, name: str, arguments: dict, key: str = "") -> ToolOutcome:
        """Memory tools here; agents and devices by asking their actors (actors/hands/__init__.py)."""
        try:
            return self.actor.hands.call(name, arguments, key)
        except Exception as error:  # a tool's failure is the model's to read, not a crash
            return ToolOutcome(f"{name} failed: {type(error).__name__}: {error}", is_error=True)

    def image(self, digest: str) -> ImageBlock:
        data = self.node.ask(self.actor.log_writer, schema.ReadAsset(digest=digest), timeout=_ASK_SECONDS).data
        return ImageBlock(data, media_type(data))

    def joined(self, final: bool) -> list[Input]:
        actor = self.actor
        with actor._lock:
            items, actor._joined = actor._joined, []
            self.messages += [("user" if item.origin == "person" else "work", item.text) for item in items]
            if final and not items:
                actor._active = False
                actor._turn = -1
                actor._inputs = {}
                actor._until = None
        return items

    def publish(self, event: str, **fields) -> schema.Message:
        msg = getattr(schema, event)(**fields)
        self.node.publish("turn", msg)
        return msg

    def stopped(self) -> bool:
        return self.actor._halt.is_set()

    def now(self) -> datetime:
        return datetime.now().astimezone()

    def clock(self) -> float:
        return time.monotonic()

    def failed(self, error: Exception) -> None:
        """The turn broke outside the model call (the log writer or planner is gone).

        Before its message was logged, no turn began for anyone to see (no TurnStarted):
        the senders of that message and of those that came meanwhile get the error as
        their answer, and may send them again (the session does, once the lost actor runs
        again, P4); nothing is published. After it, the turn ends with "error"."""
        detail = f"{type(error).__name__}: {error}"
        actor = self.actor
        with actor._lock:
            if not self.answered:
                self.pending.fail(error)
            waiting, actor._unlogged = actor._unlogged, []
            actor._joined = []
            actor._inputs = {}
            actor._active = False
            actor._turn = -1
            actor._until = None
        for later in waiting:
            later.fail(error)
        if self.turn < 0:
            return
        try:
            self.publish("TurnEnded", turn=self.turn, reason="error", incomplete=False, detail=detail)
        except TransportError:
            log.error("%s: could not publish the end of turn %d", actor, self.turn)
