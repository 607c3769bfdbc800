"""Every record carries its checksum (P3): damage is found, named, and never written past.

The review flipped single bits in `main/` and `tree/`: 119 of 150 and 75 of 100 changed
stored text silently. With a CRC-32 on every record, `check` finds each of them; reads and
opens check the records they touch; a writer that read damage takes no new record (P15).
"""

from __future__ import annotations

import json
import random
import shutil

import pytest
from store_world import FakeClock

from everchat.actors.session.local import Chat
from everchat.actors.tree import Budget, name
from everchat.actors.folder import ChatDamaged, ChatStore, CorruptRecord, StoreError

SMALL = Budget(ceiling=1500, floor=700, cceiling=600, cfloor=300, jobs=3)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    """A closed chat with messages (one split by R8), built nodes and merge records."""
    folder = tmp_path_factory.mktemp("healthy") / "chat"
    rng = random.Random(11)
    with Chat.open(folder, create=True, budget=SMALL, clock=FakeClock()) as chat:
        for n in range(40):
            chat.add(rng.choice(["user", "everchat", "note"]), f"m{n} é " + "w" * rng.choice([20, 90, 600]))
            for key in sorted(chat.planner.running):
                chat.built(key, f"summary of {name(key)} " + "s" * rng.randint(0, 200))
        chat.add("note", "n" * 20_000)
    return folder


def _day(folder, stream):
    (day,) = (folder / stream).glob("*.jsonl")
    return day


def _flip(folder, stream, bit):
    day = _day(folder, stream)
    data = bytearray(day.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    day.write_bytes(bytes(data))


def _checked(folder) -> bool:
    """True when opening the chat read-only and checking it found a problem."""
    try:
        with Chat.open(folder, writer=False, budget=SMALL) as chat:
            chat.check()
    except StoreError:
        return True
    return False


@pytest.mark.parametrize("stream, flips, seed", [("main", 150, 1), ("tree", 100, 2)])
def test_p3_check_catches_every_single_bit_flip(healthy, tmp_path, stream, flips, seed):
    """As the review did: one random bit flipped in a copy of a healthy chat, then `check`;
    plus the flip of each file's last newline (a whole record would look torn)."""
    size = _day(healthy, stream).stat().st_size
    rng = random.Random(seed)
    bits = [rng.randrange(size * 8) for _ in range(flips)] + [(size - 1) * 8 + b for b in range(8)]
    assert not _checked(healthy)
    missed = []
    for n, bit in enumerate(bits):
        copy = tmp_path / f"c{n}"
        shutil.copytree(healthy, copy)
        _flip(copy, stream, bit)
        if not _checked(copy):
            missed.append(bit)
        shutil.rmtree(copy)
    assert missed == [], f"flips check did not catch in {stream}/ (byte.bit): {[(b // 8, b % 8) for b in missed]}"


def _text_offset(folder, i):
    """Where message i's text starts in its day file."""
    data = _day(folder, "main").read_bytes()
    line_start = data.index(b'{"i":%d,' % i)
    return line_start + data.index(b'"text":"', line_start) - line_start + len(b'"text":"')


def test_p3_a_letter_changed_in_place_is_refused_where_it_is_read(healthy, tmp_path):
    """C2b: one letter of message 5 changed (same size, valid JSON). Reading it names the
    file and the record's offset; `check` fails the same way."""
    chat = tmp_path / "chat"
    shutil.copytree(healthy, chat)
    day = _day(chat, "main")
    data = bytearray(day.read_bytes())
    at = _text_offset(chat, 5)
    data[at] = ord("Q") if data[at] != ord("Q") else ord("R")
    day.write_bytes(bytes(data))
    record_at = bytes(data).index(b'{"i":5,')
    with Chat.open(chat, writer=False, budget=SMALL) as reader:
        with pytest.raises(CorruptRecord) as err:
            reader.zoom(5, 1)
    assert (err.value.file, err.value.offset) == (str(day), record_at)
    assert "checksum does not match" in err.value.reason
    assert _checked(chat)


def test_p15_a_writer_that_read_damage_takes_no_new_record(healthy, tmp_path):
    chat = tmp_path / "chat"
    shutil.copytree(healthy, chat)
    day = _day(chat, "main")
    data = bytearray(day.read_bytes())
    data[_text_offset(chat, 5)] ^= 0x01
    day.write_bytes(bytes(data))
    with ChatStore.open(chat, clock=FakeClock()) as store:
        count = store.message_count
        with pytest.raises(CorruptRecord):
            store.message(5)
        with pytest.raises(ChatDamaged, match=r"main/.*byte \d+: the checksum does not match"):
            store.append_message("user", "past the damage")
        assert store.message_count == count
    assert day.read_bytes() == bytes(data), "nothing was appended"


def _strip_checksums(folder):
    """Make the chat one an Everchat before checksums wrote: records without `crc`,
    chat.json version 1, no index (its offsets changed)."""
    for stream in ("main", "tree"):
        day = _day(folder, stream)
        lines = day.read_bytes().splitlines()
        day.write_bytes(b"".join(line[:-18] + b"}\n" for line in lines))
    info = json.loads((folder / "chat.json").read_text())
    info["version"] = 1
    del info["sealed_from"]
    (folder / "chat.json").write_text(json.dumps(info))
    shutil.rmtree(folder / "index")


def test_p3_a_chat_from_before_checksums_reads_and_seals_what_comes_next(healthy, tmp_path):
    """STYLE 11: the record format is versioned. A version 1 chat opens and checks as it is;
    its first writer records in chat.json where checksums start, and every later record
    carries one (a later record without it is damage)."""
    chat = tmp_path / "chat"
    shutil.copytree(healthy, chat)
    _strip_checksums(chat)
    old_end = _day(chat, "main").stat().st_size
    assert not _checked(chat)
    with Chat.open(chat, budget=SMALL, clock=FakeClock()) as writer:
        writer.add("user", "the first sealed message")
    info = json.loads((chat / "chat.json").read_text())
    assert info["version"] == 2 and info["sealed_from"]["main"][1] == old_end
    tail = _day(chat, "main").read_bytes()[old_end:]
    assert tail.startswith(b'{"i":42,') and b',"crc":"' in tail
    assert not _checked(chat)
    day = _day(chat, "main")
    data = day.read_bytes()
    day.write_bytes(data[:old_end] + tail[:-19] + b"}\n")  # the new record without its checksum
    shutil.rmtree(chat / "index")
    with pytest.raises(CorruptRecord, match="no checksum"):
        ChatStore.open(chat, writer=False)
