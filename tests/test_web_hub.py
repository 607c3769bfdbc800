"""The event hub (docs/WEB.md, "Live events"): numbering per run, the ring and resume
(nothing lost, nothing repeated, a reset when the page cannot resume), the translation of
every session event, and the hub's threads over a fake chat."""

from __future__ import annotations

import json
import queue
import threading
import time

from everchat.frontends.web.hub import RING_BYTES, RING_SIZE, EventRing, Hub, translate
from everchat.transport import schema


class Inbox:
    """A subscriber that keeps what it is handed."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str]] = []

    def __call__(self, i: int, text: str) -> None:
        self.items.append((i, text))

    @property
    def ids(self) -> list[int]:
        return [i for i, _ in self.items]


def ids(texts) -> list[int]:
    return [json.loads(t)["id"] for t in texts]


def test_events_are_numbered_from_1_per_run_and_handed_to_every_subscriber():
    ring = EventRing(size=10)
    one, two = Inbox(), Inbox()
    ring.subscribe(one)
    token, kept, last = ring.subscribe(two)
    assert kept == [] and last == 0
    assert [ring.publish({"type": "notice", "level": "info", "text": str(n)}) for n in range(3)] == [1, 2, 3]
    assert one.ids == two.ids == [1, 2, 3]
    assert json.loads(one.items[0][1]) == {"id": 1, "type": "notice", "level": "info", "text": "0"}
    ring.unsubscribe(token)
    ring.publish({"type": "x"})
    assert one.ids == [1, 2, 3, 4] and two.ids == [1, 2, 3]
    assert EventRing().run != ring.run


def test_a_resume_gets_exactly_the_kept_events_after_its_id_then_live_ones():
    ring = EventRing(size=10)
    for n in range(7):
        ring.publish({"type": "x", "n": n})
    inbox = Inbox()
    _, kept, last = ring.subscribe(inbox, after=4, run=ring.run)
    assert ids(kept) == [5, 6, 7] and last == 7
    ring.publish({"type": "x"})
    assert inbox.ids == [8]
    assert ring.subscribe(Inbox(), after=8, run=ring.run)[1] == []  # nothing missed


def test_a_new_page_during_a_turn_gets_the_turn_from_its_opening_message_and_after_it_ends_live_only():
    ring = EventRing(size=20)
    ring.publish({"type": "notice", "level": "info", "text": "before"})                       # 1
    ring.publish({"type": "user", "turn": 4, "message": {"id": 4, "text": "hi"}})             # 2
    ring.publish({"type": "started", "turn": 4})                                              # 3
    ring.publish({"type": "user", "turn": 4, "message": {"id": 6, "text": "and this"}})       # 4: joined
    ring.publish({"type": "text", "turn": 4, "text": "Hel"})                                  # 5
    _, kept, last = ring.subscribe(Inbox())
    assert ids(kept) == [2, 3, 4, 5] and last == 1  # the page takes ids after `last`: none skipped
    ring.publish({"type": "ended", "turn": 4, "reason": "done", "incomplete": False, "detail": "", "reply": 7})
    assert ring.subscribe(Inbox())[1:] == ([], 6)
    ring.publish({"type": "started", "turn": 9})  # a turn whose message was never announced
    ring.publish({"type": "text", "turn": 9, "text": "x"})
    _, kept, last = ring.subscribe(Inbox())
    assert ids(kept) == [7, 8] and last == 6
    small = EventRing(size=3)
    small.publish({"type": "user", "turn": 0, "message": {"id": 0}})
    small.publish({"type": "started", "turn": 0})
    for n in range(3):
        small.publish({"type": "text", "turn": 0, "text": str(n)})
    assert small.subscribe(Inbox())[1:] == ([], 5)  # its start fell out of the ring: live only


def test_a_resume_from_another_run_out_of_the_ring_or_the_future_is_a_reset():
    ring = EventRing(size=5)
    for n in range(12):
        ring.publish({"type": "x"})
    assert ids(ring.subscribe(Inbox(), after=7, run=ring.run)[1]) == [8, 9, 10, 11, 12]  # kept: 8 … 12
    assert ring.subscribe(Inbox(), after=6, run=ring.run)[1] is None  # 7 fell out of the ring
    assert ring.subscribe(Inbox(), after=6, run="another")[1] is None
    assert ring.subscribe(Inbox(), after=6, run=None)[1] is None
    assert ring.subscribe(Inbox(), after=13, run=ring.run)[1] is None
    assert ring.subscribe(Inbox(), after=-1, run=ring.run)[1] is None


def test_a_subscription_made_while_events_are_published_loses_and_repeats_none():
    ring = EventRing(size=100_000)
    stop = threading.Event()

    def publish() -> None:
        while not stop.is_set():
            ring.publish({"type": "x"})

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        while ring.last < 50:
            pass
        inbox = Inbox()
        _, kept, _ = ring.subscribe(inbox, after=10, run=ring.run)
        while len(inbox.items) < 50:
            pass
    finally:
        stop.set()
        thread.join()
    seen = ids(kept) + inbox.ids
    assert seen == list(range(11, 11 + len(seen)))


def _message(i: int) -> dict:
    return {"id": i, "kind": "user", "text": f"message {i}", "date": "d", "images": [], "incomplete": False}


def test_every_session_event_becomes_the_pages_event():
    reply = {5: 7}.get
    cases = [
        (schema.TurnStarted(turn=5), [{"type": "user", "turn": 5, "message": _message(5)},
                                      {"type": "started", "turn": 5}]),
        (schema.TurnJoined(turn=5, message=6), [{"type": "user", "turn": 5, "message": _message(6)}]),
        (schema.TurnText(turn=5, text="Hi"), [{"type": "text", "turn": 5, "text": "Hi"}]),
        (schema.TurnThinking(turn=5, text="hm"), [{"type": "thinking", "turn": 5, "text": "hm"}]),
        (schema.TurnThinkingDone(turn=5), [{"type": "thinking_done", "turn": 5}]),
        (schema.TurnToolCall(turn=5, call_id="c1", name="zoom", arguments_json='{"id": 0, "n": 1}'),
         [{"type": "tool_call", "turn": 5, "call_id": "c1", "name": "zoom", "arguments": '{"id": 0, "n": 1}'}]),
        (schema.TurnToolResult(turn=5, call_id="c1", name="zoom", is_error=False, preview="user: x"),
         [{"type": "tool_result", "turn": 5, "call_id": "c1", "name": "zoom", "is_error": False,
           "preview": "user: x"}]),
        (schema.TurnEnded(turn=5, reason="stopped", incomplete=True, detail=""),
         [{"type": "ended", "turn": 5, "reason": "stopped", "incomplete": True, "detail": "", "reply": 7}]),
        (schema.TurnEnded(turn=8, reason="error", incomplete=False, detail="boom"),
         [{"type": "ended", "turn": 8, "reason": "error", "incomplete": False, "detail": "boom", "reply": None}]),
        (schema.Notice(level="warning", text="careful"), [{"type": "notice", "level": "warning", "text": "careful"}]),
    ]
    for event, expected in cases:
        assert translate(event, _message, reply) == expected


class FakeSession:
    def __init__(self) -> None:
        self.events: queue.Queue = queue.Queue()

    def next_event(self, timeout=None):
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None


class FakeChat:
    """What the hub reads: the session's events, messages, the reply of a turn, status."""

    def __init__(self) -> None:
        self.session = FakeSession()
        self.figures = {"messages": 0}
        self.status_calls = 0

    def message(self, i: int) -> dict:
        return _message(i)

    def reply_of(self, turn: int):
        return turn + 1

    def status(self) -> dict:
        self.status_calls += 1
        return dict(self.figures)


def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling a condition the hub's thread makes true


def test_r36_the_hub_announces_each_user_message_once_whoever_tells_it_first():
    chat = FakeChat()
    hub = Hub(chat, status_seconds=0.01).start()
    inbox = Inbox()
    try:
        hub.ring.subscribe(inbox)
        hub.announce(3, _message(3))  # sent here: announced at once
        chat.session.events.put(schema.TurnStarted(turn=3))
        chat.session.events.put(schema.TurnJoined(turn=3, message=4))
        chat.session.events.put(schema.TurnEnded(turn=3, reason="done", incomplete=False, detail=""))
        wait_for(lambda: any('"ended"' in t for _, t in inbox.items), "the end of the turn")
        hub.announce(3, _message(4))  # its reply came back after the hub told it: not again
    finally:
        hub.stop()
    events = [json.loads(t) for _, t in inbox.items if '"status"' not in t]
    assert [(e["type"], e.get("message", {}).get("id")) for e in events] == [
        ("user", 3), ("started", None), ("user", 4), ("ended", None)]
    assert events[-1]["reply"] == 4


def test_status_is_polled_only_while_someone_listens_and_published_only_when_it_changes():
    chat = FakeChat()
    hub = Hub(chat, status_seconds=0.01).start()
    try:
        inbox = Inbox()
        token, _, _ = hub.ring.subscribe(inbox)
        wait_for(lambda: chat.status_calls >= 3, "three polls")
        statuses = [json.loads(t) for _, t in inbox.items]
        assert [s["type"] for s in statuses] == ["status"] and statuses[0]["messages"] == 0
        chat.figures = {"messages": 1}
        wait_for(lambda: len(inbox.items) == 2, "the change")
        assert json.loads(inbox.items[1][1])["messages"] == 1
        hub.ring.unsubscribe(token)
        calls = chat.status_calls
        wait_for(lambda: not hub.ring.listening, "nobody listening")
        chat.session.events.put(schema.Notice(level="info", text="tick"))  # the hub goes on
        wait_for(lambda: hub.ring.last == 3, "the notice")
        assert chat.status_calls <= calls + 1  # at most the poll that was under way
    finally:
        hub.stop()


def test_p4_a_shells_output_fills_the_ring_to_its_bytes_not_its_count_and_a_resume_before_it_is_a_reset():
    chat = FakeChat()
    hub = Hub(chat, status_seconds=60).start()
    chunk = "B" * (64 * 1024)  # a JobOutput chunk at its largest
    try:
        hub.ring.publish({"type": "notice", "level": "info", "text": "before the flood"})  # 1
        for n in range(200):  # 12.8 MB of output, 3x the ring's bytes
            chat.session.events.put(schema.JobOutput(job=f"turn-1-{n}", caller="main", text=chunk))
        wait_for(lambda: hub.ring.last == 201, "every chunk published", timeout=120)
    finally:
        hub.stop()
    events, size = hub.ring.kept
    assert size <= RING_BYTES and RING_BYTES - size < 70 * 1024  # full to its bytes
    assert events < 70 <= RING_SIZE  # far fewer than its count
    assert hub.ring.subscribe(Inbox(), after=1, run=hub.ring.run)[1] is None  # 2 was dropped: reset
    _, kept, _ = hub.ring.subscribe(Inbox(), after=199, run=hub.ring.run)
    assert ids(kept) == [200, 201]
    assert json.loads(kept[-1])["text"] == chunk


def test_p4_one_event_bigger_than_the_ring_is_kept_alone():
    ring = EventRing(size=10, max_bytes=1100)
    for n in range(5):
        ring.publish({"type": "x", "text": "y" * 300})
    assert ring.kept[0] == 3 and ring.kept[1] <= 1100  # about 340 bytes each
    ring.publish({"type": "x", "text": "z" * 5000})
    assert ring.kept[0] == 1
    assert ids(ring.subscribe(Inbox(), after=5, run=ring.run)[1]) == [6]
