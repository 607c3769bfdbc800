"""The reliability review's damage cases, through the real `everchat` command (issue 8).

Each case damages a copy of a healthy chat as the review did and runs the commands a
person would. Damage to what cannot be rebuilt (the log, the tree, the saved view, an
image) is named in one line, file and offset, by every command, and nothing is written
past it; damage to what is derived (the index, the compaction view) or half-done (a
draft) is set aside or rebuilt with a warning and never blocks the chat (P2, P3, P11,
P13, P14, R24).
"""

from __future__ import annotations

import json
import shutil

import pytest
from cli_world import env, everchat  # noqa: F401  (env is a fixture)

from everchat.actors.session.local import Chat
from everchat.actors.tree import Budget, name
from everchat.actors.folder import ChatStore

SMALL = Budget(ceiling=1500, floor=700, cceiling=600, cfloor=300, jobs=3)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    """A closed chat of 60 messages with summaries, merge records and one image."""
    folder = tmp_path_factory.mktemp("healthy") / "chat"
    with Chat.open(folder, create=True, budget=SMALL) as chat:
        digest = chat.store.put_asset(PNG)
        for n in range(60):
            chat.add("note", f"note {n}: " + "amber basalt " * (3 + n % 50), images=[digest] if n == 7 else ())
            for key in sorted(chat.planner.running):
                chat.built(key, f"summary of {name(key)} " + "s" * (n * 7 % 200))
    return folder


@pytest.fixture
def chat(healthy, tmp_path):
    copy = tmp_path / "chat"
    shutil.copytree(healthy, copy)
    return copy


def _files(chat) -> dict[str, bytes]:
    return {str(p.relative_to(chat)): p.read_bytes() for p in sorted(chat.rglob("*"))
            if p.is_file() and p.name != "writer.lock" and "run" not in p.parts}


def _one_line(done) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def _all_commands(env, chat, *, budget_flags=()):
    for args in (("status",), ("view",), ("note", "after the damage"), ("--demo", "ask", "hello?")):
        yield args, everchat(env, *args, "--data-dir", str(chat), timeout=180)


def test_r24_v4_a_view_edited_into_another_cover_stops_every_command(env, chat):  # noqa: F811
    saved = json.loads((chat / "view.json").read_text())
    at = next(n for n, (level, _) in enumerate(saved["view"]) if level > 0)
    level, i = saved["view"][at]
    saved["view"][at:at + 1] = [[level - 1, 2 * i], [level - 1, 2 * i + 1]]
    (chat / "view.json").write_text(json.dumps(saved))
    before = _files(chat)
    for args, done in _all_commands(env, chat):
        assert done.returncode == 1, args
        assert f"{chat}/view.json: byte 0: view.json disagrees with the view refolded" in _one_line(done), args
    assert _files(chat) == before, "nothing was written past the damage"


def test_p14_v6_a_garbage_compaction_view_is_set_aside_and_every_command_works(env, chat):  # noqa: F811
    (chat / "compaction-view.json").write_bytes(b"\x00\xff garbage")
    for args, done in _all_commands(env, chat):
        assert done.returncode == 0, (args, done.stderr)
    assert [p.name.split("-", 1)[1] for p in (chat / "damaged").iterdir()] == ["compaction-view.json"]
    assert json.loads((chat / "compaction-view.json").read_text())["view"]
    assert everchat(env, "check", "--data-dir", str(chat)).returncode == 0


def test_p3_t1_a_summary_changed_in_place_is_named_and_not_shown(env, chat):  # noqa: F811
    [day] = (chat / "tree").glob("*.jsonl")
    data = bytearray(day.read_bytes())
    at = data.index(b'"text":"summary of ') + len(b'"text":"summary of ')
    data[at] = ord("X")
    day.write_bytes(bytes(data))
    done = everchat(env, "check", "--data-dir", str(chat))
    assert done.returncode == 1 and f"{day}: byte " in _one_line(done) and "checksum" in done.stderr
    view = everchat(env, "view", "--data-dir", str(chat))
    assert "Xummary" not in view.stdout


def test_p2_a_damaged_draft_is_set_aside_and_ask_works(env, chat):  # noqa: F811
    (chat / "draft.json").write_bytes(b"\xff\xfe not json")
    check = everchat(env, "check", "--data-dir", str(chat))
    assert check.returncode == 1 and f"{chat}/draft.json: byte 0: not a draft" in _one_line(check)
    done = everchat(env, "--demo", "ask", "hello?", "--data-dir", str(chat), timeout=180)
    assert done.returncode == 0, done.stderr
    assert "locked" not in done.stderr and "draft.json" in done.stderr
    assert [p.name.split("-", 1)[1] for p in (chat / "damaged").iterdir()] == ["draft.json"]
    assert everchat(env, "check", "--data-dir", str(chat)).returncode == 0


def test_p11_t5_a_writer_that_will_refuse_writes_nothing_first(env, chat):  # noqa: F811
    """A truncated tree/ and no index: `note` used to terminate the torn line and record it in
    repairs.json as a legitimate repair, then fail on the views."""
    [day] = (chat / "tree").glob("*.jsonl")
    data = day.read_bytes()
    day.write_bytes(data[:len(data) // 2])
    shutil.rmtree(chat / "index")
    before = _files(chat)
    done = everchat(env, "note", "after the damage", "--data-dir", str(chat))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert _files(chat) == before and not (chat / "repairs.json").exists()


@pytest.mark.parametrize("how", ["changed", "deleted"])
def test_p13_check_finds_a_changed_or_missing_image(env, chat, how):  # noqa: F811
    [asset] = (chat / "assets").iterdir()
    if how == "changed":
        asset.write_bytes(PNG + b"x")
    else:
        asset.unlink()
    done = everchat(env, "check", "--data-dir", str(chat))
    assert done.returncode == 1 and f"{asset}: byte 0: the image of message 7" in _one_line(done)


def test_p14_i5_swapped_index_slots_heal_and_the_chat_goes_on(env, chat):  # noqa: F811
    path = chat / "index" / "messages.idx"
    data = bytearray(path.read_bytes())
    data[16 * 10:16 * 11], data[16 * 11:16 * 12] = data[16 * 11:16 * 12], data[16 * 10:16 * 11]
    path.write_bytes(bytes(data))
    assert everchat(env, "zoom", "10", "--data-dir", str(chat)).stdout.startswith("note: note 10:")
    done = everchat(env, "note", "goes on", "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    check = everchat(env, "check", "--data-dir", str(chat))  # entries nobody read yet: check names them
    assert check.returncode == 1 and _one_line(check).endswith("(it is rebuilt from the log: run `everchat repair`)")
    fixed = everchat(env, "repair", "--data-dir", str(chat))
    assert fixed.returncode == 0 and "rebuilt the index from the log" in fixed.stdout
    assert everchat(env, "check", "--data-dir", str(chat)).returncode == 0
    with ChatStore.open(chat, writer=False) as store:
        assert store.message(11).text.startswith("note 11:")


def test_repair_refolds_an_edited_view_and_sets_the_old_one_aside(env, chat):  # noqa: F811
    good = json.loads((chat / "view.json").read_text())["view"]
    saved = json.loads((chat / "view.json").read_text())
    saved["view"] = saved["view"][1:]  # no longer covers message 0
    (chat / "view.json").write_text(json.dumps(saved))
    assert everchat(env, "view", "--data-dir", str(chat)).returncode == 1
    fixed = everchat(env, "repair", "--data-dir", str(chat))
    assert fixed.returncode == 0, fixed.stderr
    assert "refolded view.json from the merge records (R24)" in fixed.stdout
    assert json.loads((chat / "view.json").read_text())["view"] == good
    assert sorted(p.name.split("-", 1)[1] for p in (chat / "damaged").iterdir()) == ["compaction-view.json",
                                                                                      "view.json"]


def test_repair_names_damage_in_the_log_and_rewrites_nothing(env, chat):  # noqa: F811
    [day] = (chat / "main").glob("*.jsonl")
    data = bytearray(day.read_bytes())
    data[len(data) // 3] ^= 0x04
    day.write_bytes(bytes(data))
    done = everchat(env, "repair", "--data-dir", str(chat))
    assert done.returncode == 1 and f"{day}: byte " in done.stderr and "no repair rewrites" in done.stderr
    assert day.read_bytes() == bytes(data)
