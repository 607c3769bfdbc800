"""Each past-chat format, parsed from a small sample file of the real format, gives
exactly the records expected: kinds (R3), texts with their prefixes, each message's own
date (R1), order, only the kept branch, no thinking (R6), tools only when asked, secrets
redacted (tests/data/import_chats/, written for these tests).
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from everchat.actors.upkeep import importing as chat_sources
from everchat.actors.upkeep.importing import (SourceError, conversation_items, parse_bytes, parse_chatgpt,
                                          parse_claude, parse_claude_code, parse_codex, read_path)

DATA = Path(__file__).parent / "data" / "import_chats"
CHATGPT = DATA / "chatgpt" / "conversations.json"
CLAUDE = DATA / "claude" / "conversations.json"
CLAUDE_CODE = DATA / "claude-code" / "projects" / "-home-ana-src-tilemap" / "5e7a9c1b-2d3f-4a6b-8c0d-1e2f3a4b5c6d.jsonl"
CODEX = next((DATA / "codex").rglob("rollout-*.jsonl"))
# a 1x1 PNG, the image the Claude Code sample holds
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP438AAAAQBAYDFKhhdAAAAAElFTkSuQmCC")


def records(conversations, with_tools=False, since=None) -> list[tuple[str, str, str | None]]:
    out = []
    for conv in conversations:
        out += [(i.kind, i.text, i.date) for i in conversation_items(conv, set(), with_tools=with_tools, since=since)]
    return out


def test_r3_chatgpt_keeps_only_the_current_node_branch_with_each_message_dated():
    conversations = parse_chatgpt(CHATGPT.read_bytes())
    assert [c.title for c in conversations] == ["Sourdough starter and a deploy key", "Trip to Kyoto", "New chat"]
    assert conversations[2].messages == ()  # an empty conversation: nothing to log
    assert records(conversations[1:2]) == [
        ("note", 'ChatGPT conversation "Trip to Kyoto", from 2025-03-02, imported', "2025-03-02T09:15:30+00:00"),
        ("user", "[ChatGPT, 2025-03-02] I'm going to Kyoto for three days in April 🌸. What should I see?",
         "2025-03-02T09:15:30+00:00"),
        ("note", "[ChatGPT replied] Day 1: Fushimi Inari at dawn, then Tōfuku-ji.\nDay 2: Arashiyama bamboo grove "
                 "and the monkey park.\nDay 3: Gion, Kiyomizu-dera and Nishiki market (錦市場).", "2025-03-02T09:15:45+00:00"),
        # the edited question (u2b) is the kept branch; u2a and its reply are not
        ("user", "[ChatGPT, 2025-03-02] [image]\nHere is my rail pass. How much will the bus from Kyoto Station to "
                 "Ginkaku-ji cost in yen?", "2025-03-02T09:18:20+00:00"),
        ("note", "[ChatGPT replied] The flat city-bus fare is 230 yen, so 460 yen there and back.",
         "2025-03-02T09:18:30+00:00"),
    ]


def test_r6_chatgpt_tools_only_when_asked_and_never_its_thoughts():
    kyoto = parse_chatgpt(CHATGPT.read_bytes())[1]
    texts = [text for _, text, _ in records([kyoto], with_tools=True)]
    assert texts[4:6] == ["[ChatGPT called python] fare = 230\nprint(fare * 2)", "[python returned to ChatGPT] 460"]
    assert not any("flat fare." in text for text in texts)  # the thoughts block
    assert not any("capsule hotel" in text for text in texts)  # the branch left behind


def test_secrets_in_a_chat_are_redacted_and_a_message_without_a_time_takes_its_conversations():
    starter = parse_chatgpt(CHATGPT.read_bytes())[0]
    assert records([starter])[1:] == [
        ("user", "[ChatGPT, 2025-03-09] My starter smells like acetone. Also why does OPENAI_API_KEY=[redacted] fail "
                 "in my deploy?", "2025-03-09T09:00:01+00:00"),
        ("note", "[ChatGPT replied] Acetone means it is hungry: feed it twice a day at 1:1:1. Rotate that key now; it "
                 "is in this chat.", "2025-03-09T09:00:00+00:00"),
    ]


def test_r3_claude_export_in_order_with_attachments_named_and_no_thinking():
    conversations = parse_claude(CLAUDE.read_bytes())
    assert [(c.title, len(c.messages)) for c in conversations] == [
        ("Naming the sawtooth test", 7), ("Untitled", 0), ("Grüße aus München", 2)]
    assert records(conversations) == [
        ("note", 'Claude conversation "Naming the sawtooth test", from 2025-05-11, imported', "2025-05-11T08:30:12+00:00"),
        ("user", "[Claude, 2025-05-11] Suggest a name for a test that checks the view never grows past the ceiling. "
                 "Notes attached.\n\n[attached: notes.md]", "2025-05-11T08:30:13+00:00"),
        ("note", "[Claude replied] How about `test_r19_the_view_stays_under_its_ceiling`? It reads as a sentence.",
         "2025-05-11T08:30:20+00:00"),
        ("user", "[Claude, 2025-05-11] Check the current spec for the floor value, please.\n\n[file: spec-screenshot.png]",
         "2025-05-11T08:40:00+00:00"),
        ("note", "[Claude replied] Let me look it up.", "2025-05-11T08:41:55+00:00"),
        ("note", "[Claude replied] The floor is 64,000 bytes — half the ceiling.", "2025-05-11T08:41:55+00:00"),
        ("note", 'Claude conversation "Grüße aus München", from 2025-07-02, imported', "2025-07-02T21:15:00+00:00"),
        ("user", "[Claude, 2025-07-02] Wie sagt man „Ich habe Hunger“ höflich? 🍜", "2025-07-02T21:15:01+00:00"),
        ("note", "[Claude replied] „Ich hätte gern etwas zu essen.“ ist höflicher.", "2025-07-02T21:15:09+00:00"),
    ]
    with_tools = [text for _, text, _ in records(conversations[:1], with_tools=True)]
    assert with_tools[5:7] == ['[Claude called web_search] {"query":"everchat sawtooth floor"}',
                               "[web_search returned to Claude] R19: the floor is 64,000 bytes."]


def test_r3_claude_code_keeps_the_branch_it_ended_on_without_side_threads_meta_or_thinking():
    (session,) = parse_claude_code(CLAUDE_CODE.read_bytes())
    assert (session.id, session.title, session.where) == (
        "5e7a9c1b-2d3f-4a6b-8c0d-1e2f3a4b5c6d", "Fix the tile cache eviction bug", "/home/ana/src/tilemap")
    assert records([session]) == [
        ("note", 'Claude Code session "Fix the tile cache eviction bug", from 2025-08-04, in /home/ana/src/tilemap, '
                 "imported", "2025-08-04T14:02:10+00:00"),
        ("user", "[Claude Code, 2025-08-04] The tile cache evicts the newest tile instead of the oldest. Can you find "
                 "why? ✨", "2025-08-04T14:02:30+00:00"),
        ("note", "[Claude Code replied] I'll read the cache first.", "2025-08-04T14:02:36+00:00"),
        ("note", "[Claude Code replied] `evict` pops from the end of the list, which holds the newest tile. It should "
                 "pop index 0.", "2025-08-04T14:02:40+00:00"),
        ("user", "[Claude Code, 2025-08-04] Fix it with a deque and add a test. Token for CI: [redacted]\n[image]",
         "2025-08-04T14:04:00+00:00"),
        ("note", "[Claude Code replied] Done: `evict` now uses `popleft()` on a deque, and test_evicts_the_oldest_tile "
                 "passes.", "2025-08-04T14:04:30+00:00"),
    ]
    tools = [text for _, text, _ in records([session], with_tools=True)][3:5]
    assert tools == ['[Claude Code called Read] {"file_path":"/home/ana/src/tilemap/cache.py"}',
                     "[Read returned to Claude Code]      1\tclass TileCache:\n     2\t    def evict(self):\n"
                     "     3\t        self.tiles.pop()"]


def test_r3_codex_rollout_skips_its_context_reasoning_and_events():
    (session,) = parse_codex(CODEX.read_bytes())
    assert records([session], with_tools=True) == [
        ("note", 'Codex session "Why does `weather --city Zürich` print the temperature in F…", from 2025-09-14, in '
                 "/home/ana/src/weather-cli, imported", "2025-09-14T10:02:11+00:00"),
        ("user", "[Codex, 2025-09-14] Why does `weather --city Zürich` print the temperature in Fahrenheit?",
         "2025-09-14T10:02:20+00:00"),
        ("note", '[Codex called shell] {"command":["bash","-lc","rg -n units src/"],"workdir":"/home/ana/src/weather-cli"}',
         "2025-09-14T10:02:25+00:00"),
        ("note", "[shell returned to Codex] src/config.rs:12:    units: Units::Imperial,\n", "2025-09-14T10:02:25+00:00"),
        ("note", "[Codex replied] `src/config.rs` defaults `units` to `Units::Imperial`. Set it to `Units::Metric`, or "
                 "pass `--units metric`.", "2025-09-14T10:02:31+00:00"),
        ("user", "[Codex, 2025-09-14] Make metric the default and export WEATHER_API_TOKEN=[redacted] in the README "
                 "example.", "2025-09-14T10:05:00+00:00"),
        ("note", "[Codex replied] Done: metric is the default; the README reads the token from the environment instead "
                 "of showing one.", "2025-09-14T10:05:09+00:00"),
    ]


def test_the_format_is_told_from_the_content_and_a_folder_is_searched():
    assert [c.source for c in parse_bytes(CLAUDE.read_bytes(), "x.json")] == ["claude"] * 3
    assert [c.source for c in parse_bytes(CODEX.read_bytes(), "x.jsonl")] == ["codex"]
    found = read_path(DATA / "claude-code")
    assert [len(f.conversations) for f in found] == [0, 1]  # a log holding only a summary gives none
    with pytest.raises(SourceError, match="not a ChatGPT or Claude export"):
        parse_bytes(b"just some notes\n", "notes.txt")
    with pytest.raises(SourceError, match="deep.json: not JSON"):
        parse_bytes(b"[" * 200_000 + b"]" * 200_000, "deep.json")  # too deep to read: refused in words


def test_a_folder_skips_files_that_hold_no_chat_and_says_why(tmp_path):
    shutil.copytree(DATA / "codex", tmp_path / "logs")
    (tmp_path / "logs" / "metrics.jsonl").write_text('{"cpu": 0.4}\n', encoding="utf-8")
    found = read_path(tmp_path / "logs")
    assert [(Path(f.origin).name, len(f.conversations), bool(f.skipped)) for f in found] == [
        ("metrics.jsonl", 0, True), (CODEX.name, 1, False)]
    assert "not a ChatGPT or Claude export, nor a Claude Code or Codex session log" in found[0].skipped
    with pytest.raises(SourceError):
        read_path(tmp_path / "logs" / "metrics.jsonl")  # named alone, it must be a chat


def test_keys_are_durable_source_ids_and_known_ones_are_left_out():
    kyoto = parse_chatgpt(CHATGPT.read_bytes())[1]
    items = conversation_items(kyoto, set())
    cid = "67c3f1d2-8a4e-8000-9b1c-2f3e4d5c6b7a"
    assert [i.key for i in items] == [f"chat:chatgpt:{cid}"] + [f"chat:chatgpt:{cid}:{m}" for m in
                                                                 ("u1", "r1", "u2b", "r2b")]
    assert conversation_items(kyoto, {i.key for i in items}) == []
    # a conversation that went on since: a note says so, then only the new messages
    later = conversation_items(kyoto, {i.key for i in items[:3]}, last="chat:codex:other:line-1")
    assert [(i.kind, i.text[:60], i.key) for i in later] == [
        ("note", 'ChatGPT conversation "Trip to Kyoto", from 2025-03-02, conti', f"chat:chatgpt:{cid}:+u2b"),
        ("user", "[ChatGPT, 2025-03-02] [image]\nHere is my rail pass. How much", f"chat:chatgpt:{cid}:u2b"),
        ("note", "[ChatGPT replied] The flat city-bus fare is 230 yen, so 460 ", f"chat:chatgpt:{cid}:r2b")]
    # a run interrupted inside this conversation goes on without that note
    resumed = conversation_items(kyoto, {i.key for i in items[:3]}, last=items[2].key)
    assert [i.key for i in resumed] == [i.key for i in items[3:]]


def test_since_drops_what_was_said_before_it():
    from datetime import datetime, timezone

    kyoto = parse_chatgpt(CHATGPT.read_bytes())[1]
    after = records([kyoto], since=datetime(2025, 3, 2, 9, 17, tzinfo=timezone.utc))
    assert [text[:30] for _, text, _ in after] == [
        'ChatGPT conversation "Trip to ', "[ChatGPT, 2025-03-02] [image]\n", "[ChatGPT replied] The flat cit"]
    assert records([kyoto], since=datetime(2026, 1, 1, tzinfo=timezone.utc)) == []


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_zip_export_is_read_in_memory_and_its_member_names_never_become_paths(tmp_path):
    archive = tmp_path / "export.zip"
    archive.write_bytes(_zip({"../../evil/conversations.json": CHATGPT.read_bytes(), "user.json": b"{}",
                              "file-Qw3rTy-rail-pass.png": PNG}))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    (found,) = read_path(archive)
    assert found.origin == f"{archive}:../../evil/conversations.json"
    assert [c.title for c in found.conversations] == ["Sourdough starter and a deploy key", "Trip to Kyoto", "New chat"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not (tmp_path.parent / "evil").exists()
    # R9: the image the question named is read from its member and logged with it
    question = [i for i in conversation_items(found.conversations[1], set()) if "rail pass" in i.text]
    assert [i.images for i in question] == [(PNG,)]


def test_r9_images_a_log_holds_go_with_their_message_and_others_are_left_out():
    (session,) = parse_claude_code(CLAUDE_CODE.read_bytes())
    with_image = [i for i in conversation_items(session, set()) if i.images]
    assert [(i.text[-7:], i.images) for i in with_image] == [("[image]", (PNG,))]
    assert parse_chatgpt(CHATGPT.read_bytes())[1].messages[2].pointers == ("file-Qw3rTy",)
    # not an image of R9's four types: the text keeps saying [image], nothing is attached
    line = {"timestamp": "2025-09-14T10:02:20.002Z", "type": "response_item", "payload": {
        "type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is in these?"},
            {"type": "input_image", "image_url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
            {"type": "input_image", "image_url": "data:image/bmp;base64," + base64.b64encode(b"BM" + bytes(60)).decode()}]}}
    (codex,) = parse_codex(json.dumps(line).encode())
    (item,) = conversation_items(codex, set())[1:]
    assert (item.text, item.images) == ("[Codex, 2025-09-14] What is in these?\n[image]\n[image]", (PNG,))


def test_a_member_over_the_limit_and_a_bomb_are_refused_with_a_clear_message(tmp_path, monkeypatch):
    from everchat.actors.upkeep.importing import _files

    monkeypatch.setattr(_files, "MAX_BYTES", 10_000)
    bomb = tmp_path / "bomb.zip"
    bomb.write_bytes(_zip({"conversations.json": b"[" + b" " * 1_000_000 + b"]"}))
    assert bomb.stat().st_size < 10_000  # small on disk, a million bytes inside
    with pytest.raises(SourceError, match=r"conversations.json declares 1,000,002 bytes, over the 10,000-byte limit"):
        read_path(bomb)
    # a member that holds more than it declares (its header edited): caught while read
    lying = bytearray(_zip({"conversations.json": b"[" + b" " * 5000 + b"]"}))
    central = lying.rfind(b"PK\x01\x02")
    lying[central + 24:central + 28] = (100).to_bytes(4, "little")  # the declared size, in the central directory
    (tmp_path / "lying.zip").write_bytes(bytes(lying))
    with pytest.raises(SourceError, match="lying.zip:conversations.json (holds more than the 100 bytes it declares|"
                                          "cannot be read)"):
        read_path(tmp_path / "lying.zip")
    big = tmp_path / "conversations.json"
    big.write_bytes(b"[" + b" " * 20_000 + b"]")
    with pytest.raises(SourceError, match="is 20,002 bytes, over the 10,000-byte limit"):
        read_path(big)


def test_a_claude_export_zip_is_read_like_its_json(tmp_path):
    archive = tmp_path / "data-2025-07-03-12-00-00.zip"
    archive.write_bytes(_zip({"conversations.json": CLAUDE.read_bytes(), "users.json": b"[]", "projects.json": b"[]"}))
    (found,) = read_path(archive)
    assert [c.title for c in found.conversations] == ["Naming the sawtooth test", "Untitled", "Grüße aus München"]


def test_every_public_name_is_exported():
    assert set(chat_sources.__all__) <= set(dir(chat_sources))
    assert json.loads(CHATGPT.read_bytes())  # the sample is plain JSON


def test_a_resumed_claude_code_session_logs_the_messages_it_copied_once():
    """Claude Code starts a resumed session's log with copies of the earlier messages (their
    uuids kept): a message is known by its uuid whichever log holds it."""
    from everchat.actors.upkeep.importing import imported_ids, remember

    (first,) = parse_claude_code(CLAUDE_CODE.read_bytes())
    lines = CLAUDE_CODE.read_text(encoding="utf-8").splitlines()[:-1]  # without the torn line
    resumed = [line.replace("5e7a9c1b-2d3f-4a6b-8c0d-1e2f3a4b5c6d", "7d6c5b4a-0000-4111-8222-933344445555")
               for line in lines]
    resumed.append(json.dumps({"parentUuid": "c0000000-0000-4000-8000-00000000000b", "isSidechain": False,
                               "type": "user", "sessionId": "7d6c5b4a-0000-4111-8222-933344445555",
                               "cwd": "/home/ana/src/tilemap", "uuid": "c0000000-0000-4000-8000-00000000000c",
                               "timestamp": "2025-08-05T09:00:00.000Z",
                               "message": {"role": "user", "content": "Now make the cache size configurable."}}))
    (second,) = parse_claude_code("\n".join(resumed).encode())
    known: set[str] = set()
    for item in conversation_items(first, set()):
        remember(known, item.key)
    again = conversation_items(second, known)
    assert [(i.kind, i.text) for i in again] == [
        ("note", 'Claude Code session "Fix the tile cache eviction bug", from 2025-08-04, in /home/ana/src/tilemap, '
                 "imported"),
        ("user", "[Claude Code, 2025-08-05] Now make the cache size configurable.")]
    # the same from the log's keys, as a later run reads them
    known_later, _ = imported_ids([i.key for i in conversation_items(first, set())])
    assert [i.text for i in conversation_items(second, known_later)][1:] == [again[1].text]


def test_an_older_codex_rollout_without_payloads_is_read_too():
    old = "\n".join(json.dumps(line) for line in [
        {"id": "5f1c2d3e-aaaa-4bbb-8ccc-0123456789ab", "timestamp": "2025-04-30T16:20:00.000Z", "instructions": None},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the TODOs in main.go"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "There are two TODOs."}]},
    ]).encode()
    (session,) = parse_bytes(old, "rollout-2025-04-30T16-20-00-5f1c2d3e.jsonl")
    assert (session.source, session.id, session.title) == ("codex", "5f1c2d3e-aaaa-4bbb-8ccc-0123456789ab",
                                                         "List the TODOs in main.go")
    assert [(i.kind, i.text, i.date) for i in conversation_items(session, set())][1:] == [
        ("user", "[Codex, 2025-04-30] List the TODOs in main.go", "2025-04-30T16:20:00+00:00"),
        ("note", "[Codex replied] There are two TODOs.", "2025-04-30T16:20:00+00:00")]


_LEAF = (st.none() | st.booleans() | st.integers(-5, 2**40) | st.floats(allow_nan=False) | st.text(max_size=8)
         | st.sampled_from(["user", "assistant", "tool", "system", "human", "text", "image", "tool_use", "tool_result",
                            "thinking", "message", "response_item", "session_meta", "function_call",
                            "function_call_output", "input_text", "output_text", "input_image", "multimodal_text",
                            "image_asset_pointer", "code", "2025-01-01T00:00:00Z", "root"]))
_KEYS = st.sampled_from(["mapping", "current_node", "message", "parent", "children", "author", "role", "content",
                         "content_type", "parts", "create_time", "recipient", "metadata", "id", "title", "chat_messages",
                         "sender", "text", "type", "name", "input", "uuid", "parentUuid", "sessionId", "timestamp",
                         "cwd", "isSidechain", "isMeta", "payload", "call_id", "output", "arguments", "source", "data",
                         "image_url", "attachments", "files", "file_name", "summary", "leafUuid", "root",
                         "asset_pointer", "tool_use_id"])
_VALUES = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=6),
                       max_leaves=30)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_VALUES, max_size=4), st.booleans(), st.sampled_from(["mapping", "chat_messages", "payload", "sessionId"]))
def test_a_file_of_any_shape_is_parsed_or_refused_in_words_never_a_crash(objects, as_lines, hint):
    """Exports are foreign data: a field of an unexpected shape counts as missing."""
    objects = [{**o, hint: o.get(hint, {})} if isinstance(o, dict) else {hint: o} for o in objects]
    data = b"\n".join(json.dumps(o).encode() for o in objects) if as_lines else json.dumps(objects).encode()
    try:
        conversations = parse_bytes(data, "any.json")
    except SourceError:
        return
    for conv in conversations:
        for item in conversation_items(conv, set(), with_tools=True):
            item.text.encode()  # clean UTF-8 (a lone surrogate would be refused by the store)
            assert len(item.key.encode()) <= 1024 and item.key.count(":") <= 3 + item.key.endswith("+")


def test_a_lone_surrogate_or_a_colon_in_an_id_cannot_spoil_a_key_or_a_text():
    export = [{"title": "bad \ud800 title", "conversation_id": "a:b", "current_node": "m:1", "mapping": {
        "m:1": {"id": "m:1", "parent": None, "children": [], "message": {
            "id": "m:1", "author": {"role": "user"}, "create_time": 1.7e9,
            "content": {"content_type": "text", "parts": ["half an emoji \ud83d here"]}}}}}]
    (conv,) = parse_chatgpt(json.dumps(export).encode())
    head, said = conversation_items(conv, set())
    assert said.text == "[ChatGPT, 2023-11-14] half an emoji \ufffd here" and "bad \ufffd title" in head.text
    assert head.key.startswith("chat:chatgpt:sha256-") and said.key.count(":") == 3
