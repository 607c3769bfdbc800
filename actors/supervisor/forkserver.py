"""One preloaded process that forks the actor processes (issue 9: a fast `--processes` start).

Starting an interpreter and importing the actors costs about half a CPU second; a chat of
eleven actors paid it eleven times, one after another. The supervisor's launcher instead
starts this process once: it imports every actor's code, then waits for requests and
forks one child per actor, which runs `everchat.actors.supervisor.process.main` with the arguments
it was sent. A fork costs milliseconds, so every actor can start at once. Where it may
(Linux, while it runs no other thread: `supervisor_parts.Launcher`), the supervisor does
not even start an interpreter for it: it forks itself, having imported the actors' code
already, and the fork runs `run_forked` (the server at once, instead of after half a second
of imports). The supervisor asks for a whole wave of actors in one write.

    python -m everchat.actors.supervisor.forkserver --parent PID

The protocol is one JSON object a line: the parent writes `{"argv": [...], "env": {...}}`
on our stdin; we answer on stdout, in order, `{"pid": N}` (or `{"error": TEXT}`), and
say each child's end as `{"exit": PID, "code": C}` (C as `Popen.returncode`: negative
for a signal). Before any request we say `{"ready": OUR_PID}` once the imports are done.

Dying with the supervisor (P16): this process asks the kernel (Linux) to kill it when the
launcher thread that started it ends, and each child asks the same of us (it runs
`process.main`, with `--parent` our pid), so a kill -9 of the supervisor takes the whole
family. Elsewhere, our stdin closing (the parent is gone, or closed us) makes us stop our
children (SIGTERM, then SIGKILL after `_STOP_SECONDS`) and exit; they also poll their
parent themselves.

Why this is safe to fork: this process runs one thread, holds no zmq context and no open
chat, and imports only; every child makes its own node, sockets and threads after the fork.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import selectors
import signal
import sys
import time

__all__ = ["main", "serve", "PRELOAD"]

PRELOAD = ("everchat.actors.supervisor.process", "everchat.actors.supervisor.catalog")
"""What every child would import itself: `process` and `catalog.build_actor`, which
imports every actor class (and through them the store, the transport and the models);
then the model SDKs the chat's settings name (`_preload_sdks`)."""

_STOP_SECONDS = 5.0


def _write(fd: int, obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    try:
        while data:
            data = data[os.write(fd, data):]
    except BrokenPipeError:  # the supervisor is gone: our stdin ends too, and we stop
        return


def _child(argv: list[str], env: dict, keep_out: list[int]) -> None:
    """In the forked child: drop what belongs to the server, then run the actor. Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # the server ignores Ctrl-C; an actor stops on it
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)  # the server's request pipe is not the actor's to read
        os.dup2(null, 1)  # nor its answer pipe to write
        for fd in {null, *keep_out} - {0, 1, 2}:
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["everchat.actors.supervisor.process", *argv]
        from everchat.actors.supervisor.process import main

        code = main(argv)
    except SystemExit as exit:  # argparse's own exit
        code = exit.code if isinstance(exit.code, int) else 2
    except BaseException as error:  # the actor's log may not be open yet: say it where errors go
        sys.stderr.write(f"everchat: error: actor process {os.getpid()}: {type(error).__name__}: {error}\n")
    finally:
        try:
            import logging

            logging.shutdown()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(requests: int, answers: int) -> int:
    """Fork a child per request read from `requests`, answer on `answers`, report exits;
    returns once `requests` is closed and every child has ended."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up pipe is what we wait on
    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: set[int] = set()
    buffer = b""
    closed = False
    stop_by = None
    while not closed or children:
        timeout = None if not closed else max(0.0, stop_by - time.monotonic())
        for key, _ in selector.select(timeout):
            if key.fd == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
                continue
            chunk = os.read(requests, 65536)
            if not chunk:  # the supervisor closed us, or is gone: our children stop too
                closed, stop_by = True, time.monotonic() + _STOP_SECONDS
                selector.unregister(requests)
                for pid in children:
                    _signal(pid, signal.SIGTERM)
                continue
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                server = os.getpid()
                try:
                    request = json.loads(line)
                    argv = [*map(str, request["argv"]), "--parent", str(server)]
                    env = {str(k): str(v) for k, v in request["env"].items()}
                    pid = os.fork()
                except Exception as error:  # a bad request or no fork: the caller hears why
                    _write(answers, {"error": f"{type(error).__name__}: {error}"})
                    continue
                if pid == 0:
                    _child(argv, env, [requests, answers, wake_r, wake_w, selector.fileno()])
                children.add(pid)
                _write(answers, {"pid": pid})
        _reap(children, answers)
        if closed and children and time.monotonic() >= stop_by:
            for pid in children:
                _signal(pid, signal.SIGKILL)
            stop_by = time.monotonic() + _STOP_SECONDS
    return 0


def _reap(children: set[int], answers: int) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        _write(answers, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:  # ended; reaped at the next turn
        pass


_SDKS = {"anthropic": "anthropic", "openai": "openai", "openai-chat": "openai"}


def _preload_sdks() -> None:
    """The model SDKs the chat's settings name: each worker and the turn runner import
    theirs as they start (about half a CPU second each, so nine times over by default).
    Settings that do not load, or an SDK that does not import, are the actors' own
    errors, said in their words when they start: nothing is preloaded then."""
    from everchat.actors.turns.actor import configured_settings

    try:
        settings = configured_settings()
        modules = {_SDKS.get(role.provider) for role in (settings.reply, settings.compaction)} - {None}
    except Exception:  # noqa: BLE001 - reported by the actors (see above)
        return
    for module in sorted(modules):
        try:
            importlib.import_module(module)
        except ImportError:  # reported by the actors (see above)
            continue


def _reset_signals() -> None:
    """A fork of the supervisor keeps its Python signal handlers (a front end's Ctrl-C,
    `serve`'s SIGTERM): the server starts from the defaults, as a new interpreter would."""
    signal.set_wakeup_fd(-1)
    for signum in signal.valid_signals():
        try:
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):  # not ours to set (SIGKILL, SIGSTOP)
            continue


def _keep_only(fds: set[int]) -> None:
    """Close every descriptor but `fds` (the supervisor's chat lock, its terminal, its
    sockets: none of them is an actor's), without touching their Python objects."""
    low = 0
    for fd in sorted(fds):
        if fd > low:  # never an empty range: closerange(n, n) closes all on some Pythons
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)


def run_forked(requests: int, answers: int, env: dict[str, str], parent: int) -> None:
    """The fork server in a fork of the supervisor's own process (issue 9): the supervisor
    imported the actors' code before it started, so this fork is preloaded at once, where
    a new interpreter takes about half a CPU second. Runs in the child, in the launcher
    thread that forked it (its only thread now); never returns.

    The supervisor forks itself only while its one other thread waits for this fork
    (`supervisor_parts.Launcher`): no lock is held by a thread that is gone here, and no
    zmq context runs yet. What is the supervisor's stays untouched: its objects are frozen
    out of every collection (no finalizer closes a descriptor that is another's by then),
    its descriptors closed but stderr and the two pipes, its signal handlers reset."""
    code = 1
    try:
        gc.freeze()
        from everchat.actors.supervisor.process import die_with_parent

        die_with_parent()  # the launcher thread: the supervisor may end any moment (checked below)
        _reset_signals()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)  # the person's terminal is not the server's
        os.dup2(null, 1)
        _keep_only({0, 1, 2, requests, answers})
        os.environ.clear()
        os.environ.update(env)
        if os.getppid() != parent:
            return
        code = _serve_preloaded(requests, answers)
    except BaseException as error:  # said where errors go; the supervisor hears the server ended
        try:
            sys.stderr.write(f"everchat: error: fork server {os.getpid()}: {type(error).__name__}: {error}\n")
            sys.stderr.flush()
        except BaseException:
            pass
    finally:
        os._exit(code)


def _serve_preloaded(requests: int, answers: int) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the actors; the supervisor stops us
    for name in PRELOAD:
        importlib.import_module(name)
    importlib.import_module("everchat.actors.supervisor.process").argument_parser()  # made once, not in every child
    _preload_sdks()
    gc.freeze()  # what we imported is shared: no child's collection walks it (or copies its pages)
    _write(answers, {"ready": os.getpid()})
    return serve(requests, answers)


def main(argv: list[str] | None = None) -> int:
    from everchat.actors.supervisor.process import die_with_parent

    die_with_parent()  # first: the supervisor may die any moment (checked below)
    parser = argparse.ArgumentParser(description="Fork Everchat's actor processes from one preloaded process.")
    parser.add_argument("--parent", type=int, required=True, help="the supervisor's pid")
    args = parser.parse_args(argv)
    if os.getppid() != args.parent:
        sys.stderr.write(f"everchat: warning: fork server: the supervisor (pid {args.parent}) is already gone\n")
        return 1
    return _serve_preloaded(0, 1)


if __name__ == "__main__":
    sys.exit(main())
