"""The device hub's pure core and its devices file (actors/devices.py; docs/HANDS.md §3-§5,
R39): no sockets, no threads; times are passed in."""

from __future__ import annotations

import stat

import pytest

from everchat.actors.device_jobs import Job, Outcome
from everchat.actors.device_remote import DeviceBook, hash_secret
from everchat.actors.devices import EXPIRY_SECONDS, DeviceHub
from everchat.transport import schema

KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
OTHER_KEY = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"


def job(job_id: str = "call-1", caller: str = "main") -> Job:
    return Job(id=job_id, tool="shell", arguments={"command": "true"}, caller=caller, timeout=60.0, created=0.0)


def hub_with_laptop(now: float = 0.0) -> tuple[DeviceHub, object]:
    hub = DeviceHub("here")
    hub.set_devices({"laptop": KEY})
    poll = object()
    assert hub.poll("laptop", poll, [], 20.0, now) == []
    return hub, poll


def test_r39_a_resent_run_job_with_a_known_id_is_never_started_twice():
    hub = DeviceHub("here")
    first, second = object(), object()
    answers, start = hub.submit(job(), "", first, 0.0)
    assert answers == [] and start == job()
    answers, start = hub.submit(job(), "", second, 1.0)
    assert answers == [] and start is None
    result = schema.JobResult("call-1", "done", False, False)
    assert hub.finished("call-1", Outcome("done"), 2.0) == [(first, result), (second, result)]
    third = object()
    assert hub.submit(job(), "here", third, 3.0) == ([(third, result)], None)


def test_r39_a_job_the_journal_recovered_is_answered_and_not_started_again():
    hub = DeviceHub("here")
    hub.remember(job(), Outcome("may have run", True, True), 0.0)
    waiter = object()
    assert hub.submit(job(), "", waiter, 1.0) == ([(waiter, schema.JobResult("call-1", "may have run", True, True))],
                                                   None)


def test_a_job_for_an_unknown_or_offline_computer_is_refused_at_once():
    hub = DeviceHub("here")
    hub.set_devices({"laptop": KEY})
    waiter = object()
    (answer,), start = hub.submit(job(), "nas", waiter, 0.0)
    assert start is None and answer[1].is_error and "no computer called 'nas'" in answer[1].text
    (answer,), _ = hub.submit(job(), "laptop", waiter, 0.0)
    assert answer[1].is_error and "not connected now" in answer[1].text
    assert "call-1" not in hub.records


def test_r39_a_remote_job_goes_out_with_the_waiting_poll_once():
    hub, poll = hub_with_laptop()
    asker = object()
    assert hub.submit(job(), "laptop", asker, 1.0) == ([], None)
    ((waiter, work),) = hub.ready(1.0)
    assert waiter is poll and [item["id"] for item in work.jobs] == ["call-1"] and work.stop == []
    assert hub.poll("laptop", object(), ["call-1"], 20.0, 2.0) == []
    assert hub.ready(3.0) == []
    result = schema.JobResult("call-1", "ok", False, False)
    assert hub.finished("call-1", Outcome("ok"), 4.0, "laptop") == [(asker, result)]
    assert hub.finished("call-1", Outcome("again"), 5.0, "laptop") == []


def test_a_job_sent_that_the_device_does_not_hold_never_reached_it_and_goes_again():
    hub, poll = hub_with_laptop()
    hub.submit(job(), "laptop", object(), 1.0)
    hub.ready(1.0)
    second = object()
    ((waiter, work),) = hub.poll("laptop", second, [], 20.0, 2.0)
    assert waiter is second and [item["id"] for item in work.jobs] == ["call-1"]


def test_an_answer_that_could_not_leave_puts_its_job_back():
    hub, poll = hub_with_laptop()
    hub.submit(job(), "laptop", object(), 1.0)
    ((_, work),) = hub.ready(1.0)
    hub.unsent("laptop", work, 1.0)
    ((_, again),) = hub.poll("laptop", object(), [], 20.0, 2.0)
    assert again.jobs == work.jobs


def test_a_poll_is_answered_with_none_after_its_wait():
    hub, poll = hub_with_laptop(now=100.0)
    assert hub.ready(119.9) == []
    assert hub.ready(120.0) == [(poll, schema.DeviceWork([], []))]
    assert hub.online("laptop", 120.0)


def test_a_device_is_offline_once_its_last_poll_is_old():
    hub, poll = hub_with_laptop(now=0.0)
    hub.ready(20.0)
    assert hub.online("laptop", 44.0) and not hub.online("laptop", 46.0)
    rows = hub.rows(46.0, local_running=2)
    assert rows[0] == {"name": "here", "online": True, "last_seen": 46.0, "running": 2, "local": True}
    assert rows[1] == {"name": "laptop", "online": False, "last_seen": 0.0, "running": 0, "local": False}


def test_r39_an_uncertain_report_is_passed_through_to_the_asker():
    hub, poll = hub_with_laptop()
    asker = object()
    hub.submit(job(), "laptop", asker, 1.0)
    hub.ready(1.0)
    answers = hub.finished("call-1", Outcome("may have run", True, True), 2.0, "laptop")
    assert answers == [(asker, schema.JobResult("call-1", "may have run", True, True))]


def test_a_report_from_another_device_is_ignored():
    hub, poll = hub_with_laptop()
    hub.set_devices({"laptop": KEY, "nas": OTHER_KEY})
    hub.submit(job(), "laptop", object(), 1.0)
    hub.ready(1.0)
    assert hub.finished("call-1", Outcome("forged"), 2.0, "nas") == []
    assert hub.records["call-1"].result is None


def test_stop_jobs_answers_what_was_not_sent_and_tells_the_device_to_stop_the_rest():
    hub, poll = hub_with_laptop()
    hub.submit(job("sent"), "laptop", object(), 1.0)
    hub.ready(1.0)
    second = object()
    assert hub.poll("laptop", second, ["sent"], 20.0, 2.0) == []
    queued_asker = object()
    hub.submit(job("queued"), "laptop", queued_asker, 2.0)     # not sent yet: no ready() since
    answers = hub.stop("main", 3.0)
    assert answers == [(queued_asker, schema.JobResult("queued", "stopped before it started on laptop", True, False)),
                       (second, schema.DeviceWork([], ["main"]))]


def test_records_expire_ten_minutes_after_their_job_ended():
    hub = DeviceHub("here")
    hub.submit(job(), "", object(), 0.0)
    hub.finished("call-1", Outcome("done"), 10.0)
    hub.expire(10.0 + EXPIRY_SECONDS - 1)
    assert "call-1" in hub.records
    hub.expire(10.0 + EXPIRY_SECONDS)
    assert "call-1" not in hub.records


def test_a_job_never_taken_expires_with_an_error_and_one_never_reported_as_uncertain():
    hub, poll = hub_with_laptop()
    taken, never = object(), object()
    hub.submit(job("taken"), "laptop", taken, 1.0)
    hub.ready(1.0)
    hub.polls.clear()
    hub.last_poll["laptop"] = 2.0
    hub.submit(job("never"), "laptop", never, 2.0)
    answers = dict(hub.expire(2.0 + EXPIRY_SECONDS + 60.0))
    assert answers[never].is_error and not answers[never].uncertain
    assert answers[taken].uncertain


# ---- devices.json (actors/device_remote.py) -------------------------------------------


def book_with_secret(tmp_path, name="laptop", now=0.0):
    book = DeviceBook(tmp_path)
    data = book.load()
    secret, expires = DeviceBook.add_secret(data, name, now, ttl=3600.0)
    book.save(data)
    return book, secret


def test_the_join_secret_is_stored_only_as_its_hash_in_a_private_file(tmp_path):
    book, secret = book_with_secret(tmp_path)
    text = book.path.read_text()
    assert secret not in text and hash_secret(secret) in text
    assert stat.S_IMODE(book.path.stat().st_mode) == 0o600
    assert len(secret) >= 43


def test_a_secret_enrolls_once(tmp_path):
    book, secret = book_with_secret(tmp_path)
    data = book.load()
    assert DeviceBook.enroll(data, "laptop", secret, KEY, 1.0) is None
    assert data["devices"]["laptop"]["key"] == KEY
    assert "used already" in DeviceBook.enroll(data, "laptop", secret, KEY, 2.0)


@pytest.mark.parametrize("name, secret_ok, now, words", [
    ("laptop", False, 1.0, "not one this chat made"),
    ("laptop", True, 3601.0, "expired"),
    ("nas", True, 1.0, "for the device 'laptop', not 'nas'"),
])
def test_a_bad_expired_or_misnamed_secret_is_refused(tmp_path, name, secret_ok, now, words):
    book, secret = book_with_secret(tmp_path)
    data = book.load()
    why = DeviceBook.enroll(data, name, secret if secret_ok else "x" * 43, KEY, now)
    assert words in why and data["devices"] == {}


def test_a_name_enrolled_by_another_key_is_refused_until_removed(tmp_path):
    book, secret = book_with_secret(tmp_path)
    data = book.load()
    DeviceBook.enroll(data, "laptop", secret, KEY, 1.0)
    again, _ = DeviceBook.add_secret(data, "laptop", 2.0)
    assert "another computer (another key) is enrolled as 'laptop'" in DeviceBook.enroll(data, "laptop", again,
                                                                                         OTHER_KEY, 3.0)
    assert DeviceBook.remove(data, "laptop") == KEY
    assert data["removed"] == {"laptop": KEY}
    fresh, _ = DeviceBook.add_secret(data, "laptop", 4.0)
    assert DeviceBook.enroll(data, "laptop", fresh, OTHER_KEY, 5.0) is None
