"""P5: the chat folder and every file in it are the owner's alone, whatever the umask.

The review found the chat 0755 with day files 0644 under the default umask (the whole
conversation readable by every local user) and 0777 under umask 000.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest
from cli_world import env, everchat  # noqa: F401  (env is a fixture)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def _modes(root):
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


def _with_umask(env, mask, *args):
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=lambda: os.umask(mask))


@pytest.mark.parametrize("mask", [0o000, 0o002, 0o022])
def test_p5_everything_a_chat_is_made_of_is_owner_only_whatever_the_umask(env, tmp_path, mask):  # noqa: F811
    chat = tmp_path / "chat"
    (tmp_path / "dot.png").write_bytes(PNG)
    assert _with_umask(env, mask, "note", "private " * 3000, "--data-dir", str(chat)).returncode == 0
    done = _with_umask(env, mask, "--demo", "ask", "look", "--image", str(tmp_path / "dot.png"),
                       "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    modes = _modes(chat)
    assert {"main", "tree", "assets", "index", "view.json", "chat.json"} <= {p.split("/")[0] for p in modes}
    assert stat.S_IMODE(chat.stat().st_mode) == 0o700
    loose = {path: oct(mode) for path, mode in modes.items() if mode & 0o077}
    assert loose == {}, "every file and folder of the chat is its owner's only"


def test_p5_an_older_chat_open_to_others_is_closed_by_its_next_writer(env, tmp_path):  # noqa: F811
    chat = tmp_path / "chat"
    assert everchat(env, "note", "hello", "--data-dir", str(chat)).returncode == 0
    os.chmod(chat, 0o755)  # as an Everchat before this one left it under umask 022
    assert everchat(env, "note", "again", "--data-dir", str(chat)).returncode == 0
    assert stat.S_IMODE(chat.stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to act as another user")
def test_p5_another_user_cannot_read_the_conversation(env, tmp_path):  # noqa: F811
    tmp_path.chmod(0o755)  # the test's own folder lets anyone in: only the chat's mode may stop them
    chat = tmp_path / "chat"
    assert everchat(env, "note", "a private note", "--data-dir", str(chat)).returncode == 0
    [day] = list((chat / "main").glob("*.jsonl"))
    peek = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", str(day)],
                          capture_output=True, text=True)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
    assert "a private note" not in peek.stdout
