"""Agents (R38; docs/HANDS.md §1, §3): named subagents that work in the background and
report once into the chat.

`AgentBook` is the pure core: names (permanent, starting with a letter, unique in the
chat), each agent's state (`queued`, `working`, `done`, `stopped`, `failed`), the queue
(at most `limit` working at once, 8 by default), spawns and tells made idempotent by
their keys, tells waiting for a working agent, and the report outbox. It is rebuilt from
the transcripts at start (`restore`), which is all the state there is: the transcripts
(`agents/NAME/`, written by the log writer, actors/folder/_transcripts.py) hold it.

`AgentsActor` is the shell, named "agents". Each working agent runs `TurnRunner.run` in a
worker thread over an `_AgentIO`, with the chat's one prompt (R34: the same system prompt
and tools as every turn and compaction), its own header (`agent_header`), and its steps
logged into its transcript instead of the chat.

A run's records in the transcript (keys make each append idempotent):

    user     the task (key `spawn:<key>`, meta task, run 1) or a tell (`tell:<key>`, meta run)
    state    `working` when run r begins (key `run-r`)
    everchat, tool, echo   the call's steps, as a turn logs them (keys `turn-<i>-<n>`)
    work     the outbox: the exact `[NAME] …` text, its state and its chat key (`report-r`)
    reported the chat has it (`reported-r`)

The report enters the chat EXACTLY ONCE (R38), even across a crash: first the outbox
record (fsynced), then `Append(kind="work", key="agent-NAME-report-r")` to the chat (the
log writer answers a known key with the ids it gave it), then `reported`. At start every
outbox record without its `reported` is appended again under its key. The log writer
remembers the last `ChatStore.KEY_HORIZON` (65,536) keyed appends: a report whose append
was done, whose `reported` was lost, and that is resent only after 65,536 more keyed
appends would be logged twice. The agents actor resends at its own start, before any
turn of that run could log anything, so this cannot happen in practice.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from everchat.actors.prompt.tasks import TURN_OPENING
from everchat.actors.hands import HandTools, check_agent_name, web_for
from everchat.actors.zoom import MemoryTools, ToolOutcome, ZoomError, media_type
from everchat.actors.turns.calls import AskReader, computers_joined, configured_settings, interruptible
from everchat.actors.models import (ImageBlock, Message, ModelError, Request, TextBlock, ToolResultBlock,
                                    ToolUseBlock)
from everchat.actors.prompt import chat_prompt, turn_text, view_blocks
from everchat.actors.turns.turn import Input, TurnRunner, view_lines
from everchat.actors.folder.usage import metered
from everchat.transport import (Actor, ActorStopped, AskTimeout, PeerLost, Refused, RemoteError, TransportError,
                                schema)

__all__ = [
    "AGENT_LIMIT",
    "Agent",
    "AgentBook",
    "AgentError",
    "AgentsActor",
    "STATES",
    "agent_header",
    "history_messages",
    "report_key",
    "report_text",
    "no_agent",
    "page_text",
    "transcript_page",
]

log = logging.getLogger("everchat.agents")

AGENT_LIMIT = 8
"""R38: at most 8 agents work at once (the `limit`, configurable)."""

STATES = ("queued", "working", "done", "stopped", "failed")
_END_STATES = {"done": "done", "round_limit": "stopped", "stopped": "stopped", "error": "failed"}

_ASK_SECONDS = 30.0
_RETRY_SECONDS = 0.5  # between tries of a report's delivery while the log writer is lost


class AgentError(ValueError):
    """A spawn or tell the agents actor refuses (a name taken, no agent of that name): the
    asker reads it as the tool's error."""


def report_key(name: str, run: int) -> str:
    """The chat key of agent `name`'s report of run `run` (R38: appended once)."""
    return f"agent-{name}-report-{run}"


def agent_header(now: datetime, name: str, computers: Sequence[str] | None = None) -> str:
    """The header of an agent's call (R36's turn header, for R38's agent): it opens with
    `TURN_OPENING`, says this call is the agent NAME's task, and carries the date and
    time and (with device tools) the computers joined now. No blank line inside."""
    if now.tzinfo is None:
        now = now.astimezone()
    offset = now.strftime("%z")
    zone = f"UTC{offset[:3]}:{offset[3:]}" if offset else "local"
    lines = [
        f"{TURN_OPENING} This call is the agent {name}'s task, not a compaction and not the chat's own turn: "
        f"do the task below with your tools; your last reply is your report, and it enters the chat as "
        f"[{name}] …",
        f"Now: {now.strftime('%A %Y-%m-%d %H:%M')} ({zone})",
    ]
    if computers is not None:
        lines.append("Computers joined now: " + (", ".join(computers) if computers else "none"))
    return "\n".join(lines)


# --- the pure core -------------------------------------------------------------------


@dataclass
class Agent:
    """One agent as the book knows it. `runs`: the number of its latest run (from 1);
    `pending`: logged inputs waiting for its next run; `joined`: tells of the working run
    not yet handed to its call; `closing`: the run took its last join (a later tell
    starts a new run); `outbox`: run -> (chat key, text) of reports not yet in the chat."""

    name: str
    task: str
    order: int
    state: str = "queued"
    runs: int = 0
    pending: list[Input] = field(default_factory=list)
    joined: list[Input] = field(default_factory=list)
    closing: bool = False
    outbox: dict[int, tuple[str, str]] = field(default_factory=dict)
    last_reply: str = ""  # restore: the last reply of its latest run (for a failed run's report)


class AgentBook:
    """R38's bookkeeping: names, states, the queue, keys, the outbox. No I/O: the shell
    logs first, then tells the book (so the book never holds what the disk does not)."""

    def __init__(self, limit: int = AGENT_LIMIT) -> None:
        if limit < 1:
            raise ValueError("at least one agent may work at once")
        self.limit = limit
        self.agents: dict[str, Agent] = {}
        self.queue: deque[str] = deque()
        self.keys: dict[str, str] = {}  # "spawn:<key>" / "tell:<key>" -> the agent's name

    def __repr__(self) -> str:
        return f"AgentBook({len(self.agents)} agents, {self.working()} working, {len(self.queue)} queued)"

    def working(self) -> int:
        return sum(1 for agent in self.agents.values() if agent.state == "working")

    def known(self, key: str) -> Agent | None:
        """The agent a spawn or tell key (`spawn:<key>`, `tell:<key>`) already reached."""
        name = self.keys.get(key)
        return self.agents.get(name) if name is not None else None

    def check_spawn(self, name: str) -> None:
        """R38: a spawn's name is an agent's name, and a new one (names are permanent)."""
        check_agent_name(name)
        if name in self.agents:
            raise AgentError(f"an agent named {name} exists already ({self.agents[name].state}); names are "
                             f"permanent: tell it, or choose another name")

    def spawned(self, name: str, task: str, key: str, task_input: Input) -> Agent:
        """The task is logged: the agent is queued."""
        self.check_spawn(name)
        agent = Agent(name, task, order=len(self.agents))
        self.agents[name] = agent
        if key:
            self.keys[key] = name
        self._wait(agent, task_input)
        return agent

    def tell_target(self, name: str) -> tuple[Agent, int]:
        """Where a tell to `name` goes: the working run (joined) or the next one; its run."""
        agent = self.agents.get(name)
        if agent is None:
            raise AgentError(f"no agent named {name!r}; start one with spawn")
        if agent.state == "working" and not agent.closing:
            return agent, agent.runs
        return agent, agent.runs + 1

    def told(self, name: str, key: str, message: Input, run: int) -> Agent:
        """A tell is logged for `run`: joined to the working run, or queued for the next."""
        agent = self.agents[name]
        if key:
            self.keys[key] = name
        if run == agent.runs and agent.state == "working" and not agent.closing:
            agent.joined.append(message)
        else:
            self._wait(agent, message)
        return agent

    def _wait(self, agent: Agent, message: Input) -> None:
        agent.pending.append(message)
        if agent.state != "queued" or agent.name not in self.queue:
            if agent.state != "working":
                agent.state = "queued"
                self.queue.append(agent.name)

    def next_runs(self) -> list[tuple[Agent, Input]]:
        """The queued agents that may work now (R38: at most `limit` at once), each with
        its run's input; they are `working` from here on."""
        started = []
        while self.queue and self.working() < self.limit:
            agent = self.agents[self.queue.popleft()]
            if not agent.pending:
                continue
            first, *later = agent.pending
            agent.pending = []
            agent.state = "working"
            agent.runs += 1
            agent.closing = False
            agent.joined = later
            started.append((agent, first))
        return started

    def take_joined(self, name: str, final: bool) -> list[Input]:
        """The tells the run has not had; with `final` and none, the run takes no more."""
        agent = self.agents[name]
        items, agent.joined = agent.joined, []
        if final and not items:
            agent.closing = True
        return items

    def ended(self, name: str, state: str, run: int, key: str, text: str) -> Agent:
        """Run `run` ended in `state` and its report is in the outbox (logged)."""
        agent = self.agents[name]
        agent.outbox[run] = (key, text)
        if agent.runs == run and agent.state == "working":
            agent.state = state
            agent.closing = False
            if agent.pending:  # a tell came after its last join: it starts the next run
                agent.state = "queued"
                self.queue.append(name)
        return agent

    def reported(self, name: str, run: int) -> None:
        self.agents[name].outbox.pop(run, None)

    def rows(self) -> list[dict]:
        """ListAgents' rows `{name, state, task, position}` (position in the queue from 1)."""
        places = {name: n for n, name in enumerate(self.queue, 1)}
        return [{"name": a.name, "state": a.state, "task": a.task, "position": places.get(a.name, 0)}
                for a in sorted(self.agents.values(), key=lambda a: a.order)]

    def statistics(self) -> dict:
        return {"limit": self.limit, "working": self.working(), "queued": list(self.queue),
                "agents": len(self.agents)}

    def restore(self, name: str, records: Sequence[dict]) -> Agent | None:
        """Rebuild agent `name` from its transcript's records (at start). An agent whose
        last run began and never ended comes back `working` (the shell fails it, see
        `AgentsActor`); one with inputs waiting comes back queued."""
        agent: Agent | None = None
        for record in records:
            kind, meta, key = record["kind"], record.get("meta") or {}, record.get("key") or ""
            run = meta.get("run") if isinstance(meta.get("run"), int) else 0
            if kind == "user" and meta.get("task") and agent is None:
                agent = Agent(name, record["text"], order=len(self.agents))
                self.agents[name] = agent
                agent.pending.append(Input((record["i"],), record["text"]))
                agent.state = "queued"
            if agent is None:
                continue
            if key.startswith(("spawn:", "tell:")):
                self.keys[key] = name
            if kind == "user" and meta.get("tell") and run > agent.runs:
                agent.pending.append(Input((record["i"],), record["text"]))
                if agent.state != "queued":
                    agent.state = "queued"
            elif kind == "state" and record["text"] == "working":
                agent.runs = max(agent.runs, run)
                agent.state = "working"
                agent.pending = []
                agent.last_reply = ""
            elif kind == "everchat" and run == agent.runs:
                agent.last_reply = record["text"]
            elif kind == "work":
                if run > agent.runs:  # a queued agent stopped before it began
                    agent.runs, agent.pending = run, []
                agent.outbox[run] = (str(meta.get("key") or report_key(name, run)), record["text"])
                state = meta.get("state")
                if run == agent.runs and state in STATES:
                    agent.state = state
            elif kind == "reported":
                agent.outbox.pop(run, None)
        if agent is not None and agent.state == "queued" and agent.pending:
            self.queue.append(name)
        return agent


def history_messages(records: Sequence[dict], view: str, header: str) -> list[Message]:
    """An agent's earlier runs as the model saw them, rebuilt from its transcript (R38: a
    tell to a finished agent continues it): the view and the header with the task first,
    then its replies, tool calls and results, and the tells, in order. A tool call left
    without its result (a crash) gets one saying so, so the conversation stays valid."""
    messages: list[tuple[str, list]] = []

    def add(role: str, block) -> None:
        if messages and messages[-1][0] == role:
            messages[-1][1].append(block)
        else:
            messages.append((role, [block]))

    for record in records:
        kind, text, meta = record["kind"], record["text"], record.get("meta") or {}
        if kind == "user" and meta.get("task"):
            for block in view_blocks(view_lines(view)):
                add("user", block)
            add("user", TextBlock(turn_text(header, text)))
        elif kind == "user":
            add("user", TextBlock(f"[The chat told you this (record {record['i']}):]\n{text or '(no text)'}"))
        elif kind == "everchat" and text.strip():
            add("assistant", TextBlock(text))
        elif kind == "tool":
            tool, _, arguments = text.partition(" ")
            try:
                given = json.loads(arguments) if arguments else {}
            except ValueError:
                given = {}
            add("assistant", ToolUseBlock(str(meta.get("call") or f"call-{record['i']}"), tool,
                                          given if isinstance(given, dict) else {}))
        elif kind == "echo":
            call = str(meta.get("call") or "")
            add("user", ToolResultBlock(call, (TextBlock(text or "(empty)"),), bool(meta.get("error"))))
    out: list[Message] = []
    for k, (role, blocks) in enumerate(messages):
        if role == "user":
            asked = [b.id for b in messages[k - 1][1] if isinstance(b, ToolUseBlock)] if k else []
            answered = {b.tool_use_id for b in blocks if isinstance(b, ToolResultBlock)}
            missing = [ToolResultBlock(i, (TextBlock("(no result: Everchat stopped before it came)"),), True)
                       for i in asked if i not in answered]
            results = [b for b in blocks if isinstance(b, ToolResultBlock) and b.tool_use_id in asked]
            rest = [b for b in blocks if not isinstance(b, ToolResultBlock)]
            blocks = missing + results + rest  # results first, as the APIs want
        elif k + 1 == len(messages) and any(isinstance(b, ToolUseBlock) for b in blocks):
            asked = [b.id for b in blocks if isinstance(b, ToolUseBlock)]
            out.append(Message(role, tuple(blocks)))
            out.append(Message("user", tuple(ToolResultBlock(i, (TextBlock("(no result: the run ended)"),), True)
                                             for i in asked)))
            continue
        if blocks:
            out.append(Message(role, tuple(blocks)))
    return out


class _AgentRunner(TurnRunner):
    """`TurnRunner` for one run of agent `name`: its header (`agent_header`) in place of a
    turn's, and, when it continues a finished agent, its earlier runs (rebuilt from the
    transcript) before the new input."""

    def __init__(self, *args, name: str, started: datetime, past: Sequence[dict] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.name = name
        self.started = started
        self.past = list(past)
        self.head: list[Message] = []

    def first_message(self, view, header, message, images=(), joined=()) -> Message:
        computers = self.computers() if callable(self.computers) else self.computers
        header = agent_header(self.started, self.name, computers)
        if not self.past:
            return super().first_message(view, header, message, images, joined)
        self.head = history_messages(self.past, view, header)
        blocks: list = [TextBlock(f"[The chat told you this (record {message.ids[0]}):]\n{message.text or '(no text)'}")]
        for later, later_images in joined:
            blocks.append(TextBlock(f"[The chat told you this (record {later.ids[0]}):]\n{later.text}"))
            blocks += later_images
        return Message("user", tuple(blocks))

    def joined_blocks(self, message, images) -> list:
        """R38: a `tell` that reached the agent between its tool calls comes from the chat,
        not from the person, and its number is the transcript's record."""
        return [TextBlock(f"[The chat told you this (record {message.ids[0]}):]\n{message.text or '(no text)'}"),
                *images]

    def request(self, messages: Sequence[Message]) -> Request:
        whole = list(self.head) + list(messages)
        merged: list[Message] = []
        for each in whole:  # a run that ended on a user message: the tell joins it
            if merged and merged[-1].role == each.role:
                merged[-1] = Message(each.role, merged[-1].content + each.content)
            else:
                merged.append(each)
        return replace(super().request(merged), label="agent")


def report_text(name: str, state: str, reply: str, detail: str = "") -> str:
    """The one `work` message of a run (R3, R38): `[NAME] ` and the run's last reply,
    with how it ended when it did not end done."""
    body = reply.strip() or "(no reply)"
    if state == "done":
        return f"[{name}] {body}"
    why = f": {detail}" if detail else ""
    return f"[{name}] ({state}{why}) {body}"


def transcript_page(ask, name: str, page: int = 1) -> str:
    """R35's zoom("Name"): page `page` of agent `name`'s transcript (`i kind: text` per
    record) with a line saying where the rest is; ZoomError for an unknown agent or page.
    `ask(msg)` asks the log writer (a node's or a session's ask). The turn runner and the
    session hand `MemoryTools(..., agents=lambda name, page: transcript_page(ask, name,
    page))` this, so the model, `/zoom NAME` and `everchat zoom NAME` say the same."""
    try:
        got = ask(schema.ReadTranscript(agent=name, page=page))
    except RemoteError as error:
        if error.kind == "NoTranscript":
            raise ZoomError(no_agent(name)) from None
        if error.kind == "BadInput":
            raise ZoomError(error.text) from None
        if error.kind == "CorruptRecord":
            raise ZoomError(unreadable(name, error.text)) from None
        raise
    return page_text(name, got.text, got.page, got.pages)


def no_agent(name: str) -> str:
    """What zoom("Name") says for a name no agent of the chat has (R35)."""
    return f"No agent named {name!r} in this chat."


def unreadable(name: str, why: str) -> str:
    """What zoom("Name") and the agents list say of a transcript that cannot be read
    (P8): it is skipped, the rest of the chat goes on."""
    return f"The transcript of agent {name!r} cannot be read ({why}); it is skipped."


def page_text(name: str, text: str, page: int, pages: int) -> str:
    """A transcript page as zoom shows it: the page, then where the rest is."""
    if page < pages:
        text += f'\n(page {page} of {pages}: zoom("{name}", page={page + 1}) for the rest)'
    return text


# --- the shell -----------------------------------------------------------------------

_LOST = (PeerLost, ActorStopped, AskTimeout, Refused)
_LOST_KINDS = frozenset(cls.__name__ for cls in _LOST)


def _lost(error: TransportError) -> bool:
    """The log writer (or whom it asked) was lost or busy: worth asking again."""
    if isinstance(error, RemoteError):
        return error.kind in _LOST_KINDS
    return isinstance(error, _LOST)


class AgentsActor(Actor):
    """The agents of a chat (R38), named "agents". `settings`: a `config.Settings`, or
    "configured" (read in `on_start`, as the turn runner's). `limit`: how many agents work
    at once (default: the settings' `agent_limit`, else 8). `devices`: the devices actor's
    name (its absence is logged, never fatal).

    Threads: the actor's own thread answers SpawnAgent, TellAgent, StopAgent, ListAgents;
    one thread per working agent runs its call; one reporter thread appends the reports to
    the chat, in the order the runs ended, retrying while the log writer is lost."""

    def __init__(self, settings="configured", limit: int | None = None, log_writer: str = "log_writer",
                 planner: str = "planner", devices: str = "devices", extra_tools: tuple = ()) -> None:
        super().__init__()
        # the single placement's Python tools, `(ToolSpec, handler)`: offered and run as the
        # turn runner does, so an agent's call sends the turns' very tools (R26, R34)
        self.extra_tools = tuple(extra_tools)
        self.settings = settings
        self.limit = limit
        self.log_writer = log_writer
        self.planner = planner
        self.devices = devices
        self.book: AgentBook | None = None
        self.connection = None
        self.usage = None
        self._lock = threading.Lock()
        self._halt = threading.Event()  # the actor stops: every run ends, nothing more is reported
        self._stops: dict[str, threading.Event] = {}  # the working agents' own stop events
        self._threads: dict[str, threading.Thread] = {}
        self._reports: queue.Queue = queue.Queue()
        self._reporter: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the actor's thread: read the settings, build the chat's one prompt (the
        turn runner's, R34), rebuild the book from the transcripts (asks to the log writer:
        if it cannot be reached the start fails and the supervisor restarts us), fail the
        runs a crash cut short, queue the outbox's undelivered reports and start the
        queued agents.

        A run that was working when the process died is marked `failed`, not run again:
        its tool calls may have changed files or run commands (R39: a job is never run
        twice), and its call's thinking is gone. Its report says so, once, and a `tell`
        continues it from its transcript when the person wants."""
        super().on_start()
        from everchat.actors.folder.usage import Tally

        if self.settings == "configured":
            self.settings = configured_settings()
        self.tools_on = self.settings.devices
        self.web = web_for(self.settings)
        # R34: the very prompt of the turn runner and the compactors (one cache entry). The
        # single placement's extra Python tools are the turn runner's alone: agents are
        # offered the chat's tools without them (the integrator's call, see the report).
        self.prompt = chat_prompt(self.settings, tuple(spec for spec, _ in self.extra_tools))
        self.book = AgentBook(self.limit or self.settings.agent_jobs or AGENT_LIMIT)
        self.usage = Tally()
        self.memory = MemoryTools(AskReader(self.node, self.log_writer), agents=self.transcript_page)
        try:
            self.connection = self.settings.reply.connect()
        except ModelError as error:  # a missing key is the first run's error, in its words
            log.warning("%s: no reply model yet: %s", self, error)
        names = self._ask(self.log_writer, schema.ListTranscripts()).agents
        cut_short = []
        for name in names:
            try:
                records = self._records(name)
            except RemoteError as error:
                if error.kind != "CorruptRecord":
                    raise
                log.warning("%s: %s", self, unreadable(name, error.text))  # P8: the others still work
                continue
            agent = self.book.restore(name, records)
            if agent is not None and agent.state == "working":
                cut_short.append(agent)
        self._reporter = threading.Thread(target=self._report_loop, name=f"{self.name}-reports", daemon=True)
        self._reporter.start()
        for agent in sorted((a for a in self.book.agents.values()), key=lambda a: a.order):
            for run in sorted(agent.outbox):
                self._reports.put((agent.name, run))
        for agent in cut_short:
            text = report_text(agent.name, "failed", agent.last_reply,
                               "Everchat stopped while it worked; its transcript has its steps, and a tell "
                               "continues it from there")
            self._end_run(agent.name, agent.runs, "failed", text, retry=False)
        self._launch_next()

    def on_stop(self) -> None:
        """Runs in the actor's thread: ends every run (their reports are left to the next
        start, which reports them failed, once) and the reporter."""
        self._halt.set()
        with self._lock:
            for stop in self._stops.values():
                stop.set()
            threads = list(self._threads.values())
        self._reports.put(None)
        for thread in threads:
            thread.join(timeout=5)
        if self._reporter is not None:
            self._reporter.join(timeout=5)
        super().on_stop()

    # -- messages ----------------------------------------------------------------------

    def on_spawn_agent(self, msg: schema.SpawnAgent, delivery) -> schema.AgentAccepted:
        """R38: start agent `name` on `task` (queued when `limit` work already). The same
        key again answers the agent it started."""
        key = f"spawn:{msg.key}" if msg.key else f"spawn:{msg.name}"
        with self._lock:
            known = self.book.known(key)
            if known is not None:
                return self._accepted(known, again=True)
            self.book.check_spawn(msg.name)
            if not msg.task.strip():
                raise AgentError("an agent's task is a text that is not empty")
            ids = self._record(msg.name, "user", msg.task, key, {"task": True, "run": 1})
            agent = self.book.spawned(msg.name, msg.task, key, Input(tuple(ids), msg.task))
            started = self.book.next_runs()
            answer = self._accepted(agent)
        self._launch(started)
        self._publish(agent.name, agent.state, "started" if agent.state == "working" else "queued")
        return answer

    def on_tell_agent(self, msg: schema.TellAgent, delivery) -> schema.AgentAccepted:
        """R38: `text` reaches a working agent between its tool calls; a finished one goes
        on from its transcript (queued like a spawn). Logged in the transcript first."""
        key = f"tell:{msg.key}" if msg.key else ""
        with self._lock:
            known = self.book.known(key) if key else None
            if known is not None:
                return self._accepted(known, again=True)
            if not msg.text.strip():
                raise AgentError("a tell is a text that is not empty")
            agent, run = self.book.tell_target(msg.name)
            record_key = key or f"tell:{time.time_ns()}"
            ids = self._record(msg.name, "user", msg.text, record_key, {"tell": True, "run": run})
            self.book.told(msg.name, key, Input(tuple(ids), msg.text), run)
            started = self.book.next_runs()
            answer = self._accepted(agent, told=True)
        self._launch(started)
        return answer

    def on_stop_agent(self, msg: schema.StopAgent, delivery) -> schema.Ack:
        """End agent `name`'s call (its report says it was stopped) and its device jobs
        (`StopJobs(caller=name)`; a chat without a devices actor is logged, not an error).
        A queued agent is taken out of the queue and reports that it never began."""
        with self._lock:
            agent = self.book.agents.get(msg.name)
            if agent is None:
                raise AgentError(f"no agent named {msg.name!r}")
            if agent.state == "working":
                self._stops[msg.name].set()
                queued = False
            else:
                queued = agent.state == "queued"
                if queued:
                    self.book.queue = deque(n for n in self.book.queue if n != msg.name)
                    agent.pending = []
                    agent.runs += 1
                    agent.state = "working"  # for ended(): this run ends at once
        if queued:
            text = report_text(msg.name, "stopped", "", "stopped before it began")
            self._end_run(msg.name, agent.runs, "stopped", text, retry=False)
            self._launch_next()
        stop_jobs = getattr(schema, "StopJobs", None)
        if stop_jobs is None:
            log.info("%s: no StopJobs message in this build: %s's device jobs were not asked to stop", self, msg.name)
        else:
            try:
                self.node.ask(self.devices, stop_jobs(caller=msg.name), timeout=_ASK_SECONDS)
            except TransportError as error:
                log.warning("%s: could not stop %s's device jobs (%s: %s)", self, msg.name, type(error).__name__,
                            error)
        return schema.Ack()

    def on_list_agents(self, msg: schema.ListAgents, delivery) -> schema.AgentList:
        with self._lock:
            return schema.AgentList(agents=self.book.rows())

    def statistics(self) -> dict:
        """The queue as the ops console shows it: limit, working, queued names."""
        with self._lock:
            return self.book.statistics() if self.book is not None else {}

    # -- the transcripts (asks to the log writer) ------------------------------------------

    def transcript_page(self, name: str, page: int) -> str:
        """R35's zoom("Name") for the model: one page, with where the rest is."""
        return transcript_page(lambda msg: self._ask(self.log_writer, msg), name, page)

    def _ask(self, target: str, msg: schema.Message) -> schema.Message:
        return self.node.ask(target, msg, timeout=_ASK_SECONDS)

    def _record(self, name: str, kind: str, text: str, key: str, meta: dict | None = None) -> list[int]:
        return self._ask(self.log_writer, schema.AppendTranscript(name, kind, text, key, meta)).ids

    def _records(self, name: str, first: int = 0, until: int | None = None) -> list[dict]:
        out: list[dict] = []
        while True:
            got = self._ask(self.log_writer, schema.ReadTranscriptRecords(agent=name, first=first + len(out)))
            out += got.records
            if not got.more or (until is not None and first + len(out) >= until):
                break
        return out if until is None else [r for r in out if r["i"] < until]

    def _retry(self, what: str, do):
        """Ask until it is answered: the log writer may be restarting (P4). The asks made
        so are idempotent (keyed). Ends with the actor (ActorStopped)."""
        while True:
            try:
                return do()
            except TransportError as error:
                if not _lost(error) or self._halt.is_set():
                    raise
                log.warning("%s: %s: %s: %s; trying again", self, what, type(error).__name__, error)
            if self._halt.wait(_RETRY_SECONDS):
                raise ActorStopped(f"{self}: stopped while {what}")

    # -- runs ------------------------------------------------------------------------------

    def _accepted(self, agent: Agent, again: bool = False, told: bool = False) -> schema.AgentAccepted:
        later = (f"Its report will arrive in the chat as a work message [{agent.name}] …; do not wait for it "
                 f"or poll.")
        if agent.state == "queued":
            place = list(self.book.queue).index(agent.name) + 1 if agent.name in self.book.queue else 0
            detail = f"Queued ({place} in line; at most {self.book.limit} agents work at once). {later}"
        elif agent.state == "working":
            detail = ("It reads this between its tool calls. " if told else "") + later
        else:
            detail = later
        if again:
            detail = "(already done with this key) " + detail
        return schema.AgentAccepted(name=agent.name, state=agent.state, detail=detail)

    def _launch_next(self) -> None:
        with self._lock:
            started = self.book.next_runs()
        self._launch(started)

    def _launch(self, started: list[tuple[Agent, Input]]) -> None:
        for agent, first in started:
            stop = threading.Event()
            thread = threading.Thread(target=self._run, args=(agent.name, agent.runs, first, stop),
                                      name=f"{self.name}-{agent.name}", daemon=True)
            with self._lock:
                self._stops[agent.name] = stop
                self._threads[agent.name] = thread
            if self._halt.is_set():
                stop.set()
            thread.start()

    def _run(self, name: str, run: int, first: Input, stop: threading.Event) -> None:
        """One run of agent `name` (its worker thread): the call, then its report."""
        io = _AgentIO(self, name, run, first, stop)
        reason, detail = "error", ""
        try:
            past = self._records(name, until=first.ids[0]) if run > 1 else []
            reply = self.settings.reply
            runner = _AgentRunner(self.prompt, reply.model, effort=reply.effort, tool_rounds=self.settings.tool_rounds,
                                  name=name, started=io.now(), past=past,
                                  computers=self._computers if self.tools_on else None)
            runner.usage = self.usage
            end = runner.run(io)
            reason, detail = end.reason, end.detail
        except TransportError as error:  # the planner or the log writer was lost: no bug of ours
            log.error("%s: %s's run %d failed: %s: %s", self, name, run, type(error).__name__, error)
            detail = f"{type(error).__name__}: {error}"
        except Exception as error:  # the run is over; the chat hears why
            log.exception("%s: %s's run %d failed", self, name, run)
            detail = f"{type(error).__name__}: {error}"
        if self._halt.is_set():
            return  # Everchat stops: the next start reports this run failed, once
        state = _END_STATES.get(reason, "failed")
        if reason == "stopped" and not detail:
            detail = "stopped by the person"
        try:
            self._end_run(name, run, state, report_text(name, state, io.last_reply, detail if state != "done" else ""))
        except TransportError as error:
            log.error("%s: %s's report of run %d is not in its outbox (%s); the next start reports it failed",
                      self, name, run, error)
            return
        finally:
            with self._lock:
                if self._threads.get(name) is threading.current_thread():
                    del self._threads[name]
        self._launch_next()

    def _end_run(self, name: str, run: int, state: str, text: str, retry: bool = True) -> None:
        """R38's first step: the report into the outbox (fsynced), then to the reporter.
        `retry`: ask again while the log writer is lost (a run's thread); `on_start` does
        not, so a lost log writer fails the start, which the supervisor repeats."""
        key = report_key(name, run)

        def outbox() -> list[int]:
            return self._record(name, "work", text, f"report-{run}", {"run": run, "state": state, "key": key})

        if retry:
            self._retry(f"logging {name}'s report", outbox)
        else:
            outbox()
        with self._lock:
            self.book.ended(name, state, run, key, text)
        self._publish(name, state, text)
        self._reports.put((name, run))

    def _report_loop(self) -> None:
        """The reporter thread: each outbox entry into the chat as one keyed `work`
        message, then its `reported` record; in the order the runs ended."""
        while True:
            item = self._reports.get()
            if item is None:
                return
            name, run = item
            with self._lock:
                entry = self.book.agents[name].outbox.get(run)
            if entry is None:
                continue  # reported already (queued twice at start)
            key, text = entry
            try:
                ids = self._retry(f"reporting {name}", lambda: self._ask(self.log_writer, schema.Append(
                    kind="work", text=text, key=key, images=[], meta={"agent": name, "run": run})).ids)
                self._retry(f"noting {name}'s report", lambda: self._record(
                    name, "reported", key, f"reported-{run}", {"run": run, "ids": ids}))
                self._hand_to_turn(ids, text)
            except TransportError as error:
                log.error("%s: %s's report %s waits for the next start: %s", self, name, key, error)
                continue
            with self._lock:
                self.book.reported(name, run)

    def _hand_to_turn(self, ids: list[int], text: str) -> None:
        """R34: a running turn takes the report in between its tool calls (a hint: the log
        has the report, and the next turn's view holds it whatever happens here)."""
        try:
            self.node.tell("turn_runner", schema.ReportLogged(ids=list(ids), text=text))
        except TransportError as error:
            log.info("%s: the running turn was not told of a report: %s", self, error)

    def _publish(self, name: str, state: str, text: str) -> None:
        try:
            self.node.publish("agent", schema.AgentEvent(name=name, state=state, text=text[:_EVENT_CHARS]))
        except TransportError as error:  # events are hints
            log.info("%s: agent event not published: %s", self, error)

    def _connection(self):
        if self.connection is None:
            self.connection = self.settings.reply.connect()
        return self.connection

    def _computers(self) -> list[str]:
        """R36 for an agent's header: the computers joined now, as the turn's header has them."""
        return computers_joined(self.node, self.devices)


_EVENT_CHARS = 300

class _AgentIO:
    """`turns.TurnIO` for one run of one agent: the view from the planner, the steps into
    its transcript, its tools as caller NAME, tells as joins, its own stop event."""

    def __init__(self, actor: AgentsActor, name: str, run: int, first: Input, stop: threading.Event) -> None:
        self.actor = actor
        self.node = actor.node
        self.name = name
        self.run = run
        self.first = first
        self.stop = stop
        self.last_reply = ""
        self.started = datetime.now().astimezone()
        self.hands = HandTools(self._hand_ask, actor.memory.call, caller=name, devices=actor.tools_on,
                               extra={spec.name: handler for spec, handler in actor.extra_tools}, web=getattr(actor, "web", None))

    def _hand_ask(self, target: str, msg: schema.Message, timeout: float) -> schema.Message:
        return self.node.ask(target, msg, timeout=timeout)

    def settle(self) -> schema.SettledView:
        """R38: an agent's call begins with the view, settled as a turn's (R36)."""
        actor = self.actor
        count = actor._ask(actor.log_writer, schema.CountMessages()).messages
        timeout = actor.settings.settle_timeout
        return self.node.ask(actor.planner, schema.SettleView(until=count, timeout=timeout),
                             timeout=timeout + _ASK_SECONDS)

    def begin(self) -> Input:
        """The run's input (the task, or the tell that continues it) was logged when it
        came, so a queued agent survives a crash; here the run's start is logged."""
        self.actor._record(self.name, "state", "working", f"run-{self.run}", {"run": self.run})
        return self.first

    def log(self, kind, text, key, images=(), meta=None) -> list[int]:
        meta = {**(meta or {}), "run": self.run}
        if images:
            meta["images"] = list(images)
        ids = self.actor._record(self.name, kind, text, key, meta)
        if kind == "everchat":
            self.last_reply = text
        return ids

    def save_draft(self, key, text, meta) -> None:
        """Nothing: the draft (R37) exists so the chat's log gets a reply a crash cut short.
        A run a crash cuts short is reported failed and continued from its transcript by a
        tell, so an agent's draft would never be read."""

    def stream(self, request: Request) -> Iterator:
        events = interruptible(lambda: self.actor._connection().stream(request), self.stop, self.actor._halt,
                               name="agent-stream")
        return metered(events, self._record_usage)

    def _record_usage(self, usage) -> None:
        try:
            self.node.tell(self.actor.log_writer, schema.RecordUsage.of("turns", usage))
        except TransportError as error:  # figures only: the run goes on
            log.warning("%s: usage not recorded: %s", self.actor, error)

    def tool(self, name: str, arguments: dict, key: str = "") -> ToolOutcome:
        """The agent's tools, as caller NAME. The key is made the chat's own (a device job's
        id is unique in the chat, R39; a turn's keys and this agent's could be equal)."""
        return self.hands.call(name, arguments, f"agent-{self.name}-{key}")

    def image(self, digest: str) -> ImageBlock:
        data = self.actor._ask(self.actor.log_writer, schema.ReadAsset(digest=digest)).data
        return ImageBlock(data, media_type(data))

    def joined(self, final: bool) -> list[Input]:
        with self.actor._lock:
            return self.actor.book.take_joined(self.name, final)

    def publish(self, event: str, **fields) -> schema.Message:
        """The turn's events, kept by the core; a few go out as `AgentEvent`s (topic "agent")."""
        msg = getattr(schema, event)(**fields)
        said = None
        if event == "TurnStarted":
            said = ("working", f"run {self.run} started")
        elif event == "TurnToolCall":
            said = ("working", f"{msg.name} {msg.arguments_json}")
        elif event == "TurnToolResult":
            said = ("working", f"{'error' if msg.is_error else 'result'}: {msg.preview}")
        elif event == "TurnJoined":
            said = ("working", "read a tell")
        elif event == "Notice":
            said = ("working", msg.text)
        if said is not None:
            self.actor._publish(self.name, *said)
        return msg

    def stopped(self) -> bool:
        return self.stop.is_set() or self.actor._halt.is_set()

    def now(self) -> datetime:
        return self.started

    def clock(self) -> float:
        return time.monotonic()
