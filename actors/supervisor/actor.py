"""The supervisor: starts every actor from a placement, restarts the ones that crash,
keeps the registry of where each lives, and gathers mailbox statistics (ops console).

Placements (configuration, not code):
- `single`: every actor in this process (the default; fast start);
- `processes`: every actor in its own OS process, over ipc (or tcp with CURVE);
- any actor may also join from another host (`everchat actor NAME --join tcp://…`):
  the supervisor then expects it instead of starting it.

A crashed actor is restarted with exponential backoff; past the limit the
supervisor gives up on it with a clear error. A restarted actor recovers from the
log writer (the planner reloads the saved view; nothing is rebuilt by another rule).

Who may touch the chat:
- `start()` first takes the chat (P6, R5): its own OS lock, `supervisor.lock` in the chat
  folder (the log writer takes `writer.lock` itself, and flock conflicts even inside one
  process), then it opens and closes the chat as its writer, which checks that no other
  writer holds it and that the chat opens. Only then is `run/` written or anything bound:
  a second supervisor fails with ChatLocked naming the owner and leaves the running chat
  as it was.
- `run/` is 0700 and every file in it 0600 whatever the umask (P5); the transport makes
  its sockets 0600 and lets in only processes of the same user.
- Actor processes die with the supervisor (P16): each asks the kernel (Linux) to kill it
  when the thread that started it ends. They are forked by one fork server
  (actors/supervisor/forkserver.py: the actors' code imported once, so all start at once, issue 9;
  a fork of the supervisor itself where that is safe), which is started from one thread
  that lives as long as the supervisor
  (`supervisor_parts.Launcher`), never from a caller's thread that may end first: the
  server dies with that thread, the actors with the server. Elsewhere the server stops
  its children when its pipe from us closes, and they poll for their parent
  (actors/supervisor/process.py).
- Actor processes log to `run/<name>.log`, never to the terminal they share with the
  person (P9); the warning about a stopped one names its file.

Stopping (P10) is a normal end: the actors stop one at a time, workers first and the log
writer last (everyone saves through it), each while the others it reports to still run. In
the single placement every one stops in the node, which runs on until the last; in
`processes` each process stops its actor before its node. The workers give up the model call
in flight at once (actors/compactor/call_thread.py; its summary is built by the next run), so a model
that never answers does not hold the close.

The session reads `stopping`, `running(name)` and `incarnation(name)` to repeat its
requests across restarts (P4). A client attached to the running chat (issue 10,
actors/session/attached.py) reads the same three through `SupervisorStatus`, answered by `state()`.

One chat, one server (issue 10): a supervisor made `attachable` (the one of `serve`, the
terminal chat, the web page) says so in its run file, `run/supervisor.json`
(`"attachable": true`); the other writing commands of this computer then attach to it
instead of failing on its lock (R5 stays: the lock and the folder stay the server's). A
one-shot command's supervisor (`ask`, `compact`, `import`) is not attachable: it ends
when its command does, taking a client's actors with it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pykka

from everchat.actors.turns.after_turn import STOP_SECONDS
from everchat.actors.supervisor.catalog import NodeAgent, budget_to_json, build_actor, node_rows
from everchat.actors.tree import Budget
from everchat.actors.folder import ChatStore
from everchat.actors.supervisor.parts import LOCK_NAME, ChatLock, Launcher, Ports
from everchat.actors.turns.actor import SETTINGS_ENV, settings_flags
from everchat.transport import KeyStore, Node, check_ipc_bind, parse_address, schema

__all__ = ["Placement", "Supervisor", "SupervisorActor", "NodeAgent", "GaveUp", "actor_names", "build_actor",
           "node_rows", "LOCK_NAME"]

log = logging.getLogger("everchat.supervisor")

_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 5.0
_RESTART_LIMIT = 10  # restarts within _RESTART_WINDOW seconds before giving up
_RESTART_WINDOW = 60.0
_LAUNCH_SECONDS = 60.0  # a Register waits this long at most for its process to be known


def _stop_wait(name: str) -> float:
    """How long the stop waits for actor `name`: the turn runner's lets its queued
    after-turn commands finish (issue 13), the others' 10 s."""
    return STOP_SECONDS if name == "turn_runner" else 10.0


class GaveUp(RuntimeError):
    """An actor crashed more often than the restart limit allows."""


@dataclass(frozen=True)
class Placement:
    """Where the actors run. `workers` compactor workers (1 … 8, R31)."""

    mode: str = "single"  # "single" or "processes"
    transport: str = "ipc"  # for "processes": "ipc" or "tcp" (CURVE)
    workers: int = 2
    remote: tuple[str, ...] = ()  # names that join from elsewhere instead of being started
    summarizer: str = "configured"  # or "scripted" (the placement tests' deterministic stand-in)
    listen: str = "127.0.0.1"  # for tcp: the address the actors listen on, and that joiners dial

    def __post_init__(self) -> None:
        if self.mode not in ("single", "processes"):
            raise ValueError(f"placement mode is 'single' or 'processes', not {self.mode!r}")
        if self.transport not in ("ipc", "tcp"):
            raise ValueError(f"transport is 'ipc' or 'tcp', not {self.transport!r}")
        if self.listen in ("0.0.0.0", "*", "::", ""):
            raise ValueError(f"listen on one address that other hosts can dial (this host's), not {self.listen!r}: "
                             "it is also the address every actor is announced at")
        if not 1 <= self.workers <= 8:
            raise ValueError(f"workers must be 1 to 8 (R31), not {self.workers}")


def actor_names(placement: Placement) -> list[str]:
    """Start order: the log writer first (everyone asks it), then the planner, the device
    hub, the turn runner (R36: it asks all three), the agents (they ask all four), then
    workers."""
    return (["log_writer", "planner", "devices", "turn_runner", "agents"]
            + [f"compactor.{n}" for n in range(placement.workers)])


class SupervisorActor(NodeAgent):
    """The registry: who lives where; handlers run in this actor's thread."""

    def __init__(self, supervisor: "Supervisor") -> None:
        super().__init__()
        self.supervisor = supervisor

    def on_register(self, msg: schema.Register, delivery) -> schema.Directory:
        return self.supervisor.registered(msg)

    def on_directory(self, msg: schema.Directory, delivery) -> None:
        """The supervisor makes the directory; one sent to it would reroute the chat."""
        raise ValueError(f"{self}: the supervisor keeps the directory and takes none from {delivery.sender}")

    def on_stats_request(self, msg: schema.StatsRequest, delivery) -> schema.StatsReply:
        return schema.StatsReply(actors=self.supervisor.statistics())

    def on_supervisor_status(self, msg: schema.SupervisorStatus, delivery) -> schema.SupervisorState:
        """An attached client's view of the actors (issue 10, P4): `Supervisor.state()`."""
        return self.supervisor.state()


@dataclass
class _Child:
    name: str
    process: subprocess.Popen | None = None
    ref: object = None  # the pykka ActorRef, in the single placement
    endpoint: str = ""
    host: str = ""
    pid: int = 0
    restarts: int = 0
    crashes: list[float] = field(default_factory=list)
    registered: threading.Event = field(default_factory=threading.Event)
    launched: threading.Event = field(default_factory=threading.Event)  # `process` is set (or failed)
    gave_up: str = ""


class Supervisor:
    """Runs a chat's actors by a placement. `start()` returns once every actor is up."""

    def __init__(self, chat: str | Path, placement: Placement | None = None, budget: Budget | None = None,
                 run_dir: str | Path | None = None, settings=None, extra_tools: tuple = (),
                 attachable: bool = False) -> None:
        self.chat = Path(chat)
        self.attachable = attachable  # other commands may attach to this chat (issue 10)
        self.settings = settings  # the turn runner's (config.Settings); None: read from the environment
        self.extra_tools = tuple(extra_tools)
        self.placement = placement or Placement()
        self.budget = budget or Budget(jobs=self.placement.workers)
        self.run_dir = Path(run_dir) if run_dir else self.chat / "run"
        self.children: dict[str, _Child] = {name: _Child(name) for name in actor_names(self.placement)}
        self.routes: dict[str, str] = {}
        self.node: Node | None = None
        self.keys: KeyStore | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._monitor: threading.Thread | None = None
        self._chat_lock = ChatLock(self.chat)
        self.ports = Ports(self.chat)  # tcp: listen where the chat listened before (joined devices dial it)
        self._launcher: Launcher | None = None

    def __repr__(self) -> str:
        return f"<Supervisor {self.chat} {self.placement.mode} pid={os.getpid()} host={socket.gethostname()}>"

    # -- starting ------------------------------------------------------------------

    def _endpoint(self, name: str) -> str | None:
        """Where a process listens. In `single` only the supervisor's node listens
        (for the ops console and joining actors); every actor is in it."""
        if self.placement.mode == "single" and name != "supervisor":
            return None
        if self.placement.transport == "tcp":
            listen = self.placement.listen
            host = f"[{listen}]" if ":" in listen else listen
            return f"tcp://{host}:{self.ports.port(name, listen)}"
        return f"ipc://{self.run_dir / (name + '.sock')}"

    def start(self, timeout: float = 60.0) -> "Supervisor":
        """Take the chat, then start every actor; returns once each is up and the log
        writer holds the chat open. Raises the store's errors when the chat is not ours to
        run (ChatLocked naming the owner, NotAChat, CorruptRecord) before anything of the
        chat is touched, TimeoutError when an actor does not start, and ActorStopped when
        the log writer's own start failed (its log says why); a failed start leaves
        nothing running."""
        if self.placement.mode == "processes":
            # The fork server (issue 9) touches nothing of the chat: it imports the actors'
            # code while we take the chat, and a refused start ends it unused.
            self._launcher = Launcher(f"supervisor-launcher-{os.getpid()}")
            self._launcher.prestart(self._child_env())
        try:
            for name in ("supervisor", *self.children):
                endpoint = self._endpoint(name)
                if endpoint is not None and endpoint.startswith("ipc://"):
                    check_ipc_bind(endpoint)  # else an actor's process fails to bind, seen as a start timeout
            self._take_chat()  # refused: stop() releases nothing it did not take
            self._make_run_dir()
            if self.placement.transport == "tcp":
                self.keys = KeyStore(self.chat / "config")  # keys in config/keys/, 0600
                for name in self.children:
                    if name not in self.placement.remote:
                        # Made (and authorized) here, one after another: the actors start
                        # side by side and would each rewrite authorized_keys at once.
                        self.keys.ensure(name)
            self.node = Node("supervisor", bind=self._endpoint("supervisor"), keys=self.keys)
            self.node.start()
            self.node.host("supervisor", SupervisorActor, self)
            if self.node.endpoint:
                self.routes["supervisor"] = self.node.endpoint
                self.ports.remember("supervisor", self.node.endpoint)
            self._write_run_file()
            deadline = time.monotonic() + timeout
            # The log writer first (the planner asks it as it starts, so it must know where
            # it is), then every other actor at once: each is a fork of the same preloaded
            # process, and they start side by side.
            local = [child for child in self.children.values() if child.name not in self.placement.remote]
            first, rest = local[:1], local[1:]
            opened = False
            for wave in (first, rest):
                if wave:
                    self._launch(*wave)  # one request to the fork server for the whole wave
                if wave is rest and first and first[0].name == "log_writer":
                    self._await_open(deadline)  # while the others start
                    opened = True
                for child in wave:
                    if not child.registered.wait(max(0.0, deadline - time.monotonic())):
                        raise TimeoutError(f"{self}: {child.name} did not start within {timeout} s")
            for name in self.placement.remote:
                if not self.children[name].registered.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"{self}: {name} did not join within {timeout} s")
            if not opened:
                self._await_open(deadline)
        except BaseException:
            self.stop()
            raise
        self._monitor = threading.Thread(target=self._watch, name="supervisor-monitor", daemon=True)
        self._monitor.start()
        return self

    def _await_open(self, deadline: float) -> None:
        """The log writer opens the folder (and takes writer.lock) in its own start, which
        may still run after it registered: an answer means the chat is open (R5)."""
        self.node.ask("log_writer", schema.CountMessages(), timeout=max(1.0, deadline - time.monotonic()))

    def _take_chat(self) -> None:
        """P6, R5: the supervisor's lock first, then the chat opened (and closed) as its
        writer: that fails with ChatLocked when another process writes it, and with the
        store's error when it does not open. A folder with no lock file yet may be a new
        chat: the store makes it first (and refuses a folder of other files, R1)."""
        if not self._chat_lock.path.exists():
            ChatStore.open(self.chat, create=True).close()
        self._chat_lock.acquire()
        try:
            ChatStore.open(self.chat, create=True).close()
        except BaseException:
            self._chat_lock.release()
            raise

    def _make_run_dir(self) -> None:
        """`run/` is the owner's alone whatever the umask, also one made before (P5)."""
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.run_dir, 0o700)

    def _write_run_file(self) -> None:
        info = {"version": 1, "pid": os.getpid(), "host": socket.gethostname(), "endpoint": self.node.endpoint,
                "placement": self.placement.mode, "transport": self.placement.transport,
                "attachable": self.attachable}
        path = self.run_dir / "supervisor.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # a temporary file left by a crash may have had another mode
            os.write(fd, json.dumps(info).encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def _launch(self, *children: _Child) -> None:
        """Start `children`'s actors: here (single), or each in a process of its own, all
        forked at once by the fork server. Raises the first failure, once every fork that
        did start is known (stop() ends those)."""
        for child in children:
            child.registered.clear()
            child.launched.clear()
        if self.placement.mode == "single":
            for child in children:
                cls, args = build_actor(child.name, self.chat, self.budget, self.placement.summarizer,
                                        self.settings, self.extra_tools)
                child.ref = self.node.host(child.name, cls, *args)
                child.host, child.pid = socket.gethostname(), os.getpid()
                child.registered.set()
            return
        env = self._child_env()
        if self._launcher is None:
            self._launcher = Launcher(f"supervisor-launcher-{os.getpid()}")
        def forked(index: int, process) -> None:
            if not isinstance(process, BaseException):
                children[index].process = process
            children[index].launched.set()  # its Register may already wait for this (see registered())

        try:
            answers = self._launcher.fork_all([self._argv(child) for child in children], env, each=forked)
        finally:
            for child in children:
                child.launched.set()  # no process: a Register that waits for one is refused
        failed = [answer for answer in answers if isinstance(answer, BaseException)]
        if failed:
            raise failed[0]

    def _argv(self, child: _Child) -> list[str]:
        """everchat.actors.supervisor.process's arguments for `child`; the fork server adds --parent (its own pid)."""
        argv = [
            "--name", child.name,
            "--chat", str(self.chat),
            "--supervisor", self.node.endpoint,
            "--bind", self._endpoint(child.name),
            "--budget", budget_to_json(self.budget),
            "--summarizer", self.placement.summarizer,
            "--log", str(self.log_file(child.name)),
            # Its peers as we know them now: its actor is hosted before it registers (and
            # the planner asks the log writer as it starts).
            "--routes", json.dumps({name: endpoint for name, endpoint in self.routes.items()
                                    if name not in (child.name, f"node.{child.name}")}),
        ]
        if self.keys is not None:
            argv += ["--keys", str(self.chat / "config")]
        return argv

    def _child_env(self) -> dict | None:
        """The environment of the actor processes (None: ours). The turn runner in its own
        process resolves the session's settings from it (keys stay in the environment,
        never on a command line); the fork server reads which model SDKs to preload."""
        if self.settings is None:
            return None
        return dict(os.environ, **{SETTINGS_ENV: json.dumps(settings_flags(self.settings))})

    def registered(self, msg: schema.Register) -> schema.Directory:
        """A process announced an actor (started by us or joining from elsewhere)."""
        parse_address(msg.endpoint)  # a bad endpoint changes no route
        child = self.children.get(msg.name)
        if child is None:
            raise ValueError(f"{self}: no actor called {msg.name!r} belongs to this chat")
        if msg.name not in self.placement.remote and self.placement.mode == "processes":
            # A fork registers quickly: its pid may reach us after its Register.
            child.launched.wait(_LAUNCH_SECONDS)
        with self._lock:
            if msg.name not in self.placement.remote:
                # An actor we start registers from the process we started, and only then:
                # anyone else's Register would reroute the chat to it.
                started = child.process.pid if child.process is not None else None
                if started != msg.pid:
                    where = f"pid {started}" if started is not None else "the supervisor's own process"
                    raise ValueError(f"{self}: {msg.name} runs in {where}; a Register from pid {msg.pid} "
                                     f"on {msg.host} is refused")
            child.endpoint, child.host, child.pid = msg.endpoint, msg.host, msg.pid
            if msg.name not in self.placement.remote:
                self.ports.remember(msg.name, msg.endpoint)
            moved = self.routes.get(msg.name) != msg.endpoint
            self.routes[msg.name] = msg.endpoint
            self.routes[f"node.{msg.name}"] = msg.endpoint
            routes = dict(self.routes)
        self.node.route(msg.name, msg.endpoint)
        self.node.route(f"node.{msg.name}", msg.endpoint)
        if moved:  # the others hear of this one (each heard of the rest when it registered)
            news = schema.Directory(routes={msg.name: msg.endpoint, f"node.{msg.name}": msg.endpoint})
            for other in self.children.values():
                if other.name != msg.name and other.registered.is_set() and other.endpoint:
                    self.node.tell(f"node.{other.name}", news)
        if child.restarts and msg.name.startswith("compactor."):
            self.node.tell("planner", schema.ActorRestarted(name=msg.name))
        child.registered.set()
        return schema.Directory(routes=routes)

    # -- watching and restarting ------------------------------------------------------

    def _watch(self) -> None:
        while not self._stopping.wait(0.05):
            for child in list(self.children.values()):
                if child.gave_up or child.name in self.placement.remote:
                    continue
                if self._alive(child):
                    continue
                self._restart(child)

    def _alive(self, child: _Child) -> bool:
        if self.placement.mode == "single":
            return child.ref is not None and child.ref.is_alive()
        return child.process is not None and child.process.poll() is None

    def log_file(self, name: str) -> Path:
        """Where the process of actor `name` logs (P9: not the person's terminal)."""
        return self.run_dir / f"{name}.log"

    def _see(self, child: _Child) -> str:
        return f"; its log: {self.log_file(child.name)}" if self.placement.mode == "processes" else ""

    def _restart(self, child: _Child) -> None:
        now = time.monotonic()
        child.crashes = [t for t in child.crashes if now - t < _RESTART_WINDOW] + [now]
        code = child.process.returncode if child.process is not None else "stopped"
        if len(child.crashes) > _RESTART_LIMIT:
            child.gave_up = f"{child.name} crashed {len(child.crashes)} times within {_RESTART_WINDOW:.0f} s; giving up"
            log.error("%s: %s (last exit: %s%s)", self, child.gave_up, code, self._see(child))
            return
        delay = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (len(child.crashes) - 1))
        log.warning("%s: %s stopped (exit %s%s); restarting in %.1f s", self, child.name, code, self._see(child), delay)
        if self._stopping.wait(delay):
            return
        child.restarts += 1
        if self.placement.mode == "single":
            self.node.stop_actor(child.name)
        try:
            self._launch(child)
        except OSError as error:  # no fork this time (the fork server was lost): the next round tries again
            log.error("%s: could not start %s again: %s", self, child.name, error)
            return
        if self.placement.mode == "single" and child.name.startswith("compactor."):
            self.node.tell("planner", schema.ActorRestarted(name=child.name))

    # -- what the session reads (P4: its retries wait for a lost actor to run again) ---------------

    @property
    def stopping(self) -> bool:
        """`stop()` has begun: actors now stop on purpose, and none is restarted."""
        return self._stopping.is_set()

    def running(self, name: str) -> bool:
        """Whether actor `name` runs and has registered from the run that serves now, so an
        ask reaches it. An actor joined from elsewhere runs once it has joined (the
        supervisor does not restart it). Raises GaveUp once the supervisor gave up on it,
        and ValueError for a name that is not one of this chat's actors."""
        child = self._child(name)
        if child.gave_up:
            raise GaveUp(f"{child.gave_up} (the chat cannot go on without it)")
        if not child.registered.is_set():
            return False
        if name in self.placement.remote:
            return True
        if not self._alive(child):
            return False
        return self.placement.mode == "single" or child.pid == child.process.pid

    def incarnation(self, name: str) -> tuple[int, int]:
        """Which run of actor `name` serves now: (restarts so far, the pid it registered from)."""
        child = self._child(name)
        return child.restarts, child.pid

    def state(self) -> schema.SupervisorState:
        """What `running`, `incarnation` and `stopping` say of every actor, with the
        endpoint that reaches it (in the single placement every actor is in our node):
        the reply an attached client's retry policy reads (issue 10, P4)."""
        rows = []
        for name, child in self.children.items():
            try:
                running = self.running(name)
            except GaveUp:
                running = False
            endpoint = child.endpoint if self.placement.mode == "processes" or name in self.placement.remote \
                else (self.node.endpoint or "")
            rows.append((name, running, child.restarts, child.pid, endpoint or "", child.gave_up))
        return schema.SupervisorState(actors=rows, stopping=self.stopping, mode=self.placement.mode)

    def _child(self, name: str) -> _Child:
        child = self.children.get(name)
        if child is None:
            raise ValueError(f"{self}: no actor called {name!r} belongs to this chat")
        return child

    # -- statistics ---------------------------------------------------------------------

    def statistics(self) -> list[dict]:
        rows = node_rows(self.node)
        if self.placement.mode == "processes":
            for child in self.children.values():
                if not child.registered.is_set() or child.gave_up:
                    continue
                try:
                    reply = self.node.ask(f"node.{child.name}", schema.StatsRequest(), timeout=2.0)
                except Exception as error:  # a dead child shows as such, the table goes on
                    rows.append({"name": child.name, "host": child.host, "pid": child.pid, "error": str(error)})
                    continue
                rows += reply.actors
        by_name = {child.name: child for child in self.children.values()}
        for row in rows:
            child = by_name.get(row.get("name"))
            if child is not None:
                row["restarts"] = child.restarts
                if child.gave_up:
                    row["error"] = child.gave_up
        return rows

    # -- stopping ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every actor, clear `run/` (`_clear_run_dir`), then release the chat. Safe
        after a failed or no start."""
        self._stopping.set()
        if self._monitor is not None:
            self._monitor.join(timeout=5)
        # Workers first (all at once), the log writer last: everyone else saves through it.
        children = list(self.children.values())
        workers = [child for child in children if child.name.startswith("compactor.")]
        others = [child for child in reversed(children) if child not in workers]
        if self.node is not None and self.placement.mode == "single":
            self._stop_hosted(workers, others)
        else:
            for group in [workers] + [[child] for child in others]:
                self._stop_processes(group, _stop_wait(group[0].name) if group else 10.0)
        if self._launcher is not None:
            self._launcher.close()
            self._launcher = None
        if self.node is not None:
            self.node.stop()
        if self._chat_lock.held:  # only the chat's own supervisor clears run/
            self._clear_run_dir()
            self._chat_lock.release()

    def _stop_hosted(self, workers: list[_Child], others: list[_Child]) -> None:
        """The single placement's actors, stopped one by one in `_stop_processes`'s order
        while the node still runs (P10), so what each handles last still reaches the actors
        it reports to: a summary that came before the stop is saved and planned on, not
        refused as "supervisor is stopped". The workers hear first, all at once: a call in
        flight and a wait for work are given up (their jobs are built by the next run).
        The node's own stop ends whatever did not stop in time."""
        for child in workers:
            self.node.stop_actor(child.name, wait=False)
        for child in workers:
            if not self.node.wait_stopped(child.name, 10.0):
                log.error("%s: %s did not stop within 10 s", self, child.name)
        for child in others:
            wait = _stop_wait(child.name)
            try:
                self.node.stop_actor(child.name, timeout=wait)
            except pykka.Timeout:  # the node's stop ends it anyway
                log.error("%s: %s did not stop within %g s", self, child.name, wait)

    def _stop_processes(self, children: list[_Child], wait: float = 10.0) -> None:
        """Ask `children`'s processes to stop, all at once, and wait for each (`wait` s, then kill)."""
        running = [child for child in children if child.process is not None]
        for child in running:
            if child.process.poll() is None:
                child.process.terminate()
        for child in running:
            try:
                child.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                log.error("%s: %s did not stop within %g s; killing it", self, child.name, wait)
                child.process.kill()
                child.process.wait()

    def _clear_run_dir(self) -> None:
        """A clean exit leaves `run/` without what only a running chat uses: the run file
        (`supervisor.json`, its `.tmp`) and every ipc socket (`*.sock`, `*.sock.events`;
        ZeroMQ leaves their files behind). Every actor has stopped and we still hold the
        chat, so none of them is in use. The actor processes' logs (`run/<name>.log`) stay:
        they are small (rotated), and what an actor wrote before a crash or a restart is
        what one reads afterwards. `run/` itself goes when nothing is left in it (single)."""
        for pattern in ("supervisor.json", "supervisor.tmp", "*.sock", "*.sock.events"):
            for path in self.run_dir.glob(pattern):
                path.unlink(missing_ok=True)
        try:
            self.run_dir.rmdir()
        except OSError:  # logs are left in it (or it was never made)
            pass

    def __enter__(self) -> "Supervisor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
