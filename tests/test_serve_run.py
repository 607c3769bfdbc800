"""`serve` runs as many compactor workers as every other command (R31: `compaction_jobs`,
default 8; `--workers` overrides it), and a clean exit of `serve` or `ask`, single or
`--processes`, leaves no socket and no run file in `run/` (actor logs may stay).

Real processes: `everchat serve` stopped by SIGTERM or SIGINT, `everchat ask`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_world import env, everchat  # noqa: F401 (env is a fixture)

EVERCHAT = [sys.executable, "-m", "everchat.frontends.cli.main"]


def serve(env: dict, chat: Path, *flags: str) -> subprocess.Popen:
    """`everchat serve` running; returns once it printed that it serves."""
    process = subprocess.Popen([*EVERCHAT, "--demo", "--data-dir", str(chat), "serve", *flags],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True,  # SIGINT as a terminal gives it, whatever pytest inherited
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = process.stdout.readline()
    if not line.startswith("everchat: serving"):
        process.kill()
        raise AssertionError(f"serve did not start: {line!r} {process.communicate()[1]}")
    return process


def stopped(process: subprocess.Popen, sig: int) -> int:
    process.send_signal(sig)
    try:
        return process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


def compactors(env: dict, chat: Path) -> int:
    """How many compactor workers the running chat has, as `ops` lists them."""
    done = everchat(env, "ops", "--once", "--json", "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    return sum(1 for row in json.loads(done.stdout) if row["name"].startswith("compactor."))


def leftovers(chat: Path) -> list[str]:
    """What a running chat put in run/ that must not outlive it."""
    run = chat / "run"
    if not run.exists():
        return []
    return sorted(p.name for p in run.iterdir() if p.name.endswith((".sock", ".sock.events", ".json", ".tmp")))


@pytest.mark.parametrize(("flags", "config", "workers"), [
    ((), "", 8),
    ((), "compaction_jobs = 3\n", 3),
    (("--compaction-jobs", "5"), "compaction_jobs = 3\n", 5),
    (("--workers", "1"), "compaction_jobs = 3\n", 1),
], ids=["default", "config", "flag", "workers"])
def test_r31_serve_runs_compaction_jobs_workers(env, tmp_path, flags, config, workers):
    home = Path(env["EVERCHAT_HOME"])
    home.mkdir(parents=True)
    (home / "config.toml").write_text(config)
    chat = tmp_path / "chat"
    server = serve(env, chat, *flags)
    try:
        assert compactors(env, chat) == workers
    finally:
        assert stopped(server, signal.SIGTERM) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
@pytest.mark.parametrize("mode", [(), ("--processes",)], ids=["single", "processes"])
def test_serve_stopped_leaves_no_socket_in_run(env, tmp_path, sig, mode):
    chat = tmp_path / "chat"
    server = serve(env, chat, "--workers", "1", *mode)
    assert any(name.endswith(".sock") for name in leftovers(chat))  # there were sockets to clear
    assert stopped(server, sig) == 0
    assert leftovers(chat) == []


@pytest.mark.parametrize("mode", [(), ("--processes", "--compaction-jobs", "1")], ids=["single", "processes"])
def test_ask_leaves_no_socket_in_run(env, tmp_path, mode):
    chat = tmp_path / "chat"
    done = everchat(env, "--demo", *mode, "--data-dir", str(chat), "ask", "Remember amber-42.")
    assert done.returncode == 0, done.stderr
    assert leftovers(chat) == []
