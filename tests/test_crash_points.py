"""Every crash point of a scripted conversation (issue 8: crash points, not only random kills).

`tests/crash_script.py` writes a conversation through the production persistence (the
store, `open_writer_store`, `Planning`, drafts, usage). Run once whole, it says how many
writes of each kind it made; then, for every kind and every k, a real process runs it with
the test-only crash point armed and ends right after its k-th write of that kind. After
each crash the chat is reopened and checked:

- every append the process acknowledged is in the log once, with the ids it was given;
- `check` passes: no gap, every checksum, the saved view equal to the view refolded from
  the merge records (R24);
- running the script again to its end leaves the folder a run without the crash leaves:
  the same messages, nodes, merge records, views and usage. Two differences are the
  design's: after a crash between the two view files the compaction view restarts as the
  view fitted down (R24); after a crash between a reply's draft and its message, the reply
  is the draft's text marked incomplete (R37), so the reference is a run with that reply
  cut the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from crash_script import conversation
from crash_script import run as run_script

from everchat.actors.session.local import Chat
from everchat.actors.folder import ChatStore
from everchat.actors.folder._crash import CRASH_STATUS, KINDS

SCRIPT = Path(__file__).with_name("crash_script.py")


def _script(chat: Path, *args: str) -> tuple[int, list[dict]]:
    done = subprocess.run([sys.executable, str(SCRIPT), str(chat), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode in (0, CRASH_STATUS), done.stderr
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


def _content(chat: Path, *, cview: bool = True) -> dict:
    """What must be the same: log bytes, the tree's nodes (a set: their order follows the
    order compactions finished in) and merge records (in order), views and usage."""
    out: dict = {}
    for day in sorted((chat / "main").glob("*.jsonl")):
        out[f"main/{day.name}"] = day.read_bytes()
    nodes, merges = [], []
    for day in sorted((chat / "tree").glob("*.jsonl")):
        for line in day.read_bytes().splitlines():
            (merges if line.startswith(b'{"merge"') else nodes).append(line)
    out["tree nodes"] = sorted(nodes)
    out["tree merges"] = merges
    names = ["chat.json", "view.json", "usage.json"] + (["compaction-view.json"] if cview else [])
    for name in names:
        out[name] = (chat / name).read_bytes()
    out["draft.json exists"] = (chat / "draft.json").exists()
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    chat = tmp_path_factory.mktemp("reference") / "chat"
    status, lines = _script(chat)
    assert status == 0
    return chat, lines[-1]["counts"]


def _points(counts: dict) -> list[tuple[str, int]]:
    return [(kind, k) for kind in KINDS for k in range(1, counts[kind] + 1)]


def _replies() -> list[tuple[str, tuple[str, str]]]:
    return [(step[1], step[3]) for step in conversation() if step[0] == "reply"]


def _cut_reference(tmp: Path, key: str, text: str, cache: dict) -> dict:
    if (key, text) not in cache:
        chat = tmp / f"cut-{len(cache)}"
        run_script(chat, (key, text))
        cache[(key, text)] = _content(chat)
    return cache[(key, text)]


def _check_after_crash(chat: Path, acks: list[dict]) -> None:
    with ChatStore.open(chat, writer=False) as store:
        keys: dict[str, list[int]] = {}
        for i in range(store.message_count):
            record = store.message(i)
            if record.key is not None:
                keys.setdefault(record.key, []).append(i)
    for item in acks:
        if "ack" in item:
            assert keys.get(item["ack"]) == item["ids"], f"acknowledged {item} is in the log once, as told"
    with Chat.open(chat, writer=False) as reader:
        reader.check()  # every record and checksum, no gap, the view refolded (R24)


def test_every_crash_point_of_a_scripted_conversation_recovers_to_the_same_chat(reference, tmp_path):
    ref_chat, counts = reference
    points = _points(counts)
    assert {kind for kind, _ in points} == set(KINDS), f"the script reaches every kind of write: {counts}"
    expected = _content(ref_chat)
    without_cview = _content(ref_chat, cview=False)
    replies, cuts = _replies(), {}
    failures = []
    for n, (kind, k) in enumerate(points):
        chat = tmp_path / f"p{n}"
        status, acks = _script(chat, "--crash", f"{kind}:{k}")
        assert status == CRASH_STATUS, f"{kind}:{k} did not crash"
        try:
            _check_after_crash(chat, acks)
            run_script(chat)
            if kind == "draft" and (k - 1) % 3 < 2:
                key, chunks = replies[(k - 1) // 3]
                partial = chunks[0] if (k - 1) % 3 == 0 else "".join(chunks)
                want = _cut_reference(tmp_path, key, partial, cuts)
                assert _content(chat) == want
            elif kind == "view":
                assert _content(chat, cview=False) == without_cview
            else:
                assert _content(chat) == expected
        except AssertionError as error:
            failures.append(f"{kind}:{k}: {str(error)[:300]}")
        except Exception as error:  # a recovery that fails is a failure of this point, named
            failures.append(f"{kind}:{k}: {type(error).__name__}: {str(error)[:300]}")
    assert not failures, f"{len(failures)} of {len(points)} crash points failed:\n" + "\n".join(failures)
