"""The log files have a size and a repeated error is counted, not written again (P3):
`errors.log` in the home rotates at `DETAILS_BYTES` (one older file kept), even with several
processes writing it; a flood of one bug through the web server writes its traceback and
its terminal line once, then one line with the count at most once a minute; an actor
process's `run/<name>.log` counts repeats the same way."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import aiohttp
import pytest

from everchat.actors.settings import load
from everchat.frontends.cli import edge
from everchat.frontends.cli.edge import DETAILS_BYTES, PersonHandler, person_logging, write_details
from everchat.frontends.web.chat import WebChat

from web_world import run, served

pytestmark = pytest.mark.timeout(180)

_ENTRY = re.compile(r"--- \S+ pid \d+: ")


def failure(n: int) -> BaseException:
    """Error n, raised (with a traceback) and caught."""
    try:
        raise ValueError(f"failure {n} " + "x" * 900)
    except ValueError as error:
        return error


def test_p3_errors_log_rotates_at_its_size_keeping_one_older_file(tmp_path, monkeypatch):
    monkeypatch.setenv("EVERCHAT_HOME", str(tmp_path / "home"))
    log = tmp_path / "home" / "logs" / "errors.log"
    for n in range(3 * DETAILS_BYTES // 1000):  # three files' worth of ~1 KB entries
        assert write_details(failure(n), f"everchat web: entry {n}") == f"details in {log}"
        assert log.stat().st_size <= DETAILS_BYTES
    older = log.with_name("errors.log.1")
    assert older.stat().st_size <= DETAILS_BYTES and older.stat().st_size > DETAILS_BYTES // 2
    assert f"entry {n}\n" in log.read_text()  # the newest is in the current file
    assert sorted(p.name for p in log.parent.iterdir()) == ["errors.log", "errors.log.1"]


def test_p3_processes_writing_errors_log_at_once_rotate_it_without_tearing_an_entry(tmp_path):
    home = tmp_path / "home"
    script = textwrap.dedent("""
        import sys
        from everchat.frontends.cli import edge
        edge.DETAILS_BYTES = 40_000
        for n in range(400):
            try:
                raise ValueError(f"writer {sys.argv[1]} entry {n} " + "y" * 200)
            except ValueError as error:
                edge.write_details(error, f"writer {sys.argv[1]} entry {n}")
    """)
    env = {"EVERCHAT_HOME": str(home), "PATH": "/usr/bin:/bin"}
    writers = [subprocess.Popen([sys.executable, "-c", script, str(k)], env=env) for k in range(4)]
    try:
        assert [w.wait(timeout=120) for w in writers] == [0, 0, 0, 0]
    finally:
        for w in writers:
            w.kill()
            w.wait()
    for path in (home / "logs" / "errors.log", home / "logs" / "errors.log.1"):
        text = path.read_text()
        assert len(text.encode()) <= 40_000
        entries = _ENTRY.split(text)[1:]
        assert entries and text.startswith("--- ")
        for entry in entries:  # each whole: its header, its traceback, its last line
            assert re.fullmatch(r"writer (\d) entry (\d+)\nTraceback.*\nValueError: writer \1 entry \2 y{200}\n",
                                entry, re.DOTALL), entry[:300]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_p3_a_bug_hit_again_and_again_is_written_and_said_once_then_counted(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("EVERCHAT_HOME", str(home))
    calls = iter(range(10_000))

    def broken(self) -> dict:
        raise KeyError(f"status {next(calls)}")  # the same bug, another text each time

    monkeypatch.setattr(WebChat, "status", broken)
    clock = Clock()
    with person_logging("everchat web") as handler:
        assert isinstance(handler, PersonHandler)
        handler.repeats.clock = clock
        world = served(tmp_path, load({"demo": True}, env={}, home=home))
        web = next(world)
        try:
            async def hit(times: int) -> None:
                async with web.client() as client:
                    await web.sign_in(client)
                    for _ in range(times):
                        async with client.get(web.base + "/api/status") as response:
                            assert response.status == 500

            run(hit(100))
            log = (home / "logs" / "errors.log").read_text()
            assert log.count("Traceback") == 1 and log.count("--- ") == 1
            lines = [line for line in capsys.readouterr().err.splitlines() if "KeyError" in line]
            assert len(lines) == 1 and "details in" in lines[0]
            clock.now += 61  # a minute on: the next one is told as a count
            run(hit(1))
            log = (home / "logs" / "errors.log").read_text()
            assert log.count("Traceback") == 1 and log.count("--- ") == 2
            assert "the same error 100 more time(s) since it was last written" in log
            lines = [line for line in capsys.readouterr().err.splitlines() if "KeyError" in line]
            assert len(lines) == 1 and "the same error 100 more time(s) since it was last shown" in lines[0]
        finally:
            world.close()


def test_p3_an_actor_process_log_counts_a_repeated_error_instead_of_writing_it_again(tmp_path):
    log = tmp_path / "run" / "planner.log"
    log.parent.mkdir()
    script = textwrap.dedent("""
        import logging, sys
        from everchat.actors.supervisor import process
        assert process.log_to_file(process.Path(sys.argv[1]), "planner")
        [handler] = logging.getLogger().handlers
        def fail(n):
            try:
                raise OSError(f"disk full {n}")
            except OSError:
                logging.getLogger("everchat.planner").exception("could not write node %d", n)
        for n in range(500):
            fail(n)
        handler.repeats.seconds = 0  # as if a minute had passed
        fail(500)
    """)
    subprocess.run([sys.executable, "-c", script, str(log)], check=True, timeout=120,
                   env={"PATH": "/usr/bin:/bin"})
    text = log.read_text()
    assert text.count("Traceback") == 1 and text.count("could not write node 0") == 1
    assert "could not write node 1\n" not in text and "could not write node 499" not in text
    [again] = [line for line in text.splitlines() if "could not write node 500" in line]
    assert again.endswith("OSError: disk full 500 (the same error 500 more time(s) since it was last written; "
                          "its traceback was written then)")


def test_distinct_errors_are_each_written_whole(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EVERCHAT_HOME", str(tmp_path / "home"))
    import logging

    with person_logging("everchat web"):
        for kind in (KeyError, ValueError, OSError):
            try:
                raise kind("one")
            except kind:
                logging.getLogger("everchat.web").exception("GET /x failed")
    text = (tmp_path / "home" / "logs" / "errors.log").read_text()
    assert text.count("Traceback") == 3
    assert len([line for line in capsys.readouterr().err.splitlines() if "GET /x failed" in line]) == 3
    assert edge.details_file() == tmp_path / "home" / "logs" / "errors.log"
