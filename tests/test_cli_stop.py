"""P10 (issue 20) at the command line: `ask` on a chat with summaries pending ends as a
normal command ends, with nothing on stderr but what it means to say; `ask --no-wait`
with a compaction model that accepts the connection and never answers exits about as
fast as with one that answers, and the next run builds the summaries it left.

Real processes: `everchat` commands on chats whose notes were logged without their
summaries (as `import --log-only` leaves them), run side by side so the machine is busy.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_world import env, everchat  # noqa: F401 (env is a fixture)
from hung_world import HungServer

from everchat.tools.fakemodel import FakeModelServer

NOTES = 21
UNSUMMARIZED = re.compile(r"everchat: warning: \d+ line\(s\) of the view were not summarized in time; "
                          r"the turn shows their messages cut to 512 bytes, newest first as far as the "
                          r"view's budget allows, and the rest as lines to zoom\.\n")


@pytest.fixture
def pending(env, tmp_path):
    """A chat of NOTES notes logged without their summaries, by `import --log-only` (as in
    the review's reproduction): every one of them pending."""
    text = tmp_path / "notes.txt"
    rng = random.Random(1)  # short paragraphs of a few words: the import packs them into notes of ~15 KB
    words = ["alpha", "beta", "gamma", "delta", "eps"]
    text.write_text("".join(" ".join(rng.choice(words) for _ in range(20)) + "\n\n" for _ in range(3000)),
                    encoding="utf-8")
    chat = tmp_path / "pending"
    done = everchat(env, "--data-dir", str(chat), "import", "--log-only", str(text))
    assert done.returncode == 0, done.stderr
    assert _pending(env, chat) == NOTES
    return chat


def _copies(pending, tmp_path, count: int) -> list:
    copies = [tmp_path / f"chat{n}" for n in range(count)]
    for copy in copies:
        shutil.copytree(pending, copy)
    return copies


def _pending(env, chat) -> int:
    import json

    done = everchat(env, "--data-dir", str(chat), "status")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["pending"]


@pytest.mark.parametrize("placement", [[], ["--processes"]], ids=["single", "processes"])
def test_p10_asks_with_summaries_pending_end_with_nothing_on_stderr(env, pending, tmp_path, placement):
    chats = _copies(pending, tmp_path, 6)

    def ask(chat):
        return everchat(env, "--demo", *placement, "--data-dir", str(chat), "ask", "--no-wait", "quick question")

    with ThreadPoolExecutor(3) as pool:  # three at once: a loaded machine, as CI's
        runs = list(pool.map(ask, chats))
    assert [(run.returncode, run.stderr) for run in runs] == [(0, "")] * len(runs)
    assert all("Noted as message 21." in run.stdout for run in runs)
    # Nor in the logs: the actor processes' own (P9), and the home's error log.
    assert _errors_logged(env, chats) == []
    # and the waiting ask too, on the chats the first round left half summarized
    again = [everchat(env, "--demo", *placement, "--data-dir", str(chat), "ask", "and again") for chat in chats[:2]]
    assert [(run.returncode, run.stderr) for run in again] == [(0, "")] * 2
    assert _errors_logged(env, chats) == []


def _errors_logged(env, chats) -> list[str]:
    logs = [path for chat in chats for path in (chat / "run").glob("*.log")]
    logs += list((Path(env["EVERCHAT_HOME"]) / "logs").glob("*.log"))
    return [f"{path.name}: {line}" for path in logs for line in path.read_text(errors="replace").splitlines()
            if re.search(r"\b(ERROR|CRITICAL)\b|error:", line)]


def _timed_ask(env, chat, url: str, timeout: float) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "--reply-provider", "demo",
                           "--compaction-provider", "anthropic", "--compaction-model", "fake-compactor",
                           "--compaction-base-url", url, "--settle-timeout", "0.5", "--data-dir", str(chat),
                           "ask", "--no-wait", "quick question"],
                          env=env, capture_output=True, text=True, timeout=timeout)
    return time.monotonic() - start, done


def test_p10_ask_no_wait_does_not_wait_for_a_compaction_model_that_never_answers(env, pending, tmp_path):
    env = dict(env, ANTHROPIC_API_KEY="test-key")
    answering, hanging, again = _copies(pending, tmp_path, 3)
    with FakeModelServer() as server:
        first, responsive = _timed_ask(env, answering, server.base_url, 300)
        assert responsive.returncode == 0, responsive.stderr
        with HungServer() as hung:
            # Bounded far above the limit below, so a regression fails rather than hangs.
            took, done = _timed_ask(env, hanging, hung.url, 20 * first + 60)
            assert hung.accepted >= 1  # the call was made, and never answered
        second, _ = _timed_ask(env, again, server.base_url, 300)
        assert done.returncode == 0, done.stderr
        assert UNSUMMARIZED.fullmatch(done.stderr), done.stderr  # the turn's own warning (R36), nothing else
        assert "Noted as message 21." in done.stdout
        # The close gave up the hung calls: the run took about what the answered one took.
        assert took < 3 * max(first, second), (took, first, second)
        assert _pending(env, hanging) == NOTES  # the in-flight ones were not saved ...
        built = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "--reply-provider", "demo",
                                "--compaction-provider", "anthropic", "--compaction-model", "fake-compactor",
                                "--compaction-base-url", server.base_url, "--data-dir", str(hanging), "compact"],
                               env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert _pending(env, hanging) == 0  # ... and the next run built them
