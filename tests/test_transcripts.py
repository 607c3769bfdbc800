"""Agents' transcripts (R38, actors/folder/_transcripts.py): records with the log's rules
(R2, R4, P3), keyed idempotent appends, R7's clip, R35's pages, and the log writer's
handlers over a real node."""

from __future__ import annotations

import json
import zlib

import pytest

from everchat.actors.log_writer.actor import LogWriter
from everchat.actors.folder import CorruptRecord, NoTranscript, ReadOnlyStore, Transcripts
from everchat.actors.folder._errors import BadInput
from everchat.transport import Node, RemoteError, schema


def path_of(chat, name="Alpha"):
    return chat / "agents" / name / "transcript.jsonl"


def test_r38_records_are_numbered_lines_each_with_its_crc(tmp_path):
    book = Transcripts(tmp_path, writer=True)
    assert book.append("Alpha", "user", "find the bug", "task") == [0]
    assert book.append("Alpha", "everchat", "Looking.", "k1", {"turn": 0}) == [1]
    lines = path_of(tmp_path).read_bytes().splitlines()
    assert json.loads(lines[0].decode()) | {"crc": ""} == {"transcript": 1, "agent": "Alpha", "crc": ""}
    for number, line in enumerate(lines[1:]):
        body, crc = line[:-18], line[-10:-2]
        assert int(crc, 16) == zlib.crc32(body)
        record = json.loads(line)
        assert record["i"] == number
    again = Transcripts(tmp_path, writer=False)
    assert [(r.i, r.kind, r.text, r.meta) for r in again.records("Alpha")] == [
        (0, "user", "find the bug", None), (1, "everchat", "Looking.", {"turn": 0})]
    assert again.names() == ["Alpha"]


def test_r38_a_resent_key_is_logged_once(tmp_path):
    book = Transcripts(tmp_path, writer=True)
    assert book.append("Alpha", "user", "task", "task") == [0]
    assert book.append("Alpha", "tool", "zoom {}", "turn-0-1") == [1]
    size = path_of(tmp_path).stat().st_size
    assert book.append("Alpha", "tool", "zoom {}", "turn-0-1") == [1]
    assert path_of(tmp_path).stat().st_size == size
    reopened = Transcripts(tmp_path, writer=True)  # the keys survive a reopen
    assert reopened.append("Alpha", "tool", "zoom {}", "turn-0-1") == [1]
    assert path_of(tmp_path).stat().st_size == size


def test_r2_a_torn_last_line_is_reported_skipped_and_terminated_before_the_next_record(tmp_path):
    book = Transcripts(tmp_path, writer=True)
    book.append("Alpha", "user", "task", "task")
    torn_at = path_of(tmp_path).stat().st_size
    with open(path_of(tmp_path), "ab") as f:
        f.write(b'{"i":1,"kind":"everchat","te')
    reader = Transcripts(tmp_path, writer=False)
    assert [r.text for r in reader.records("Alpha")] == ["task"]
    assert [(r.file, r.offset) for r in reader.repairs] == [("agents/Alpha/transcript.jsonl", torn_at)]
    writer = Transcripts(tmp_path, writer=True)
    assert writer.append("Alpha", "everchat", "done", "k") == [1]
    after = Transcripts(tmp_path, writer=False)
    assert [r.text for r in after.records("Alpha")] == ["task", "done"]
    assert after.repairs == []  # terminated and listed: no longer torn


def test_r2_p3_a_changed_byte_is_a_loud_error_naming_file_and_offset(tmp_path):
    book = Transcripts(tmp_path, writer=True)
    book.append("Alpha", "user", "task", "task")
    book.append("Alpha", "everchat", "the answer is 42", "k")
    data = path_of(tmp_path).read_bytes()
    at = data.index(b"42")
    path_of(tmp_path).write_bytes(data[:at] + b"43" + data[at + 2:])
    second = data.index(b'{"i":1')
    with pytest.raises(CorruptRecord) as caught:
        Transcripts(tmp_path, writer=False).records("Alpha")
    assert caught.value.file == "agents/Alpha/transcript.jsonl" and caught.value.offset == second
    assert "checksum" in str(caught.value)


def test_r2_a_gap_in_the_numbers_is_a_loud_error(tmp_path):
    book = Transcripts(tmp_path, writer=True)
    book.append("Alpha", "user", "task", "task")
    lines = path_of(tmp_path).read_bytes().splitlines(keepends=True)
    from everchat.actors.folder._records import seal
    forged = seal(b'{"i":5,"kind":"user","text":"x","size":1,"date":"2026-01-01T00:00:00+00:00","key":"z"')
    path_of(tmp_path).write_bytes(b"".join(lines) + forged)
    with pytest.raises(CorruptRecord, match="record number 5 where 1 was due"):
        Transcripts(tmp_path, writer=False).records("Alpha")


def test_r7_a_long_echo_is_clipped(tmp_path):
    book = Transcripts(tmp_path, writer=True)
    book.append("Alpha", "echo", "a" * 20_000 + "b" * 20_000, "k")
    (record,) = Transcripts(tmp_path, writer=False).records("Alpha")
    assert record.text == "a" * 15_000 + "\n[10000 characters cut]\n" + "b" * 15_000
    assert record.meta == {"cut": 10_000}


def test_r35_zoom_name_pages_are_16000_bytes_of_i_kind_text(tmp_path):
    book = Transcripts(tmp_path, writer=True)
    book.append("Alpha", "user", "task", "task")
    for n in range(1, 6):
        book.append("Alpha", "everchat", f"reply {n} " + "x" * 5000, f"k{n}")
    text, pages = book.page("Alpha", 1)
    assert pages == 2
    assert text.startswith("0 user: task\n1 everchat: reply 1 ")
    assert len(text.encode()) <= 16_000
    rest, _ = book.page("Alpha", 2)
    assert text + rest == "\n".join(r.line for r in book.records("Alpha"))
    with pytest.raises(BadInput, match="has 2 pages, not page 3"):
        book.page("Alpha", 3)
    with pytest.raises(NoTranscript):
        book.page("Beta", 1)


def test_r5_a_reader_never_writes_and_names_must_be_agents_names(tmp_path):
    with pytest.raises(ReadOnlyStore):
        Transcripts(tmp_path, writer=False).append("Alpha", "user", "x", "k")
    assert not (tmp_path / "agents").exists()
    book = Transcripts(tmp_path, writer=True)
    for bad in ("1abc", "../x", "", "a b"):
        with pytest.raises(BadInput):
            book.append(bad, "user", "x", "k")
    with pytest.raises(BadInput, match="kind"):
        book.append("Alpha", "note", "x", "k")


def test_r38_the_log_writer_appends_and_reads_transcripts_over_the_wire(tmp_path):
    node = Node("transcripts-test").start()
    try:
        node.host("log_writer", LogWriter, tmp_path / "chat")
        ask = lambda msg: node.ask("log_writer", msg, timeout=10)  # noqa: E731
        assert ask(schema.AppendTranscript("Alpha", "user", "task", "task", None)).ids == [0]
        assert ask(schema.AppendTranscript("Alpha", "everchat", "done", "k", {"turn": 0})).ids == [1]
        assert ask(schema.AppendTranscript("Alpha", "everchat", "done", "k", {"turn": 0})).ids == [1]
        page = ask(schema.ReadTranscript("Alpha", 1))
        assert (page.text, page.page, page.pages) == ("0 user: task\n1 everchat: done", 1, 1)
        got = ask(schema.ReadTranscriptRecords("Alpha", 1))
        assert [r["text"] for r in got.records] == ["done"] and got.more is False
        assert ask(schema.ListTranscripts()).agents == ["Alpha"]
        with pytest.raises(RemoteError) as caught:
            ask(schema.ReadTranscript("Nobody", 1))
        assert caught.value.kind == "NoTranscript"
    finally:
        node.stop()
    assert not list((tmp_path / "chat" / "main").glob("*.jsonl")) or all(
        b"Alpha" not in p.read_bytes() for p in (tmp_path / "chat" / "main").glob("*.jsonl"))
