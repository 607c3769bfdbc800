"""The keeper of one shell job's processes (P16; docs/HANDS.md §4): when a job is stopped,
every process it started ends, also one that left the job's process group (`setsid`) or
was orphaned on purpose (a double fork).

    python -I -S keeper.py [--end-rest] GRACE /bin/sh -c COMMAND

`device_jobs._shell` runs each shell job through this small program, and
`after_turn.run_hook` the after-turn command, with `--end-rest`. It imports only the
standard library, so it starts without the site packages (`-S`, a few tens of ms). It:

- asks Linux to make it a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process the job
  orphans is re-parented to the keeper instead of to init, so it stays in the keeper's
  process tree however it detached itself;
- starts the command (`posix_spawn`) in a process group of its own, led by the shell (so
  `$$` is the job's group, as before), with the signals Python ignores set back to their
  defaults (a writer to a closed pipe dies of SIGPIPE);
- reaps what it adopted and, when the shell ends, ends with the shell's own status;
  processes the shell left running in the background are left alone (`nohup server &`
  works, HANDS.md §4), except with `--end-rest` (the after-turn command, docs/GOALS.md:
  what it leaves running ends with it), where they are killed as on SIGTERM first;
- on SIGTERM (Stop, or the job's timeout) kills its whole tree (`kill_tree`): every
  descendant is first stopped (SIGSTOP), so that none forks away while the tree is read,
  then sent SIGTERM (and SIGCONT), and after GRACE seconds SIGKILL, until none is left.

Without a subreaper (macOS; `EVERCHAT_JOB_TREE=ps` forces this path, to test it on Linux)
the tree is read from `ps`. It is frozen before anything is killed, so a `setsid` child of
the running shell is still found; a process orphaned before the stop (a double fork) has
left the tree by then and is out of reach.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

SCRIPT = os.path.abspath(__file__)  # run as `python -I -S SCRIPT …`: the callers start it by path

__all__ = ["process_table", "descendants", "alive", "kill_tree", "end_keeper", "main"]

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_TICK = 0.01
_ROUNDS = 1000  # bounds each loop over a tree that keeps changing (a fork bomb)


def _use_proc() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir("/proc") and os.environ.get("EVERCHAT_JOB_TREE") != "ps"


def process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state letter, start time) of every process we can see. Linux
    reads /proc (the start time tells a pid reused since apart); elsewhere `ps` (no start
    time: "")."""
    table: dict[int, tuple[int, str, str]] = {}
    if _use_proc():
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as file:
                    data = file.read()
            except OSError:
                continue  # gone meanwhile
            fields = data[data.rfind(b")") + 2:].split()
            if len(fields) > 19:
                table[int(name)] = (int(fields[1]), fields[0].decode(), fields[19].decode())
        return table
    lister = subprocess.Popen(["ps", "-A", "-o", "pid=,ppid=,stat="], stdout=subprocess.PIPE, text=True)
    listing = lister.communicate()[0]
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            table[int(parts[0])] = (int(parts[1]), parts[2][:1], "")
    table.pop(lister.pid, None)  # not one of the job's
    return table


def descendants(root: int, table: dict | None = None) -> dict[int, str]:
    """The live (not zombie) processes under `root`, each with its start time."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, str] = {}
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid in found or pid == root:
            continue
        if table[pid][1] != "Z":
            found[pid] = table[pid][2]
        todo.extend(children.get(pid, ()))
    return found


def alive(pid: int, started: str = "", table: dict | None = None) -> bool:
    """Whether `pid` is still the live process that started at `started` ("" : any)."""
    entry = (process_table() if table is None else table).get(pid)
    return entry is not None and entry[1] != "Z" and (not started or entry[2] == started)


def _signal(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(root: int, grace: float, reap=lambda: None) -> None:
    """Kill every process under `root` (see the module docstring): freeze, SIGTERM, wait
    up to `grace` seconds, then SIGKILL until none is left. `reap` is called while waiting
    (the keeper reaps its children there; zombies count as gone)."""
    seen: dict[int, str] = {}
    for _ in range(_ROUNDS):  # freeze: stop what is found until nothing new turns up
        new = {pid: started for pid, started in descendants(root).items() if pid not in seen}
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        seen.update(new)
    for pid in seen:
        _signal((pid,), signal.SIGTERM)
        _signal((pid,), signal.SIGCONT)

    def left() -> dict[int, str]:
        table = process_table()
        rest = {pid: started for pid, started in seen.items() if alive(pid, started, table)}
        rest.update(descendants(root, table))
        return rest

    end = time.monotonic() + grace
    while time.monotonic() < end and left():
        reap()
        time.sleep(_TICK)
    for _ in range(_ROUNDS):
        reap()
        rest = left()
        if not rest:
            return
        seen.update(rest)
        _signal(rest, signal.SIGKILL)
        time.sleep(_TICK)


def end_keeper(keeper: subprocess.Popen, wait: float, log=None) -> None:
    """From the keeper's parent: SIGTERM `keeper`, which kills the tree it keeps and ends;
    should it not end within `wait` seconds, kill that tree from here, then the keeper."""
    try:
        keeper.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        keeper.wait(wait)
    except subprocess.TimeoutExpired:
        if log is not None:
            log.warning("the keeper of a job (pid %d) did not end; killing its processes from here", keeper.pid)
        kill_tree(keeper.pid, 0.0)
        keeper.kill()
    keeper.wait()


def _subreaper() -> None:
    if not _use_proc():
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the tree walk still finds what stayed in it
        pass


def _end_like(status: int | None) -> None:
    """Exit as the shell did: its exit code, or killed by its signal."""
    if status is None:
        os._exit(0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> None:
    end_rest = argv[:1] == ["--end-rest"]
    argv = argv[end_rest:]
    grace, command = float(argv[0]), argv[1:]
    _subreaper()
    # SIGTERM and SIGCHLD are only ever taken by sigwait: no handler runs at a bad moment.
    signal.signal(signal.SIGCHLD, lambda *_: None)
    watched = {signal.SIGTERM, signal.SIGCHLD}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    defaults = [sig for sig in (getattr(signal, name, None) for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ",
                                                                          "SIGTERM", "SIGCHLD")) if sig]
    shell = os.posix_spawn(command[0], command, os.environ, setpgroup=0, setsigmask=(), setsigdef=defaults)
    status: dict[str, int] = {}

    def reap() -> None:
        while True:
            try:
                pid, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == shell:
                status["shell"] = code

    while "shell" not in status:
        if signal.sigwait(watched) == signal.SIGTERM:
            kill_tree(os.getpid(), grace, reap)
            reap()
            break
        reap()
    if end_rest and "shell" in status:
        kill_tree(os.getpid(), grace, reap)
    _end_like(status.get("shell"))


if __name__ == "__main__":
    main(sys.argv[1:])
