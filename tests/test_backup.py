"""`everchat backup` and `everchat restore` (actors/upkeep/backup/): a consistent snapshot of a
chat, taken without its lock (R4, R5), restored into a new folder that passes `check` and
holds the chat as it was at the snapshot's id (R22, R24, R25)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from datetime import date
from pathlib import Path

import pytest

from everchat.actors.upkeep.backup import MANIFEST_NAME, BackupError, restore, snapshot
from everchat.actors.session.local import Chat
from everchat.actors.tree import Budget, node_of, refold
from everchat.actors.folder import ChatStore, Transcripts
from everchat.frontends.cli.main import main
from polling import wait_until
from cli_world import clean_home

#: A small sawtooth, so that a chat of a hundred short notes merges its view (R19, R25).
BUDGET = Budget(ceiling=3000, floor=1500, cceiling=1200, cfloor=600)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
WORDS = ["amber-42", "tree", "view", "sawtooth", "ünïcode", "日本語", "emoji🙂", "line", "log", "zoom"]


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    clean_home(tmp_path, monkeypatch)


def note_text(n: int) -> str:
    """Every fifth note is over 512 bytes (an unbuilt leaf, R11), the others free leaves."""
    return f"note {n} " + ("about amber-42 and path/to/file.py " * 20 if n % 5 == 4 else "short")


def add_notes(chat: Chat, first: int, count: int, image: str | None = None) -> None:
    for n in range(first, first + count):
        chat.add("note", note_text(n), images=[image] if image and n == first else ())


def make_chat(path: Path, notes: int = 120) -> None:
    """An idle chat: notes (one with an image), free nodes and merge records (R11, R25),
    an agent's transcript whose last line is being written, config files and keys, and
    the files a running chat leaves (locks, run/, index/, damaged/)."""
    with Chat.open(path, create=True, budget=BUDGET) as chat:
        digest = chat.store.put_asset(PNG)
        add_notes(chat, 0, notes, image=digest)
    transcripts = Transcripts(path, writer=True)
    transcripts.append("Ann", "user", "find the amber", "task-1")
    transcripts.append("Ann", "everchat", "looking", "reply-1")
    with open(path / "agents" / "Ann" / "transcript.jsonl", "ab") as f:
        f.write(b'{"i":2,"kind":"ever')  # a record being written when the backup reads
    from everchat.transport import KeyStore

    KeyStore(path / "config").ensure("supervisor")
    (path / "config" / "devices.json").write_text('{"v": 1, "devices": []}\n')
    (path / "run").mkdir()
    (path / "run" / "supervisor.json").write_text("{}")
    (path / "damaged").mkdir()
    (path / "damaged" / "old-view.json").write_text("{}")


def reached(chat: Chat) -> dict[int, str]:
    """R35: zoom from every view line down to every message it covers; message id -> what
    zoom(id, 1) showed."""
    todo = []
    for line in chat.view_lines():
        first, n = map(int, re.match(r"(\d+)\+(\d+)\|", line).groups())
        todo.append((first, n))
    out: dict[int, str] = {}
    while todo:
        first, n = todo.pop()
        if n == 1:
            out[first] = chat.zoom(first, 1)
            continue
        halves = [tuple(map(int, m)) for m in re.findall(r"^(\d+)\+(\d+)\|", chat.zoom(first, n), re.M)]
        assert halves == [(first, n // 2), (first + n // 2, n // 2)]
        todo += halves
    return out


def assert_zoom_reaches_every_message(restored: Path, original: Path, count: int) -> None:
    with Chat.open(restored, writer=False) as chat, ChatStore.open(original, writer=False) as store:
        assert chat.store.message_count == count
        seen = reached(chat)
        assert sorted(seen) == list(range(count))
        for i in range(count):
            assert chat.store.message(i) == store.message(i)
            assert store.message(i).text[:300] in seen[i]


def tree_nodes(chat: Path) -> list[tuple[int, int, str]]:
    nodes = []
    for day in sorted((chat / "tree").glob("*.jsonl")):
        for line in day.read_bytes().splitlines():
            rec = json.loads(line)
            if "l" in rec:
                nodes.append((rec["l"], rec["i"], rec["text"]))
    return nodes


def members(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as zf:
        return zf.namelist()


def everchat(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *args], env=os.environ.copy(),
                          capture_output=True, text=True, timeout=timeout)


def test_r22_r24_an_idle_chat_backed_up_and_restored_is_the_same_chat(tmp_path):
    """Every record, the same view bytes (R22), every node and message readable, zoom
    reaching every message (R35), and `everchat check` passing on the restored folder."""
    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    make_chat(chat)
    manifest = snapshot(chat, zip_path)
    with Chat.open(chat, writer=False) as original:
        counts = original.check()
    assert (manifest["messages"], manifest["nodes"], manifest["merges"]) == \
        (counts["messages"], counts["nodes"], counts["merges"]) == (120, counts["nodes"], counts["merges"])
    assert counts["merges"] > 0 and counts["nodes"] > 120
    report = restore(zip_path, new)
    assert (report["messages"], report["nodes"], report["merges"]) == (120, counts["nodes"], counts["merges"])
    for name in ("view.json", "compaction-view.json", "chat.json"):
        assert (new / name).read_bytes() == (chat / name).read_bytes(), name
    for folder in ("main", "tree"):
        for day in (chat / folder).glob("*.jsonl"):
            assert (new / folder / day.name).read_bytes() == day.read_bytes()
    with ChatStore.open(new, writer=False) as store:
        for level, i, text in tree_nodes(chat):
            assert store.node(level, i) == text
        assert store.asset(store.message(0).images[0]) == PNG
    assert_zoom_reaches_every_message(new, chat, 120)
    # The agent's transcript as complete lines; the devices book; never locks, run/, index/, damaged/.
    transcript = (chat / "agents" / "Ann" / "transcript.jsonl").read_bytes()
    assert (new / "agents" / "Ann" / "transcript.jsonl").read_bytes() == transcript[:transcript.rindex(b"\n") + 1]
    assert (new / "config" / "devices.json").read_bytes() == (chat / "config" / "devices.json").read_bytes()
    names = members(zip_path)
    assert not [n for n in names if n.split("/")[0] in ("run", "index", "damaged", "writer.lock",
                                                         "supervisor.lock", "draft.json")]
    assert sorted(os.listdir(new)) == ["agents", "assets", "chat.json", "compaction-view.json", "config",
                                       "main", "tree", "view.json"]
    done = everchat("check", "--data-dir", str(new))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["messages"] == 120


def chat_with_records_after_its_view(chat: Path) -> tuple[bytes, bytes, int]:
    """A chat at rest whose view.json is the one saved at 120 messages while its log holds
    200 and more merge records (what a crash between an append and the view's save
    leaves, R24: a killed `import-chats` left 16 such messages in the issue's loop). The
    saved view and compaction view, and the merge records the saved view folds."""
    make_chat(chat, notes=120)
    saved = (chat / "view.json").read_bytes(), (chat / "compaction-view.json").read_bytes()
    with ChatStore.open(chat, writer=False) as store:
        records_then = store.merge_count
    with Chat.open(chat, budget=BUDGET) as writer:
        add_notes(writer, 120, 80)
    with ChatStore.open(chat, writer=False) as store:
        assert store.merge_count > records_then
    (chat / "view.json").write_bytes(saved[0])
    (chat / "compaction-view.json").write_bytes(saved[1])
    return saved[0], saved[1], records_then


def test_issue20_a_chat_at_rest_with_records_after_its_view_restores_to_the_same_view(tmp_path):
    """Issue 20: nothing runs, so the backup holds the whole log (messages and merge
    records after the saved view too) with the view as saved; the restored chat recovers
    them as the original does (R24), and `everchat view` prints the same on both. (The
    cut used to stop at the saved view: the restored chat lost 80 messages and showed an
    older view.)"""
    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    saved_view, saved_cview, _ = chat_with_records_after_its_view(chat)
    manifest = snapshot(chat, zip_path)
    restore(zip_path, new)
    shown = [everchat("view", "--data-dir", str(folder)) for folder in (chat, new)]
    assert shown[0].returncode == shown[1].returncode == 0, shown[1].stderr
    assert shown[1].stdout == shown[0].stdout and "199+1|" in shown[0].stdout
    for budget in (None, BUDGET):
        with Chat.open(chat, writer=False, budget=budget) as original, \
                Chat.open(new, writer=False, budget=budget) as restored:
            assert restored.render_view() == original.render_view()
    with ChatStore.open(chat, writer=False) as store:
        merges = store.merge_count
    assert (manifest["messages"], manifest["merges"], manifest["log_messages"]) == (200, merges, 200)
    assert manifest["view"]["messages"] == 120
    assert (new / "view.json").read_bytes() == saved_view
    assert (new / "compaction-view.json").read_bytes() == saved_cview
    assert set(tree_nodes(new)) == set(tree_nodes(chat))
    assert_zoom_reaches_every_message(new, chat, 200)


def snapshot_while_the_planner_saves(chat: Path, zip_path: Path, monkeypatch) -> dict:
    """`snapshot` of a running chat: its planner saves the view it has caught up to (the
    one recovery folds in memory) while the backup takes its cut."""
    with Chat.open(chat, budget=BUDGET, writer=False) as caught_up:
        newer = json.dumps({**caught_up.planner.saved_views()[0], "version": 2, "merges": caught_up.merges}).encode()
    real_cut = ChatStore.cut

    def planner_saves_meanwhile(store, messages, merges):
        (chat / "view.json").write_bytes(newer)
        return real_cut(store, messages, merges)

    with monkeypatch.context() as patched:
        patched.setattr(ChatStore, "cut", planner_saves_meanwhile)
        return snapshot(chat, zip_path)


def test_r24_a_view_saved_while_the_backup_reads_cuts_it_at_the_first_view_read(tmp_path, monkeypatch):
    """A running chat: the planner saves a view while the backup takes its cut, so the
    cut is the view read first, T messages and the K merge records it folds (R24), and
    what was logged after it is left out: the nodes of later messages and later merge
    records too, and the backup holds the view saved then, byte for byte."""
    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    saved_view, saved_cview, records_then = chat_with_records_after_its_view(chat)
    later_nodes = [node for node in tree_nodes(chat) if (node[1] + 1) << node[0] > 120]
    assert later_nodes
    manifest = snapshot_while_the_planner_saves(chat, zip_path, monkeypatch)
    assert (manifest["messages"], manifest["merges"], manifest["log_messages"]) == (120, records_then, 200)
    restore(zip_path, new)
    assert (new / "view.json").read_bytes() == saved_view
    assert (new / "compaction-view.json").read_bytes() == saved_cview
    assert all((n[1] + 1) << n[0] <= 120 for n in tree_nodes(new))
    assert {n for n in tree_nodes(chat) if (n[1] + 1) << n[0] <= 120} == set(tree_nodes(new))
    assert_zoom_reaches_every_message(new, chat, 120)


def test_r21_r24_a_backup_holds_the_compaction_view_of_its_own_cut(tmp_path, monkeypatch):
    """The writer replaces view.json, then compaction-view.json (R4). A backup that reads
    between the two renames (the new view, the old compaction view) reads both again
    until they belong to one t, so the ZIP holds the compaction view of its cut, not none
    (the restored chat would refit it from the view: another compaction view, R24)."""
    from everchat.actors.upkeep.backup import _snapshot

    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    make_chat(chat, notes=120)
    old_cview = (chat / "compaction-view.json").read_bytes()
    with Chat.open(chat, budget=BUDGET) as writer:
        add_notes(writer, 120, 1)
    new_cview = (chat / "compaction-view.json").read_bytes()
    assert json.loads(new_cview)["t"] == 121 != json.loads(old_cview)["t"]
    (chat / "compaction-view.json").write_bytes(old_cview)  # the writer is between its renames
    real_read = _snapshot.read_small
    reads = []

    def writer_renames_next(path):
        data = real_read(path)
        if path.name == "compaction-view.json" and not reads:
            reads.append(path)
            path.write_bytes(new_cview)  # ... and does its second rename right after this read
        return data

    monkeypatch.setattr(_snapshot, "read_small", writer_renames_next)
    snapshot(chat, zip_path)
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.read("compaction-view.json") == new_cview
    restore(zip_path, new)
    assert (new / "compaction-view.json").read_bytes() == new_cview


def test_r5_keys_stay_out_by_default_and_go_in_with_with_keys(tmp_path, capsys):
    chat = tmp_path / "chat"
    make_chat(chat, notes=10)
    keys = sorted(p.relative_to(chat).as_posix() for p in (chat / "config" / "keys").rglob("*") if p.is_file())
    assert keys
    plain, keyed = tmp_path / "plain.zip", tmp_path / "keyed.zip"
    assert main(["backup", str(plain), "--data-dir", str(chat)]) == 0
    assert main(["backup", str(keyed), "--data-dir", str(chat), "--with-keys"]) == 0
    out = capsys.readouterr().out
    assert f"everchat: backed up 10 messages" in out and "keys included" in out
    assert not [n for n in members(plain) if n.startswith("config/keys/")]
    assert "config/devices.json" in members(plain)
    assert sorted(n for n in members(keyed) if n.startswith("config/keys/")) == keys
    assert main(["restore", str(keyed), "--data-dir", str(tmp_path / "back")]) == 0
    for rel in keys:
        assert (tmp_path / "back" / rel).read_bytes() == (chat / rel).read_bytes()
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_a_backup_never_replaces_a_file_and_leaves_no_half_zip(tmp_path):
    chat, zip_path = tmp_path / "chat", tmp_path / "chat.zip"
    make_chat(chat, notes=5)
    zip_path.write_bytes(b"mine")
    with pytest.raises(BackupError, match="exists already"):
        snapshot(chat, zip_path)
    assert zip_path.read_bytes() == b"mine"
    with ChatStore.open(chat, writer=False) as store:
        digest = store.message(0).images[0]
    (chat / "assets" / digest).write_bytes(PNG + b"!")
    with pytest.raises(BackupError, match="no longer hash to its name"):
        snapshot(chat, tmp_path / "other.zip")
    assert sorted(os.listdir(tmp_path)) == ["chat", "chat.zip"]


def write_text_file(path: Path, size: int) -> None:
    """Lines of random words (multi-byte characters included): the demo model summarizes
    each 16 KB part in about 510 bytes, so some 300 parts pass the view's ceiling."""
    import random

    rng = random.Random(7)
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14)))
        lines.append(line)
        total += len(line.encode()) + 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def view_has_merged(chat: Path) -> bool:
    """The saved view folds a merge record (R24): the view has passed its ceiling once."""
    try:
        return json.loads((chat / "view.json").read_bytes()).get("merges", 0) > 0
    except (FileNotFoundError, ValueError):
        return False


def test_r4_r5_r24_a_backup_during_a_running_import_restores_the_chat_as_it_was_at_its_id(tmp_path):
    """A real `everchat import` (the demo model summarizing as it goes) and a real
    `everchat backup` while it runs, once its view has merged (R19, R25). The restored chat
    passes `check`; its view is the one the chat had at the snapshot's id, refolded from
    the original's merge records up to that id by the production fold (R24); zoom reaches
    every one of its messages; the import, never disturbed, finishes."""
    source, chat = tmp_path / "big.txt", tmp_path / "chat"
    write_text_file(source, 6_500_000)
    env = os.environ.copy()
    importing = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", "--demo", "import", str(source),
                                  "--data-dir", str(chat)], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: importing.poll() is not None or view_has_merged(chat), 600, "the import's first merge")
        zip_path = tmp_path / "chat.zip"
        done = everchat("backup", str(zip_path), "--data-dir", str(chat))
        assert importing.poll() is None, "the import ended before the backup did"
        assert done.returncode == 0, done.stderr
        _, err = importing.communicate(timeout=900)
        assert importing.returncode == 0, err
    finally:
        if importing.poll() is None:
            importing.kill()
            importing.wait()
    with zipfile.ZipFile(zip_path) as zf:
        manifest = json.loads(zf.read(MANIFEST_NAME))
    count, k = manifest["messages"], manifest["merges"]
    with ChatStore.open(chat, writer=False) as store:
        final = store.message_count
        records = [r for r in store.merge_records(first=0) if r[1] <= count]
    assert 0 < k == len(records) and count < final
    t, lines, still_open = refold(records)
    expected = [list(pair) for pair in lines] + [[0, leaf] for leaf in range(t, count)]
    new = tmp_path / "restored"
    done = everchat("restore", str(zip_path), "--data-dir", str(new))
    assert done.returncode == 0, done.stderr
    view = json.loads((new / "view.json").read_text())
    # view.json is the view as saved when the backup read it: the cut itself when the
    # planner saved during the read, else an older one whose later messages and records the
    # restored chat folds and plans at open, as the original would (R24, issue 20)
    assert view["t"] <= count and view["merges"] <= k
    with Chat.open(new, writer=False) as restored:
        planned = restored.planner
        lines = [list(node_of(key)) for key in planned.view.ordered()]
        assert (planned.messages, lines, planned.view.shrinking) == (count, expected, still_open)
    checked = everchat("check", "--data-dir", str(new))
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["messages"] == count
    assert_zoom_reaches_every_message(new, chat, count)



def covers(line: bytes) -> int:
    """How many messages a tree line's node reaches (0 for a merge record)."""
    rec = json.loads(line)
    return (rec["i"] + 1) << rec["l"] if "l" in rec else 0


def test_p3_sealed_from_moves_with_the_lines_the_cut_leaves_out_of_tree(tmp_path, monkeypatch):
    """A chat sealed from a later position (P3: a version 1 chat upgraded by its first
    writer): in the backup, `sealed_from` names the same record of `tree/`, now that the
    nodes of messages past the cut are left out, and `main/`'s stops at the copy's end.
    The record is a summary of note 4 built late (a compaction that ended after later
    notes were logged), so it belongs to the cut and follows nodes that do not."""
    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    make_chat(chat, notes=120)
    saved = (chat / "view.json").read_bytes(), (chat / "compaction-view.json").read_bytes()
    with Chat.open(chat, budget=BUDGET) as writer:
        add_notes(writer, 120, 80)
    with ChatStore.open(chat) as store:
        assert store.node(0, 4) is None
        store.append_nodes([(0, 4, "note 4, summarized late")])
    (chat / "view.json").write_bytes(saved[0])
    (chat / "compaction-view.json").write_bytes(saved[1])
    (day,) = sorted((chat / "tree").glob("*.jsonl"))
    lines = day.read_bytes().splitlines(keepends=True)
    assert any(covers(line) > 120 for line in lines[:-1]) and b"summarized late" in lines[-1]
    ordinal = date.fromisoformat(day.stem).toordinal()
    (main_day,) = sorted((chat / "main").glob("*.jsonl"))
    info = json.loads((chat / "chat.json").read_text())
    info["sealed_from"] = {"main": [ordinal, main_day.stat().st_size],
                           "tree": [ordinal, sum(len(line) for line in lines[:-1])]}
    (chat / "chat.json").write_text(json.dumps(info) + "\n")
    snapshot_while_the_planner_saves(chat, zip_path, monkeypatch)  # the cut at the saved view
    restore(zip_path, new)
    moved = json.loads((new / "chat.json").read_text())["sealed_from"]
    restored_tree = (new / "tree" / day.name).read_bytes()
    assert moved["main"] == [ordinal, (new / "main" / main_day.name).stat().st_size]
    assert moved["main"][1] < main_day.stat().st_size
    assert moved["tree"][0] == ordinal
    assert restored_tree[moved["tree"][1]:] == lines[-1]


def test_r2_torn_lines_a_writer_terminated_travel_with_main_and_stay_out_of_tree(tmp_path):
    """R2: a torn last line in `main/` and one in `tree/`, terminated by the next writer and
    listed in repairs.json. The backup copies `main/` byte for byte, so its span and its
    repairs.json entry come along; the tree's torn line is left out with its entry. The
    restored chat checks, with the one repaired span counted."""
    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    make_chat(chat, notes=20)
    (main_day,) = sorted((chat / "main").glob("*.jsonl"))
    (tree_day,) = sorted((chat / "tree").glob("*.jsonl"))
    with open(main_day, "ab") as f:
        f.write(b'{"i":20,"kind":"no')
    with open(tree_day, "ab") as f:
        f.write(b'{"l":0,"i":3,"te')
    with Chat.open(chat, budget=BUDGET) as writer:
        add_notes(writer, 20, 10)
    listed = json.loads((chat / "repairs.json").read_text())["repairs"]
    assert sorted(r["file"].split("/")[0] for r in listed) == ["main", "tree"]
    snapshot(chat, zip_path)
    report = restore(zip_path, new)
    assert (report["messages"], report["repaired"]) == (30, 1)
    assert json.loads((new / "repairs.json").read_text())["repairs"] == [r for r in listed if r["file"].startswith("main/")]
    assert (new / "main" / main_day.name).read_bytes() == main_day.read_bytes()
    assert b'"te\n' not in (new / "tree" / tree_day.name).read_bytes()
    assert_zoom_reaches_every_message(new, chat, 30)


def test_r24_a_chat_that_lost_view_json_is_backed_up_whole_and_refolds_the_same_view(tmp_path):
    """No view.json to cut at (lost, R24): the backup takes the whole log and every merge
    record and holds no view; the restored chat refolds the view the original refolds."""
    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    make_chat(chat, notes=120)
    with ChatStore.open(chat, writer=False) as store:
        merges = store.merge_count
    (chat / "view.json").unlink()
    (chat / "compaction-view.json").unlink()
    manifest = snapshot(chat, zip_path)
    assert (manifest["messages"], manifest["merges"]) == (120, merges)
    assert "view.json" not in members(zip_path)
    restore(zip_path, new)
    with Chat.open(chat, writer=False) as original, Chat.open(new, writer=False) as restored:
        assert restored.view_lines() == original.view_lines()


def test_r38_a_report_past_the_cut_is_unreported_in_the_backup_and_logged_once_after_restore(tmp_path, monkeypatch):
    """An agent's report logged to main/ after the saved view of a running chat (past the
    cut) is not in the backup: its transcript ends before that report's `reported` record,
    so the restored chat's agents find it in their outbox and log it, by its key, once."""
    from everchat.actors.agents.actor import report_key

    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    make_chat(chat, notes=40)
    saved = (chat / "view.json").read_bytes(), (chat / "compaction-view.json").read_bytes()
    key, text = report_key("Ada", 1), "[Ada] found it"
    transcripts = Transcripts(chat, writer=True)
    transcripts.append("Ada", "user", "find it", "task-1")
    transcripts.append("Ada", "work", text, "report-1", {"run": 1, "state": "done", "key": key})
    with Chat.open(chat, budget=BUDGET) as writer:  # the report reaches the chat ...
        (report,) = [writer.store.append_message("work", text, key=key, meta={"agent": "Ada", "run": 1})]
    transcripts.append("Ada", "reported", key, "reported-1", {"run": 1, "ids": report})
    (chat / "view.json").write_bytes(saved[0])  # ... after the view the planner saved last
    (chat / "compaction-view.json").write_bytes(saved[1])

    manifest = snapshot_while_the_planner_saves(chat, zip_path, monkeypatch)
    assert manifest["messages"] == 40 and manifest["log_messages"] == 41
    restore(zip_path, new)
    kinds = [record.kind for record in Transcripts(new, writer=False).records("Ada")]
    assert kinds == ["user", "work"]  # the report waits in the outbox again
    with ChatStore.open(new, writer=False) as store:
        assert store.message_count == 40


# -- the goal (issue 13, docs/GOALS.md) -----------------------------------------------------


def test_a_running_goal_travels_with_the_backup_and_comes_back_paused_saying_so(tmp_path, capsys):
    """A goal saved mid-turn on this machine: the ZIP holds goal.json as it is; the
    restored chat has the goal, paused, "restored from a backup" (it must not start
    working on its own on the machine it is restored to). The original is untouched."""
    from everchat.actors.turns.goals import GOAL_NAME, Goal, load_goal, save_goal

    chat, zip_path, new = tmp_path / "chat", tmp_path / "chat.zip", tmp_path / "restored"
    make_chat(chat, notes=10)
    save_goal(chat, Goal("Make the tests pass.", "active", 3, True, ""))
    saved = (chat / GOAL_NAME).read_bytes()
    assert main(["backup", str(zip_path), "--data-dir", str(chat)]) == 0
    assert "the chat's goal (active) is in it; a restore brings it back paused" in capsys.readouterr().out
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.read(GOAL_NAME) == saved
        manifest = json.loads(zf.read(MANIFEST_NAME))
    assert (manifest["version"], manifest["goal"]) == (2, "active")
    assert main(["restore", str(zip_path), "--data-dir", str(new)]) == 0
    out, err = capsys.readouterr()
    paused = {"version": 1, "text": "Make the tests pass.", "state": "paused", "turns": 3, "running": False,
              "detail": "restored from a backup"}
    assert json.loads(out)["goal"] == paused
    assert "the chat's goal is restored paused" in err and "Make the tests pass." in err
    assert load_goal(new) == Goal("Make the tests pass.", "paused", 3, False, "restored from a backup")
    assert stat_mode(new / GOAL_NAME) == 0o600
    assert (chat / GOAL_NAME).read_bytes() == saved


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_a_paused_goal_comes_back_paused_with_its_reason_and_no_goal_stays_none(tmp_path):
    from everchat.actors.turns.goals import Goal, load_goal, save_goal

    chat, new = tmp_path / "chat", tmp_path / "restored"
    make_chat(chat, notes=10)
    snapshot(chat, tmp_path / "none.zip")
    assert "goal.json" not in members(tmp_path / "none.zip")
    assert restore(tmp_path / "none.zip", tmp_path / "nogoal")["goal"] is None
    assert load_goal(tmp_path / "nogoal") is None
    save_goal(chat, Goal("Ship it.", "paused", 30, False, "30 turns in a row without a word from you"))
    snapshot(chat, tmp_path / "paused.zip")
    restore(tmp_path / "paused.zip", new)
    assert load_goal(new) == Goal("Ship it.", "paused", 30, False,
                                  "restored from a backup; it was paused: 30 turns in a row without a word from you")


def test_a_file_that_is_not_a_goal_is_left_out_of_the_backup_and_said(tmp_path, caplog):
    chat = tmp_path / "chat"
    make_chat(chat, notes=10)
    (chat / "goal.json").write_text('{"version": 1, "text": ""}\n')
    manifest = snapshot(chat, tmp_path / "chat.zip")
    assert "goal.json" not in members(tmp_path / "chat.zip") and manifest["goal"] is None
    assert "is not a goal" in caplog.text and "left out of the backup" in caplog.text


def test_a_restored_chat_opens_with_its_goal_paused_and_only_the_persons_word_resumes_it(tmp_path):
    """The real chat on the restored folder: at its start the turn runner keeps the goal
    paused (no check, no continuation); the person's message resumes it ("resumed"), its
    turn is checked (the demo model finds it met), and nothing ran before it."""
    from everchat.actors import settings as config
    from everchat.actors.turns.goals import Goal, GoalBook, load_goal, save_goal
    from everchat.actors.session.session import ChatSession
    from everchat.transport import schema

    chat, new = tmp_path / "chat", tmp_path / "restored"
    with Chat.open(chat, create=True, budget=BUDGET) as writer:
        add_notes(writer, 0, 10)
    save_goal(chat, Goal("Make the tests pass.", "active", 1, False, ""))  # between turns: it would go on here
    snapshot(chat, tmp_path / "chat.zip")
    restore(tmp_path / "chat.zip", new)
    assert GoalBook(load_goal(new)).restarted().action == "none"  # what the turn runner does at its start
    settings = config.load({"demo": True, "data_dir": str(new)}, env={}, home=tmp_path / "home")
    with ChatSession.open(settings) as session:
        assert session.goal_status() == {"version": 1, "text": "Make the tests pass.", "state": "paused", "turns": 1,
                                         "running": False, "detail": "restored from a backup"}
        mine = session.send("Go on.")
        goal_news: list[tuple[str, str]] = []
        while not (("resumed", "") in goal_news and goal_news[-1][0] in ("met", "paused")):
            event = session.next_event(timeout=60)
            assert event is not None, f"no end of the goal; saw {goal_news}"
            if isinstance(event, schema.GoalEvent):
                goal_news.append((event.event, event.detail))
        # The turn runner's start says the goal waits (when the session subscribed in time).
        if goal_news[0] == ("paused", "restored from a backup"):
            goal_news.pop(0)
        assert goal_news == [("resumed", ""), ("met", "Goal met.")]
        assert mine == 10 and session.status()["messages"] == 12  # the person's turn only
