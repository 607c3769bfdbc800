"""Faults and bad inputs reach the person as one line naming the file and the cause, never
a Python traceback (P9, P10, P17, P19, P7 of the 2026-12-03 review; SPEC's exit statuses:
1 failed, 2 wrong arguments). Each test runs `everchat` as a real process."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_world import env, everchat  # noqa: F401 (env is a fixture)

from everchat.actors.folder import ChatStore
from everchat.actors.folder.usage import UsageTotals, save_usage
from everchat.frontends.cli.commands import UsageError
from everchat.frontends.cli.ask import _explain_lock
from everchat.transport import KeyStore

CLI = [sys.executable, "-m", "everchat.frontends.cli.main"]


def one_line(done: subprocess.CompletedProcess) -> str:
    """The one line on stderr (no traceback), without its newline."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.endswith("\n"), done.stderr
    return done.stderr[:-1]


def a_chat(env: dict, path: Path, *notes: str) -> Path:
    for text in notes or ("a first note",):
        done = everchat(env, "note", text, "--data-dir", str(path))
        assert done.returncode == 0, done.stderr
    return path


# ---- P9: the config file -------------------------------------------------------------------


def test_p9_a_binary_config_file_is_exit_2_naming_the_file(env, tmp_path):
    config = tmp_path / "home" / "config.toml"
    config.parent.mkdir()
    config.write_bytes(b"\x00\xff")
    done = everchat(env, "--demo", "ask", "hi")
    assert done.returncode == 2
    assert one_line(done) == f"everchat: {config}: not UTF-8 text (byte 1)"


def test_p9_a_deeply_nested_config_file_is_exit_2_naming_the_file(env, tmp_path):
    config = tmp_path / "home" / "config.toml"
    config.parent.mkdir()
    config.write_text("a = " + "[" * 10_000 + "]" * 10_000 + "\n")
    done = everchat(env, "--demo", "ask", "hi")
    assert done.returncode == 2
    assert one_line(done) == f"everchat: {config}: not valid TOML: it nests too deeply"


# ---- P9: the chat folder -------------------------------------------------------------------


def test_p9_note_under_a_file_says_the_file_is_no_folder(env, tmp_path):
    (tmp_path / "afile").write_text("mine")
    done = everchat(env, "note", "hi", "--data-dir", str(tmp_path / "afile" / "sub"))
    assert done.returncode == 1
    assert one_line(done) == (f"everchat: cannot open the chat in {tmp_path}/afile/sub: "
                              f"{tmp_path}/afile is a file, not a folder")
    assert (tmp_path / "afile").read_text() == "mine"


def test_p9_serve_on_a_file_says_the_file_is_no_folder(env, tmp_path):
    (tmp_path / "afile").write_text("mine")
    done = everchat(env, "--demo", "serve", "--data-dir", str(tmp_path / "afile"), timeout=60)
    assert done.returncode == 1
    assert one_line(done) == f"everchat: cannot serve the chat in {tmp_path}/afile: it is a file, not a folder"


def _no_room_for_files() -> None:
    """In the child: every write that would grow a file fails (EFBIG), as on a full disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_p9_note_making_a_chat_on_a_full_disk_is_one_line(env, tmp_path):
    """F0: the first write of a new chat (its lock file's owner) fails."""
    chat = tmp_path / "new-chat"
    done = subprocess.run([*CLI, "note", "hi", "--data-dir", str(chat)], env=env, capture_output=True,
                          text=True, timeout=60, preexec_fn=_no_room_for_files)
    assert done.returncode == 1
    assert one_line(done) == f"everchat: cannot open the chat in {chat}: File too large"


@pytest.mark.parametrize("name", ["writer.lock", "index/messages.idx"])
def test_p9_note_when_a_file_of_the_chat_cannot_be_written_is_one_line(env, tmp_path, name):
    """R1, R6: the lock file or the index cannot be opened for writing (here: a folder stands in its place)."""
    chat = a_chat(env, tmp_path / "chat")
    (chat / name).unlink()
    (chat / name / "x").mkdir(parents=True)
    done = everchat(env, "note", "hi", "--data-dir", str(chat))
    assert done.returncode == 1
    assert one_line(done) == f"everchat: cannot open the chat in {chat}: {chat}/{name} is a folder, not a file"


# ---- P7 (with P9): logged, but the view was not saved ------------------------------------------


@pytest.fixture
def view_not_replaceable(tmp_path):
    """Makes the chat's view.json impossible to replace: immutable (as root, R3), or the
    folder read-only (otherwise, R4). Undone afterwards."""
    undo = []

    def make(chat: Path) -> None:
        if os.geteuid() != 0:
            chat.chmod(0o555)
            undo.append(lambda: chat.chmod(0o755))
            return
        if shutil.which("chattr") is None:
            pytest.skip("needs chattr as root")
        done = subprocess.run(["chattr", "+i", str(chat / "view.json")], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i does not work here: {done.stderr.decode().strip()}")
        undo.append(lambda: subprocess.run(["chattr", "-i", str(chat / "view.json")], check=True))

    yield make
    for step in undo:
        step()


def test_p7_note_whose_view_cannot_be_saved_says_it_was_logged_and_not_to_retry(env, tmp_path, view_not_replaceable):
    chat = a_chat(env, tmp_path / "chat")
    view_not_replaceable(chat)
    done = everchat(env, "note", "the second note", "--data-dir", str(chat))
    assert done.returncode == 1
    line = one_line(done)
    assert re.fullmatch(r"everchat: logged as message 1, but saving the view failed: .+; the next open recovers "
                        r"it \(do not retry, it would log the note twice\)", line), line
    zoom = everchat(env, "zoom", "1", "--data-dir", str(chat))
    assert zoom.stdout == "note: the second note\n"


# ---- P9: actors and sockets ----------------------------------------------------------------------


def _wait_for_run_file(chat: Path, serving: subprocess.Popen) -> dict:
    """The run file, once `serve` wrote it (the serve's stdout line comes later, after joins)."""
    seen = threading.Event()
    info: dict = {}

    def look() -> None:
        while serving.poll() is None and not seen.is_set():
            try:
                info.update(json.loads((chat / "run" / "supervisor.json").read_text()))
                seen.set()
            except (OSError, ValueError):
                seen.wait(0.05)

    watcher = threading.Thread(target=look, daemon=True)
    watcher.start()
    watcher.join(60)
    assert info, f"serve wrote no run file; it said: {serving.stderr.read() if serving.poll() is not None else ''}"
    return info


@pytest.fixture
def serving_tcp(env, tmp_path):
    """`serve --tcp` in one process (no --processes) waiting for compactor.1 to join from elsewhere."""
    chat = tmp_path / "chat"
    process = subprocess.Popen([*CLI, "--demo", "serve", "--tcp", "--workers", "2", "--remote", "compactor.1",
                                "--data-dir", str(chat)],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        yield chat, process, _wait_for_run_file(chat, process)
    finally:
        process.kill()
        process.wait(timeout=30)
        process.stdout.close()
        process.stderr.close()


def test_p9_an_actor_whose_key_is_not_authorized_is_told_to_add_it_to_authorized_keys(env, tmp_path, serving_tcp):
    chat, _, info = serving_tcp
    keys = tmp_path / "elsewhere" / "config"
    done = everchat(env, "actor", "compactor.1", "--join", info["endpoint"], "--keys", str(keys),
                    "--data-dir", str(tmp_path / "elsewhere" / "none"), "--summarizer", "scripted", timeout=90)
    public = KeyStore(keys).ensure("compactor.1").public.decode()
    assert done.returncode == 1
    endpoint = info["endpoint"].split(";")[0]
    assert one_line(done) == (
        f"everchat: compactor.1 could not join the chat at {endpoint}: the chat refused this actor's key; "
        f"add the line '{public} compactor.1' to config/keys/authorized_keys in the chat's folder on its host "
        "(no restart needed), then run this command again")


def test_p17_tcp_without_processes_serves_one_process_that_a_remote_actor_joins(env, tmp_path, serving_tcp):
    """The help says so: --tcp also works single (the chat's one process listens on tcp)."""
    chat, process, info = serving_tcp
    assert info["transport"] == "tcp" and info["placement"] == "single"
    assert info["endpoint"].startswith("tcp://127.0.0.1:")
    elsewhere = tmp_path / "elsewhere" / "config"
    KeyStore(chat / "config").ensure("compactor.1")  # authorized by the chat beforehand
    (elsewhere / "keys").mkdir(parents=True)
    shutil.copy2(chat / "config" / "keys" / "compactor.1.key", elsewhere / "keys")
    joiner = subprocess.Popen([*CLI, "actor", "compactor.1", "--join", info["endpoint"], "--keys", str(elsewhere),
                               "--data-dir", str(tmp_path / "elsewhere" / "none"), "--summarizer", "scripted"],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = process.stdout.readline()  # printed once every actor, compactor.1 included, is there
        assert line.startswith(f"everchat: serving {chat} (single, 2 workers) at tcp://127.0.0.1:"), line
    finally:
        joiner.terminate()
        assert joiner.wait(timeout=30) == 0
        joiner.stderr.close()


def test_p9_serve_listening_on_an_address_of_another_host_is_one_line(env, tmp_path):
    done = everchat(env, "--demo", "serve", "--tcp", "--listen", "192.0.2.1", "--data-dir", str(tmp_path / "chat"),
                    timeout=60)
    assert done.returncode == 1
    assert one_line(done) == ("everchat: cannot listen on 192.0.2.1: Cannot assign requested address; --listen names "
                              "an address of this host, which other hosts dial")


def test_p17_listen_without_tcp_is_a_usage_error(env, tmp_path):
    done = everchat(env, "--demo", "serve", "--listen", "10.0.0.5", "--data-dir", str(tmp_path / "chat"))
    assert done.returncode == 2
    assert one_line(done) == ("everchat: --listen goes with --tcp: without it the actors talk over ipc sockets in "
                              "the chat folder, which listen on no address")
    assert not (tmp_path / "chat").exists()


# ---- P17: inputs that are not regular files --------------------------------------------------------


def test_p17_an_image_that_is_a_fifo_or_a_device_is_refused_at_once(env, tmp_path):
    fifo = tmp_path / "picture.png"
    os.mkfifo(fifo)
    done = everchat(env, "--demo", "ask", "what is this?", "--image", str(fifo), "--data-dir", str(tmp_path / "chat"),
                    timeout=30)
    assert done.returncode == 2
    assert one_line(done) == f"everchat: {fifo} is a named pipe (FIFO), not an image"
    done = everchat(env, "--demo", "ask", "and this?", "--image", "/dev/zero", "--data-dir", str(tmp_path / "chat"),
                    timeout=30)
    assert done.returncode == 2
    assert one_line(done) == "everchat: /dev/zero is a character device, not an image"
    assert not (tmp_path / "chat").exists()


def test_p17_regular_file_is_the_shared_check_for_inputs(tmp_path):
    from everchat.frontends.cli.commands import regular_file

    (tmp_path / "notes.txt").write_text("x")
    assert regular_file(tmp_path / "notes.txt", "text file") == tmp_path / "notes.txt"
    os.mkfifo(tmp_path / "pipe")
    cases = {tmp_path / "pipe": f"{tmp_path}/pipe is a named pipe (FIFO), not a text file",
             tmp_path: f"{tmp_path} is a folder, not a text file",
             tmp_path / "gone.txt": f"{tmp_path}/gone.txt: no such text file"}
    for path, words in cases.items():
        with pytest.raises(UsageError) as refused:
            regular_file(path, "text file")
        assert str(refused.value) == words


# ---- P10: the real cause, and warnings in words -------------------------------------------------------


def test_p10_ask_on_a_chat_whose_view_is_garbage_names_the_file_not_a_stopped_planner(env, tmp_path):
    chat = a_chat(env, tmp_path / "chat")
    (chat / "view.json").write_bytes(b"\x00garbage")
    done = everchat(env, "--demo", "ask", "hi", "--data-dir", str(chat))
    assert done.returncode == 1
    assert one_line(done).startswith(f"everchat: cannot open the chat in {chat}: {chat}/view.json: byte 0: ")
    assert "ActorStopped" not in done.stderr


def test_p10_p2_a_failed_open_never_blames_a_lock_this_process_holds(env, tmp_path):
    from everchat.actors.folder._lock import WriterLock

    chat = a_chat(env, tmp_path / "chat")
    lock = WriterLock(chat)
    lock.acquire()
    try:
        _explain_lock(chat)  # this process holds it: nothing to tell about another owner
    finally:
        lock.release()


def test_p10_p2_ask_with_a_garbage_draft_is_never_locked_by_its_own_pid(env, tmp_path):
    chat = a_chat(env, tmp_path / "chat")
    (chat / "draft.json").write_bytes(b"\xff\xfe not json")
    done = everchat(env, "--demo", "ask", "hello", "--data-dir", str(chat))
    assert "is locked by its writer" not in done.stderr
    assert "Traceback" not in done.stderr
    if done.returncode != 0:  # until the log writer sets a bad draft aside (P2), it names the draft
        assert one_line(done).startswith(f"everchat: cannot open the chat in {chat}: {chat}/draft.json: ")


def test_p10_a_warning_reads_as_words_with_the_chat_folder_not_a_repr(env, tmp_path):
    """I6: an index shorter than the log is rebuilt, and the person is told in one line."""
    chat = a_chat(env, tmp_path / "chat", "one", "two", "three")
    index = chat / "index" / "messages.idx"
    index.write_bytes(index.read_bytes()[:8])
    done = everchat(env, "view", "--data-dir", str(chat))
    assert done.returncode == 0
    assert one_line(done) == f"everchat: warning: {chat}: the index disagrees with the log; rebuilding it"


def test_p9_an_unexpected_error_is_one_line_and_its_traceback_goes_to_a_log_file(env, tmp_path):
    """The safety net: a bug (here injected) is `internal error`, exit 1; the details are in a file."""
    chat = a_chat(env, tmp_path / "chat")
    bug = ("import sys, everchat.frontends.cli.read as r\n"
           "def run(command, args): raise RuntimeError('a bug')\n"
           "r.run = run\n"
           "from everchat.frontends.cli.main import main\n"
           f"sys.exit(main(['view', '--data-dir', {str(chat)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", bug], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    details = tmp_path / "home" / "logs" / "errors.log"
    assert one_line(done) == f"everchat: internal error: RuntimeError: a bug (details in {details})"
    logged = details.read_text()
    assert "Traceback" in logged and "RuntimeError: a bug" in logged and "everchat view" in logged


# ---- P19: usage that cannot be saved -------------------------------------------------------------------


def test_p19_usage_that_cannot_be_replaced_is_one_error_naming_the_file(tmp_path):
    from everchat.actors.folder.usage import UsageNotSaved

    (tmp_path / "usage.json" / "x").mkdir(parents=True)
    with pytest.raises(UsageNotSaved) as failed:
        save_usage(tmp_path, UsageTotals())
    assert str(failed.value) == f"{tmp_path}/usage.json could not be saved: it is a folder, not a file"
    assert isinstance(failed.value, OSError)
    assert [p.name for p in tmp_path.iterdir()] == ["usage.json"]  # no temporary file left


def test_p19_ask_whose_usage_cannot_be_saved_prints_no_traceback(env, tmp_path):
    """R8 of the review: usage.json immutable (root and chattr only)."""
    chat = a_chat(env, tmp_path / "chat")
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("needs chattr as root")
    (chat / "usage.json").write_text(json.dumps(UsageTotals().to_dict()) + "\n")
    if subprocess.run(["chattr", "+i", str(chat / "usage.json")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i does not work here")
    try:
        done = everchat(env, "--demo", "ask", "hello", "--data-dir", str(chat))
    finally:
        subprocess.run(["chattr", "-i", str(chat / "usage.json")], check=True)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "usage.json could not be saved" in done.stderr
    with ChatStore.open(chat, writer=False) as store:
        assert store.message_count == 3  # the note, the question, the reply


def test_p19_a_usage_file_that_is_a_folder_costs_the_figures_only_said_once(env, tmp_path):
    """usage.json cannot be read nor replaced (a folder took its name): the chat opens, the
    turn is logged, and the lost figures are said once, in words, with no traceback."""
    chat = a_chat(env, tmp_path / "chat")
    (chat / "usage.json").unlink(missing_ok=True)
    (chat / "usage.json").mkdir()
    done = everchat(env, "--demo", "ask", "hello", "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("usage figures not saved") == 1, done.stderr
    assert f"{chat}/usage.json could not be saved: it is a folder, not a file" in done.stderr
    with ChatStore.open(chat, writer=False) as store:
        assert store.message_count == 3  # the note, the question, the reply


def test_p9_check_of_a_merge_record_that_does_not_fold_is_one_line(env, tmp_path):
    """T7: a merge record's pair changed (valid JSON, same size): `check` names tree/, no traceback."""
    from everchat.actors.session.local import Chat
    from everchat.actors.tree import Budget

    chat = tmp_path / "chat"
    with Chat.open(chat, create=True, budget=Budget(ceiling=300, floor=150, cceiling=300, cfloor=150)) as writer:
        for n in range(12):
            writer.add("note", f"note number {n:02} " + "x" * 20)
    (day,) = (chat / "tree").glob("*.jsonl")
    from everchat.actors.folder._records import seal

    lines = day.read_bytes().splitlines(keepends=True)
    [at] = [n for n, line in enumerate(lines) if line.startswith(b'{"merge":[[0,0],[0,2]')]
    offset = sum(len(line) for line in lines[:at])
    # A record with a valid checksum (so written by a writer, not damaged on disk) that
    # does not fold: R24's own error, at the record's place.
    lines[at] = seal(lines[at][:-19].replace(b'[[0,0],[0,2]', b'[[0,0],[0,4]'))
    day.write_bytes(b"".join(lines))
    done = everchat(env, "check", "--data-dir", str(chat))
    assert done.returncode == 1
    assert one_line(done) == (f"everchat: {day}: byte {offset}: this merge record does not fold into the view: "
                              "merge record t=7 merges 0+4, whose halves are not both lines (R24, R25)")


@pytest.mark.parametrize("placement", [[], ["--processes"]])
def test_a_chat_folder_too_deep_for_its_sockets_is_one_line_and_nothing_made(env, tmp_path, placement):
    """A unix socket's path has at most 107 bytes (103 on macOS). A chat folder deep enough
    that run/turn_runner.sock.events passes that fails at once, naming the path, before it
    is touched; with --processes it used to fail as 'turn_runner did not start within 60 s'."""
    deep = tmp_path / ("d" * 60) / ("e" * 40) / "chat"
    deep.parent.mkdir(parents=True)
    done = everchat(env, "--demo", *placement, "ask", "hi", "--data-dir", str(deep))
    line = one_line(done)
    assert done.returncode == 1 and "sock.events is" in line and "over the" in line and str(deep) in line, line
    assert not deep.exists()
