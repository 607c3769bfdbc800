"""The chat as the web page's JSON (frontends/web/chat.py), on a stand-in session: view lines
(R14, R15, R16), MSGs (R3's kinds, R8's parts, R37's incomplete), the memory path from a
view line down to a message's leaf (R10), and a turn's reply id."""

from __future__ import annotations

import pytest

from everchat.actors.tree import PLACEHOLDER
from everchat.actors.zoom import MemoryTools, ZoomError
from everchat.frontends.web.chat import WebChat, message_json, parse_line, parse_view
from everchat.transport import schema


def record(i: int, kind: str = "user", text: str = "", meta=None, images=()) -> schema.MessageRecord:
    return schema.MessageRecord(i=i, kind=kind, text=text or f"message {i}", size=0, date=f"2026-12-03T10:00:{i:02}",
                                images=list(images), meta=meta)


class Reader:
    """`MemoryReader` over a list of records and a dict of built nodes."""

    def __init__(self, records, nodes) -> None:
        self.records = records
        self.nodes = nodes

    def count(self) -> int:
        return len(self.records)

    def message(self, i: int):
        return self.records[i]

    def node(self, l: int, i: int):  # noqa: E741
        return self.nodes.get((l, i))

    def asset(self, digest: str) -> bytes:
        raise KeyError(digest)


class Session:
    def __init__(self, records, nodes, view: str) -> None:
        self.memory = MemoryTools(Reader(records, nodes))
        self._view = view

    def view(self) -> str:
        return self._view


def test_r14_r15_view_lines_are_parsed_with_their_bytes_and_built_flag():
    view = f"<chat>\n0+4|four of them\n4+1|{PLACEHOLDER}\n5+1|ünïcode | with a bar\n</chat>"
    lines = parse_view(view)
    assert lines == [
        {"first": 0, "count": 4, "text": "four of them", "bytes": 17, "built": True},
        {"first": 4, "count": 1, "text": PLACEHOLDER, "bytes": len(f"4+1|{PLACEHOLDER}") + 1, "built": False},
        {"first": 5, "count": 1, "text": "ünïcode | with a bar", "bytes": len("5+1|ünïcode | with a bar".encode()) + 1,
         "built": True},
    ]
    assert parse_view("<chat>\n</chat>") == []
    with pytest.raises(ValueError):
        parse_line("no head here")


def test_r3_r37_a_record_becomes_a_msg_with_the_agents_replies_as_assistant():
    assert message_json(record(3, "everchat", "Hi", meta={"turn": 2, "incomplete": "stopped"})) == {
        "id": 3, "kind": "assistant", "text": "Hi", "date": "2026-12-03T10:00:03", "images": [], "incomplete": True}
    for kind in ("user", "note", "tool", "echo", "work"):
        assert message_json(record(0, kind))["kind"] == kind
    part = message_json(record(4, "user", "a", meta={"part": 1, "parts": 2}, images=["d" * 64]))
    assert (part["part"], part["parts"], part["images"]) == (1, 2, ["d" * 64])


def test_r8_a_user_message_in_parts_is_one_msg_with_every_part():
    records = [record(0, "user", "first half ", meta={"part": 1, "parts": 2}),
               record(1, "user", "second half", meta={"part": 2, "parts": 2})]
    message = WebChat(Session(records, {}, "")).message(0)
    assert message["text"] == "first half second half" and message["ids"] == [0, 1] and "parts" not in message


def test_r10_the_memory_path_runs_from_the_view_line_down_to_the_message():
    records = [record(i) for i in range(6)]
    nodes = {(2, 0): "zero to three", (1, 1): "two and three", (0, 3): "user: message 3"}
    view = "<chat>\n0+4|zero to three\n4+1|user: message 4\n5+1|user: message 5\n</chat>"
    chat = WebChat(Session(records, nodes, view))
    memory = chat.memory(3)
    assert memory["line"]["first"] == 0 and memory["line"]["count"] == 4
    assert [(p["first"], p["count"], p["text"], p["built"]) for p in memory["path"]] == [
        (0, 4, "zero to three", True), (2, 2, "two and three", True), (3, 1, "user: message 3", True)]
    assert chat.memory(2)["path"][-1] == {"first": 2, "count": 1, "text": PLACEHOLDER,
                                          "bytes": len(f"2+1|{PLACEHOLDER}") + 1, "built": False}
    assert [p["first"] for p in chat.memory(5)["path"]] == [5]
    with pytest.raises(ZoomError, match="No message 6"):
        chat.memory(6)


def test_r35_zoom_gives_the_two_halves_or_the_message():
    records = [record(i) for i in range(4)]
    chat = WebChat(Session(records, {(1, 0): "zero and one", (1, 1): "two and three"}, ""))
    assert chat.zoom(0, 4) == {"first": 0, "count": 4, "halves": [
        {"first": 0, "count": 2, "text": "zero and one", "bytes": 17, "built": True},
        {"first": 2, "count": 2, "text": "two and three", "bytes": 18, "built": True}]}
    assert chat.zoom(2, 1)["message"]["text"] == "message 2"
    with pytest.raises(ZoomError, match=r"^No line 1\+2\. id must be a multiple of n"):
        chat.zoom(1, 2)


def test_r37_the_reply_of_a_turn_is_its_last_logged_reply():
    records = [record(0, "user"), record(1, "everchat", meta={"turn": 0}), record(2, "tool", meta={"turn": 0}),
               record(3, "echo", meta={"turn": 0}), record(4, "everchat", meta={"turn": 0}), record(5, "user"),
               record(6, "note")]
    chat = WebChat(Session(records, {}, ""))
    assert chat.reply_of(0) == 4
    assert chat.reply_of(5) is None
