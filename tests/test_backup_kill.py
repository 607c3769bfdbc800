"""P11: a `backup` or `restore` killed with SIGKILL at its write boundaries leaves its
temporary file or folder (nothing can remove it then), and the next run of the same
command removes it and finishes; a temporary of a process that still runs is left alone.
The killed processes are real (tests/backup_kill_child.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cli_world import clean_home
from everchat.actors.upkeep.backup import restore, snapshot
from everchat.actors.session.local import Chat
from polling import wait_until

CHILD = Path(__file__).with_name("backup_kill_child.py")


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    clean_home(tmp_path, monkeypatch)


def small_chat(folder: Path) -> None:
    with Chat.open(folder, create=True) as chat:
        for n in range(30):
            chat.add("note", f"note {n} " + "words " * (n * 10))


def kill_at(tmp_path: Path, *args: str) -> None:
    """Run the child until it stands at its boundary, then SIGKILL it."""
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, str(CHILD), *args, str(ready)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: ready.exists() or child.poll() is not None, 120, "the child at its boundary")
        assert child.poll() is None, child.stderr.read()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL


def hidden(folder: Path, start: str) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(start))


@pytest.mark.parametrize("boundary", ["member", "synced"])
def test_p11_the_next_backup_removes_the_half_zip_a_killed_one_left(tmp_path, boundary):
    chat, zip_path = tmp_path / "chat", tmp_path / "out" / "b.zip"
    small_chat(chat)
    zip_path.parent.mkdir()
    kill_at(tmp_path, "backup", str(chat), str(zip_path), boundary)
    assert not zip_path.exists()
    assert len(hidden(zip_path.parent, ".b.zip.tmp.")) == 1  # what the kill left
    manifest = snapshot(chat, zip_path)
    assert manifest["messages"] == 30
    assert os.listdir(zip_path.parent) == ["b.zip"]


@pytest.mark.parametrize("boundary", ["member", "checked"])
def test_p11_the_next_restore_removes_the_copy_a_killed_one_left(tmp_path, boundary):
    chat, zip_path, target = tmp_path / "chat", tmp_path / "b.zip", tmp_path / "to" / "chat"
    small_chat(chat)
    snapshot(chat, zip_path)
    target.parent.mkdir()
    kill_at(tmp_path, "restore", str(zip_path), str(target), boundary)
    assert not target.exists()
    assert len(hidden(target.parent, ".chat.restore-")) == 1  # what the kill left
    assert restore(zip_path, target)["messages"] == 30
    assert os.listdir(target.parent) == ["chat"]


def test_p11_a_temporary_of_a_process_that_still_runs_is_left_alone(tmp_path):
    """Another backup into the same name, still writing (its pid lives: this test's
    parent's), and a restore's copy of the same: neither is touched."""
    chat, zip_path, target = tmp_path / "chat", tmp_path / "b.zip", tmp_path / "chat2"
    small_chat(chat)
    live_zip = tmp_path / f".b.zip.tmp.{os.getppid()}"
    live_zip.write_bytes(b"PK half")
    live_copy = tmp_path / f".chat2.restore-{os.getppid()}-abcd"
    live_copy.mkdir()
    snapshot(chat, tmp_path / "other.zip")
    snapshot(chat, zip_path)
    restore(zip_path, target)
    assert live_zip.read_bytes() == b"PK half" and live_copy.is_dir()
