"""`everchat import FILE`: a UTF-8 file logged as consecutive notes, cut by R8, resumable;
by default summarized as it goes (the demo model here), with `--log-only` logged offline.

The kill test runs the real command in a child process and kills it with SIGKILL while
it is blocked mid-import: its stderr is a pipe shrunk to one page that the test does
not read, so the progress lines fill it and the child stops at a point the test knows
is past the first group commit and before the end (no timing involved).
"""

from __future__ import annotations

import array
import fcntl
import hashlib
import io
import os
import random
import signal
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from everchat.actors.compactor.compaction import FAILURE_CAP
from everchat.actors.folder import PART_BYTES, ChatStore, split_text
from everchat.frontends.cli.main import main
from everchat.frontends.cli.import_file import BATCH_BYTES, import_key, parts_of
from everchat.frontends.cli.progress import Progress
from cli_world import clean_home

# Each import runs both ways: summarized as it goes (the default, with the offline demo
# model) and logged only, its summaries left for later.
WAYS = pytest.mark.parametrize("way", [["--demo"], ["--log-only"]], ids=["summarized", "log-only"])


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    clean_home(tmp_path, monkeypatch)

WORDS = ["amber-42", "tree", "view", "sawtooth", "ünïcode", "日本語", "emoji🙂", "line", "log", "zoom"]


def text_file(path: Path, size: int, seed: int = 7, long_lines: float = 0.02) -> str:
    """Lines of random words (multi-byte characters included) of about `size` bytes, a
    share `long_lines` of them one word longer than a part (the demo model summarizes
    those slowly: summarized imports use fewer)."""
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14)))
        if rng.random() < long_lines:
            line = "x" * rng.randint(1, 20_000)  # a line longer than a part: R8 cuts it anyway
        lines.append(line)
        total += len(line.encode()) + 1
    text = "\n".join(lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return text


def long_lines(way: list[str]) -> float:
    return 0.02 if way == ["--log-only"] else 0.0


def notes(chat: Path) -> list:
    with ChatStore.open(chat, writer=False) as store:
        return [store.message(i) for i in range(store.message_count)]


def pending(chat: Path) -> int:
    from everchat.actors.session.local import Chat

    with Chat.open(chat, writer=False) as reader:
        return reader.status()["unbuilt_lines"]


def bar(err: str) -> list[str]:
    """The progress bar's lines (stderr)."""
    return [line for line in err.splitlines() if line.startswith("importing ")]


def test_r8_a_file_is_cut_exactly_as_one_long_text_would_be(tmp_path):
    text = text_file(tmp_path / "memories.txt", 3 * 1024 * 1024 + 777)
    parts = list(parts_of(tmp_path / "memories.txt"))
    assert [part for _, part in parts] == split_text(text)
    assert all(len(part.encode()) <= PART_BYTES for _, part in parts)
    offsets = [0]
    for _, part in parts[:-1]:
        offsets.append(offsets[-1] + len(part.encode()))
    assert [offset for offset, _ in parts] == offsets


@WAYS
def test_r3_an_import_logs_consecutive_notes_that_rebuild_the_file(tmp_path, capsys, way):
    chat = tmp_path / "chat"
    assert main(["note", "before the import", "--data-dir", str(chat)]) == 0
    text = text_file(tmp_path / "memories.txt", 200_000, long_lines=long_lines(way))
    assert main(["--data-dir", str(chat), "import", str(tmp_path / "memories.txt"), *way]) == 0
    out = capsys.readouterr()
    records = notes(chat)
    assert [r.kind for r in records] == ["note"] * len(records)
    imported = records[1:]
    assert "".join(r.text for r in imported) == text
    assert len(imported) == len(split_text(text))
    assert f"imported {tmp_path / 'memories.txt'}: {len(imported)} notes, messages 1-{len(imported)}" in out.out
    assert "100%" in bar(out.err)[-1]  # the progress bar is on stderr
    assert imported[0].meta == {"import": "memories.txt", "offset": 0}
    assert imported[0].key.startswith("import:") and imported[0].key.endswith(":0")
    if way == ["--log-only"]:
        assert pending(chat) == len(imported)
        assert (f"{len(imported)} summaries are pending (--log-only): their summaries are built when the chat "
                "next runs, or by `everchat compact`; a big import summarized later leaves the view over its "
                "budget until the next messages fit it") in out.out
    else:
        assert pending(chat) == 0
        assert "every summary is built: view " in out.out


@WAYS
def test_the_same_file_imported_again_logs_nothing(tmp_path, capsys, way):
    chat = tmp_path / "chat"
    text_file(tmp_path / "a.txt", 50_000, long_lines=long_lines(way))
    assert main(["import", str(tmp_path / "a.txt"), "--data-dir", str(chat), *way]) == 0
    before = notes(chat)
    capsys.readouterr()
    assert main(["import", str(tmp_path / "a.txt"), "--data-dir", str(chat), *way]) == 0
    assert "is already imported" in capsys.readouterr().out
    assert notes(chat) == before


@WAYS
def test_an_interrupted_import_goes_on_after_its_last_part_even_past_later_messages(tmp_path, capsys, way):
    """The run finds where the earlier one stopped, though the chat went on since."""
    chat = tmp_path / "chat"
    source = tmp_path / "a.txt"
    text = text_file(source, 120_000, long_lines=long_lines(way))
    digest_parts = list(parts_of(source))
    with ChatStore.open(chat, create=True) as store:  # an earlier run, then something else
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        for offset, part in digest_parts[:3]:
            store.append_message("note", part, key=import_key(digest, offset),
                                 meta={"import": "a.txt", "offset": offset})
        store.append_message("user", "something said in between")
    assert main(["import", str(source), "--data-dir", str(chat), *way]) == 0
    records = notes(chat)
    assert [r.kind for r in records].count("user") == 1
    assert "".join(r.text for r in records if r.kind == "note") == text
    assert "3 were logged before" in capsys.readouterr().out


def _pipe_bytes(fd: int) -> int:
    size = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, size)
    return size[0]


@WAYS
def test_a_killed_import_run_again_logs_each_part_once(tmp_path, way):
    chat = tmp_path / "chat"
    source = tmp_path / "big.txt"
    text = text_file(source, 3 * BATCH_BYTES, long_lines=long_lines(way))
    command = [sys.executable, "-m", "everchat.frontends.cli.main", "import", str(source), "--data-dir", str(chat), *way]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        fd = child.stderr.fileno()
        capacity = fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 4096)
        # The child writes a progress line per percent; once the pipe is full it blocks.
        # Within two lines of full, it can read at most a few more parts before it stops.
        while _pipe_bytes(fd) < capacity - 200:
            try:
                child.wait(timeout=0.02)
                break
            except subprocess.TimeoutExpired:
                pass
        assert child.poll() is None, "the import finished before the pipe filled"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        progress = child.stderr.read().decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    logged = notes(chat)
    assert 0 < len(logged) < len(split_text(text))  # past the first commit, short of the end
    assert " 0% " in bar(progress)[0] and "100%" not in progress

    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"{len(logged)} were logged before" in again.stdout
    records = notes(chat)
    assert "".join(r.text for r in records) == text
    assert len(records) == len(split_text(text))
    assert len({r.key for r in records}) == len(records)
    assert [r.meta["offset"] for r in records] == [offset for offset, _ in parts_of(source)]  # in order
    assert pending(chat) == (len(records) if way == ["--log-only"] else 0)


@pytest.mark.parametrize("content, why", [
    (b"fine\n\xff\xfe broken\n", "is not UTF-8 text (byte 5)"),
    (b"cut in the middle \xe6\x97", "ends inside a UTF-8 character"),
    (b"", "is empty"),
])
def test_a_file_that_is_not_utf8_text_is_refused_and_nothing_is_made(tmp_path, capsys, content, why):
    (tmp_path / "bad.txt").write_bytes(content)
    assert main(["import", str(tmp_path / "bad.txt"), "--data-dir", str(tmp_path / "chat")]) == 2
    assert why in capsys.readouterr().err
    assert not (tmp_path / "chat").exists()


def test_a_missing_file_is_a_usage_error(tmp_path, capsys):
    assert main(["import", str(tmp_path / "nope.txt"), "--data-dir", str(tmp_path / "chat")]) == 2
    assert "nope.txt: no such file" in capsys.readouterr().err
    assert not (tmp_path / "chat").exists()


@WAYS
def test_ctrl_c_stops_an_import_that_the_same_command_then_finishes(tmp_path, capsys, monkeypatch, way):
    from everchat.frontends.cli import import_file as commands_import

    chat, source = tmp_path / "chat", tmp_path / "a.txt"
    text = text_file(source, 2 * BATCH_BYTES, long_lines=long_lines(way))
    real = commands_import.parts_of

    def interrupted(path):
        for n, part in enumerate(real(path)):
            if n == 100:  # past the first group commit (64 parts of 16 KB, or 16 parts summarized)
                raise KeyboardInterrupt
            yield part

    monkeypatch.setattr(commands_import, "parts_of", interrupted)
    assert main(["import", str(source), "--data-dir", str(chat), *way]) == 130
    assert "run the same command again to go on where it stopped" in capsys.readouterr().err
    logged = len(notes(chat))
    assert 0 < logged <= 100
    monkeypatch.setattr(commands_import, "parts_of", real)
    assert main(["import", str(source), "--data-dir", str(chat), *way]) == 0
    assert f"{logged} were logged before" in capsys.readouterr().out
    assert "".join(r.text for r in notes(chat)) == text


@WAYS
def test_ctrl_c_is_never_taken_inside_a_commit_the_parts_in_hand_are_committed_first(tmp_path, capsys,
                                                                                    monkeypatch, way):
    """A real SIGINT lands after part 100 (past the first group commit of 64 parts, or
    the sixth batch of 16 summarized): the import commits the parts in hand up to part
    101 before it stops, and says how many notes it logged."""
    from everchat.frontends.cli import import_file as commands_import

    chat, source = tmp_path / "chat", tmp_path / "a.txt"
    text = text_file(source, 2 * BATCH_BYTES, long_lines=long_lines(way))
    real = commands_import.parts_of

    def ctrl_c_at_part_100(path):
        for n, part in enumerate(real(path)):
            if n == 100:
                os.kill(os.getpid(), signal.SIGINT)
            yield part

    monkeypatch.setattr(commands_import, "parts_of", ctrl_c_at_part_100)
    before = signal.getsignal(signal.SIGINT)   # default_int_handler, or SIG_IGN when pytest was started so
    assert main(["import", str(source), "--data-dir", str(chat), *way]) == 130
    assert "everchat: import interrupted after 101 notes; run the same command again" in capsys.readouterr().err
    assert len(notes(chat)) == 101
    assert signal.getsignal(signal.SIGINT) is before  # put back
    monkeypatch.setattr(commands_import, "parts_of", real)
    assert main(["import", str(source), "--data-dir", str(chat), *way]) == 0
    assert "101 were logged before" in capsys.readouterr().out
    assert "".join(r.text for r in notes(chat)) == text


class Terminal(io.StringIO):
    """A screen the progress bar takes for a terminal."""

    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_progress_bar_redraws_one_line():
    screen = Terminal()
    bar = Progress("importing a.txt", 2048, screen)
    bar.update(1024, "1 notes")
    bar.finish(2048, "2 notes")
    drawn = screen.getvalue()
    assert drawn.startswith("\rimporting a.txt [############............]  50% 1.0 KB of 2.0 KB 1 notes")
    assert drawn.endswith("\rimporting a.txt [########################] 100% 2.0 KB of 2.0 KB 2 notes\n")
    assert drawn.count("\n") == 1


def test_on_a_terminal_a_warning_takes_a_line_of_its_own_above_the_bar():
    screen = Terminal()
    bar = Progress("importing a.txt", 2048, screen)
    bar.update(1024, "1 notes")
    bar.say("everchat: warning: Summarizing 0+1 failed (1 of 3): boom")
    bar.update(1024, "1 notes")
    line = "importing a.txt [############............]  50% 1.0 KB of 2.0 KB 1 notes"
    assert screen.getvalue() == (f"\r{line}\r{' ' * len(line)}\r"
                                 "everchat: warning: Summarizing 0+1 failed (1 of 3): boom\n"
                                 f"\r{line}")


def figures(chat: Path) -> dict:
    """The view's figures (R16) and the compactions' usage, read back from the folder."""
    from everchat.actors.session.local import Chat
    from everchat.actors.folder.usage import load_usage

    with Chat.open(chat, writer=False) as reader:
        status = reader.status()
    compactions = load_usage(chat).role("compactions")
    return dict(status, calls=compactions.calls, input=compactions.input)


def merge_records(chat: Path) -> int:
    from everchat.actors.session.local import Chat

    with Chat.open(chat, writer=False) as reader:
        return reader.check()["merges"]


def test_r19_a_summarized_import_leaves_the_view_within_its_budget_and_a_log_only_one_does_not(tmp_path, capsys):
    """About 345 parts of 16 KB, each summarized by the demo model in about 510 bytes: some
    175 KB of lines, over the 128,000-byte ceiling. Summarized as it goes, each append
    fits the view (R19) with parents the pool built meanwhile, and compactions read a
    compaction view near its 16-32 KB (R21, R27). Logged only, every note counts as its
    placeholder: the view stays over its ceiling until `compact` builds them all and ends
    with the batch the next message would run (issue 8), built from far larger contexts."""
    source = tmp_path / "big.txt"
    text_file(source, 5_500_000, long_lines=0.0)
    fitted, later = tmp_path / "fitted", tmp_path / "later"
    assert main(["--demo", "import", str(source), "--data-dir", str(fitted)]) == 0
    assert main(["--demo", "import", str(source), "--data-dir", str(later), "--log-only"]) == 0
    logged = figures(later)
    assert main(["--demo", "compact", "--data-dir", str(later)]) == 0
    now, after = figures(fitted), figures(later)
    assert now["messages"] == after["messages"] == logged["messages"] > 300
    for status in (now, after):
        assert status["unbuilt_lines"] == status["ready_merges"] == status["running"] == 0
    # Logged only, every line is a short placeholder: built, they come to well over the
    # ceiling, and only the one batch `compact` ends with merges them (no message came).
    assert logged["view_lines"] == logged["messages"] and logged["calls"] == 0
    assert logged["view_bytes"] < logged["floor"] and 510 * logged["messages"] > 1.3 * logged["ceiling"]
    assert merge_records(later) == 1
    # The last part is appended once every line before it is built, so its fit counts
    # them at their size: only its own line, a placeholder then, can grow past the
    # ceiling after it (at most "id+1|", 512 bytes and a newline), and seldom does.
    assert now["view_bytes"] <= now["ceiling"] + len(f"{now['messages']}+1|") + 512 + 1
    assert after["view_bytes"] <= after["floor"]
    assert now["compaction_view_bytes"] <= 2 * 32_000
    assert now["input"] < after["input"] / 2
    out = capsys.readouterr().out
    assert f"every summary is built: view {now['view_bytes']:,} bytes (budget 128,000)" in out


def test_r30_an_import_goes_on_past_failed_summaries(tmp_path, capsys, monkeypatch):
    """The first 24 compaction calls fail (a 404, which the SDK does not retry): the
    first lines fail twice at the batches' appends (R30), so nothing runs while more
    than 16 lines wait, and the planner's backlog would never shrink. The import sees
    it, waits as a turn does (failed calls tried again every 10 s; the third builds the
    line from its input), says each failure, and finishes with every summary built."""
    from everchat.frontends.cli import import_file as commands_import
    from everchat.tools.bench.bench_pool import summary_rule
    from everchat.tools.fakemodel import FakeModelServer, ModelNotFound

    waits = []
    real = commands_import._wait

    def wait(*args):
        waits.append(real(*args))
        return waits[-1]

    monkeypatch.setattr(commands_import, "_wait", wait)
    chat, source = tmp_path / "chat", tmp_path / "a.txt"
    text = text_file(source, 2 * BATCH_BYTES, long_lines=0.0)
    with FakeModelServer(api_keys=("test-key",)) as server:
        server.rule(summary_rule()).inject(ModelNotFound(), times=24)
        for key, value in {"ANTHROPIC_API_KEY": "test-key", "EVERCHAT_REPLY_PROVIDER": "demo",
                           "EVERCHAT_COMPACTION_PROVIDER": "anthropic",
                           "EVERCHAT_COMPACTION_BASE_URL": server.base_url}.items():
            monkeypatch.setenv(key, value)
        assert main(["import", str(source), "--data-dir", str(chat)]) == 0
    out = capsys.readouterr()
    assert "every summary is built" in out.out
    # R30's cap, taken from the planner's side: the notice must not repeat its own number.
    assert f"everchat: warning: Summarizing 0+1 failed (1 of {FAILURE_CAP})" in out.err
    assert commands_import._STUCK in waits  # the import saw the pool stuck and settled instead
    assert f"everchat: warning: Summarizing 0+1 failed (2 of {FAILURE_CAP})" in out.err
    assert f"Summarizing 0+1 failed ({FAILURE_CAP + 1} of" not in out.err  # the cap-th failure built it
    assert "".join(r.text for r in notes(chat)) == text
    assert pending(chat) == 0
