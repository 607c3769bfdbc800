"""The subscription connections' shared parts without a real CLI: the environment scrub,
Claude Code's decoder on recorded output, the request as one stream-json message (R23's
marks), the machine-wide gate, and whole runs of a fake CLI through the real MCP bridge."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from polling import wait_until

from everchat.actors.models import (
    CliMissing,
    ImageBlock,
    Message,
    ModelTimeout,
    NotLoggedIn,
    ProtocolError,
    QuotaExceeded,
    Request,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    Usage,
)
from everchat.actors.models._claudecode import STEADY_OPENING, ClaudeDecoder, user_line
from everchat.actors.models._cli import CliConnection, Finished, ToolsAsked, priority_of, scrubbed_environment
from everchat.actors.models._cli_gate import Gate
from everchat.actors.models._cli_run import LIVE
from everchat.actors.prompt import memory_tools, view_blocks

SAMPLES = Path(__file__).parent / "samples"
CHILD = str(Path(__file__).parent / "fake_cli_child.py")


def decode(name: str) -> list:
    decoder = ClaudeDecoder("claudecode", "m")
    return [item for line in (SAMPLES / name).read_text().splitlines() for item in decoder.feed(line)]


# --- the scrub ------------------------------------------------------------------------


def test_the_child_environment_holds_no_api_key_but_keeps_the_subscription_login():
    env = scrubbed_environment({"PATH": "/bin", "ANTHROPIC_API_KEY": "a", "ANTHROPIC_AUTH_TOKEN": "b",
                                "OPENAI_API_KEY": "c", "CODEX_API_KEY": "d", "CLAUDE_CODE_USE_BEDROCK": "1",
                                "SOME_VENDOR_API_KEY": "e", "CLAUDE_CODE_OAUTH_TOKEN": "login",
                                "AZURE_CLIENT_SECRET": "f", "OPENAI_IDENTITY_TOKEN_FILE": "/tmp/t",
                                "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR": "3", "ANTHROPIC_CUSTOM_HEADERS": "x-api-key: g",
                                "ANTHROPIC_BASE_URL": "http://127.0.0.1:1"})
    assert env == {"PATH": "/bin", "CLAUDE_CODE_OAUTH_TOKEN": "login", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}


# --- Claude Code's output, recorded from the real binary --------------------------------


def test_a_recorded_claude_code_reply_decodes_into_thinking_text_usage_and_its_end():
    items = decode("claude_code_reply.jsonl")
    assert "".join(i.text for i in items if isinstance(i, ThinkingDelta)) == "The person greets me."
    texts = [i.text for i in items if isinstance(i, TextDelta)]
    assert len(texts) > 1 and "".join(texts) == "Hello! How can I help today?"
    (usage,) = [i for i in items if isinstance(i, Usage)]
    assert usage.input > 0 and usage.output > 0
    assert items[-1] == Finished("end_turn")


def test_a_recorded_tool_round_decodes_text_and_usage_per_message_and_leaves_the_call_to_the_bridge():
    items = decode("claude_code_tool.jsonl")  # the real binary calling zoom through our bridge
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Let me look.It was amber-42."
    assert len([i for i in items if isinstance(i, Usage)]) == 2  # one per model message
    assert len([i for i in items if isinstance(i, ToolsAsked)]) == 1  # the first stopped for zoom
    assert not [i for i in items if isinstance(i, Exception)]
    assert items[-1] == Finished("end_turn")


def test_a_recorded_usage_limit_reads_as_quota_with_its_reset_time():
    (error,) = [i for i in decode("claude_code_quota.jsonl") if isinstance(i, Exception)]
    assert isinstance(error, QuotaExceeded)
    assert "usage limit is reached" in str(error) and "resets" in str(error)


def test_a_recorded_missing_login_reads_as_not_logged_in():
    (error,) = [i for i in decode("claude_code_nologin.jsonl") if isinstance(i, Exception)]
    assert isinstance(error, NotLoggedIn)
    assert "run `claude` and /login" in str(error)


def test_a_tool_bridge_that_failed_to_start_is_a_protocol_error():
    init = (SAMPLES / "claude_code_tool.jsonl").read_text().splitlines()[0]
    assert ClaudeDecoder().feed(init) == []  # recorded: "everchat" connected
    (error,) = ClaudeDecoder().feed(init.replace('"status":"connected"', '"status":"failed"'))
    assert isinstance(error, ProtocolError) and "could not start Everchat's tool bridge" in str(error)


def test_a_line_that_is_not_json_is_a_protocol_error():
    (error,) = ClaudeDecoder().feed("Segmentation fault")
    assert isinstance(error, ProtocolError) and "not JSON" in str(error)


# --- the request as one user message ----------------------------------------------------


def test_r23_the_view_keeps_its_mark_and_claude_code_adds_the_end_mark_itself():
    view = view_blocks([f"line {n}" for n in range(9)])  # 2 whole blocks, the second marked
    image = ImageBlock(b"\x89PNG-bytes", "image/png")
    request = Request(model="m", system="s", messages=(
        Message("user", (*view, TextBlock("the turn", cache=True), image)),
        Message.assistant("an earlier answer"),
        Message("user", (TextBlock("shorter please", cache=True),))))
    opening, *content = json.loads(user_line(request))["message"]["content"]
    assert opening == {"type": "text", "text": STEADY_OPENING} and len(STEADY_OPENING) > 20
    marked = [n for n, block in enumerate(content) if "cache_control" in block]
    assert marked == [1]  # the view's last whole block (Claude Code marks the end on every call)
    assert content[1]["text"] == view[1].text
    assert content[4] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                       "data": base64.b64encode(b"\x89PNG-bytes").decode()}}
    assert "an earlier answer" in content[5]["text"]


def test_compactions_queue_behind_replies_and_merges_behind_leaves():
    base = Request(model="m", system="s", messages=(Message.user("x"),))
    assert priority_of(replace(base, label="turn")) == 0
    assert priority_of(replace(base, label="compaction", priority=1)) == 1
    assert priority_of(replace(base, label="compaction", priority=2)) == 2


# --- the gate -------------------------------------------------------------------------


def test_the_gate_gives_no_more_slots_than_it_has(tmp_path):
    gate = Gate(tmp_path, 1)
    held = gate.acquire(0, timeout=0)
    assert held is not None
    assert Gate(tmp_path, 1).acquire(0, timeout=0) is None  # another process's view of it
    held.release()
    again = gate.acquire(0, timeout=0)
    assert again is not None
    again.release()


def test_a_merge_waits_while_a_reply_waits_even_with_a_slot_free(tmp_path):
    gate = Gate(tmp_path, 2)
    ticket = tmp_path / f"wait-0-{0:020d}-1-aaaa"
    fd = os.open(ticket, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a live reply waiting
    try:
        assert gate.acquire(2, timeout=0) is None
    finally:
        os.close(fd)
    slot = gate.acquire(2, timeout=0)  # its waiter died: the stale ticket goes
    assert slot is not None and not ticket.exists()
    slot.release()


def test_a_waiter_is_never_taken_for_dead_while_it_makes_its_ticket(tmp_path, monkeypatch):
    """Issue 13: a ticket was created, then locked; a later waiter looking in between took
    it for a dead waiter's and removed it, and went ahead of the live one."""
    from everchat.actors.models import _cli_gate

    gate = Gate(tmp_path, 1)
    held = gate.acquire(0, timeout=0)  # the waiter below must wait
    real_flock = fcntl.flock
    looked = threading.Event()

    def flock(fd, op):  # the first lock is the waiter's ticket: a merge looks just before it
        if not looked.is_set():
            looked.set()
            gate._anyone_ahead(f"wait-9-{0:020d}-1-later")
        return real_flock(fd, op)

    monkeypatch.setattr(_cli_gate.fcntl, "flock", flock)
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("slot", gate.acquire(0, timeout=30)))
    waiter.start()
    try:
        wait_until(lambda: list(tmp_path.glob("wait-0-*")), 30, "the waiting reply's ticket")
        assert gate._anyone_ahead(f"wait-9-{0:020d}-1-later")  # the merge sees the reply ahead
    finally:
        held.release()
        waiter.join(timeout=30)
    assert got["slot"] is not None
    got["slot"].release()


# --- whole runs of a fake CLI -----------------------------------------------------------


class FakeCli(CliConnection):
    provider = "fakecli"
    announces_tool_turns = True  # it speaks Claude Code's stream

    def __init__(self, mode: str, tmp_path: Path, timeout: float = 60.0, concurrency: int = 1) -> None:
        super().__init__(sys.executable, timeout=timeout, concurrency=concurrency, state_dir=tmp_path / "state")
        self.mode = mode

    def argv(self, run, request):
        return [self.executable, CHILD, str(run.folder), self.mode]

    def opening(self, run, request):
        return user_line(request).encode() + b"\n"

    def decoder(self, request):
        return ClaudeDecoder(self.provider, request.model)


def request(*messages: Message) -> Request:
    return Request(model="m", system="s", tools=memory_tools(), messages=messages or (Message.user("hi there"),))


def gone(pid: int) -> bool:
    """The process ended (a zombie no reaper collected counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "\nState:\tZ" in status.read_text()


def test_a_fake_cli_reply_streams_with_its_usage(tmp_path):
    with FakeCli("reply", tmp_path) as conn:
        events = list(conn.stream(request()))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo ", "there"]
    assert events[-2:] == [Usage(input=10, output=3, cache_read=5), Stop("end_turn")]


def test_a_tool_call_parks_the_run_and_its_result_continues_the_same_process(tmp_path):
    with FakeCli("tool", tmp_path) as conn:
        first = request()
        events = list(conn.stream(first))
        assert events == [TextDelta("Looking. "), ToolCall("toolu_fake_1", "zoom", {"id": 3}),
                          Usage(input=7, output=2), Stop("tool_use")]
        (pid,) = conn.parked_pids()
        result = ToolResultBlock("toolu_fake_1", (TextBlock("user: amber-42"),
                                                  ImageBlock(b"png", "image/png")))
        later = Message("user", (result, TextBlock("[joined] also this")))
        events = list(conn.stream(replace(first, messages=(*first.messages, Message.assistant("(zoom)"), later))))
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
            "tools=['zoom', 'date'] error=False got: user: amber-42 | image/png | [joined] also this")
        assert events[-2:] == [Usage(input=9, output=4), Stop("end_turn")]
        wait_until(lambda: gone(pid), 30, "the run ends with its answer")


def test_a_call_on_a_reused_thread_id_leaves_the_parked_run_to_its_caller(tmp_path):
    """Issue 13: callers run each call on a fresh thread and thread ids are reused, so the
    thread says nothing about whose run it is. Here both calls share one thread: the
    unrelated one must not end the parked run, which its caller's results continue."""
    with FakeCli("tool", tmp_path, concurrency=2) as conn:  # the parked run holds its slot
        first = request()
        list(conn.stream(first))
        (parked,) = conn.parked_pids()
        conn.mode = "reply"
        assert list(conn.stream(request(Message.user("something else"))))[-1] == Stop("end_turn")
        assert conn.parked_pids() == [parked]
        result = Message("user", (ToolResultBlock.of_text("toolu_fake_1", "user: amber-42"),))
        events = list(conn.stream(replace(first, messages=(*first.messages, Message.assistant("(zoom)"), result))))
        assert "got: user: amber-42" in "".join(e.text for e in events if isinstance(e, TextDelta))
        wait_until(lambda: gone(parked), 30, "the run ends with its answer")


def test_a_new_turn_ends_the_parked_run_of_a_turn_stopped_in_its_tool_step(tmp_path):
    """R37, issue 13: a turn stopped while its tools ran never continues its run. A chat runs
    one turn at a time, so the next turn's call ends that run at once and takes its slot
    (with --cli-concurrency 1 it would otherwise wait out the whole timeout); a parked
    agent's run is not a turn's and stays."""
    with FakeCli("tool", tmp_path, timeout=600, concurrency=2) as conn:
        list(conn.stream(replace(request(), label="agent")))
        list(conn.stream(replace(request(Message.user("the stopped turn")), label="turn")))
        agent, stopped = conn.parked_pids()
        conn.mode = "reply"
        events = list(conn.stream(replace(request(Message.user("the next turn")), label="turn")))
        assert events[-1] == Stop("end_turn")
        assert conn.parked_pids() == [agent]
        wait_until(lambda: gone(stopped), 30, "the stopped turn's run ends")


def test_a_run_parked_by_one_caller_survives_another_callers_call(tmp_path):
    with FakeCli("tool", tmp_path, concurrency=2) as conn:  # the parked run holds its slot
        first = request()
        parked = {}

        def turn() -> None:  # a turn runner's thread stops for its tool
            parked["events"] = list(conn.stream(first))

        thread = threading.Thread(target=turn)
        thread.start()
        thread.join()
        conn.mode = "reply"
        assert list(conn.stream(request(Message.user("a summary"))))[-1] == Stop("end_turn")  # a compactor
        assert len(conn.parked_pids()) == 1
        result = Message("user", (ToolResultBlock.of_text("toolu_fake_1", "user: amber-42"),))
        events = list(conn.stream(replace(first, messages=(*first.messages, Message.assistant("(zoom)"), result))))
        assert "got: user: amber-42" in "".join(e.text for e in events if isinstance(e, TextDelta))
        assert conn.parked_pids() == []


def test_a_run_parked_past_the_timeout_ends_by_itself_and_frees_its_slot(tmp_path):
    """Issue 13: a turn stopped during its tool step never calls stream again; its parked
    run must not hold the only slot until someone else's call or the exit."""
    with FakeCli("tool", tmp_path, timeout=3) as conn:
        list(conn.stream(request()))
        (pid,) = conn.parked_pids()
        wait_until(lambda: gone(pid), 30, "the parked run ends by itself")
        assert conn.parked_pids() == []
        slot = Gate(tmp_path / "state" / "gate", 1).acquire(0, timeout=30)  # another process on the state_dir
        assert slot is not None
        slot.release()


def test_ended_runs_leave_no_bridge_listener_thread_and_are_not_kept_live(tmp_path):
    """Issue 13: closing the listener did not wake its accept() (Linux), so every call left
    a thread and, through it, its run in LIVE."""
    before = set(threading.enumerate())
    with FakeCli("reply", tmp_path) as conn:
        for _ in range(3):
            assert list(conn.stream(request()))[-1] == Stop("end_turn")
        conn.mode = "tool"
        first = request()
        list(conn.stream(first))
        result = Message("user", (ToolResultBlock.of_text("toolu_fake_1", "user: amber-42"),))
        events = list(conn.stream(replace(first, messages=(*first.messages, Message.assistant("(zoom)"), result))))
        assert events[-1] == Stop("end_turn")

    def listeners() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "cli-bridge" and t not in before]

    wait_until(lambda: not listeners(), 30, "the bridge listeners end with their runs")
    assert [run for run in LIVE if run.ended] == []


def test_a_continued_run_whose_results_cannot_be_sent_is_killed(tmp_path, monkeypatch):
    """Issue 13: the run has left the parked ones when its results go out; if sending them
    fails, nothing else would ever end it."""
    from everchat.actors.models import _cli

    def broken(*args):
        raise RuntimeError("could not send the results")

    with FakeCli("tool", tmp_path, concurrency=2) as conn:
        first = request()
        list(conn.stream(first))
        (pid,) = conn.parked_pids()
        monkeypatch.setattr(_cli, "answer", broken)
        result = Message("user", (ToolResultBlock.of_text("toolu_fake_1", "user: amber-42"),))
        with pytest.raises(RuntimeError, match="could not send"):
            list(conn.stream(replace(first, messages=(*first.messages, Message.assistant("(zoom)"), result))))
        wait_until(lambda: gone(pid), 30, "the run whose results failed ends")


def test_a_timeout_kills_the_cli_and_everything_it_started(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_CLI_PIDS", str(pids))
    with FakeCli("hang", tmp_path, timeout=3) as conn:
        events = []
        with pytest.raises(ModelTimeout, match="within 3 s \\(--cli-timeout\\)"):
            for event in conn.stream(request()):
                events.append(event)
    assert events == [TextDelta("Thinking about it")]
    child, grandchild = map(int, pids.read_text().split())
    wait_until(lambda: gone(child) and gone(grandchild), 30, "the CLI and what it started end")


def test_a_stopped_reply_kills_its_run(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_CLI_PIDS", str(pids))
    conn = FakeCli("hang", tmp_path)
    stream = conn.stream(request())
    assert next(stream) == TextDelta("Thinking about it")
    stream.close()  # R37: the person stopped the reply
    child, grandchild = map(int, pids.read_text().split())
    wait_until(lambda: gone(child) and gone(grandchild), 30, "the CLI and what it started end")


def test_close_ends_a_run_that_is_still_streaming(tmp_path, monkeypatch):
    """Issue 13: close() ended only the parked runs, though it promises every live one."""
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_CLI_PIDS", str(pids))
    conn = FakeCli("hang", tmp_path)
    stream = conn.stream(request())
    try:
        assert next(stream) == TextDelta("Thinking about it")
        conn.close()
        child, grandchild = map(int, pids.read_text().split())
        wait_until(lambda: gone(child) and gone(grandchild), 30, "close() ends the streaming run")
    finally:
        stream.close()


def test_a_run_ended_while_a_tool_call_arrives_ends_whole(tmp_path, monkeypatch):
    """Issue 13: kill() walked the pending calls while the stream's thread could add one."""
    from everchat.actors.models import _cli_run

    run = _cli_run.Run(folder=tmp_path / "run", slot=None)
    (tmp_path / "run").mkdir()
    a, b = socket.socketpair()
    run.pending["first"] = _cli_run.BridgeCall("first", "zoom", {}, a)
    close = _cli_run._close_quietly

    def arriving(sock):  # another thread queues a call while kill() walks them
        run.pending.setdefault("second", _cli_run.BridgeCall("second", "zoom", {}, b))
        close(sock)

    monkeypatch.setattr(_cli_run, "_close_quietly", arriving)
    run.kill()
    assert run.ended and not (tmp_path / "run").exists()
    b.close()


def test_a_run_closed_while_its_results_go_out_fails_as_a_model_error(tmp_path, monkeypatch):
    """Issue 13: close() from another thread between taking the parked run and answering
    it left the caller a KeyError."""
    from everchat.actors.models import _cli

    with FakeCli("tool", tmp_path) as conn:
        first = request()
        list(conn.stream(first))
        sending = _cli.answer

        def closed_first(run, *args):
            conn.close()
            sending(run, *args)

        monkeypatch.setattr(_cli, "answer", closed_first)
        result = Message("user", (ToolResultBlock.of_text("toolu_fake_1", "user: amber-42"),))
        with pytest.raises(ProtocolError):
            list(conn.stream(replace(first, messages=(*first.messages, Message.assistant("(zoom)"), result))))


def test_a_parked_run_dies_with_the_process_that_owns_it(tmp_path):
    """The bridge's lifeline: no prctl needed, so this holds on macOS too."""
    runs = Path(tempfile.mkdtemp(prefix="ec"))  # the owner's temp dir: short, for the socket's path
    owner = subprocess.Popen([sys.executable, str(Path(__file__).parent / "cli_owner_child.py"), str(tmp_path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(runs)})
    cli = int(owner.stdout.readline())
    try:
        assert not gone(cli) and len(list(runs.iterdir())) == 1
        owner.kill()  # SIGKILL: no atexit, no finally
        owner.wait()
        wait_until(lambda: gone(cli), 30, "the CLI ends with its owner")
        wait_until(lambda: not list(runs.iterdir()), 30, "its folder goes")
    finally:
        owner.kill()
        owner.wait()
        if not gone(cli):
            os.killpg(cli, signal.SIGKILL)  # the test failed: leave nothing behind
        shutil.rmtree(runs, ignore_errors=True)


@pytest.mark.parametrize("owner", ["none", "dead"])
def test_a_bridge_removes_the_folder_only_of_a_run_whose_owner_was_there(tmp_path, owner):
    """Issue 13: run by hand on a folder (no socket), the bridge removed that folder."""
    folder = Path(tempfile.mkdtemp(prefix="ec"))  # short: the socket's path
    try:
        (folder / "tools.json").write_text("[]")
        if owner == "dead":  # a socket nobody listens on: its owner died before the lifeline
            dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            dead.bind(str(folder / "bridge.sock"))
            dead.close()
        bridge = subprocess.Popen([sys.executable, "-m", "everchat.actors.models._mcp_bridge", str(folder)],
                                  stdin=subprocess.PIPE, start_new_session=True)  # its group is not ours
        try:
            assert bridge.wait(timeout=30) == 0  # its lifeline ended it
        finally:
            bridge.kill()
            bridge.stdin.close()
        assert folder.exists() == (owner == "none")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_output_that_is_not_json_is_a_protocol_error(tmp_path):
    with FakeCli("garbage", tmp_path) as conn, pytest.raises(ProtocolError, match="not JSON"):
        list(conn.stream(request()))


def test_a_cli_that_exits_without_an_answer_says_so_with_its_stderr(tmp_path):
    with FakeCli("exit", tmp_path) as conn, pytest.raises(ProtocolError, match="exit code 3.*something broke"):
        list(conn.stream(request()))


def test_a_decoder_that_raises_at_the_end_still_ends_the_call(tmp_path):
    """Issue 13: the output reader died before saying the output closed, so the call
    waited out its timeout instead of failing at once; its error is the call's."""

    class Raising(ClaudeDecoder):
        def end(self, returncode, stderr):
            raise RuntimeError("a decoder bug")

    conn = FakeCli("exit", tmp_path, timeout=20)
    conn.decoder = lambda request: Raising(conn.provider, request.model)
    with conn, pytest.raises(ProtocolError, match="RuntimeError: a decoder bug"):
        list(conn.stream(request()))


def test_a_missing_executable_reads_clearly(tmp_path):
    conn = FakeCli("reply", tmp_path)
    conn.executable = str(tmp_path / "no-such-cli")
    with pytest.raises(CliMissing, match="--cli-executable"):
        list(conn.stream(request()))


def test_a_cli_that_cannot_be_executed_reads_as_missing(tmp_path):
    conn = FakeCli("reply", tmp_path)
    conn.executable = str(tmp_path / "not-a-program")
    Path(conn.executable).write_bytes(b"\x00\x01 not an executable format")
    os.chmod(conn.executable, 0o755)  # exec fails with ENOEXEC, not a missing file (issue 13)
    with pytest.raises(CliMissing, match="cannot start .*--cli-executable"):
        list(conn.stream(request()))


@pytest.mark.parametrize("where", ["missing", "too long"])
def test_a_run_folder_that_cannot_be_made_is_a_protocol_error_and_frees_the_slot(tmp_path, monkeypatch, where):
    """Issue 13: an OSError while preparing the run (its folder; a socket path longer than
    AF_UNIX allows) reads as the model's error, not a raw OSError callers do not catch."""
    temp = tmp_path / ("no-such-folder" if where == "missing" else "x" * 120)
    if where == "too long":
        temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with FakeCli("reply", tmp_path) as conn:
        with pytest.raises(ProtocolError, match="could not prepare the CLI run"):
            list(conn.stream(request()))
        slot = conn.gate.acquire(0, timeout=0)
        assert slot is not None
        slot.release()


def test_the_fake_server_tells_which_images_a_request_carried_in_either_vendors_shape():
    from everchat.tools.fakemodel import Exchange

    png = base64.b64encode(b"png-bytes").decode()
    body = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "tool_result", "content": [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{png}"}}]},
        {"type": "input_image", "image_url": f"data:image/webp;base64,{png}"}]}]}
    exchange = Exchange(1, "anthropic", "POST", "/v1/messages", {}, body, 0.0, 0.0)
    assert exchange.images() == [("image/png", b"png-bytes"), ("image/jpeg", b"png-bytes"),
                                 ("image/webp", b"png-bytes")]


def test_claude_code_thinks_only_with_an_effort_and_within_half_the_output_limit(tmp_path, monkeypatch):
    from everchat.actors.models import ClaudeCodeConnection

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-paid")
    conn = ClaudeCodeConnection("claude", state_dir=tmp_path)
    base = Request(model="m", system="s", messages=(Message.user("x"),), max_tokens=8192)

    def env(**changes):
        return conn.environment(None, replace(base, **changes))

    assert env()["MAX_THINKING_TOKENS"] == "0"  # no effort: no thinking, as on the API path
    assert env(effort="none")["MAX_THINKING_TOKENS"] == "0"
    assert env(effort="high")["MAX_THINKING_TOKENS"] == "4096"
    assert env(effort="high", max_tokens=1024)["MAX_THINKING_TOKENS"] == "0"  # no room for the API's minimum
    assert env()["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "8192"
    assert "ANTHROPIC_API_KEY" not in env()
