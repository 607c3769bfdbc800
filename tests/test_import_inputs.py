"""P17: `import` takes a regular file only. A FIFO was waited on for good and /dev/zero read
for ever; now anything that is not a regular file is refused in one line (status 2)
before anything is made or logged, both ways (summarized and --log-only)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from cli_world import env, everchat  # noqa: F401  (env is a fixture)
from everchat.frontends.cli import import_file as commands_import
from everchat.frontends.cli.commands import UsageError

WAYS = pytest.mark.parametrize("way", [["--demo"], ["--log-only"]], ids=["summarized", "log-only"])


def one_line(done) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@WAYS
def test_p17_importing_a_fifo_is_refused_at_once_and_makes_nothing(env, tmp_path, way):
    fifo = tmp_path / "notes.txt"
    os.mkfifo(fifo)
    done = everchat(env, "--data-dir", str(tmp_path / "chat"), "import", str(fifo), *way, timeout=30)
    assert done.returncode == 2
    assert one_line(done) == f"everchat: {fifo} is a named pipe (FIFO), not a text file"
    assert not (tmp_path / "chat").exists()


@WAYS
def test_p17_importing_dev_zero_is_refused_at_once_and_makes_nothing(env, tmp_path, way):
    done = everchat(env, "--data-dir", str(tmp_path / "chat"), "import", "/dev/zero", *way, timeout=30)
    assert done.returncode == 2
    assert one_line(done) == "everchat: /dev/zero is a character device, not a text file"
    assert not (tmp_path / "chat").exists()


def test_p17_a_fifo_swapped_in_after_the_look_is_refused_not_waited_on(tmp_path, monkeypatch):
    """The second guard: the file is opened without blocking and looked at again, so a
    FIFO that replaced a regular file between the two is refused, not waited on."""
    fifo = tmp_path / "notes.txt"
    os.mkfifo(fifo)
    regular = os.stat(Path(__file__))
    real_stat = os.stat
    monkeypatch.setattr(commands_import.os, "stat",
                        lambda path, *a, **k: regular if Path(path) == fifo else real_stat(path, *a, **k))
    outcome: dict = {}

    def identify() -> None:
        try:
            commands_import.identify(fifo)
        except UsageError as error:
            outcome["refused"] = str(error)

    thread = threading.Thread(target=identify, daemon=True)
    thread.start()
    thread.join(timeout=10)
    if thread.is_alive():  # it waits in open(): a writer lets it go before the test fails
        with open(fifo, "wb"):
            pass
        thread.join(timeout=10)
        pytest.fail("identify waited on the FIFO")
    assert outcome == {"refused": f"{fifo} is a named pipe (FIFO), not a text file"}


def test_a_folder_and_a_missing_file_keep_their_words(env, tmp_path):
    done = everchat(env, "--data-dir", str(tmp_path / "chat"), "import", str(tmp_path), timeout=30)
    assert done.returncode == 2
    assert one_line(done) == f"everchat: {tmp_path} is a folder, not a text file"
    done = everchat(env, "--data-dir", str(tmp_path / "chat"), "import", str(tmp_path / "gone.txt"), timeout=30)
    assert done.returncode == 2
    assert one_line(done) == f"everchat: {tmp_path / 'gone.txt'}: no such file"
