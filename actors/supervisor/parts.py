"""Two parts of the supervisor that stand on their own: its lock on the chat folder, and
the thread that starts the actor processes.

- `ChatLock` (P6, R5): the supervisor's OS lock on `supervisor.lock` in the chat folder,
  taken before anything of the chat is touched, its owner written in it so a second
  supervisor can name it.
- `Launcher` (P16): every actor process is started from one thread that lives as long as
  the supervisor, because Linux's parent-death signal follows the thread that forked.
  It starts one fork server there (actors/supervisor/forkserver.py, issue 9), which forks each actor
  process from its preloaded imports: `Forked` is such a child as the supervisor sees it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from everchat.actors.folder import OwnerLock

__all__ = ["ChatLock", "Launcher", "Forked", "ForkServerLost", "LOCK_NAME"]

LOCK_NAME = "supervisor.lock"  # in the chat folder, beside the store's writer.lock


class ChatLock(OwnerLock):
    """The supervisor's OS lock on its chat folder (P6): `supervisor.lock`, beside the
    store's writer.lock and taken the same way (`OwnerLock`): without waiting, its owner
    written in it so a second supervisor can name it. The kernel drops it when the owner
    dies, also by kill -9."""

    def __init__(self, chat: Path) -> None:
        super().__init__(chat / LOCK_NAME)


class ForkServerLost(OSError):
    """The fork server ended (killed, or it could not start) before it answered a request."""


class Forked:
    """An actor process forked by the fork server, read as the supervisor reads a
    `subprocess.Popen`: `pid`, `returncode`, `poll()`, `wait()`, `terminate()`, `kill()`.
    The server, its parent, reaps it and tells us its exit code."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()

    def __repr__(self) -> str:
        return f"<Forked pid={self.pid} returncode={self.returncode}>"

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"actor process {self.pid}", timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # once told it ended, its pid may be another's
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:  # ended; its exit code is on its way
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


class _SelfFork:
    """The fork server when it is a fork of this very process (`Launcher`, issue 9), read
    as a `subprocess.Popen` with pipes: `pid`, `stdin`, `stdout`, `returncode`, `poll()`,
    `wait()`, `terminate()`, `kill()`."""

    def __init__(self, pid: int, requests: int, answers: int) -> None:
        self.pid = pid
        self.stdin = os.fdopen(requests, "wb")
        self.stdout = os.fdopen(answers, "rb")
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<SelfFork pid={self.pid} returncode={self.returncode}>"

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped by someone else: its code is lost
                    pid, status = self.pid, 0
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"fork server {self.pid}", timeout)
            time.sleep(pause)
            pause = min(0.05, pause * 2)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _ForkServer:
    """Our side of one fork server: requests written one at a time, its answers and its
    children's exits read by a thread of their own."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lost = False
        self._lock = threading.Lock()  # one request and its answer at a time
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._children: dict[int, Forked] = {}
        self._reader = threading.Thread(target=self._read, name=f"fork-server-{process.pid}", daemon=True)
        self._reader.start()

    def fork_all(self, argvs: list[list[str]], env: dict, timeout: float,
                 each: Callable[[int, Forked | BaseException], None] | None = None) -> list[Forked | BaseException]:
        """One process per `argvs` entry, all asked for in one write (issue 9: no round
        trip per actor); each answer a Forked, or the error that one met, also handed to
        `each(index, answer)` as soon as it comes."""
        requests = b"".join((json.dumps({"argv": argv, "env": env}) + "\n").encode() for argv in argvs)
        with self._lock:
            try:
                self.process.stdin.write(requests)
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError) as error:
                raise ForkServerLost(f"the fork server (pid {self.process.pid}) is gone: {error}") from None
            deadline = time.monotonic() + timeout
            answers: list[Forked | BaseException] = []
            while len(answers) < len(argvs):
                try:
                    answer = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise TimeoutError(f"the fork server (pid {self.process.pid}) forked {len(answers)} of "
                                       f"{len(argvs)} within {timeout} s") from None
                more = len(argvs) - len(answers) if isinstance(answer, ForkServerLost) else 1  # nothing more comes
                for _ in range(more):
                    answers.append(answer)
                    if each is not None:
                        each(len(answers) - 1, answer)
        return answers

    def close(self) -> None:
        """No more requests: the server stops what still runs and exits. One that has
        forked nothing yet (a start that failed early) is ended at once."""
        with self._lock:
            idle = not self._children
            try:
                self.process.stdin.close()
            except BrokenPipeError:  # it is gone already
                pass
        if idle:
            self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)

    def _read(self) -> None:
        for line in self.process.stdout:
            answer = json.loads(line)
            if "pid" in answer:  # made here, before the next line: its exit always finds it
                forked = self._children[answer["pid"]] = Forked(answer["pid"])
                self._answers.put(forked)
            elif "exit" in answer:
                forked = self._children.pop(answer["exit"], None)
                if forked is not None:  # every child's pid came first; this keeps the reader alive regardless
                    forked.ended(answer["code"])
            elif "error" in answer:
                self._answers.put(OSError(f"the fork server could not fork: {answer['error']}"))
        # The server ended: on Linux the kernel killed its children with it; elsewhere
        # they see their parent gone and stop. Either way none of them serves any more.
        self.lost = True
        for forked in self._children.values():
            forked.ended(-signal.SIGKILL)
        self._children.clear()
        self._answers.put(ForkServerLost(f"the fork server (pid {self.process.pid}) ended"))
        try:  # reaped here: a server lost and replaced is waited for by no one else
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # its pipe closed but it lives on: close() waits again
            pass


class Launcher:
    """Starts the actor processes, all from one thread of its own (P16).

    An actor process asks Linux to kill it when its parent ends (PR_SET_PDEATHSIG), and the
    kernel means the parent *thread*: the one that forked it. Children started from the
    thread that called `start()` (which may be a short-lived worker of a front end) or from
    the monitor would die with that thread. This thread lives from the first launch until
    `close()`, which the supervisor calls after its children have stopped.

    `fork()` starts an actor process through the fork server (issue 9), which this thread
    starts once: the server dies with this thread and its children with it."""

    fork_self = True
    """The fork server may be a fork of this process (see `_may_fork_self`); False: always
    a new interpreter (tests set it to try both)."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._server: _ForkServer | None = None
        self._server_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def prestart(self, env: dict | None = None) -> None:
        """Start the fork server now, so its imports run while the caller does other work;
        `env` (None: ours) is the environment it reads the chat's settings from."""
        self._fork_server(env)

    def fork(self, argv: list[str], env: dict | None, timeout: float = 60.0) -> Forked:
        """An actor process running `everchat.actors.supervisor.process.main(argv)` (its `--parent`
        added by the server) with the environment `env` (None: ours), forked by the fork
        server; raises ForkServerLost when the server is gone (the next call starts another)."""
        [answer] = self.fork_all([argv], env, timeout)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def fork_all(self, argvs: list[list[str]], env: dict | None, timeout: float = 60.0,
                 each: Callable[[int, Forked | BaseException], None] | None = None) -> list[Forked | BaseException]:
        """`fork` for each of `argvs` at once (one request, the server forks them one after
        another without waiting for us): each a Forked, or the error that one met, also
        handed to `each(index, answer)` as it comes. Raises ForkServerLost when the server
        is gone before it was asked."""
        return self._fork_server(env).fork_all(argvs, dict(os.environ) if env is None else env, timeout, each)

    def _fork_server(self, env: dict | None = None) -> _ForkServer:
        with self._server_lock:
            if self._server is None or self._server.lost:
                self._server = _ForkServer(self._call(lambda: self._start_server(env)))
            return self._server

    def _start_server(self, env: dict | None) -> subprocess.Popen | _SelfFork:
        """In this thread: the fork server, a fork of this process when that is safe
        (`_may_fork_self`), else a new interpreter that imports the actors' code itself."""
        if self.fork_self and _may_fork_self():
            return _fork_self(dict(os.environ) if env is None else env)
        command = [sys.executable, "-m", "everchat.actors.supervisor.forkserver", "--parent", str(os.getpid())]
        return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def __repr__(self) -> str:
        return f"<Launcher {self.thread.name} pid={os.getpid()}>"

    def popen(self, command: list[str], env: dict | None) -> subprocess.Popen:
        """subprocess.Popen(command) run in the launcher's thread; its errors are raised here."""
        return self._call(lambda: subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL))

    def _call(self, job):
        """`job()` run in the launcher's thread, its result or error returned here."""
        done: Future = Future()
        self._jobs.put((job, done))
        return done.result()

    def close(self) -> None:
        """The fork server first (it stops what still runs, then exits), then this thread:
        the server's death signal follows this thread, so the thread ends last."""
        with self._server_lock:
            server, self._server = self._server, None
        if server is not None:
            server.close()
        self._jobs.put(None)
        self.thread.join(timeout=5)

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, done = item
            try:
                done.set_result(job())
            except BaseException as error:  # handed to the caller
                done.set_exception(error)


def _may_fork_self() -> bool:
    """Whether this process may fork itself as the fork server: on Linux (elsewhere a fork
    without exec of a process that may have used the system's frameworks is not safe), and
    only while it runs two threads, the launcher and the caller that waits for it. Then no
    other thread can hold a lock the fork would copy held, and no zmq context runs (its
    own threads would count). /proc tells the threads of every kind, Python's or not."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        return len(os.listdir("/proc/self/task")) <= 2
    except OSError:
        return False


def _fork_self(env: dict) -> _SelfFork:
    """Fork this process as the fork server (forkserver.run_forked runs in the child)."""
    from everchat.actors.supervisor import forkserver

    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    parent = os.getpid()
    try:
        with warnings.catch_warnings():  # 3.12 warns of any fork with threads; see _may_fork_self
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except BaseException:
        for fd in (requests_r, requests_w, answers_r, answers_w):
            os.close(fd)
        raise
    if pid == 0:
        forkserver.run_forked(requests_r, answers_w, env, parent)  # never returns
    os.close(requests_r)
    os.close(answers_w)
    return _SelfFork(pid, requests_w, answers_r)


class Ports:
    """The tcp ports a chat's actors listened on, kept in `config/ports.json` (0600), so a
    chat served again over tcp listens where it did: a computer that joined it (issue 11)
    dials the address it was given, and reconnects by itself after the server restarts. A
    port taken meanwhile is given up for a free one (the device then needs a new link)."""

    def __init__(self, chat: Path) -> None:
        self.path = Path(chat) / "config" / "ports.json"

    def load(self) -> dict[str, int]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, int) and 0 < v < 65536}

    def port(self, name: str, host: str) -> int:
        """The port `name` listened on last time when it is free now, else 0 (any)."""
        port = self.load().get(name, 0)
        return port if port and _port_free(host, port) else 0

    def remember(self, name: str, endpoint: str | None) -> None:
        """Keep the port of a tcp endpoint (`tcp://HOST:PORT;…`)."""
        if not endpoint or not endpoint.startswith("tcp://"):
            return
        try:
            port = int(endpoint.split(";")[0].rpartition(":")[2])
        except ValueError:
            return
        ports = self.load()
        if ports.get(name) == port:
            return
        ports[name] = port
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_name(f".ports.json.tmp.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(ports, sort_keys=True).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True
