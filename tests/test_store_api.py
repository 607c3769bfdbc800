"""Every call of the log store's public face, on real files in a temporary folder."""

from __future__ import annotations

import json
import os
import socket

import pytest
from store_world import GIF, JPEG, PNG, WEBP, FakeClock, folder_bytes

from everchat.actors.folder._records import seal
from everchat.actors.folder import (BadInput, ChatStore, CorruptRecord, MessageRecord,
                                   NotAChat, ReadOnlyStore, StoreClosed, StoreError)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def chat(tmp_path):
    return tmp_path / "chat"


@pytest.fixture
def store(chat, clock):
    s = ChatStore.open(chat, create=True, clock=clock)
    yield s
    s.close()


class Counter:
    """Counts os.write and os.fsync calls (the store's only ways to write and flush)."""

    def __init__(self, monkeypatch):
        self.writes, self.fsyncs = [], []
        real_write, real_fsync = os.write, os.fsync

        def write(fd, data):
            self.writes.append(len(data))
            return real_write(fd, data)

        def fsync(fd):
            self.fsyncs.append(os.readlink(f"/proc/self/fd/{fd}"))
            return real_fsync(fd)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)


# -- opening --------------------------------------------------------------------------------

def test_r1_create_makes_the_folder_layout_with_a_versioned_chat_json(store, chat):
    for name in ("main", "tree", "assets", "index"):
        assert (chat / name).is_dir()
    info = json.loads((chat / "chat.json").read_text())
    assert info["format"] == "everchat-chat" and info["version"] == 2
    assert info["sealed_from"] == {"main": [0, 0], "tree": [0, 0]}  # P3: every record carries its checksum
    assert store.message_count == 0 and store.writer


def test_a_folder_without_a_chat_is_not_a_chat(tmp_path):
    with pytest.raises(NotAChat):
        ChatStore.open(tmp_path / "missing")
    with pytest.raises(NotAChat):
        ChatStore.open(tmp_path, writer=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotAChat):
        ChatStore.open(tmp_path / "file", create=True)
    assert not (tmp_path / "missing").exists()


def test_r5_create_needs_a_writer(chat):
    with pytest.raises(BadInput):
        ChatStore.open(chat, create=True, writer=False)


def test_a_chat_of_a_newer_format_is_refused(chat):
    ChatStore.open(chat, create=True).close()
    (chat / "chat.json").write_text('{"format": "everchat-chat", "version": 3}')
    with pytest.raises(StoreError, match="version 3"):
        ChatStore.open(chat, writer=False)


def test_repr_names_the_folder_the_role_the_process_and_the_host(store, chat):
    text = repr(store)
    assert str(chat) in text and "writer" in text
    assert f"pid={os.getpid()}" in text and socket.gethostname() in text


# -- messages ----------------------------------------------------------------------------------

def test_r3_each_of_the_six_kinds_is_logged_with_the_r1_fields(store, chat):
    kinds = ["user", "everchat", "tool", "echo", "work", "note"]
    for n, kind in enumerate(kinds):
        text = "[Ada] done" if kind == "work" else f"{kind} text é"
        assert store.append_message(kind, text) == [n]
    assert store.message_count == 6
    rec = store.message(0)
    assert rec == MessageRecord(0, "user", "user text é", 12, "2026-10-08T23:59:58+02:00")
    assert store.message_line(4) == "work: [Ada] done"
    first = (chat / "main" / "2026-10-08.jsonl").read_bytes().split(b"\n")[0]
    assert first == seal(('{"i":0,"kind":"user","text":"user text é","size":12,'
                          '"date":"2026-10-08T23:59:58+02:00"').encode())[:-1]


def test_r3_an_unknown_kind_is_refused_and_nothing_is_written(store, chat):
    store.append_message("user", "hi")
    before = folder_bytes(chat)
    for kind in ("thought", "USER", None, ""):
        with pytest.raises(BadInput, match="R3"):
            store.append_message(kind, "x")
    assert folder_bytes(chat) == before and store.message_count == 1


def test_r3_a_work_message_starts_with_an_agent_name(store):
    with pytest.raises(BadInput, match=r"\[Name\]"):
        store.append_message("work", "no name here")
    assert store.append_message("work", "[Scout] found it") == [0]


@pytest.mark.parametrize("text", [b"bytes", None, 5, "lone \ud800 surrogate",
                                  "x" * (8 * 1024 * 1024 + 1), "€" * (3 * 1024 * 1024)])
def test_a_text_that_is_not_clean_str_or_is_absurdly_large_is_refused(store, chat, text):
    before = folder_bytes(chat)
    with pytest.raises(BadInput):
        store.append_message("user", text)
    assert folder_bytes(chat) == before


@pytest.mark.parametrize("kwargs", [{"key": ""}, {"key": 5}, {"key": "k" * 1025},
                                    {"meta": [1]}, {"meta": {1: "x"}},
                                    {"meta": {"x": float("nan")}}, {"meta": {"part": 1}},
                                    {"meta": {"x": object()}}, {"images": "abc"},
                                    {"images": ["0" * 64]}, {"images": ["ABC"]}])
def test_bad_keys_meta_and_images_are_refused(store, kwargs):
    with pytest.raises(BadInput):
        store.append_message("user", "hi", **kwargs)
    assert store.message_count == 0


def test_r7_a_long_echo_keeps_both_ends_says_how_much_was_cut_and_r8_splits_it(store):
    text = "".join(chr(0x61 + k % 26) for k in range(100_000))
    ids = store.append_message("echo", text)
    records = [store.message(i) for i in ids]
    logged = "".join(r.text for r in records)
    assert logged == text[:15_000] + "\n[70000 characters cut]\n" + text[-15_000:]
    assert all(r.kind == "echo" and r.size <= 16_000 for r in records)
    assert [r.meta for r in records] == [{"cut": 70_000, "part": k + 1, "parts": len(ids)}
                                         for k in range(len(ids))]


def test_r8_a_long_text_is_logged_as_consecutive_parts_rejoining_to_it(store):
    store.append_message("user", "before")
    digest = store.put_asset(PNG)
    text = ("word " * 3000 + "\n") * 5  # 75,005 bytes
    ids = store.append_message("user", text, key="k", images=[digest], meta={"src": "cli"})
    assert ids == list(range(1, 1 + len(ids))) and len(ids) == 5
    records = [store.message(i) for i in ids]
    assert "".join(r.text for r in records) == text
    assert all(r.size == len(r.text.encode()) <= 16_000 for r in records)
    assert [r.meta for r in records] == [{"src": "cli", "part": k + 1, "parts": 5}
                                         for k in range(5)]
    assert [r.key for r in records] == ["k"] * 5
    assert [r.images for r in records] == [(digest,)] + [()] * 4


def test_r4_a_single_append_is_one_write_and_one_fsync(store, chat, monkeypatch):
    store.append_message("user", "first")  # the day file exists now
    count = Counter(monkeypatch)
    store.append_message("user", "second")
    assert len(count.writes) == 1
    assert count.fsyncs == [str(chat / "main" / "2026-10-08.jsonl")]


def test_r4_a_new_day_file_also_fsyncs_its_folder(store, chat, clock, monkeypatch):
    store.append_message("user", "first")
    clock.advance(seconds=5)
    count = Counter(monkeypatch)
    store.append_message("user", "after midnight")
    assert len(count.writes) == 1
    assert sorted(count.fsyncs) == sorted([str(chat / "main"),
                                           str(chat / "main" / "2026-10-09.jsonl")])


def test_r4_group_commit_logs_many_messages_with_one_write_and_one_fsync(store, chat,
                                                                          monkeypatch):
    store.append_message("user", "first")
    count = Counter(monkeypatch)
    items = [("note", f"memory {n}") for n in range(1000)]
    ids = store.append_messages(items)
    assert ids == [[n] for n in range(1, 1001)]
    assert len(count.writes) == 1 and len(count.fsyncs) == 1
    assert store.message(1000).text == "memory 999"


def test_group_commit_takes_dicts_and_tuples_and_answers_per_item(store):
    digest = store.put_asset(GIF)
    ids = store.append_messages([
        {"kind": "user", "text": "a", "key": "ka", "images": [digest], "meta": {"m": 1}},
        ("everchat", "b"),
        ("tool", "c", "kc"),
        ("echo", "d", None, [digest]),
        ("note", "x" * 20_000, None, (), {"from": "import"}),
    ])
    assert ids == [[0], [1], [2], [3], [4, 5]]
    assert store.message(0) == MessageRecord(0, "user", "a", 1, store.message(0).date, "ka",
                                             (digest,), {"m": 1})
    assert store.message(2).key == "kc" and store.message(3).images == (digest,)
    assert store.message(5).meta == {"from": "import", "part": 2, "parts": 2}
    assert store.append_messages([]) == []


def test_a_bad_item_refuses_the_whole_group_and_writes_nothing(store, chat):
    store.append_message("user", "hi")
    before = folder_bytes(chat)
    with pytest.raises(BadInput):
        store.append_messages([("user", "fine"), ("nonsense", "bad")])
    with pytest.raises(BadInput):
        store.append_messages([("user",)])
    with pytest.raises(BadInput):
        store.append_messages([{"kind": "user", "text": "x", "colour": "red"}])
    assert folder_bytes(chat) == before


def test_a_resent_append_is_logged_once(store, monkeypatch):
    assert store.append_message("user", "hello", key="c-1") == [0]
    count = Counter(monkeypatch)
    assert store.append_message("user", "hello", key="c-1") == [0]
    assert count.writes == [] and count.fsyncs == []
    assert store.message_count == 1


def test_a_resent_split_append_returns_all_its_ids(store):
    ids = store.append_message("note", "y" * 40_000, key="big")
    assert len(ids) == 3
    assert store.append_message("note", "y" * 40_000, key="big") == ids


def test_a_key_repeated_inside_one_group_is_logged_once(store):
    ids = store.append_messages([("user", "a", "k"), ("user", "b"), ("user", "a", "k")])
    assert ids == [[0], [1], [0]] and store.message_count == 2


def test_keys_hold_across_close_and_reopen(chat, clock):
    with ChatStore.open(chat, create=True, clock=clock) as s:
        s.append_message("user", "a", key="ka")
        s.append_messages([("user", "b", "kb"), ("note", "z" * 33_000, "kz")])
    with ChatStore.open(chat, clock=clock) as s:
        assert s.append_message("user", "a", key="ka") == [0]
        assert s.append_messages([("user", "b", "kb"), ("user", "c", "kc")]) == [[1], [5]]
        assert s.append_message("note", "z" * 33_000, key="kz") == [2, 3, 4]
        assert s.message_count == 6


def test_keys_hold_after_a_crash_before_any_checkpoint(chat, clock):
    s = ChatStore.open(chat, create=True, clock=clock)
    s.append_message("user", "a", key="ka")
    s._abandon()
    with ChatStore.open(chat, clock=clock) as s:
        assert s.append_message("user", "a", key="ka") == [0]


def test_keys_older_than_the_horizon_are_forgotten(chat, clock, monkeypatch):
    monkeypatch.setattr(ChatStore, "KEY_HORIZON", 4)
    with ChatStore.open(chat, create=True, clock=clock) as s:
        for n in range(6):
            s.append_message("user", f"m{n}", key=f"k{n}")
    with ChatStore.open(chat, clock=clock) as s:
        assert s.append_message("user", "m2", key="k2") == [2]  # among the last 4
        assert s.append_message("user", "m1", key="k1") == [6]  # forgotten: logged anew


def test_message_reads_refuse_ids_outside_the_chat(store):
    store.append_message("user", "hi")
    for bad in (-1, 1, "0", 1.0, None):
        with pytest.raises(BadInput):
            store.message(bad)


# -- days and dates ----------------------------------------------------------------------------

def test_r1_day_files_follow_the_clock_and_ids_run_on_across_days(chat, clock):
    with ChatStore.open(chat, create=True, clock=clock) as s:
        s.append_message("user", "late")
        clock.advance(seconds=3)
        s.append_messages([("everchat", "early"), ("user", "again")])
        s.append_nodes([(0, 0, "user: late")])
        clock.advance(days=1)
        s.append_message("note", "next day")
    assert sorted(p.name for p in (chat / "main").iterdir()) == [
        "2026-10-08.jsonl", "2026-10-09.jsonl", "2026-10-10.jsonl"]
    assert [p.name for p in (chat / "tree").iterdir()] == ["2026-10-09.jsonl"]
    with ChatStore.open(chat, writer=False) as s:
        assert [s.message(i).date for i in range(4)] == [
            "2026-10-08T23:59:58+02:00", "2026-10-09T00:00:01+02:00",
            "2026-10-09T00:00:01+02:00", "2026-10-10T00:00:01+02:00"]
        assert [s.message(i).text for i in range(4)] == ["late", "early", "again",
                                                         "next day"]
        assert s.check()["files"] == 4


def test_a_clock_that_goes_back_keeps_writing_the_latest_day_file(chat, clock):
    with ChatStore.open(chat, create=True, clock=clock) as s:
        clock.advance(seconds=5)
        s.append_message("user", "tomorrow")
        clock.advance(hours=-2)
        s.append_message("user", "clock went back")
        assert s.message(1).date == "2026-10-08T22:00:03+02:00"
    assert [p.name for p in (chat / "main").iterdir()] == ["2026-10-09.jsonl"]


# -- the tree -------------------------------------------------------------------------------------

def _four(store):
    store.append_messages([("user", f"m{n}") for n in range(4)])


def test_r10_r12_a_node_is_built_once_and_read_by_level_and_index(store, chat):
    _four(store)
    assert store.append_nodes([(0, 0, "user: m0"), (0, 1, "user: m1")]) == 2
    assert store.append_nodes([(1, 0, "user: m0\nuser: m1")]) == 1
    assert store.node(0, 1) == "user: m1" and store.node(1, 0) == "user: m0\nuser: m1"
    assert store.node(0, 2) is None and store.node(2, 0) is None and store.node(40, 9) is None
    assert not (chat / "index" / "nodes-40.idx").exists()  # a read creates no slot file
    assert store.append_nodes([(0, 0, "user: m0")]) == 0  # the identical duplicate
    with pytest.raises(StoreError, match="R12"):
        store.append_nodes([(0, 2, "new"), (0, 0, "another text")])
    assert store.node(0, 2) is None  # nothing of that batch was written
    with pytest.raises(StoreError, match="R12"):
        store.append_nodes([(0, 3, "one"), (0, 3, "two")])


@pytest.mark.parametrize("node", [(0, 0, ""), (0, 0, "a" * 513), (0, 0, "é" * 257),
                                  (0, 0, "\ud800"), (0, 0, b"bytes"), (-1, 0, "x"),
                                  (0, -1, "x"), (True, 0, "x"), (63, 0, "x"), (0, 4, "x"),
                                  (1, 2, "x"), (3, 0, "x"), (0, 0), "abc"])
def test_r10_a_node_has_1_to_512_bytes_and_covers_logged_messages(store, chat, node):
    _four(store)
    before = folder_bytes(chat)
    with pytest.raises(BadInput):
        store.append_nodes([node])
    assert folder_bytes(chat) == before


def test_r10_a_node_of_exactly_512_bytes_is_fine(store):
    _four(store)
    store.append_nodes([(2, 0, "é" * 256)])
    assert store.node(2, 0) == "é" * 256


def test_r4_append_nodes_is_one_write_and_one_fsync_for_all(store, monkeypatch):
    store.append_messages([("user", f"m{n}") for n in range(100)])
    store.append_nodes([(0, 0, "first")])
    count = Counter(monkeypatch)
    assert store.append_nodes([(0, i, f"leaf {i}") for i in range(1, 100)]) == 99
    assert len(count.writes) == 1 and len(count.fsyncs) == 1


def test_r25_merge_records_round_trip_in_order_and_filter_by_t(store):
    _four(store)
    store.append_nodes([(0, 0, "a"), (0, 1, "b"), (1, 0, "a\nb"), (0, 2, "c"), (0, 3, "d"),
                        (1, 1, "c\nd"), (2, 0, "abcd")])
    store.append_merge([], 1, True)
    store.append_merge([(0, 0)], 2, False)
    store.append_merge([(0, 2), (1, 0)], 4, True)
    store.append_merge([], 4, False)
    assert store.merge_records() == [([], 1, True), ([(0, 0)], 2, False),
                                     ([(0, 2), (1, 0)], 4, True), ([], 4, False)]
    assert store.merge_records(after_t=1) == store.merge_records()[1:]
    assert store.merge_records(after_t=2) == store.merge_records()[2:]
    assert store.merge_records(after_t=4) == []


def test_r25_merge_records_after_t_reads_only_the_records_after_it(store, monkeypatch):
    store.append_messages([("user", f"m{n}") for n in range(1024)])
    store.append_nodes([(1, 0, "a")])
    for t in range(1, 1025):
        store.append_merge([(0, 0)], t, False)
    from everchat.actors.folder import _daylog, _index
    probes, reads = [], []
    real_entry, real_pread = _index.LogIndex.merge_entry, _daylog.DayLog.pread
    monkeypatch.setattr(_index.LogIndex, "merge_entry",
                        lambda self, k: probes.append(k) or real_entry(self, k))
    monkeypatch.setattr(_daylog.DayLog, "pread",
                        lambda self, *a: reads.append(a) or real_pread(self, *a))
    assert [t for _, t, _ in store.merge_records(after_t=1020)] == [1021, 1022, 1023, 1024]
    assert len(probes) <= 11 and len(reads) == 4


@pytest.mark.parametrize("merges, t, is_open", [
    ([(0, 2)], 2, True),     # the parent node(1, 1) is not built
    ([(0, 1)], 2, True),     # a pair is named by its left member, i even
    ([(62, 0)], 2, True),    # no level above the highest
    ([(0, 0)], 5, True),     # t above T
    ([(0, 0)], 0, True),     # t below the last merge record's t
    ([(0, 0)], 2, 1),        # open is a bool
    ([(0, 0)], "2", True),
    ([(1,)], 2, True),
])
def test_r25_a_merge_record_names_pairs_with_built_parents_and_a_sane_t(store, merges, t,
                                                                          is_open):
    _four(store)
    store.append_nodes([(0, 0, "a"), (1, 0, "ab")])
    store.append_merge([], 1, True)
    with pytest.raises(BadInput):
        store.append_merge(merges, t, is_open)
    assert store.merge_records() == [([], 1, True)]


# -- views and assets --------------------------------------------------------------------------

def test_r22_views_are_saved_atomically_and_load_back_unchanged(store, chat):
    assert store.load_views() == (None, None)
    view, cview = {"v": 1, "lines": [[0, 0], [1, 1]], "t": 4}, {"v": 1, "lines": [[2, 0]]}
    store.save_views(view, cview)
    assert store.load_views() == (view, cview)
    store.save_views(dict(view, t=5), cview)
    assert store.load_views()[0]["t"] == 5
    assert sorted(p.name for p in chat.iterdir() if "view" in p.name) == [
        "compaction-view.json", "view.json"]  # no temporary file left behind
    with pytest.raises(BadInput):
        store.save_views([1, 2], cview)


def test_r22_save_views_replaces_the_files_by_rename_and_fsyncs(store, chat, monkeypatch):
    store.save_views({"a": 1}, {"b": 2})
    inode = (chat / "view.json").stat().st_ino
    count = Counter(monkeypatch)
    store.save_views({"a": 2}, {"b": 3})
    assert (chat / "view.json").stat().st_ino != inode
    assert str(chat) in count.fsyncs and len(count.fsyncs) == 3


def test_r24_an_unparseable_view_file_is_a_corrupt_record_naming_it(store, chat):
    store.save_views({"a": 1}, {"b": 2})
    (chat / "view.json").write_text('{"a": 1,, }')
    with pytest.raises(CorruptRecord) as err:
        store.load_views()
    assert err.value.file == str(chat / "view.json") and err.value.offset == 8


def test_p14_an_unparseable_compaction_view_is_set_aside_by_a_writer_and_loads_as_none(store, chat, caplog):
    """R24: a lost compaction view restarts as the view fitted down; a damaged one is set
    aside in damaged/ (never deleted) with a warning naming it, and never blocks the chat."""
    store.save_views({"a": 1}, {"b": 2})
    (chat / "compaction-view.json").write_text('{"b": 2,, }')
    with ChatStore.open(chat, writer=False) as reader:
        assert reader.load_views() == ({"a": 1}, None)
    assert (chat / "compaction-view.json").exists(), "a reader never moves a file (R5)"
    assert store.load_views() == ({"a": 1}, None)
    assert "compaction-view.json: byte 8" in caplog.text
    [aside] = (chat / "damaged").iterdir()
    assert aside.name.endswith("-compaction-view.json") and aside.read_text() == '{"b": 2,, }'
    assert not (chat / "compaction-view.json").exists()


@pytest.mark.parametrize("image", [PNG, JPEG, GIF, WEBP])
def test_r9_images_are_stored_once_under_their_sha256(store, chat, image):
    import hashlib
    digest = store.put_asset(image)
    assert digest == hashlib.sha256(image).hexdigest()
    mtime = (chat / "assets" / digest).stat().st_mtime_ns
    assert store.put_asset(image) == digest
    assert (chat / "assets" / digest).stat().st_mtime_ns == mtime
    assert store.asset(digest) == image
    assert [p.name for p in (chat / "assets").iterdir()] == [digest]


@pytest.mark.parametrize("data", [b"", b"hello", b"<svg/>", b"RIFF\x00\x00\x00\x00WAVE",
                                  "text", PNG + bytes(5 * 1024 * 1024)])
def test_r9_only_images_of_at_most_5_mb_are_stored(store, chat, data):
    with pytest.raises(BadInput):
        store.put_asset(data)
    assert list((chat / "assets").iterdir()) == []


def test_r9_an_image_of_exactly_5_mib_is_stored(store):
    data = PNG + bytes(5 * 1024 * 1024 - len(PNG))
    assert store.asset(store.put_asset(data)) == data


def test_r9_asset_reads_check_the_name_and_the_bytes(store, chat):
    with pytest.raises(BadInput):
        store.asset("0" * 64)
    with pytest.raises(BadInput):
        store.asset("../chat.json")
    digest = store.put_asset(JPEG)
    (chat / "assets" / digest).write_bytes(JPEG + b"!")
    with pytest.raises(CorruptRecord):
        store.asset(digest)


# -- life cycle ----------------------------------------------------------------------------------

def test_a_closed_store_refuses_every_call_and_closing_twice_is_fine(store):
    store.append_message("user", "hi")
    store.close()
    store.close()
    with pytest.raises(StoreClosed):
        store.message(0)
    with pytest.raises(StoreClosed):
        store.append_message("user", "again")


def test_r5_a_reader_refuses_every_write(chat):
    ChatStore.open(chat, create=True).close()
    with ChatStore.open(chat, writer=False) as s:
        for call in (lambda: s.append_message("user", "x"), lambda: s.append_messages([]),
                     lambda: s.append_nodes([]), lambda: s.append_merge([], 0, False),
                     lambda: s.save_views({}, {}), lambda: s.put_asset(PNG)):
            with pytest.raises(ReadOnlyStore):
                call()


def test_check_verifies_the_chat_and_returns_counts(store):
    _four(store)
    store.append_nodes([(0, 0, "a"), (0, 1, "b"), (1, 0, "ab")])
    store.append_merge([(0, 0)], 4, False)
    assert store.check() == {"messages": 4, "nodes": 3, "merges": 1, "files": 2,
                             "bytes": store.check()["bytes"], "torn": 0, "repaired": 0, "assets": 0}


def test_r1_a_new_chat_is_never_made_among_other_files(tmp_path):
    """A folder of someone's files (a mistaken --data-dir) is refused and left untouched;
    an empty folder, a new one, or one holding only the chat's own keys is fine."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(NotAChat, match=r"holds other files \(notes.txt\) and no chat"):
        ChatStore.open(home, create=True)
    assert [entry.name for entry in home.iterdir()] == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    (tmp_path / "keyed" / "config" / "keys").mkdir(parents=True)
    for folder in ("empty", "new", "keyed"):
        with ChatStore.open(tmp_path / folder, create=True) as store:
            assert store.message_count == 0


def test_r1_a_chat_killed_while_being_made_is_made_on_the_next_open(tmp_path):
    """A kill inside chat.json's atomic write leaves `.chat.json.tmp.<pid>` and no chat.json:
    the next create finishes the chat and removes the stray file; a look-alike name that is not
    one of ours (`.notes.tmp.12`, `.chat.json.tmp.x`) still counts as someone's file."""
    chat = tmp_path / "chat"
    for folder in ("main", "tree"):
        (chat / folder).mkdir(parents=True)
    (chat / ".chat.json.tmp.4571").write_bytes(b'{"format": "everchat-ch')
    with ChatStore.open(chat, create=True) as store:
        assert store.message_count == 0
    assert not (chat / ".chat.json.tmp.4571").exists()
    for stray in (".notes.tmp.12", ".chat.json.tmp.x"):
        other = tmp_path / stray.strip(".")
        other.mkdir()
        (other / stray).write_text("mine")
        with pytest.raises(NotAChat, match="holds other files"):
            ChatStore.open(other, create=True)
