"""What a device does with one job (issue 11, R39; docs/HANDS.md section 4): the four tools
run for real (shell jobs are real process groups), R7 clips a shell's output, and the
journal keeps "never twice" across a device killed with SIGKILL."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from everchat.actors.devices.jobs import EXPIRY, MAX_TIMEOUT, Job, Outcome, group_alive, job_from_call, run_job, work_folder
from everchat.actors.devices.journal import AlreadyRunning, Journal
from everchat.actors.folder import clip_echo
from polling import wait_until

NOW = 1_800_000_000.0


@pytest.fixture
def work(tmp_path) -> Path:
    return work_folder(tmp_path / "home", "main")


def run(tool: str, arguments: dict, work: Path, cancel: threading.Event | None = None,
        chunks: list | None = None) -> Outcome:
    job = job_from_call("job-1", tool, arguments, "main")
    return run_job(job, work, (chunks if chunks is not None else []).append, cancel or threading.Event())


class Running:
    """A shell job run in a thread, its output chunks gathered as they come. Start it with
    the `shell_jobs` fixture, which ends it with the test, passed or failed."""

    def __init__(self, command: str, work: Path, timeout: float | None = None) -> None:
        arguments = {"command": command} | ({"timeout": timeout} if timeout is not None else {})
        self.job = job_from_call("job-1", "shell", arguments, "main")
        self.chunks: list[str] = []
        self.cancel = threading.Event()
        self.outcome: Outcome | None = None
        self.thread = threading.Thread(target=self._run, args=(work,), name="test-shell-job", daemon=True)
        self.thread.start()

    def _run(self, work: Path) -> None:
        self.outcome = run_job(self.job, work, self.chunks.append, self.cancel)

    @property
    def output(self) -> str:
        return "".join(self.chunks)

    def wait_for(self, text: str) -> str:
        return wait_until(lambda: text in self.output and self.output, 30, f"{text!r} in the output")

    def end(self) -> Outcome:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the job did not end"
        return self.outcome


@contextlib.contextmanager
def ending_jobs():
    """Yields `start(command, work, timeout=None) -> Running`; when the block ends (an
    assertion failed in it too) every job it started is stopped and its thread joined, so
    a failing test reports and the run goes on instead of hanging on a `sleep 300`."""
    started: list[Running] = []

    def start(command: str, work: Path, timeout: float | None = None) -> Running:
        started.append(Running(command, work, timeout))
        return started[-1]

    try:
        yield start
    finally:
        for job in started:
            job.cancel.set()
        for job in started:
            job.thread.join(60)
        assert not [job for job in started if job.thread.is_alive()], "a job did not end when stopped"


@pytest.fixture
def shell_jobs():
    with ending_jobs() as start:
        yield start


def pids(output: str) -> dict[str, int]:
    """`name=PID` pairs the test commands print."""
    return {name: int(value) for name, _, value in
            (word.partition("=") for word in output.split()) if value.isdigit()}


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (this container's init may not reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        try:
            return "\nState:\tZ" not in status.read_text()
        except OSError:
            return False
    return True


# --- the work folder and the checked call -------------------------------------------------


def test_the_work_folder_is_made_private_on_demand_per_caller(tmp_path):
    folder = work_folder(tmp_path / "home", "Scout")
    assert folder == tmp_path / "home" / "work" / "Scout" and folder.is_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for bad in ("", ".", "..", "a/b", "../x"):
        with pytest.raises(ValueError, match="bad caller name"):
            work_folder(tmp_path / "home", bad)


def test_a_call_becomes_a_job_without_its_device_field():
    job = job_from_call("k1", "shell", {"command": "ls", "device": "laptop", "timeout": 5}, "main", now=NOW)
    assert job == Job("k1", "shell", {"command": "ls", "timeout": 5}, "main", 5.0, NOW)


def test_a_shell_timeout_defaults_to_600_s_and_is_capped_there():
    assert job_from_call("k", "shell", {"command": "ls"}, "main").timeout == 600.0
    assert job_from_call("k", "shell", {"command": "ls", "timeout": 10_000}, "main").timeout == MAX_TIMEOUT == 600.0
    assert job_from_call("k", "shell", {"command": "ls"}, "main", timeout_default=30).timeout == 30.0


@pytest.mark.parametrize("tool, arguments, message", [
    ("rm", {"path": "x"}, "unknown device tool 'rm': use one of shell, read, write, edit"),
    ("shell", {}, "shell: missing argument 'command'"),
    ("shell", {"command": 3}, "shell: 'command' must be a string, not 3"),
    ("shell", {"command": "  "}, "shell: 'command' is empty"),
    ("shell", {"command": "ls", "timeout": "5"}, "shell: 'timeout' must be a number of seconds, not \"5\""),
    ("shell", {"command": "ls", "timeout": 0}, "shell: 'timeout' must be more than 0 seconds, not 0"),
    ("shell", {"command": "ls", "cwd": "/"}, "shell: unknown argument 'cwd' (it takes command, timeout)"),
    ("read", {"path": "a", "offset": 1.5}, "read: 'offset' must be a whole number, not 1.5"),
    ("read", {"path": "a", "limit": True}, "read: 'limit' must be a whole number, not true"),
    ("read", {"path": "a", "offset": -1}, "read: 'offset' must be 0 (the first line) or more, not -1"),
    ("read", {"path": "a", "limit": 0}, "read: 'limit' must be 1 or more, not 0"),
    ("read", {"path": ""}, "read: 'path' is empty"),
    ("read", {"path": "a\0b"}, "read: 'path' holds a NUL character"),
    ("write", {"path": "a"}, "write: missing argument 'content'"),
    ("edit", {"path": "a", "old": "", "new": "x"}, "edit: 'old' is empty: give the exact text to replace"),
    ("edit", "path=a", "edit: the arguments must be an object, not str"),
])
def test_a_bad_call_is_refused_with_a_message_the_model_can_act_on(tool, arguments, message):
    with pytest.raises(ValueError) as refused:
        job_from_call("k", tool, arguments, "main")
    assert str(refused.value) == message


# --- shell ------------------------------------------------------------------------------------


def test_r39_a_shell_command_runs_in_the_work_folder_with_stderr_merged(work):
    outcome = run("shell", {"command": "pwd; echo out; echo err >&2; read x; echo read=$?"}, work)
    assert outcome == Outcome(f"{work}\nout\nerr\nread=1\n[exit 0]")  # stdin is /dev/null: read fails


def test_a_nonzero_exit_is_an_error_with_its_status_on_the_last_line(work):
    assert run("shell", {"command": "printf 'no newline'; exit 3"}, work) == \
        Outcome("no newline\n[exit 3]", is_error=True)
    assert run("shell", {"command": "exit 0"}, work) == Outcome("[exit 0]")


def test_shell_output_streams_while_the_command_is_still_running(work, tmp_path, shell_jobs):
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    job = shell_jobs(f"echo first; read word < {gate}; echo second $word", work)
    job.wait_for("first\n")
    assert job.thread.is_alive() and "second" not in job.output  # it waits on the gate
    with open(gate, "w") as writer:
        writer.write("go\n")
    assert job.end() == Outcome("first\nsecond go\n[exit 0]")
    assert job.chunks[0] == "first\n" and len(job.chunks) >= 2


def test_a_character_split_between_two_chunks_is_never_cut(work, tmp_path, shell_jobs):
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    job = shell_jobs(f"printf 'caf\\303'; read word < {gate}; printf '\\251!\\n'", work)
    job.wait_for("caf")
    with open(gate, "w") as writer:
        writer.write("go\n")
    outcome = job.end()
    assert job.output == "café!\n" and "\ufffd" not in "".join(job.chunks)
    assert outcome.text == "café!\n[exit 0]"


def test_r39_a_cancel_kills_the_whole_group_including_a_background_grandchild(work, tmp_path, shell_jobs):
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    job = shell_jobs(f"sleep 300 & echo child=$! group=$$; read word < {gate}", work)
    found = pids(job.wait_for("group="))
    assert alive(found["child"]) and group_alive(found["group"])
    job.cancel.set()
    outcome = job.end()
    assert outcome.is_error and outcome.text.endswith("\n[stopped]")
    assert not alive(found["child"]) and not group_alive(found["group"])
    with pytest.raises(ProcessLookupError):
        os.kill(found["group"], 0)  # the shell itself is reaped


def test_r39_the_timeout_kills_the_whole_group(work, shell_jobs):
    job = shell_jobs("sleep 300 & echo child=$! group=$$; wait", work, timeout=0.5)
    found = pids(job.wait_for("group="))
    outcome = job.end()
    assert outcome == Outcome(f"child={found['child']} group={found['group']}\n[killed: timeout after 0.5 s]",
                              is_error=True)
    assert not alive(found["child"]) and not group_alive(found["group"])


def test_a_command_that_ignores_sigterm_is_killed(work, shell_jobs):
    job = shell_jobs("trap '' TERM; echo group=$$; while :; do sleep 1; done", work)
    found = pids(job.wait_for("group="))
    job.cancel.set()
    assert job.end().text.endswith("[stopped]") and not group_alive(found["group"])


def test_a_job_a_failing_test_started_is_stopped_and_its_thread_joined(work):
    """Test hygiene (issue 20): a test that fails while its job runs must not leave the
    job's thread (nor the job) behind, or pytest says "1 failed" and then hangs."""
    with pytest.raises(AssertionError, match="the bug this test caught"):
        with ending_jobs() as start:
            job = start("echo group=$$; sleep 300", work)
            group = pids(job.wait_for("group="))["group"]
            raise AssertionError("the bug this test caught")
    assert not job.thread.is_alive() and job.outcome.text.endswith("[stopped]")
    assert not group_alive(group)


ESCAPES = {
    # P16: each prints the pid of a `sleep 1000` that is no longer in the job's process group
    "setsid": "setsid sh -c 'echo escaped=$$; exec sleep 1000' &",
    "double fork": "(setsid sh -c 'echo escaped=$$; exec sleep 1000' &);",
}


@pytest.mark.parametrize("how", sorted(ESCAPES))
def test_p16_stop_ends_a_process_that_left_the_jobs_group(work, shell_jobs, how):
    job = shell_jobs(f"{ESCAPES[how]} echo group=$$; sleep 300", work)
    found = pids(job.wait_for("group=") and job.wait_for("escaped="))
    try:
        assert alive(found["escaped"]) and os.getpgid(found["escaped"]) != found["group"]
        job.cancel.set()
        assert job.end().text.endswith("[stopped]")
        assert not alive(found["escaped"]) and not group_alive(found["group"])
    finally:
        if alive(found["escaped"]):
            os.kill(found["escaped"], signal.SIGKILL)


def test_p16_the_timeout_ends_a_process_that_left_the_jobs_group(work, shell_jobs):
    job = shell_jobs(f"{ESCAPES['double fork']} echo group=$$; sleep 300", work, timeout=1)
    found = pids(job.wait_for("escaped="))
    try:
        assert job.end().text.endswith("[killed: timeout after 1 s]")
        assert not alive(found["escaped"])
    finally:
        if alive(found["escaped"]):
            os.kill(found["escaped"], signal.SIGKILL)


def test_p16_without_a_subreaper_the_tree_read_from_ps_still_ends_a_setsid_child(work, shell_jobs, monkeypatch):
    """The path macOS takes (no PR_SET_CHILD_SUBREAPER, the tree from `ps`), run here."""
    monkeypatch.setenv("EVERCHAT_JOB_TREE", "ps")
    job = shell_jobs(f"{ESCAPES['setsid']} echo group=$$; sleep 300", work)
    found = pids(job.wait_for("group=") and job.wait_for("escaped="))
    try:
        job.cancel.set()
        assert job.end().text.endswith("[stopped]")
        assert not alive(found["escaped"])
    finally:
        if alive(found["escaped"]):
            os.kill(found["escaped"], signal.SIGKILL)


def test_r7_a_100000_character_output_is_clipped_like_every_echo(work):
    script = "import sys; sys.stdout.write(''.join(str(k % 10) for k in range(100_000)))"
    chunks: list[str] = []
    outcome = run("shell", {"command": f"{sys.executable} -c \"{script}\""}, work, chunks=chunks)
    whole = "".join(str(k % 10) for k in range(100_000))
    assert "".join(chunks) == whole  # the stream is whole: only the result is clipped
    assert outcome.text == clip_echo(whole + "\n[exit 0]")[0]
    assert "\n[70009 characters cut]\n" in outcome.text and outcome.text.endswith("9\n[exit 0]")


# --- read ---------------------------------------------------------------------------------------


def test_read_shows_numbered_lines_of_a_relative_path_in_the_work_folder(work):
    (work / "notes.txt").write_text("alpha\nbeta\n")
    assert run("read", {"path": "notes.txt"}, work) == \
        Outcome(f"     1\talpha\n     2\tbeta\n[{work}/notes.txt: lines 1-2 of 2]")


def test_read_takes_absolute_paths_too(work, tmp_path):
    (tmp_path / "elsewhere.txt").write_text("x\n")
    assert run("read", {"path": str(tmp_path / "elsewhere.txt")}, work).text.startswith("     1\tx\n")


def test_read_pages_by_offset_and_limit_and_says_where_the_next_page_starts(work):
    """`offset` counts the lines skipped (0 is the first, as the `read` tool's schema says);
    the numbers shown are line numbers from 1."""
    (work / "big.txt").write_text("".join(f"line {k}\n" for k in range(1, 101)))
    outcome = run("read", {"path": "big.txt", "offset": 9, "limit": 3}, work)
    assert outcome.text == f"    10\tline 10\n    11\tline 11\n    12\tline 12\n[{work}/big.txt: lines 10-12 of 100; more: offset=12]"
    following = run("read", {"path": "big.txt", "offset": 12, "limit": 1}, work)
    assert following.text.startswith("    13\tline 13\n")
    last = run("read", {"path": "big.txt", "offset": 99}, work)
    assert last.text == f"   100\tline 100\n[{work}/big.txt: lines 100-100 of 100]"


def test_a_big_file_is_paged_under_r7s_limit_without_a_limit(work):
    (work / "huge.txt").write_text(("y" * 99 + "\n") * 5000)
    outcome = run("read", {"path": "huge.txt"}, work)
    assert len(outcome.text) < 30_000 and clip_echo(outcome.text)[1] == 0
    shown = int(outcome.text.rsplit("lines 1-", 1)[1].split()[0])
    assert shown < 5000 and outcome.text.endswith(f"of 5000; more: offset={shown}]")


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such file: {p}"),
    (lambda p: p.mkdir(), "{p} is a folder, not a file"),
    (lambda p: os.mkfifo(p), "{p} is a FIFO, not a file"),
    (lambda p: p.write_bytes(b"PK\x03\x04\x00\x00binary"),
     "{p} looks binary (a NUL byte in its first 8192 bytes): not shown"),
    (lambda p: p.write_text("one\n"), "offset 5 is past the end: {p} has 1 lines (offset 0 is the first)"),
])
def test_read_refuses_what_it_cannot_show(work, make, message):
    path = work / "thing"
    make(path)
    assert run("read", {"path": "thing", "offset": 5} if "offset" in message else {"path": "thing"}, work) == \
        Outcome(message.format(p=path), is_error=True)


def test_read_refuses_a_device(work):
    assert run("read", {"path": "/dev/null"}, work) == Outcome("/dev/null is a device, not a file", is_error=True)


def test_an_empty_file_says_so(work):
    (work / "empty").write_text("")
    assert run("read", {"path": "empty"}, work) == Outcome(f"(the file {work}/empty is empty)")


# --- write and edit -----------------------------------------------------------------------------


def test_write_makes_folders_and_answers_a_diff_of_all_added_lines(work):
    outcome = run("write", {"path": "new/dir/a.txt", "content": "one\ntwo\n"}, work)
    path = work / "new/dir/a.txt"
    assert path.read_text() == "one\ntwo\n"
    assert outcome == Outcome(f"wrote 8 bytes to {path}\n--- /dev/null\n+++ b{path}\n@@ -0,0 +1,2 @@\n+one\n+two")


def test_write_over_a_file_answers_the_diff_and_keeps_its_mode(work):
    path = work / "run.sh"
    path.write_text("echo a\necho b\n")
    path.chmod(0o755)
    outcome = run("write", {"path": "run.sh", "content": "echo a\necho c\n"}, work)
    assert outcome.text == (f"wrote 14 bytes to {path}\n--- a{path}\n+++ b{path}\n@@ -1,2 +1,2 @@\n"
                            " echo a\n-echo b\n+echo c")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755 and path.read_text() == "echo a\necho c\n"
    assert [p.name for p in work.iterdir()] == ["run.sh"]  # no temporary file left


def test_text_that_is_not_utf_8_is_an_error_outcome_not_an_exception(work):
    assert run("write", {"path": "s.txt", "content": "lone \ud800"}, work) == \
        Outcome("write failed: the text cannot be written as UTF-8 (surrogates not allowed)", is_error=True)
    assert not (work / "s.txt").exists()


def test_write_refuses_a_folder(work):
    (work / "d").mkdir()
    assert run("write", {"path": "d", "content": "x"}, work) == Outcome(f"{work}/d is a folder, not a file", is_error=True)


def test_edit_replaces_text_that_occurs_exactly_once(work):
    path = work / "c.py"
    path.write_bytes(b"x = 1\ny = 2\n# \xff not utf-8\n")
    outcome = run("edit", {"path": "c.py", "old": "y = 2", "new": "y = 3"}, work)
    assert path.read_bytes() == b"x = 1\ny = 3\n# \xff not utf-8\n"  # other bytes survive as they were
    assert outcome.text.startswith(f"edited {path}\n--- a{path}\n+++ b{path}\n")
    assert "\n-y = 2\n+y = 3\n" in outcome.text and not outcome.is_error


@pytest.mark.parametrize("text, message", [
    ("a b c", "old occurs 0 times in {p}: nothing was changed"),
    ("x x x", "old occurs 3 times in {p}: give more context so that it occurs once"),
])
def test_edit_refuses_unless_old_occurs_exactly_once(work, text, message):
    path = work / "f.txt"
    path.write_text(text)
    assert run("edit", {"path": "f.txt", "old": "x", "new": "z"}, work) == \
        Outcome(message.format(p=path), is_error=True)
    assert path.read_text() == text


def test_edit_of_a_missing_file_says_so(work):
    assert run("edit", {"path": "nope", "old": "x", "new": "z"}, work) == \
        Outcome(f"no such file: {work}/nope", is_error=True)


# --- the journal ---------------------------------------------------------------------------------


def job(job_id: str = "k1", created: float = NOW) -> Job:
    return job_from_call(job_id, "shell", {"command": "echo hi"}, "main", now=created)


def test_the_journal_is_private_and_one_json_line_per_record(tmp_path):
    path = tmp_path / "dev" / "jobs.jsonl"
    with Journal(path) as journal:
        journal.run_once(job(), lambda: Outcome("hi\n[exit 0]"))
        journal.delivered("k1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [json.loads(line)["op"] for line in path.read_text().splitlines()] == ["begin", "finish", "delivered"]


def test_r39_a_job_id_seen_twice_is_never_run_twice(tmp_path):
    runs = []
    with Journal(tmp_path / "j") as journal:
        first = journal.run_once(job(), lambda: runs.append(1) or Outcome("ran"))
        assert journal.known("k1") and journal.state("k1") == "finished"
    with Journal(tmp_path / "j") as journal:  # and after a restart
        again = journal.run_once(job(), lambda: runs.append(2) or Outcome("ran again"))
    assert runs == [1] and first == again == Outcome("ran")


def test_a_job_running_now_is_not_started_a_second_time(tmp_path):
    with Journal(tmp_path / "j") as journal:
        def inner() -> Outcome:
            with pytest.raises(AlreadyRunning):
                journal.run_once(job(), lambda: Outcome("second"))
            return Outcome("first")
        assert journal.run_once(job(), inner) == Outcome("first")


def test_r39_two_threads_given_one_job_id_run_it_once(tmp_path):
    started, release, runs = threading.Event(), threading.Event(), []

    def slow() -> Outcome:
        runs.append(1)
        started.set()
        release.wait(60)
        return Outcome("done")

    with Journal(tmp_path / "j") as journal:
        first = threading.Thread(target=journal.run_once, args=(job(), slow), daemon=True)
        first.start()
        try:
            assert started.wait(60)
            with pytest.raises(AlreadyRunning, match="job 'k1' is running: its outcome is still to come"):
                journal.run_once(job(), slow)
        finally:  # the thread ends with the test, whatever failed
            release.set()
            first.join(60)
        assert journal.run_once(job(), slow) == Outcome("done") and runs == [1]


def test_a_job_that_raises_has_an_error_outcome(tmp_path):
    with Journal(tmp_path / "j") as journal:
        outcome = journal.run_once(job(), lambda: 1 / 0)
    assert outcome == Outcome("shell failed on the device: ZeroDivisionError: division by zero", is_error=True)


CRASH_AFTER_BEGIN = textwrap.dedent("""
    import sys
    from everchat.actors.devices.jobs import job_from_call
    from everchat.actors.devices.journal import Journal
    journal = Journal(sys.argv[1])
    job = job_from_call("k1", "shell", {"command": "make deploy"}, "main", now=float(sys.argv[2]))
    def run():
        print("running", flush=True)
        sys.stdin.readline()  # the test kills us here, between begin and finish
    journal.run_once(job, run)
""")


def test_r39_a_job_begun_before_a_kill_9_is_reported_uncertain_and_never_rerun(tmp_path):
    path = tmp_path / "j"
    child = subprocess.Popen([sys.executable, "-c", CRASH_AFTER_BEGIN, str(path), str(NOW)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "running\n"
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdin.close()
    child.stdout.close()
    runs = []
    with Journal(path) as journal:
        assert journal.state("k1") == "started"
        ((found, outcome),) = journal.recover(now=NOW + 60)
        assert found == job_from_call("k1", "shell", {"command": "make deploy"}, "main", now=NOW)
        assert outcome == Outcome("the shell command `make deploy` may have run before the device stopped: "
                                  "not run again", is_error=True, uncertain=True)
        assert journal.run_once(found, lambda: runs.append(1) or Outcome("rerun")) == outcome
    with Journal(path) as journal:  # the verdict itself is journaled
        assert journal.recover(now=NOW + 61) == [(found, outcome)]
    assert runs == []


def test_a_finished_job_not_yet_delivered_is_delivered_after_a_restart(tmp_path):
    with Journal(tmp_path / "j") as journal:
        journal.run_once(job("k1"), lambda: Outcome("one"))
        journal.run_once(job("k2"), lambda: Outcome("two"))
        journal.delivered("k1")
    with Journal(tmp_path / "j") as journal:
        assert journal.state("k1") == "delivered" and journal.state("k2") == "finished"
        assert journal.recover(now=NOW + 1) == [(job("k2"), Outcome("two"))]
        journal.delivered("k2")
    with Journal(tmp_path / "j") as journal:
        assert journal.recover(now=NOW + 2) == [] and journal.state("k2") == "delivered"


def test_entries_older_than_ten_minutes_expire(tmp_path):
    with Journal(tmp_path / "j") as journal:
        journal.run_once(job("old", created=NOW - EXPIRY - 1), lambda: Outcome("old"))
        journal.begin(job("old-started", created=NOW - EXPIRY - 1))
        journal.run_once(job("new", created=NOW - EXPIRY + 1), lambda: Outcome("new"))
    with Journal(tmp_path / "j") as journal:
        assert journal.recover(now=NOW) == [(job("new", created=NOW - EXPIRY + 1), Outcome("new"))]
        assert not journal.known("old") and not journal.known("old-started")
        journal.compact(now=NOW)
    assert [json.loads(line).get("id", "new") for line in (tmp_path / "j").read_text().splitlines()] == ["new", "new"]


def test_a_torn_last_line_is_skipped_with_a_warning_and_appending_goes_on(tmp_path, caplog):
    path = tmp_path / "j"
    with Journal(path) as journal:
        journal.run_once(job("k1"), lambda: Outcome("one"))
    whole = path.stat().st_size
    with open(path, "ab") as file:
        file.write(b'{"v":1,"op":"begin","job":{"id":"k2"')
    with caplog.at_level(logging.WARNING, logger="everchat.actors.devices.jobs"):
        with Journal(path) as journal:
            assert not journal.known("k2") and journal.state("k1") == "finished"
            journal.delivered("k1")
    assert f"{path}: a torn last line at byte {whole}" in caplog.text
    with Journal(path) as journal:
        assert journal.state("k1") == "delivered"


def test_p13_a_damaged_record_is_set_aside_with_one_line_and_nothing_it_names_runs_again(tmp_path, caplog):
    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        journal.run_once(job("k1"), lambda: Outcome("one"))
        journal.delivered("k1")
        journal.begin(job("k2"))                           # may have run: the device stopped here
        journal.run_once(job("k3"), lambda: Outcome("three"))
    lines = path.read_bytes().splitlines(keepends=True)   # begin k1, finish, delivered, begin k2, begin k3, finish k3
    offset = sum(map(len, lines[:3]))
    torn_k4 = b'{"v":1,"op":"begin","job":{"id":"k4","tool":"shell","argu\n'   # not JSON, mid-file
    damaged = b"".join(lines[:3]) + b'{"v":1,"op":"bogus","id":"k2"}\n' + lines[3] + torn_k4 + b"".join(lines[4:])
    path.write_bytes(damaged)
    runs = []
    with caplog.at_level(logging.WARNING, logger="everchat.actors.devices.jobs"):
        with Journal(path, clock=lambda: NOW) as journal:
            assert journal.state("k1") == "delivered"
            recovered = dict((found.id, outcome) for found, outcome in journal.recover(now=NOW + 1))
            assert sorted(recovered) == ["k2", "k3", "k4"] and recovered["k3"] == Outcome("three")
            for name in ("k2", "k3", "k4"):                  # known: never started again
                assert journal.run_once(job(name), lambda: runs.append(name) or Outcome("rerun")).text != "rerun"
            assert journal.outcome("k3") == Outcome("three")
            assert journal.outcome("k2").uncertain and journal.outcome("k4").uncertain
    assert runs == []
    (warning,) = [record.getMessage() for record in caplog.records]
    assert warning.startswith(f"{path}: a damaged record at byte {offset} (unknown op 'bogus')")
    assert f"set aside in journal.jsonl.damaged-{offset};" in warning and "3 job(s)" in warning
    assert (tmp_path / f"journal.jsonl.damaged-{offset}").read_bytes() == damaged[offset:]
    caplog.clear()
    with Journal(path, clock=lambda: NOW) as journal:       # the rewritten journal reads, and still knows them
        assert [journal.state(name) for name in ("k1", "k2", "k3", "k4")] == ["delivered", "finished", "finished",
                                                                               "finished"]
    assert caplog.records == []


def test_a_quiet_background_process_outlives_the_job(work):
    """The job ends with its shell, though a process it left in the background still holds
    the pipe; that process keeps running (the module's choice: `nohup server &` works)."""
    outcome = run("shell", {"command": "sleep 300 & echo $! > child.pid; echo done"}, work)
    child = int((work / "child.pid").read_text())
    try:
        assert outcome == Outcome("done\n[exit 0]") and alive(child)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_background_process_writing_without_end_does_not_hold_the_job(work):
    """After the shell ends at most 1 MiB more is read; a writer that goes on then dies of
    SIGPIPE, as it would when any reader goes away. (Whether `yes` wrote before the shell
    ended is up to the scheduler: the result holds its lines or not, and ends the same.)"""
    outcome = run("shell", {"command": "yes & echo $! > child.pid; echo done"}, work)
    child = int((work / "child.pid").read_text())
    assert not outcome.is_error and outcome.text.endswith("\n[exit 0]")
    wait_until(lambda: not alive(child), 30, "the writer gone after the job")


def test_a_failing_output_handler_still_kills_the_group(work):
    def broken(text: str) -> None:
        raise RuntimeError(f"cannot show {text.split()[0]}")
    job = job_from_call("k", "shell", {"command": "echo group=$$; sleep 300"}, "main")
    with pytest.raises(RuntimeError, match=r"cannot show group=(\d+)") as failed:
        run_job(job, work, broken, threading.Event())
    assert not group_alive(int(failed.value.args[0].split("=")[1]))
