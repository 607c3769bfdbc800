"""One chat, one server (issue 10, R5, R36): while `everchat serve` holds the chat, the other
commands of this computer attach to it over its local socket instead of failing on the lock,
and say so in one line on stderr; the server keeps the lock, and its clean exit releases it.

Real processes and sockets: the server is `everchat serve` in a subprocess (demo models, or
the fake model server where a turn must be held open), the clients are `everchat` commands.
Every wait polls with a deadline; every process started here is reaped here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_world import env, everchat  # noqa: F401 (env is a fixture)
from tmux_world import clean_env, tmux_pane

from everchat.actors.session.attached import ServerGone, server_info
from everchat.actors.settings import load
from everchat.actors.tree import Budget
from everchat.actors.session.session import ChatSession
from everchat.actors.folder import ChatStore
from everchat.actors.supervisor.actor import Placement, Supervisor
from everchat.tools.fakemodel import FakeModelServer, Gate, Reply, Text
from everchat.transport import TransportError

EVERCHAT = [sys.executable, "-m", "everchat.frontends.cli.main"]
HOST = socket.gethostname()
TAIL = "; close that chat first (read-only commands such as `view` and `status` work meanwhile)"


def _sigint_default() -> None:
    # The server takes SIGINT as a terminal's Ctrl-C reaches it, even when this pytest was
    # started with SIGINT ignored (which a child inherits).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Server:
    """`everchat serve` on `chat`, running until `stop()`; `stop()` is SIGINT, as Ctrl-C."""

    def __init__(self, env: dict, chat: Path, *flags: str) -> None:
        self.chat = chat
        self.process = subprocess.Popen([*EVERCHAT, "--data-dir", str(chat), "serve", "--workers", "1", *flags],
                                        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default)
        self.first_line = self.process.stdout.readline()  # returns at its line, or at its exit
        if not self.first_line.startswith("everchat: serving"):
            raise AssertionError(f"serve did not start: {self.first_line!r} {self.kill()}")

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def attached_line(self) -> str:
        return f"everchat: attached to the running chat (pid {self.pid})\n"

    def stop(self) -> tuple[int, str]:
        """SIGINT, then its exit status and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            _, err = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return self.process.returncode, err

    def kill(self) -> str:
        """Its end, now; returns its stderr."""
        if self.process.poll() is None:
            self.process.kill()
        return self.process.communicate()[1]


@pytest.fixture
def served(env, tmp_path):
    """Start servers with `served(*flags)` (demo models unless `env` says otherwise); each
    is stopped and reaped at the end."""
    servers: list[Server] = []

    def start(*flags: str, chat: Path | None = None, run_env: dict | None = None) -> Server:
        server = Server(run_env or env, chat or tmp_path / "chat", *flags)
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.kill()


def records(chat: Path) -> list:
    """The log as a reader sees it (R5: no lock, so while the server runs too)."""
    with ChatStore.open(chat, writer=False) as store:
        return [store.message(i) for i in range(store.message_count)]


def texts(chat: Path, kind: str) -> list[str]:
    return [record.text for record in records(chat) if record.kind == kind]


def poll(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)  # polling another process's progress, with a deadline
    return value


def test_r5_ask_attaches_to_the_running_serve_says_so_in_one_line_and_logs_its_message_once(env, served):
    server = served("--demo")
    chat = server.chat
    done = everchat(env, "--demo", "--data-dir", str(chat), "ask", "Remember amber-42.")
    assert done.returncode == 0, done.stderr
    assert done.stderr == server.attached_line
    assert "Noted as message 0." in done.stdout
    assert texts(chat, "user") == ["Remember amber-42."]
    assert json.loads((chat / "run" / "supervisor.json").read_text())["pid"] == server.pid  # R5: still the server's
    # The attached ask left; the server runs on and answers the next one, which zooms.
    assert server.process.poll() is None
    again = everchat(env, "--demo", "--data-dir", str(chat), "ask", "What did I ask you to remember?")
    assert again.returncode == 0, again.stderr
    assert again.stderr.startswith(server.attached_line) and "· zoom(0, 1)" in again.stderr
    assert "amber-42" in again.stdout
    assert texts(chat, "user") == ["Remember amber-42.", "What did I ask you to remember?"]
    assert server.stop() == (0, "")
    # R5: the clean exit released the lock and cleared run/: the next ask opens the chat itself.
    assert not (chat / "run" / "supervisor.json").exists()
    alone = everchat(env, "--demo", "--data-dir", str(chat), "ask", "Hello again.")
    assert (alone.returncode, alone.stderr) == (0, "")


def test_r5_note_import_compact_and_status_work_while_serve_runs(env, served, tmp_path):
    server = served("--demo")
    chat, flags = server.chat, ("--demo", "--data-dir", str(server.chat))
    note = everchat(env, *flags, "note", "The probe is called amber-42.")
    assert (note.returncode, note.stdout, note.stderr) == (0, "logged message 0\n", server.attached_line)
    source = tmp_path / "notes.txt"
    source.write_text("".join(f"Line {n}: the basalt harbor keeps crate {n}.\n" for n in range(900)))  # 3 parts
    imported = everchat(env, *flags, "import", str(source))
    assert imported.returncode == 0, imported.stderr
    assert imported.stderr.startswith(server.attached_line)
    assert f"imported {source}: 3 notes, messages 1-3" in imported.stdout
    again = everchat(env, *flags, "import", str(source), "--log-only")  # keyed parts: nothing logged twice
    assert again.returncode == 0 and again.stderr.startswith(server.attached_line)  # the server's store, R5
    assert f"{source} is already imported (3 notes); nothing logged" in again.stdout
    compact = everchat(env, *flags, "compact")
    assert compact.returncode == 0, compact.stderr
    assert compact.stderr.startswith(server.attached_line)
    assert compact.stdout.startswith("every summary is built: 4 messages")
    status = everchat(env, "--data-dir", str(chat), "status")  # read-only: never attaches, never locks
    assert (status.returncode, status.stderr) == (0, "")
    figures = json.loads(status.stdout)
    assert (figures["messages"], figures["pending"]) == (4, 0)
    assert figures["live"]["running"] is True and figures["live"]["pid"] == server.pid
    assert (figures["live"]["messages"], figures["live"]["pending"]) == (4, 0)
    assert [r.kind for r in records(chat)] == ["note"] * 4
    assert server.stop() == (0, "")


def test_r5_a_chat_held_by_a_plain_writer_still_fails_with_the_old_message(env, tmp_path):
    chat = tmp_path / "chat"
    with ChatStore.open(chat, create=True):  # as `note` or `import --log-only` would hold it
        asked = everchat(env, "--demo", "--data-dir", str(chat), "ask", "Hello?")
        noted = everchat(env, "--demo", "--data-dir", str(chat), "note", "A note.")
    locked = f"chat {chat} is locked by its writer, pid {os.getpid()} on host {HOST}{TAIL}"
    assert (asked.returncode, asked.stdout, asked.stderr) == (1, "", f"everchat: {locked}\n")
    assert (noted.returncode, noted.stdout, noted.stderr) == (1, "", f"everchat: {locked}\n")
    assert records(chat) == []


def test_r5_a_chat_held_by_a_one_shot_commands_supervisor_is_not_attached_to(env, tmp_path):
    """A one-shot command (`ask`, `compact`) ends soon and takes its actors with it: its
    supervisor is not attachable, so a second command fails on the lock as ever."""
    chat = tmp_path / "chat"
    with Supervisor(chat, Placement(workers=1, summarizer="scripted"), Budget()):
        assert json.loads((chat / "run" / "supervisor.json").read_text())["attachable"] is False
        asked = everchat(env, "--demo", "--data-dir", str(chat), "ask", "Hello?")
    assert (asked.returncode, asked.stdout) == (1, "")
    assert asked.stderr == f"everchat: chat {chat} is locked by its writer, pid {os.getpid()} on host {HOST}{TAIL}\n"
    assert records(chat) == []


def test_r5_a_second_serve_is_still_refused_while_commands_attach(env, served):
    server = served("--demo")
    second = subprocess.run([*EVERCHAT, "--demo", "--data-dir", str(server.chat), "serve", "--workers", "1"],
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert (second.returncode, second.stdout) == (1, "")
    assert second.stderr == (f"everchat: chat {server.chat} is locked by its writer, pid {server.pid} "
                             f"on host {HOST}{TAIL}\n")
    assert server.process.poll() is None


def test_r5_serve_processes_is_attached_to_and_a_placement_flag_defers_to_the_running_chat(env, served):
    server = served("--demo", "--processes")
    chat = server.chat
    done = everchat(env, "--demo", "--processes", "--data-dir", str(chat), "ask", "Remember amber-42.")
    assert done.returncode == 0, done.stderr
    assert done.stderr == server.attached_line  # the same placement: nothing more to say
    assert "Noted as message 0." in done.stdout
    note = everchat(env, "--demo", "--data-dir", str(chat), "note", "The seals are green.")
    assert (note.returncode, note.stdout, note.stderr) == (0, "logged message 2\n", server.attached_line)
    assert [(r.kind, r.text) for r in records(chat) if r.kind != "everchat"] == [
        ("user", "Remember amber-42."), ("note", "The seals are green.")]
    assert server.stop() == (0, "")
    assert not (chat / "run" / "supervisor.json").exists()


def test_r5_serve_tcp_is_attached_with_the_supervisors_key_and_status_reads_it_live_writing_no_key(env, served):
    server = served("--demo", "--tcp")
    keys = server.chat / "config" / "keys"
    before = {path.name: path.read_bytes() for path in keys.iterdir()}
    done = everchat(env, "--demo", "--data-dir", str(server.chat), "ask", "Remember amber-42.")
    assert done.returncode == 0, done.stderr
    assert done.stderr == server.attached_line and "Noted as message 0." in done.stdout

    def settled() -> dict:  # the ask waited for its own lines; the merge they make ready may still run
        status = everchat(env, "--data-dir", str(server.chat), "status")
        assert (status.returncode, status.stderr) == (0, "")
        live = json.loads(status.stdout)["live"]
        return live if live["pending"] == 0 else {}

    live = poll(settled, "the served chat's summaries built")
    assert (live["running"], live["pid"], live["messages"], live["pending"]) == (True, server.pid, 2, 0)
    assert {path.name: path.read_bytes() for path in keys.iterdir()} == before  # no key made or authorized
    assert server.stop() == (0, "")


def test_r5_a_processes_flag_attached_to_a_single_server_says_its_placement_is_used(env, served):
    server = served("--demo")
    done = everchat(env, "--demo", "--processes", "--data-dir", str(server.chat), "ask", "Hi.", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"everchat: attached to the running chat (pid {server.pid}); its own placement "
                           "(single) is used, not --processes\n")


def test_r36_an_ask_sent_while_another_clients_turn_runs_joins_that_turn(env, served):
    """Client A's turn is held at the model (a gate before its first byte); client B's ask
    attaches, its message is logged at once and joins A's turn (R36); when the gate opens
    the turn's next call carries B's message, and both clients print the turn's reply to
    its end and exit 0. B's ask follows the turn it joined, not a turn of its own."""
    gate = Gate()
    with FakeModelServer() as model:
        model.script(Reply(Text("First, the seals."), gate=gate), Reply(Text("Then the amber-42 probe.")))
        run_env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="anthropic",
                       EVERCHAT_REPLY_BASE_URL=model.base_url, EVERCHAT_COMPACTION_PROVIDER="demo")
        server = served(run_env=run_env)
        chat = server.chat
        argv = [*EVERCHAT, "--data-dir", str(chat), "ask"]
        first = subprocess.Popen([*argv, "Check the probe."], env=run_env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        second = None
        try:
            assert model.wait_for_requests(1, timeout=60)  # A's turn is on, held at the gate
            second = subprocess.Popen([*argv, "And its name?"], env=run_env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
            poll(lambda: "And its name?" in texts(chat, "user"), "B's message logged while A's turn runs")
            # A client that attaches and leaves meanwhile stops nobody's turn.
            note = everchat(run_env, "--data-dir", str(chat), "note", "A note while the turn runs.")
            assert (note.returncode, note.stderr) == (0, server.attached_line)
            assert first.poll() is None and second.poll() is None
            gate.open()
            out_a, err_a = first.communicate(timeout=120)
            out_b, err_b = second.communicate(timeout=120)
        finally:
            gate.open()
            for child in (first, second):
                if child is not None and child.poll() is None:
                    child.kill()
                    child.communicate()
        calls = model.model_calls
    assert (first.returncode, second.returncode) == (0, 0), (err_a, err_b)
    assert err_a == err_b == server.attached_line
    assert out_a == out_b == "First, the seals.Then the amber-42 probe.\n"
    assert texts(chat, "user") == ["Check the probe.", "And its name?"]  # each logged once
    assert texts(chat, "note") == ["A note while the turn runs."]
    assert len(calls) == 2 and "And its name?" in json.dumps(calls[1].body)
    assert server.stop() == (0, "")


@pytest.fixture
def pane(env):
    with tmux_pane(clean_env(None, env) | {k: v for k, v in env.items() if k.startswith("EVERCHAT_")}) as pane:
        yield pane


def test_r5_the_terminal_chat_attaches_to_serve_in_tmux(env, served, pane):
    """`everchat chat` while serve runs: the one line, then the chat as ever (a short smoke)."""
    server = served("--demo")
    note = everchat(env, "--demo", "--data-dir", str(server.chat), "note", "The code word is amber-42.")
    assert note.returncode == 0, note.stderr
    pane.start(*EVERCHAT, "--demo", "--data-dir", str(server.chat), "chat")
    screen = pane.wait("1 message so far")
    assert server.attached_line.strip() in screen
    pane.type("What is the code word?")
    pane.wait("amber-42.\" (I zoomed 0+1 to read it.)")
    pane.keys("C-d")
    pane.wait("[exit 0]")
    # The terminal left; the server runs on and holds the chat.
    assert server.process.poll() is None
    assert texts(server.chat, "user") == ["What is the code word?"]
    assert server.stop() == (0, "")


def test_r5_ask_attaches_to_an_open_terminal_chat_which_is_a_server_too(env, pane, tmp_path):
    chat = tmp_path / "chat"
    pane.start(*EVERCHAT, "--demo", "--data-dir", str(chat), "chat")
    pane.wait("0 messages so far")
    info = poll(lambda: server_info(chat), "the terminal chat's run file, attachable")
    done = everchat(env, "--demo", "--data-dir", str(chat), "ask", "Remember amber-42.")
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"everchat: attached to the running chat (pid {info['pid']})\n"
    assert "Noted as message 0." in done.stdout
    pane.wait("Noted as message 0.")  # the terminal shows the turn another client started
    pane.keys("C-d")
    pane.wait("[exit 0]")
    assert not (chat / "run" / "supervisor.json").exists()
    assert texts(chat, "user") == ["Remember amber-42."]


def test_p4_an_attached_session_waits_out_a_kill_of_the_servers_log_writer(served, tmp_path):
    """The retry policy of an attached session reads the server's supervisor over the
    socket (`SupervisorStatus`): a request to an actor that was killed waits until the
    server runs it again, then is repeated; the note is logged once."""
    server = served("--demo", "--processes")
    session = ChatSession.attach(server.chat, load(None, env={}, home=tmp_path / "home"))
    try:
        assert (session.attached, session.server_pid, session.placement_mode) == (True, server.pid, "processes")
        session.note("Before the kill.")
        restarts, pid = session.supervisor.incarnation("log_writer")
        assert pid not in (0, server.pid, os.getpid())
        os.kill(pid, signal.SIGKILL)
        session.note("After the kill.")  # sent to the dead process, or to its next run: logged once
        poll(lambda: session.supervisor.incarnation("log_writer")[0] > restarts, "the log writer restarted")
    finally:
        session.close()
    assert texts(server.chat, "note") == ["Before the kill.", "After the kill."]
    assert server.process.poll() is None
    code, err = server.stop()
    assert code == 0 and "log_writer stopped (exit -9;" in err


def test_r5_serve_stopped_with_a_client_attached_exits_cleanly_and_the_client_hears_it_is_gone(served, tmp_path):
    server = served("--demo")
    session = ChatSession.attach(server.chat, load(None, env={}, home=tmp_path / "home"))
    try:
        session.note("While attached.")
        session.compact(timeout=60)  # no summary in flight when the server stops
        assert server.stop() == (0, "")  # the lock is released, run/ cleared: nothing waits for the client
        assert not (server.chat / "run" / "supervisor.json").exists()
        with pytest.raises(TransportError) as gone:
            session.note("Too late.")
        assert isinstance(gone.value, ServerGone) or "stopped" in str(gone.value)
    finally:
        session.close()
    assert texts(server.chat, "note") == ["While attached."]


def test_r5_web_attaches_to_a_running_serve_and_leaves_it_running(env, served, tmp_path):
    """`everchat web` on a chat `serve` runs: it says so in one line, serves the chat through
    the server's actors (a note posted from the page is logged by them), and its Ctrl-C
    leaves the server running with its lock."""
    import asyncio

    import aiohttp

    server = served()
    web = subprocess.Popen([*EVERCHAT, "--data-dir", str(server.chat), "web", "--no-browser", "--port", "0"],
                           env={k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")},
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=_sigint_default)
    try:
        line = web.stdout.readline()
        assert line.startswith("everchat: the chat is at http://127.0.0.1:"), (line, web.poll())
        base, token = line.split(" at ", 1)[1].strip().split("/#")

        async def note() -> int:
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
                async with client.post(base + "/api/session", json={"token": token, "name": "attach test"},
                                       headers={"Origin": base}) as answer:
                    assert answer.status == 200
                async with client.post(base + "/api/note", json={"text": "noted through the web page"},
                                       headers={"Origin": base}) as answer:
                    assert answer.status == 200
                    return (await answer.json())["id"]

        asyncio.run(asyncio.wait_for(note(), 60))
        assert texts(server.chat, "note") == ["noted through the web page"]
        web.send_signal(signal.SIGINT)
        _, err = web.communicate(timeout=60)
    finally:
        if web.poll() is None:
            web.kill()
            web.communicate()
    assert web.returncode == 0, err
    assert server.attached_line in err
    assert server.process.poll() is None  # the server still runs, its lock held
    done = subprocess.run([*EVERCHAT, "--data-dir", str(server.chat), "note", "after the page left"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == server.attached_line
    assert server.stop()[0] == 0
