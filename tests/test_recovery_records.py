"""Recovery writes the merge records a live run would have written (P1, R24, R25).

A crash after messages are logged but before they are planned leaves them to the next
open, which plans them as live ones. Each replayed step's merge record must carry that
step's own t and open flag; chats an older Everchat damaged (every replayed record with
the last step's values) must still open, check and refold to the view they saved.
"""

from __future__ import annotations

import json
import random
import shutil

from store_world import FakeClock

from everchat.actors.session.local import Chat
from everchat.actors.tree import Budget
from everchat.actors.folder import ChatStore
from everchat.actors.folder._records import seal

# Small enough that a dozen messages pass the ceiling and the view stays shrinking a while.
SMALL = Budget(ceiling=1200, floor=600, cceiling=500, cfloor=250, jobs=3)
STREAMS = ("main", "tree")


def _texts(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [(rng.choice(["user", "everchat", "note"]), f"m{n} " + "w" * rng.choice([30, 120, 300, 480]))
            for n in range(count)]


def _tree_records(chat) -> list[dict]:
    out = []
    for day in sorted((chat / "tree").glob("*.jsonl")):
        out += [json.loads(line) for line in day.read_bytes().splitlines()]
    return [record for record in out if "merge" in record]


def _log_bytes(chat) -> dict[str, bytes]:
    files = {}
    for stream in STREAMS:
        for day in sorted((chat / stream).glob("*.jsonl")):
            files[f"{stream}/{day.name}"] = day.read_bytes()
    files["view.json"] = (chat / "view.json").read_bytes()
    files["compaction-view.json"] = (chat / "compaction-view.json").read_bytes()
    return files


def _live(chat, texts, clock) -> None:
    with Chat.open(chat, create=True, budget=SMALL, clock=clock) as writer:
        for kind, text in texts:
            writer.add(kind, text)


def test_p1_replayed_steps_write_the_records_a_live_run_writes(tmp_path):
    """40 messages planned live; then 30 logged while no planner ran (a kill -9 between the
    fsync and the planning). The next open plans them: the chat folder is byte for byte
    the one a run without the crash leaves, so every record has its own step's t."""
    texts = _texts(70, seed=5)
    clock = FakeClock()
    live = tmp_path / "live"
    _live(live, texts, clock)

    crashed = tmp_path / "crashed"
    _live(crashed, texts[:40], clock)
    with ChatStore.open(crashed, clock=clock) as store:  # logged, never planned
        store.append_messages(texts[40:])
    Chat.open(crashed, budget=SMALL, clock=clock).close()

    records = _tree_records(crashed)
    assert [r["t"] for r in records] == sorted({r["t"] for r in records}), "one record per step, t rising"
    assert sum(1 for r in records if r["t"] > 40) >= 5, "the replay must cross several batches"
    assert _log_bytes(crashed) == _log_bytes(live)
    with Chat.open(crashed, writer=False, budget=SMALL) as reader:
        reader.check()


def _damage_like_p1(chat, after_t: int) -> None:
    """Rewrite the tree as the old recovery wrote it: every record after `after_t` with the
    last record's t and open (what `_persist` took from the planner after the replay)."""
    for day in sorted((chat / "tree").glob("*.jsonl")):
        lines = day.read_bytes().splitlines(keepends=True)
        records = [json.loads(line) for line in lines]
        late = [r for r in records if "merge" in r and r["t"] > after_t]
        if not late:
            continue
        last = late[-1]
        out = []
        for line, record in zip(lines, records):
            if "merge" in record and record["t"] > after_t:
                damaged = {"merge": record["merge"], "t": last["t"], "open": last["open"]}
                body = json.dumps(damaged, ensure_ascii=False, separators=(",", ":")).encode()
                line = seal(body[:-1])  # sealed as the store seals (P3): only the P1 damage differs
            out.append(line)
        day.write_bytes(b"".join(out))


def test_p1_a_chat_damaged_by_the_old_recovery_opens_checks_and_refolds_to_its_view(tmp_path):
    """The way back for chats damaged by P1, rewriting nothing appended: records sharing
    one t fold in log order (t never decreases, R25), so such a chat checks, and a lost
    view.json refolds to the very view it saved (R24)."""
    chat = tmp_path / "chat"
    _live(chat, _texts(70, seed=5), FakeClock())
    _damage_like_p1(chat, after_t=40)
    shutil.rmtree(chat / "index")  # its merge index knew the old t values
    ts = [r["t"] for r in _tree_records(chat)]
    assert len(ts) - len(set(ts)) >= 4, "the damage gives several records one t"
    saved = (chat / "view.json").read_bytes()

    with Chat.open(chat, writer=False, budget=SMALL) as reader:
        reader.check()
    (chat / "view.json").unlink()
    (chat / "compaction-view.json").unlink()
    with Chat.open(chat, budget=SMALL) as writer:
        writer.check()
    assert json.loads((chat / "view.json").read_bytes())["view"] == json.loads(saved)["view"]
