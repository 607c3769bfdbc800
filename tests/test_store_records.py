"""The store's pure record rules: R7 clipping, R8 splitting, record lines (R1, R3)."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from everchat.actors.folder import clip_echo, split_text
from everchat.actors.folder._records import (Malformed, encode_merge, encode_message,
                                            encode_node, parse_message, parse_tree, seal)

# Pieces that make long texts cheaply: one to four UTF-8 bytes a character, spaces,
# newlines and long runs without either.
_PIECES = st.sampled_from(["a", "é", "€", "😀", " ", "\n", "word ", "x" * 97, "ü" * 51,
                           "😀" * 33, "line\n", "\u2028", "\r\n", '"', "\\"])


@st.composite
def texts(draw, max_pieces=400, max_repeat=60):
    pieces = draw(st.lists(st.tuples(_PIECES, st.integers(1, max_repeat)),
                           max_size=max_pieces))
    return "".join(piece * n for piece, n in pieces)


def _check_split(text: str, limit: int) -> list[str]:
    parts = split_text(text, limit)
    assert "".join(parts) == text
    data = text.encode()
    start = 0
    for k, part in enumerate(parts):
        size = len(part.encode())
        assert 1 <= size <= limit or len(parts) == 1
        if k < len(parts) - 1:
            # Not last: at least half the limit (minus a cut character), and the cut is
            # the last newline of the window's second half, else its last space, else
            # the last character boundary.
            assert size >= limit // 2 - 3
            window = data[start + limit // 2:start + limit]
            if b"\n" in window:
                assert part.endswith("\n")
                assert b"\n" not in data[start + size:start + limit]
            elif b" " in window:
                assert part.endswith(" ")
                assert b" " not in data[start + size:start + limit]
            else:
                assert size > limit - 4
        start += size
    return parts


@settings(max_examples=300, deadline=None)
@given(texts(max_pieces=40, max_repeat=8), st.integers(4, 64))
def test_r8_parts_rejoin_fit_and_cut_where_preferred_at_small_limits(text, limit):
    _check_split(text, limit)


@settings(max_examples=60, deadline=None)
@given(texts())
def test_r8_parts_rejoin_and_fit_16000_bytes(text):
    parts = _check_split(text, 16_000)
    assert all(len(p.encode()) <= 16_000 for p in parts)


def test_r8_a_text_of_16000_bytes_is_one_part_and_one_byte_more_is_two():
    assert split_text("a" * 16_000) == ["a" * 16_000]
    assert split_text("a" * 16_001) == ["a" * 16_000, "a"]


def test_r8_never_cuts_inside_a_character():
    text = "é" * 8_001  # 16,002 bytes: the limit falls inside the last 'é'
    parts = split_text(text)
    assert parts == ["é" * 8_000, "é"]


def test_r8_prefers_the_last_newline_then_the_last_space():
    text = "a" * 9_000 + "\n" + "b" * 5_000 + " " + "c" * 5_000
    assert split_text(text) == ["a" * 9_000 + "\n", "b" * 5_000 + " " + "c" * 5_000]
    text = "a" * 9_000 + " " + "b" * 9_000
    assert split_text(text) == ["a" * 9_000 + " ", "b" * 9_000]


def test_r8_an_early_newline_does_not_make_a_tiny_part():
    text = "a\n" + "b" * 20_000
    assert split_text(text) == ["a\n" + "b" * 15_998, "b" * 4_002]


def test_r7_an_echo_of_30000_characters_is_kept_whole():
    assert clip_echo("x" * 30_000) == ("x" * 30_000, 0)


@settings(max_examples=50, deadline=None)
@given(st.integers(30_001, 80_000), st.sampled_from(["x", "é", "😀"]))
def test_r7_a_long_echo_keeps_15000_characters_each_end_and_one_marker_line(n, ch):
    text = "".join(chr(ord("a") + k % 26) if k % 3 else ch for k in range(n))
    clipped, cut = clip_echo(text)
    assert cut == n - 30_000
    assert clipped == text[:15_000] + f"\n[{cut} characters cut]\n" + text[-15_000:]


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 80_000), st.sampled_from(["x", "é", "\n"]))
def test_r7_clipping_an_echo_twice_keeps_the_first_clip_and_its_count(n, ch):
    """A device clips a shell's output by R7 as it streams; the store clips the echo again
    when it is logged: the text and the true count must survive (they once became
    "[24 characters cut]", the marker's own length)."""
    text = "".join(chr(ord("a") + k % 26) if k % 5 else ch for k in range(n))
    once = clip_echo(text)
    assert clip_echo(once[0]) == (once[0], once[1])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200).filter(lambda t: not any(0xD800 <= ord(c) < 0xE000 for c in t)),
       st.sampled_from(["user", "everchat", "tool", "echo", "work", "note"]),
       st.none() | st.text(min_size=1, max_size=20).filter(lambda t: t.isprintable()))
def test_r1_a_message_line_is_one_line_of_compact_json_that_parses_back(text, kind, key):
    size = len(text.encode())
    line = encode_message(7, kind, text, size, "2026-10-08T10:00:00+02:00", key, (), None)
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    rec = parse_message(line[:-1])
    assert (rec["i"], rec["kind"], rec["text"], rec["size"], rec.get("key")) == (
        7, kind, text, size, key)


_clean = st.text(max_size=60).filter(lambda t: not any(0xD800 <= ord(c) < 0xE000 for c in t))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**40), _clean, _clean, st.none() | _clean,
       st.lists(st.sampled_from(["a" * 64, "0" * 64]), max_size=2),
       st.none() | st.dictionaries(_clean, st.none() | st.integers() | _clean, max_size=3))
def test_r1_message_lines_are_exactly_compact_json_dumps(i, text, date, key, images, meta):
    rec = {"i": i, "kind": "note", "text": text, "size": len(text.encode()), "date": date}
    rec.update({k: v for k, v in (("key", key), ("images", images), ("meta", meta))
                if v is not None and v != []})
    expected = seal(json.dumps(rec, ensure_ascii=False, separators=(",", ":"))[:-1].encode())
    assert encode_message(i, "note", text, rec["size"], date, key, tuple(images),
                          meta) == expected


def test_r1_message_lines_are_compact_and_not_ascii_escaped():
    line = encode_message(0, "user", "hé", 3, "2026-10-08T23:59:58+02:00", None, (), None)
    assert line == ('{"i":0,"kind":"user","text":"hé","size":3,'
                    '"date":"2026-10-08T23:59:58+02:00","crc":"%08x"}\n' % zlib.crc32(
                        '{"i":0,"kind":"user","text":"hé","size":3,"date":"2026-10-08T23:59:58+02:00"'.encode())
                    ).encode()
    assert encode_node(1, 2, "ab", 2) == seal(b'{"l":1,"i":2,"text":"ab","size":2')
    assert encode_merge([(1, 0), (2, 2)], 9, True) == seal(b'{"merge":[[1,0],[2,2]],"t":9,"open":true')


def test_p3_a_sealed_record_carries_the_crc32_of_its_bytes_and_any_change_is_found():
    """P3: the checksum is the CRC-32 of the bytes before `,"crc"`; every single bit flip of
    a sealed line is refused (as a bad checksum, or as no longer being a record)."""
    line = encode_message(4, "note", "amber-42 é", 11, "2026-10-08T23:59:58+02:00", "k", (), {"a": 1})[:-1]
    assert parse_message(line, sealed=True)["text"] == "amber-42 é"
    for bit in range(len(line) * 8):
        flipped = bytearray(line)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(Malformed):
            parse_message(bytes(flipped), sealed=True)
    unsealed = b'{"i":4,"kind":"note","text":"x","size":1,"date":"d"}'
    assert parse_message(unsealed)["text"] == "x"  # a chat from before checksums
    with pytest.raises(Malformed, match="no checksum"):
        parse_message(unsealed, sealed=True)


_GOOD = {"i": 3, "kind": "user", "text": "hi", "size": 2, "date": "2026-10-08T10:00:00+02:00"}


@pytest.mark.parametrize("change, reason", [
    ({"kind": "thought"}, "six kinds"),
    ({"size": 3}, "size 3"),
    ({"i": -1}, "natural"),
    ({"i": True}, "natural"),
    ({"text": 5}, "string"),
    ({"extra": 1}, "unknown fields"),
    ({"date": ""}, "date"),
    ({"images": ["abc"]}, "digests"),
    ({"meta": {"part": 3, "parts": 2}}, "part"),
    ({"meta": []}, "object"),
])
def test_r3_a_record_the_store_would_not_write_is_malformed(change, reason):
    rec = dict(_GOOD, **change)
    with pytest.raises(Malformed, match=reason):
        parse_message(json.dumps(rec).encode())


@pytest.mark.parametrize("line, reason", [
    (b'{"i":3,"kind":"user","text":"hi"', "JSON"),
    (b'[1,2]', "object"),
    (b'{"i":3,"kind":"user","text":"\\ud800","size":3,"date":"d"}', "surrogate"),
    (b'{"i":3,"kind":"user","text":"\xff","size":1,"date":"d"}', "JSON"),
    (b'{"i":0,"kind":"user","size":2,"date":"d"}', "string"),
])
def test_r2_broken_lines_are_malformed(line, reason):
    with pytest.raises(Malformed, match=reason):
        parse_message(line)


@pytest.mark.parametrize("line, reason", [
    (b'{"l":0,"i":0,"text":"","size":0}', "outside 1 ... 512"),
    (b'{"l":0,"i":0,"text":"' + b"a" * 513 + b'","size":513}', "outside 1 ... 512"),
    (b'{"l":0,"i":0,"text":"a","size":1,"x":1}', "exactly the fields"),
    (b'{"merge":[[0,1]],"t":2,"open":true}', "left member"),
    (b'{"merge":[[62,0]],"t":2,"open":true}', "left member"),
    (b'{"merge":[[1,2]],"t":2,"open":1}', "true or false"),
    (b'{"merge":[[1,2]],"t":-2,"open":true}', "natural"),
])
def test_r10_r25_bad_tree_records_are_malformed(line, reason):
    with pytest.raises(Malformed, match=reason):
        parse_tree(line)
