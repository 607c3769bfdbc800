"""`everchat restore` refuses a hostile or damaged ZIP and writes nothing (actors/upkeep/backup/):
zip-slip and absolute names, symlinks, duplicate names, members the manifest does not list,
a zip bomb, a wrong sum, a chat that fails its check (R2, P3), a target that is not empty.
After each refusal the target is absent (or unchanged) and nothing is left beside it."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import zipfile
from pathlib import Path

import pytest

from everchat.actors.upkeep.backup import MANIFEST_NAME, RestoreRefused, restore, snapshot
from everchat.actors.session.local import Chat
from everchat.frontends.cli.main import main

from cli_world import clean_home


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    clean_home(tmp_path, monkeypatch)


@pytest.fixture
def backup(tmp_path) -> list[tuple[str, bytes]]:
    """The members of an honest backup of a small chat, manifest last."""
    chat = tmp_path / "chat"
    with Chat.open(chat, create=True) as writer:
        for n in range(12):
            writer.add("note", f"note {n} " + "words " * (n * 20))
    snapshot(chat, tmp_path / "honest.zip")
    with zipfile.ZipFile(tmp_path / "honest.zip") as zf:
        return [(name, zf.read(name)) for name in zf.namelist()]


def manifest_of(members: list[tuple[str, bytes]], version: int = 1, **figures) -> bytes:
    """An honest manifest of `members` (names, sizes, sums), with the backup's figures
    (version 1 by default: what `restore` still reads)."""
    files = [{"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
             for name, data in members if name != MANIFEST_NAME]
    return json.dumps({"format": "everchat-backup", "version": version, **figures, "files": files}).encode()


def figures_of(members) -> dict:
    manifest = json.loads(dict(members)[MANIFEST_NAME])
    return {k: manifest[k] for k in ("messages", "merges", "nodes", "assets", "log_messages", "with_keys")}


def write_zip(path: Path, members: list, *, manifest: bytes | None = None) -> Path:
    """A ZIP of `members` ((name or ZipInfo, bytes)), then `manifest` when given."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members + ([(MANIFEST_NAME, manifest)] if manifest is not None else []):
            zf.writestr(name, data)
    return path


def honest_rest(backup) -> list[tuple[str, bytes]]:
    return [(name, data) for name, data in backup if name != MANIFEST_NAME]


def assert_refused(tmp_path: Path, zip_path: Path, words: str, **kw) -> None:
    """Refused with `words` in the reason; the target absent, nothing new beside it."""
    target = tmp_path / "new" / "chat"
    (tmp_path / "new").mkdir(exist_ok=True)
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(tmp_path / "new"))
    with pytest.raises(RestoreRefused, match=words):
        restore(zip_path, target, **kw)
    assert not os.path.lexists(target)
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(tmp_path / "new"))) == before


def test_the_honest_backup_restores(tmp_path, backup):
    """The hostile ZIPs below are this one changed in one way each."""
    rest = honest_rest(backup)
    zip_path = write_zip(tmp_path / "again.zip", rest, manifest=manifest_of(rest, **figures_of(backup)))
    assert restore(zip_path, tmp_path / "new")["messages"] == 12


@pytest.mark.parametrize("name", ["../evil.txt", "main/../../evil.txt", "/tmp/everchat-evil.txt", "C:/evil.txt",
                                  "main\\..\\..\\evil.txt", "./chat.json"])
def test_a_member_named_outside_the_chat_folder_is_refused(tmp_path, backup, name):
    """Zip-slip: a `..` part, an absolute path, a drive, a backslash; listed honestly in the
    manifest, so only its name is wrong."""
    members = honest_rest(backup) + [(name, b"owned\n")]
    zip_path = write_zip(tmp_path / "slip.zip", members, manifest=manifest_of(members, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "outside the chat folder")
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/everchat-evil.txt").exists()


@pytest.mark.parametrize("name", ["draft.json", "run/supervisor.json", "writer.lock", "index/covered.json",
                                  "damaged/x", "main/notes.txt", "assets/abc"])
def test_a_member_no_backup_holds_is_refused_whatever_its_sums(tmp_path, backup, name):
    """A draft the next writer would log as a reply (R37), a run file naming another
    process (R5), a lock, an index: never in a backup, so never restored."""
    members = honest_rest(backup) + [(name, b"{}")]
    zip_path = write_zip(tmp_path / "plant.zip", members, manifest=manifest_of(members, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, f"holds {name}, which is no part of a backup")


@pytest.mark.parametrize("goal", [b'{"version": 1, "text": "", "state": "active", "turns": 0}',
                                  b'{"version": 9, "text": "Own the box.", "state": "active", "turns": 0}',
                                  b'{"version": 1, "text": "x", "state": "running", "turns": 0}', b"not json"])
def test_a_goal_json_that_is_not_a_goal_is_refused(tmp_path, backup, goal):
    """Issue 13: a version 2 backup may hold goal.json; one that is not a goal (whatever
    its sums) is refused, not written for the turn runner to meet."""
    members = honest_rest(backup) + [("goal.json", goal)]
    zip_path = write_zip(tmp_path / "goal.zip", members, manifest=manifest_of(members, 2, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "goal.json in the backup is not a goal")


def test_a_goal_json_in_a_version_1_backup_is_refused_and_version_3_is_not_read(tmp_path, backup):
    goal = b'{"version": 1, "text": "Go.", "state": "active", "turns": 0}'
    members = honest_rest(backup) + [("goal.json", goal)]
    zip_path = write_zip(tmp_path / "v1.zip", members, manifest=manifest_of(members, 1, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "goal.json, which is no part of a version 1 backup")
    rest = honest_rest(backup)
    zip_path = write_zip(tmp_path / "v3.zip", rest, manifest=manifest_of(rest, 3, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "a backup of version 3; this Everchat restores versions 1 to 2")


def test_a_symlink_member_is_refused(tmp_path, backup):
    link = zipfile.ZipInfo("config/devices.json")  # a name a backup holds, as a symlink
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    members = honest_rest(backup) + [(link, b"/etc/passwd")]
    listed = [(m.filename if isinstance(m, zipfile.ZipInfo) else m, d) for m, d in members]
    zip_path = write_zip(tmp_path / "link.zip", members, manifest=manifest_of(listed, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "not a regular file")


def test_a_name_held_twice_is_refused(tmp_path, backup):
    rest = honest_rest(backup)
    with pytest.warns(UserWarning, match="Duplicate name"):
        zip_path = write_zip(tmp_path / "twice.zip", rest + [("chat.json", dict(rest)["chat.json"])],
                             manifest=manifest_of(rest, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "holds chat.json twice")


def test_a_member_the_manifest_does_not_list_is_refused(tmp_path, backup):
    rest = honest_rest(backup)
    zip_path = write_zip(tmp_path / "extra.zip", rest + [("config/ports.json", b"{}\n")],
                         manifest=manifest_of(rest, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "config/ports.json, which the manifest does not list")


def test_a_listed_member_missing_from_the_zip_is_refused(tmp_path, backup):
    rest = honest_rest(backup)
    zip_path = write_zip(tmp_path / "short.zip", [m for m in rest if m[0] != "view.json"],
                         manifest=manifest_of(rest, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "lists view.json, which the ZIP does not hold")


def test_a_wrong_sum_is_refused(tmp_path, backup):
    """One byte of the log changed (same size): its SHA-256 is not the manifest's."""
    rest = honest_rest(backup)
    day, data = next(m for m in rest if m[0].startswith("main/"))
    changed = [(name, (data[:40] + bytes([data[40] ^ 1]) + data[41:]) if name == day else d) for name, d in rest]
    zip_path = write_zip(tmp_path / "sum.zip", changed, manifest=manifest_of(rest, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, f"{day}: its SHA-256 is not the manifest's")


def test_p3_a_changed_record_with_honest_sums_fails_the_check_and_nothing_is_written(tmp_path, backup):
    """The sums match (the ZIP was made so), but a record's own checksum does not (P3):
    the restore's check (the code of `everchat check`) refuses it."""
    rest = honest_rest(backup)
    day, data = next(m for m in rest if m[0].startswith("main/"))
    at = data.index(b"note 3") + 5
    changed = [(name, (data[:at] + b"7" + data[at + 1:]) if name == day else d) for name, d in rest]
    zip_path = write_zip(tmp_path / "check.zip", changed, manifest=manifest_of(changed, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "fails its check: .*checksum does not match")


def lie_about_size(path: Path, name: str, size: int) -> None:
    """Make the ZIP's headers (local and central) say member `name` inflates to `size`."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        offset, at = zf.getinfo(name).header_offset, zf.start_dir
    struct.pack_into("<I", data, offset + 22, size)
    while data[at:at + 4] == b"PK\x01\x02":
        n, m, k = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46:at + 46 + n] == name.encode():
            struct.pack_into("<I", data, at + 24, size)
        at += 46 + n + m + k
    path.write_bytes(data)


BOMB = bytes(30 << 20)  # 30 MiB of zeros: some 30 KB deflated


def test_a_bomb_whose_manifest_declares_a_small_size_is_refused(tmp_path, backup):
    rest = honest_rest(backup)
    small = rest + [("usage.json", b"{}\n")]
    zip_path = write_zip(tmp_path / "bomb.zip", rest + [("usage.json", BOMB)],
                         manifest=manifest_of(small, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "usage.json is 31457280 bytes in the ZIP, 3 in the manifest")


def test_a_bomb_whose_headers_lie_too_stops_at_the_declared_size(tmp_path, backup):
    """Manifest and headers both say 3 bytes; the member inflates to 30 MiB. The read stops
    at the declared size, and what came does not match (the ZIP's CRC or the sum)."""
    rest = honest_rest(backup)
    small = rest + [("usage.json", b"{}\n")]
    zip_path = write_zip(tmp_path / "bomb.zip", rest + [("usage.json", BOMB)],
                         manifest=manifest_of(small, **figures_of(backup)))
    lie_about_size(zip_path, "usage.json", 3)
    assert_refused(tmp_path, zip_path, "usage.json (is damaged in the ZIP|: its SHA-256 is not)")


def test_a_backup_larger_than_the_limit_is_refused_before_anything_inflates(tmp_path, backup):
    members = honest_rest(backup) + [("usage.json", BOMB)]
    zip_path = write_zip(tmp_path / "big.zip", members, manifest=manifest_of(members, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "inflates to 31,4", limit=1 << 20)


def test_a_target_that_is_not_empty_is_refused_and_left_as_it_was(tmp_path, backup, capsys):
    rest = honest_rest(backup)
    zip_path = write_zip(tmp_path / "ok.zip", rest, manifest=manifest_of(rest, **figures_of(backup)))
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("mine\n")
    assert main(["restore", str(zip_path), "--data-dir", str(target)]) == 1
    assert "restore refused, nothing written" in capsys.readouterr().err
    assert os.listdir(target) == ["notes.txt"] and (target / "notes.txt").read_text() == "mine\n"


def test_a_file_that_is_not_a_zip_is_refused(tmp_path):
    fake = tmp_path / "fake.zip"
    fake.write_bytes(b"PK\x03\x04 not really")
    assert_refused(tmp_path, fake, "not a readable ZIP")


# -- P8: only what a backup of that kind holds ---------------------------------------------

ATTACKER_KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"  # a z85 CURVE public key of the attacker's


def test_p8_a_key_planted_in_a_backup_made_without_keys_is_refused(tmp_path, backup):
    """The attacker's move: an honest backup without --with-keys, plus their CURVE key in
    config/keys/authorized_keys (which the next `serve --tcp` would authorize) and a
    devices book naming it, the manifest re-summed to match. Refused, nothing written;
    the same members in a backup that says with_keys restore."""
    assert json.loads(dict(backup)[MANIFEST_NAME])["with_keys"] is False
    planted = [("config/keys/authorized_keys", f"{ATTACKER_KEY} device.laptop\n".encode()),
               ("config/devices.json", json.dumps({"version": 1, "devices": {"laptop": {
                   "key": ATTACKER_KEY, "enrolled": 1.7e9}}, "removed": {}, "secrets": []}).encode())]
    members = honest_rest(backup) + planted
    zip_path = write_zip(tmp_path / "keys.zip", members, manifest=manifest_of(members, 2, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "holds config/keys/authorized_keys, which a backup made without --with-keys "
                                       "never holds")
    keyed = {**figures_of(backup), "with_keys": True}
    zip_path = write_zip(tmp_path / "keyed.zip", members, manifest=manifest_of(members, 2, **keyed))
    restore(zip_path, tmp_path / "keyed")
    assert ATTACKER_KEY in (tmp_path / "keyed" / "config" / "keys" / "authorized_keys").read_text()


@pytest.mark.parametrize("name", ["config/keys/supervisor.key", "config/settings.toml", "config/keys/x/y.key",
                                  "agents/evil/notes.txt", "agents/1evil/transcript.jsonl",
                                  "agents/evil/deeper/transcript.jsonl", "agents/transcript.jsonl"])
def test_p8_files_a_backup_never_writes_under_config_or_agents_are_refused(tmp_path, backup, name):
    members = honest_rest(backup) + [(name, b"{}\n")]
    zip_path = write_zip(tmp_path / "plant.zip", members, manifest=manifest_of(members, 2, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, f"holds {name}, which ")


def test_p8_a_garbage_agent_transcript_fails_the_restores_check(tmp_path, backup):
    """R38: the restore runs `check`, which reads every transcript; a garbage one (it
    passed before, then broke `everchat agents`) is refused with its file and byte."""
    members = honest_rest(backup) + [("agents/evil/transcript.jsonl", b'{"not": "a transcript"}\n')]
    zip_path = write_zip(tmp_path / "evil.zip", members, manifest=manifest_of(members, 2, **figures_of(backup)))
    assert_refused(tmp_path, zip_path, "fails its check: agents/evil/transcript.jsonl: byte 0: not a version 1 "
                                       "transcript header")
