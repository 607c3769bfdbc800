"""An append may carry its own date (R1): an imported message keeps when it was said.

The date goes end to end: `schema.Append`/`AppendMany` items carry it, the log writer
hands it to the store, and `ChatStore.append_messages` checks it (an ISO date and time
with its timezone) and writes it as the record's `date`. The day file is still the day
of logging, so ids stay in file order (R1, R2).
"""

from __future__ import annotations

import msgpack
import pytest
from store_world import FakeClock

from everchat.actors.folder import BadInput, ChatStore
from everchat.transport import schema


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):
    s = ChatStore.open(tmp_path / "chat", create=True, clock=clock)
    yield s
    s.close()


def test_r1_a_given_date_is_the_records_date_and_the_day_file_is_todays(store, tmp_path, clock):
    store.append_message("user", "said today")
    store.append_message("user", "[ChatGPT, 2025-03-02] said long ago", date="2025-03-02T09:15:30.250000+00:00")
    store.append_messages([{"kind": "note", "text": "a reply then", "date": "2025-03-02T10:00:00+09:00"},
                           ("note", "a tuple's date", None, (), None, "2024-12-31T23:59:59-05:00")])
    dates = [store.message(i).date for i in range(4)]
    now = clock().isoformat(timespec="seconds")
    assert dates == [now, "2025-03-02T09:15:30+00:00", "2025-03-02T10:00:00+09:00", "2024-12-31T23:59:59-05:00"]
    assert sorted(p.name for p in (tmp_path / "chat" / "main").iterdir()) == [f"{clock().date()}.jsonl"]


def test_r2_ids_stay_in_file_order_when_dates_go_back_and_the_chat_reopens(store, tmp_path, clock):
    store.append_message("note", "new", date="2026-01-01T00:00:00+00:00")
    clock.advance(days=1)
    store.append_message("note", "older, logged the next day", date="2020-01-01T00:00:00+00:00")
    store.close()
    with ChatStore.open(tmp_path / "chat", writer=False) as again:
        assert [again.message(i).text for i in range(again.message_count)] == ["new", "older, logged the next day"]
        assert again.check()["messages"] == 2


@pytest.mark.parametrize("date, why", [
    ("2025-03-02T09:15:30", "has no timezone"),
    ("2025-03-02", "has no timezone"),
    ("yesterday", "is not an ISO date"),
    (1740906930.5, "must be an ISO date"),
])
def test_r1_a_date_that_is_not_iso_with_a_timezone_refuses_the_group_and_writes_nothing(store, date, why):
    store.append_message("user", "before")
    with pytest.raises(BadInput, match=why):
        store.append_messages([("note", "fine"), {"kind": "note", "text": "bad", "date": date}])
    assert store.message_count == 1


def test_an_append_frame_carries_its_date_and_none_by_default():
    sent = schema.Append("user", "hi", "k", [], None, "2025-03-02T09:15:30+00:00")
    assert schema.decode(schema.encode(sent)) == sent
    many = schema.AppendMany([sent, schema.Append("note", "no date", None, [], None)])
    assert schema.decode(schema.encode(many)) == many
    assert schema.Append("user", "hi", None, [], None).date is None
    assert msgpack.unpackb(schema.encode(sent))[1][5] == "2025-03-02T09:15:30+00:00"
