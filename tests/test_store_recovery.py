"""R2 and the index: torn tails, corruption anywhere, crashes, a missing or wrong index."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_world import FakeClock, folder_bytes, lines_of

from everchat.actors.folder import ChatStore, CorruptRecord, Repair
from everchat.actors.folder import _daylog
from everchat.actors.folder._records import seal

DAY = "2026-10-08"


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def chat(tmp_path):
    return tmp_path / "chat"


def _fill(chat, clock, n=6):
    """A small chat: n messages (one split in parts, some keyed), nodes, merge records."""
    with ChatStore.open(chat, create=True, clock=clock) as s:
        s.append_message("user", "hello", key="k0")
        s.append_messages([("everchat", "hi é"), ("note", "z" * 20_000, "kz")])
        s.append_messages([("tool", f"t{n}") for n in range(max(0, n - 4))])
        s.append_nodes([(0, 0, "user: hello"), (0, 1, "everchat: hi é")])
        s.append_nodes([(1, 0, "user: hello\neverchat: hi é")])
        s.append_merge([(0, 0)], 2, False)
        s.append_merge([], s.message_count, True)


def _main(chat):
    return chat / "main" / f"{DAY}.jsonl"


def _tree(chat):
    return chat / "tree" / f"{DAY}.jsonl"


class ScanCounter:
    """Counts the log lines walked while it is installed (open and check walk lines)."""

    def __init__(self, monkeypatch):
        self.lines = 0
        real = _daylog.DayLog.lines_from

        def lines_from(log, start):
            for item in real(log, start):
                self.lines += 1
                yield item

        monkeypatch.setattr(_daylog.DayLog, "lines_from", lines_from)


# -- R2: torn last lines -------------------------------------------------------------------

def test_r2_torn_last_line_is_skipped_and_terminated(chat, clock, caplog):
    _fill(chat, clock)
    size = _main(chat).stat().st_size
    with open(_main(chat), "ab") as f:
        f.write(b'{"i":6,"kind":"user","text":"never acknow')
    caplog.set_level(logging.WARNING, logger="everchat.store")
    with ChatStore.open(chat, clock=clock) as s:
        assert s.repairs == [Repair(f"main/{DAY}.jsonl", size, 41)]
        assert "torn last line" in caplog.text and f"main/{DAY}.jsonl" in caplog.text
        assert _main(chat).read_bytes().endswith(b"never acknow\n")
        assert s.message_count == 6
        assert s.append_message("user", "the id is reused") == [6]
    saved = json.loads((chat / "repairs.json").read_text())["repairs"]
    assert [(r["file"], r["offset"], r["length"]) for r in saved] == [
        (f"main/{DAY}.jsonl", size, 41)]
    caplog.clear()
    with ChatStore.open(chat, clock=clock) as s:
        assert s.repairs == [] and "torn" not in caplog.text
        assert s.message(6).text == "the id is reused"
        counts = s.check()
        assert counts["messages"] == 7 and counts["repaired"] == 1
    with ChatStore.open(chat, writer=False) as s:
        assert s.check()["repaired"] == 1


def test_r2_a_torn_tree_line_is_skipped_and_terminated(chat, clock):
    _fill(chat, clock)
    size = _tree(chat).stat().st_size
    with open(_tree(chat), "ab") as f:
        f.write(b'{"l":0,"i":2,"te')
    with ChatStore.open(chat, clock=clock) as s:
        assert s.repairs == [Repair(f"tree/{DAY}.jsonl", size, 16)]
        assert s.node(0, 2) is None
        s.append_nodes([(0, 2, "note: z")])
        assert s.node(0, 2) == "note: z"
        assert s.check()["repaired"] == 1


def test_r2_a_reader_skips_a_torn_line_and_writes_nothing(chat, clock):
    _fill(chat, clock)
    with open(_main(chat), "ab") as f:
        f.write(b'{"i":6,"kind":"us')
    before = folder_bytes(chat)
    with ChatStore.open(chat, writer=False) as s:
        assert len(s.repairs) == 1 and s.message_count == 6
        assert s.check()["torn"] == 1
    assert folder_bytes(chat) == before


def test_r2_a_torn_line_in_an_earlier_day_file_is_a_torn_last_line_too(chat, clock):
    _fill(chat, clock)
    with open(_main(chat), "ab") as f:
        f.write(b'{"i":6')
    with ChatStore.open(chat, clock=clock) as s:
        assert len(s.repairs) == 1
        clock.advance(days=1)
        s.append_message("user", "next day")
    with ChatStore.open(chat, writer=False) as s:
        assert s.message(6).text == "next day" and s.check()["repaired"] == 1


def test_r2_a_terminated_torn_line_is_accepted_only_where_remembered(chat, clock):
    _fill(chat, clock)
    with open(_main(chat), "ab") as f:
        f.write(b'{"i":6,"kind":"us')
    ChatStore.open(chat, clock=clock).close()
    raw = json.loads((chat / "repairs.json").read_text())
    offset = raw["repairs"][0]["offset"]
    raw["repairs"][0]["offset"] += 1
    (chat / "repairs.json").write_text(json.dumps(raw))
    with ChatStore.open(chat, writer=False) as s, pytest.raises(CorruptRecord) as err:
        s.check()
    assert (err.value.file, err.value.offset) == (str(_main(chat)), offset)


@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("cut", ["inside the third line", "after the second line"])
def test_p8_a_split_message_a_crash_cut_short_is_all_or_nothing(chat, clock, keyed, cut):
    """P8: an unacknowledged split append that reached the log in part (the review's kill of
    `note -` of 8 MiB left up to 130 orphan parts each time): its whole parts are skipped
    with its torn line, remembered in repairs.json, and their ids go to the next append, so
    a retry logs the text once, keyed or not."""
    key = "big" if keyed else None
    with ChatStore.open(chat, create=True, clock=clock) as s:
        s.append_message("user", "hello")
        assert s.append_message("note", "n" * 40_000, key=key) == [1, 2, 3]
    data = _main(chat).read_bytes()
    lines = lines_of(_main(chat))
    end = lines[3][0] + 100 if cut == "inside the third line" else lines[3][0]
    _main(chat).write_bytes(data[:end])
    shutil.rmtree(chat / "index")
    with ChatStore.open(chat, writer=False) as reader:
        assert reader.message_count == 1
    with ChatStore.open(chat, clock=clock) as s:
        assert s.message_count == 1 and len(s.orphans) == 2
        assert s.append_message("note", "n" * 40_000, key=key) == [1, 2, 3]
        assert "".join(s.message(i).text for i in (1, 2, 3)) == "n" * 40_000
        assert s.check()["messages"] == 4
    with ChatStore.open(chat, writer=False) as reader:
        assert reader.message_count == 4 and reader.check()["repaired"] >= 2
        assert [reader.message(i).text[:1] for i in range(4)] == ["h", "n", "n", "n"]


def test_p8_a_split_message_in_the_middle_of_the_log_stays(chat, clock):
    """Only the log's very end is a torn write: parts of a split message followed by other
    records (a chat an older Everchat went on writing) are records, as they always were."""
    with ChatStore.open(chat, create=True, clock=clock) as s:
        s.append_message("user", "hello")
        s.append_message("note", "n" * 40_000)
    lines = lines_of(_main(chat))
    _main(chat).write_bytes(b"".join(line for _, line in lines[:3]))
    shutil.rmtree(chat / "index")
    with ChatStore.open(chat, clock=clock) as s:
        assert s.message_count == 1
    # As an older writer would have: parts 1-2 of 3 stayed and the next message followed.
    _main(chat).write_bytes(b"".join(line for _, line in lines[:3]))
    (chat / "repairs.json").unlink()
    shutil.rmtree(chat / "index")
    with open(_main(chat), "ab") as f:
        f.write(seal(b'{"i":3,"kind":"user","text":"next","size":4,"date":"2026-10-08T23:59:58+02:00"'))
    with ChatStore.open(chat, clock=clock) as s:
        assert s.message_count == 4 and s.message(1).meta == {"part": 1, "parts": 3}


# -- R2: corruption anywhere ------------------------------------------------------------

_MUTATIONS = ["garbage", "drop_brace", "id_up", "id_down", "size", "kind", "bad_utf8",
              "duplicate", "surrogate"]


def _mutate(line: bytes, how: str) -> bytes:
    body = line[:-1]
    if how == "garbage":
        return b"\x00garbage" + body[8:] + b"\n"
    if how == "drop_brace":
        return body[:-1] + b"\n"
    if how == "bad_utf8":
        return body[:2] + b"\xff" + body[2:] + b"\n"
    if how == "duplicate" and b'"kind"' in body:
        return line + line
    rec = json.loads(body)
    if how == "surrogate":
        if "text" not in rec:
            return b"[]\n"
        return body.replace(b'"text":"', b'"text":"\\udc80', 1) + b"\n"
    if "merge" in rec:  # another valid merge record would be no corruption
        rec["t"] = -1
    elif "l" in rec and how in ("id_up", "id_down", "duplicate"):  # nor another valid node
        rec["i"] = -1
    elif how in ("id_up", "id_down"):
        rec["i"] += 1 if how == "id_up" or rec["i"] == 0 else -1
    elif how == "size":
        rec["size"] += 1
    elif how == "kind":
        rec["kind" if "kind" in rec else "l"] = "thought"
    return json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    chat = tmp_path_factory.mktemp("template") / "chat"
    _fill(chat, FakeClock(), n=8)
    return chat


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=st.sampled_from(["main", "tree"]), pick=st.integers(0, 100),
       how=st.sampled_from(_MUTATIONS), drop_index=st.booleans())
def test_r2_corruption_anywhere_is_a_corrupt_record_naming_file_and_offset(
        template, tmp_path_factory, stream, pick, how, drop_index):
    chat = tmp_path_factory.mktemp("c") / "chat"
    shutil.copytree(template, chat)
    if drop_index:
        shutil.rmtree(chat / "index")
    path = chat / stream / f"{DAY}.jsonl"
    lines = lines_of(path)
    offset, line = lines[pick % len(lines)]
    path.write_bytes(b"".join(bad if o == offset else ln for o, ln in lines
                              for bad in [_mutate(ln, how)]))
    where = offset + len(line) if how == "duplicate" and stream == "main" else offset
    before = folder_bytes(chat)
    try:
        with ChatStore.open(chat, writer=False) as s:
            s.check()
    except CorruptRecord as err:
        assert err.file == str(path)
        if "acknowledged records are missing" not in err.reason:  # else: the file shrank
            assert err.offset == where, err
    else:
        pytest.fail(f"{how} of {stream} line at {offset} was not found")
    assert folder_bytes(chat) == before  # nothing truncated or rewritten


def test_r2_a_gap_is_found_at_open_when_it_lies_in_the_tail(chat, clock):
    _fill(chat, clock)
    shutil.rmtree(chat / "index")
    lines = lines_of(_main(chat))
    _main(chat).write_bytes(b"".join(ln for k, (_, ln) in enumerate(lines) if k != 1))
    with pytest.raises(CorruptRecord) as err:
        ChatStore.open(chat, writer=False)
    assert (err.value.file, err.value.offset) == (str(_main(chat)), lines[1][0])
    assert "gap: id 2 where id 1 was expected" in str(err.value)


# -- the index ------------------------------------------------------------------------------

def test_opening_after_a_clean_close_scans_no_record(chat, clock, monkeypatch):
    _fill(chat, clock, n=50)
    scans = ScanCounter(monkeypatch)
    with ChatStore.open(chat, clock=clock) as s:
        assert s.message_count == 50 and s.node(1, 0) and s.message(49).text == "t45"
    with ChatStore.open(chat, writer=False) as s:
        assert len(s.merge_records()) == 2
    assert scans.lines == 0


def test_a_crash_before_the_checkpoint_rescans_only_the_tail(chat, clock, monkeypatch):
    _fill(chat, clock, n=50)
    s = ChatStore.open(chat, clock=clock)
    s.append_messages([("user", f"after {n}") for n in range(3)])
    s.append_nodes([(0, 2, "note: z")])
    s._abandon()  # as kill -9: no checkpoint
    scans = ScanCounter(monkeypatch)
    with ChatStore.open(chat, writer=False) as s:
        assert s.message_count == 53 and s.message(52).text == "after 2"
        assert s.node(0, 2) == "note: z"
    assert scans.lines == 4
    with ChatStore.open(chat, clock=clock) as s:  # the writer puts the tail in the index
        assert s.message_count == 53
    scans.lines = 0
    ChatStore.open(chat, writer=False).close()
    assert scans.lines == 0


def test_a_record_logged_but_not_indexed_is_found_by_the_tail_scan(chat, clock):
    _fill(chat, clock)
    line = {"i": 6, "kind": "user", "text": "indexed later", "size": 13,
            "date": "2026-10-08T23:59:59+02:00", "key": "late"}
    with open(_main(chat), "ab") as f:
        f.write(seal(json.dumps(line, separators=(",", ":"))[:-1].encode()))
    with ChatStore.open(chat, clock=clock) as s:
        assert s.message(6).text == "indexed later"
        assert s.append_message("user", "indexed later", key="late") == [6]
        assert s.check()["messages"] == 7


def test_node_and_message_reads_never_scan(chat, clock, monkeypatch):
    _fill(chat, clock, n=20)
    with ChatStore.open(chat, writer=False) as s:
        monkeypatch.setattr(_daylog.DayLog, "lines_from", None)
        assert s.node(1, 0) == "user: hello\neverchat: hi é" and s.node(1, 1) is None
        assert s.message(19).text == "t15"
        assert s.merge_records(after_t=2) == [([], 20, True)]


@pytest.mark.parametrize("damage", ["missing", "marker", "short", "newer"])
def test_a_missing_or_damaged_index_is_rebuilt_from_the_log(chat, clock, damage, caplog):
    _fill(chat, clock, n=12)
    with ChatStore.open(chat, writer=False) as s:
        expected = ([s.message(i) for i in range(12)], s.node(1, 0), s.merge_records())
    if damage == "missing":
        shutil.rmtree(chat / "index")
    elif damage == "marker":
        (chat / "index" / "covered.json").write_text("{not json")
    elif damage == "short":
        with open(chat / "index" / "messages.idx", "r+b") as f:
            f.truncate(16 * 5)
    else:
        raw = json.loads((chat / "index" / "covered.json").read_text())
        (chat / "index" / "covered.json").write_text(json.dumps(dict(raw, v=99)))
    before = folder_bytes(chat)
    with ChatStore.open(chat, writer=False) as s:  # a reader rebuilds in memory only
        assert ([s.message(i) for i in range(12)], s.node(1, 0), s.merge_records()) == expected
        assert s.check()["messages"] == 12
    assert folder_bytes(chat) == before
    with ChatStore.open(chat, clock=clock) as s:  # the writer rebuilds on disk
        assert s.append_message("user", "hello", key="k0") == [0]
        assert s.check()["messages"] == 12
    with ChatStore.open(chat, writer=False) as s:
        assert ([s.message(i) for i in range(12)], s.node(1, 0), s.merge_records()) == expected


def test_check_reports_an_index_that_disagrees_with_the_log_and_rebuild_fixes_it(chat, clock):
    _fill(chat, clock, n=12)
    path = chat / "index" / "messages.idx"
    data = bytearray(path.read_bytes())
    data[16 * 3:16 * 4] = data[16 * 4:16 * 5]
    path.write_bytes(bytes(data))
    with ChatStore.open(chat, clock=clock) as s:
        with pytest.raises(CorruptRecord) as err:
            s.check()
        assert (err.value.file, err.value.offset) == (str(path), 48)
        s.rebuild_index()
        assert s.check()["messages"] == 12 and s.message(3).meta == {"part": 2, "parts": 2}


def test_p14_a_read_the_index_misleads_rebuilds_it_and_reads_the_right_record(chat, clock, caplog):
    """P14 (the review's I2, I5): the index is derived; a read it sends to the wrong record
    rebuilds it from the log (a writer on disk, a reader in memory, writing nothing) and
    returns the right record. No write is refused: the log itself is sound."""
    _fill(chat, clock, n=12)
    path = chat / "index" / "messages.idx"
    data = bytearray(path.read_bytes())
    data[16 * 3:16 * 4] = data[16 * 4:16 * 5]
    path.write_bytes(bytes(data))
    with ChatStore.open(chat, writer=False) as reader:
        assert reader.message(3).meta == {"part": 2, "parts": 2}
        assert "rebuilding the index" in caplog.text
    assert path.read_bytes() == bytes(data), "a reader writes nothing (R5)"
    with ChatStore.open(chat, clock=clock) as s:
        assert s.message(3).meta == {"part": 2, "parts": 2}
        assert s.append_message("user", "after the heal") == [12]
        assert s.check()["messages"] == 13


def test_check_reports_a_node_slot_that_disagrees_with_the_log(chat, clock):
    _fill(chat, clock)
    (chat / "index" / "nodes-01.idx").write_bytes(bytes(16))
    with ChatStore.open(chat, writer=False) as s, pytest.raises(CorruptRecord) as err:
        s.check()
    assert (err.value.file, err.value.offset) == (str(chat / "index" / "nodes-01.idx"), 0)


def test_a_node_built_twice_in_the_log_is_a_corrupt_record(chat, clock):
    _fill(chat, clock)
    lines = lines_of(_tree(chat))
    with open(_tree(chat), "ab") as f:
        f.write(lines[0][1])
    with pytest.raises(CorruptRecord) as err:  # in the tail: found at open
        ChatStore.open(chat, writer=False)
    assert (err.value.file, err.value.offset) == (str(_tree(chat)), _tree(chat).stat().st_size
                                                  - len(lines[0][1]))
    assert "built a second time" in str(err.value)


def test_a_log_shorter_than_its_index_is_a_loud_error(chat, clock):
    _fill(chat, clock)
    lines = lines_of(_main(chat))
    _main(chat).write_bytes(b"".join(ln for _, ln in lines[:-1]))
    with pytest.raises(CorruptRecord, match="acknowledged records are missing"):
        ChatStore.open(chat, writer=False)


def test_a_writer_clears_temporary_files_a_crash_left_before_their_rename(chat, clock):
    _fill(chat, clock)
    for stale in (chat / ".view.json.tmp.4242", chat / "index" / ".covered.json.tmp.4242"):
        stale.write_text("half")
    ChatStore.open(chat, writer=False).close()
    assert (chat / ".view.json.tmp.4242").exists()  # a reader never writes
    ChatStore.open(chat, clock=clock).close()
    assert not (chat / ".view.json.tmp.4242").exists()
    assert not (chat / "index" / ".covered.json.tmp.4242").exists()
