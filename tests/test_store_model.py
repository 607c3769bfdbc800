"""The store against a model: random histories of appends, group commits, nodes, merge
records, clock jumps, reopens, crashes and torn tails (R1-R4, R7, R8, R10, R12, R25)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from store_world import FakeClock

from everchat.actors.folder import BadInput, ChatStore, StoreError

KINDS = ["user", "everchat", "tool", "echo", "work", "note"]
_BIG = {"user": "é" * 9_000, "echo": "0123456789" * 3_500, "note": "word " * 4_000}

# Long texts are drawn by name ("<big:note>") and expanded in the rules: hypothesis shows
# every step's arguments, and 40 kB arguments make that slow.
BIG_NAMES = {f"<big:{k}>": k for k in _BIG}
texts = st.one_of(st.text(max_size=40).filter(lambda t: not any(
    0xD800 <= ord(c) < 0xE000 for c in t)), st.sampled_from(sorted(BIG_NAMES)))


def _expand(text: str) -> str:
    return _BIG[BIG_NAMES[text]] if text in BIG_NAMES else text
messages = st.tuples(st.sampled_from(KINDS), texts,
                     st.none() | st.sampled_from(["k1", "k2", "k3", "k4", "k5"]))


DIGITS = "0123456789"
# The parts each long text is logged as, worked out by hand from R7 and R8 (16,000-byte
# parts, cut after the last newline or space in a part's second half, else between
# characters; an echo over 30,000 characters keeps 15,000 at each end around a marker):
# not with the store's own clip_echo and split_text, whose bugs would cancel out here.
_PARTS = {
    ("user", False): ["é" * 8_000, "é" * 1_000],                # 2-byte characters: 16,000 bytes fit 8,000
    ("user", True): ["[Ada] " + "é" * 7_997, "é" * 1_003],      # after 6 bytes of name
    ("echo", False): [DIGITS * 1_600, DIGITS * 1_600, DIGITS * 300],   # 35,000 bytes, no space or newline
    ("echo", True): ["[Ada] " + (DIGITS * 1_600)[:15_994], (DIGITS * 3_500)[15_994:31_994],
                     (DIGITS * 3_500)[31_994:]],
    ("echo", "clipped"): [DIGITS * 1_500 + "\n[5000 characters cut]\n", DIGITS * 1_500],  # after the 2nd newline
    ("note", False): ["word " * 3_200, "word " * 800],          # the part ends after the space at byte 15,999
    ("note", True): ["[Ada] " + "word " * 3_198, "word " * 802],  # the last space in the part is at byte 15,995
}


def _logged(kind: str, text: str) -> list[str]:
    """The parts a message is logged as: a short text whole (at most 40 characters, so
    under 161 bytes), a long one from _PARTS."""
    if text not in BIG_NAMES:
        return [f"[Ada] {text}" if kind == "work" else text]
    big = BIG_NAMES[text]
    if kind == "echo" and big == "echo":
        return _PARTS[("echo", "clipped")]                     # 35,000 characters: over R7's 30,000
    return _PARTS[(big, kind == "work")]


def _work(kind: str, text: str) -> str:
    """The text as sent: expanded, and a work message starts with its agent's name (R3)."""
    text = _expand(text)
    return f"[Ada] {text}" if kind == "work" else text


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="store-model-"))
        self.chat = self.dir / "chat"
        self.clock = FakeClock()
        self.store = ChatStore.open(self.chat, create=True, clock=self.clock)
        self.records: list[tuple[str, str, str | None]] = []  # (kind, text, key) by id
        self.keys: dict[str, list[int]] = {}
        self.nodes: dict[tuple[int, int], str] = {}
        self.merges: list[tuple[list[tuple[int, int]], int, bool]] = []

    def _expect(self, kind: str, text: str, key: str | None, pending: dict) -> list[int]:
        if key is not None and key in self.keys:
            return self.keys[key]
        if key is not None and key in pending:
            return pending[key]
        parts = _logged(kind, text)
        ids = list(range(len(self.records), len(self.records) + len(parts)))
        self.records += [(kind, part, key) for part in parts]
        if key is not None:
            pending[key] = ids
        return ids

    @rule(message=messages)
    def append_one(self, message):
        kind, text, key = message
        got = self.store.append_message(kind, _work(kind, text), key=key)
        pending: dict = {}
        assert got == self._expect(kind, text, key, pending)
        self.keys.update(pending)

    @rule(batch=st.lists(messages, max_size=6))
    def append_group(self, batch):
        got = self.store.append_messages([(kind, _work(kind, text), key)
                                          for kind, text, key in batch])
        pending: dict = {}
        assert got == [self._expect(kind, text, key, pending) for kind, text, key in batch]
        self.keys.update(pending)

    @rule(data=st.data())
    def refuse_bad_input(self, data):
        bad = data.draw(st.sampled_from([("thought", "x"), ("user", "\ud800"), ("user", 5)]))
        try:
            self.store.append_messages([("user", "fine"), bad])
        except BadInput:
            return
        raise AssertionError(f"{bad} was logged")

    @precondition(lambda self: self.records)
    @rule(data=st.data(), same=st.booleans())
    def build_node(self, data, same):
        count = len(self.records)
        level = data.draw(st.integers(0, max(0, count.bit_length() - 1)))
        if count >> level == 0:
            return
        i = data.draw(st.integers(0, (count >> level) - 1))
        old = self.nodes.get((level, i))
        text = old if old is not None and same else f"node {level} {i} " + "é" * (i % 7)
        if old is not None and text != old:
            try:
                self.store.append_nodes([(level, i, text)])
            except StoreError as exc:
                assert "R12" in str(exc)
                return
            raise AssertionError("a node was built twice")
        assert self.store.append_nodes([(level, i, text)]) == (0 if old else 1)
        self.nodes[(level, i)] = text

    @rule(data=st.data(), is_open=st.booleans())
    def merge(self, data, is_open):
        parents = sorted(k for k in self.nodes if k[0] >= 1)
        chosen = data.draw(st.lists(st.sampled_from(parents), max_size=3)) if parents else []
        pairs = [(level - 1, 2 * i) for level, i in chosen]
        self.store.append_merge(pairs, len(self.records), is_open)
        self.merges.append((pairs, len(self.records), is_open))

    @rule(hours=st.sampled_from([1, 20, 49, -3]))
    def clock_moves(self, hours):
        self.clock.advance(hours=hours)

    @rule()
    def reopen(self):
        self.store.close()
        self.store = ChatStore.open(self.chat, clock=self.clock)
        assert self.store.repairs == []

    @rule(tear=st.booleans())
    def crash(self, tear):
        self.store._abandon()
        if tear:
            latest = sorted((self.chat / "main").iterdir())
            if latest:
                with open(latest[-1], "ab") as f:
                    f.write(b'{"i":')
        self.store = ChatStore.open(self.chat, clock=self.clock)
        assert len(self.store.repairs) == (1 if tear and latest else 0)

    @invariant()
    def reads_agree_with_the_model(self):
        store = self.store
        assert store.message_count == len(self.records)
        for i in {0, len(self.records) // 2, len(self.records) - 1} - {-1}:
            if 0 <= i < len(self.records):
                rec = store.message(i)
                assert (rec.kind, rec.text, rec.key) == self.records[i]
        for (level, i), text in list(self.nodes.items())[-5:]:
            assert store.node(level, i) == text
        assert store.merge_records(after_t=-1) == self.merges

    def teardown(self) -> None:
        try:
            with ChatStore.open(self.chat, writer=False) as reader:
                assert reader.message_count == len(self.records)
                assert [(r.kind, r.text, r.key) for r in map(reader.message, range(
                    len(self.records)))] == self.records
            self.store.check()
            self.store.close()
        finally:
            shutil.rmtree(self.dir)


StoreModel.TestCase.settings = settings(max_examples=40, stateful_step_count=25,
                                        deadline=None)
test_store_agrees_with_a_model_across_reopens_crashes_and_torn_tails = StoreModel.TestCase
