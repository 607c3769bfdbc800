"""P8 through the real command: `note -` of 8 MiB killed while its one write lands.

The review killed `everchat note -` of an 8 MiB text (525 parts) as soon as the log grew
and found 65-130 parts of a note nobody was told about, for good. A split message is all
or nothing: after the kill, the next writer's chat holds the whole note or none of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from cli_world import env, everchat  # noqa: F401  (env is a fixture)

from everchat.actors.folder import ChatStore

NOTE = ("x" * 15_000 + "\n") * 550  # 8.25 MB, under the 8 MiB limit: 550 parts (R8)


def _log_size(chat) -> int:
    return sum(day.stat().st_size for day in (chat / "main").glob("*.jsonl"))


@pytest.mark.parametrize("attempt", range(4))
def test_p8_a_killed_note_leaves_all_of_it_or_nothing(env, tmp_path, attempt):  # noqa: F811
    chat = tmp_path / "chat"
    assert everchat(env, "note", "first", "--data-dir", str(chat)).returncode == 0
    start = _log_size(chat)
    writer = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", "note", "-", "--data-dir", str(chat)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    writer.stdin.write(NOTE.encode())
    writer.stdin.close()
    deadline = time.monotonic() + 60
    # Kill as soon as the note's write starts to land (its bytes reach the file).
    while _log_size(chat) == start and writer.poll() is None and time.monotonic() < deadline:
        pass
    assert writer.poll() is None, "the note ended before its write was seen: " + writer.stderr.read().decode()
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    writer.stdout.close()
    writer.stderr.close()
    after = everchat(env, "note", "after", "--data-dir", str(chat))
    assert after.returncode == 0, after.stderr
    with ChatStore.open(chat, writer=False) as store:
        count = store.message_count
        texts = [store.message(i).text for i in range(count)]
        store.check()
    parts = count - 2
    assert parts in (0, 550), f"the chat holds {parts} parts of the killed note"
    assert texts[0] == "first" and texts[-1] == "after"
    if parts:
        assert "".join(texts[1:-1]) == NOTE
