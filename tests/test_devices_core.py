"""The device hub's pure core and its devices file (actors/devices/actor.py; docs/HANDS.md §3-§5,
R39): no sockets, no threads; times are passed in."""

from __future__ import annotations

import stat

import pytest

from everchat.actors.devices.jobs import Job, Outcome
from everchat.actors.enrollment.actor import DeviceBook, hash_secret
from everchat.actors.devices.actor import EXPIRY_SECONDS, DeviceHub
from everchat.actors.devices.hub import job_id
from everchat.transport import schema

KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
OTHER_KEY = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"


def job(job_id: str = "job-1", caller: str = "main") -> Job:
    return Job(id=job_id, tool="shell", arguments={"command": "true"}, caller=caller, timeout=60.0, created=0.0)


def key(job_id: str = "job-1") -> str:
    """The asker's id of a job (RunJob.job); the hub's own id is the Job's."""
    return f"call-of-{job_id}"


def result(text: str, job_id: str = "job-1", is_error: bool = False, uncertain: bool = False) -> schema.JobResult:
    return schema.JobResult(key(job_id), text, is_error, uncertain)


def hub_with_laptop(now: float = 0.0, offline: float = 60.0, keep: float = 60.0) -> tuple[DeviceHub, object]:
    hub = DeviceHub("here", offline_seconds=offline, keep_seconds=keep)
    hub.set_devices({"laptop": KEY, "nas": OTHER_KEY})
    poll = object()
    assert hub.poll("laptop", poll, [], 20.0, now) == []
    return hub, poll


def sent_to_laptop(hub: DeviceHub, job_id: str = "job-1", now: float = 1.0) -> object:
    """A job sent out to laptop (with its waiting poll); its asker."""
    asker = object()
    assert hub.submit(job(job_id), key(job_id), "laptop", asker, now) == ([], None)
    ((_, work),) = hub.ready(now)
    assert [item["id"] for item in work.jobs] == [job_id]
    return asker


def test_job_ids_are_the_same_for_a_key_and_unguessable_without_the_secret():
    """P1: a device sees only the hub's ids, made from the asker's (predictable) keys."""
    secret = bytes(range(32))
    assert job_id(secret, "turn-5-1") == job_id(secret, "turn-5-1")
    assert job_id(secret, "turn-5-1") != job_id(secret, "turn-5-2")
    assert job_id(bytes(32), "turn-5-1") != job_id(secret, "turn-5-1")
    assert "turn" not in job_id(secret, "turn-5-1") and len(job_id(secret, "turn-5-1")) == len("job-") + 32


def test_r39_a_resent_run_job_with_a_known_id_is_never_started_twice():
    hub = DeviceHub("here")
    first, second = object(), object()
    answers, start = hub.submit(job(), key(), "", first, 0.0)
    assert answers == [] and start == job()
    answers, start = hub.submit(job(), key(), "", second, 1.0)
    assert answers == [] and start is None
    assert hub.finished("job-1", Outcome("done"), 2.0) == [(first, result("done")), (second, result("done"))]
    third = object()
    assert hub.submit(job(), key(), "here", third, 3.0) == ([(third, result("done"))], None)


def test_a_known_job_id_asked_for_another_call_is_refused_and_nothing_runs():
    hub = DeviceHub("here")
    hub.submit(job(), key(), "", object(), 0.0)
    other = Job(id="job-1", tool="shell", arguments={"command": "rm -rf build"}, caller="main")
    waiter = object()
    ((answer_to, answer),), start = hub.submit(other, key(), "", waiter, 1.0)
    assert start is None and answer_to is waiter and answer.is_error and "was not run" in answer.text


def test_r39_a_job_the_journal_recovered_is_answered_and_not_started_again():
    hub = DeviceHub("here")
    hub.remember(job(), key(), Outcome("may have run", True, True), 0.0)
    waiter = object()
    assert hub.submit(job(), key(), "", waiter, 1.0) == ([(waiter, result("may have run", is_error=True,
                                                                           uncertain=True))], None)


def test_a_job_for_an_unknown_or_offline_computer_is_refused_at_once():
    hub = DeviceHub("here")
    hub.set_devices({"laptop": KEY})
    waiter = object()
    (answer,), start = hub.submit(job(), key(), "nas", waiter, 0.0)
    assert start is None and answer[1].is_error and "no computer called 'nas'" in answer[1].text
    (answer,), _ = hub.submit(job(), key(), "laptop", waiter, 0.0)
    assert answer[1].is_error and "not connected now" in answer[1].text
    assert "job-1" not in hub.records


def test_r39_a_remote_job_goes_out_with_the_waiting_poll_once():
    hub, poll = hub_with_laptop()
    asker = object()
    assert hub.submit(job(), key(), "laptop", asker, 1.0) == ([], None)
    ((waiter, work),) = hub.ready(1.0)
    assert waiter is poll and work.jobs == [job().to_dict()] and work.stop == []
    assert hub.poll("laptop", object(), ["job-1"], 20.0, 2.0) == []
    assert hub.ready(3.0) == []
    assert hub.report("laptop", "job-1", Outcome("ok"), 4.0) == ([(asker, result("ok"))], None)
    assert hub.report("laptop", "job-1", Outcome("again"), 5.0) == ([], None)   # a repeat: the first stays
    assert hub.records["job-1"].result == result("ok")


def test_p1_a_report_counts_only_from_the_device_the_job_was_sent_to_and_only_once_sent():
    hub, poll = hub_with_laptop()
    local = object()
    hub.submit(job("here-1"), key("here-1"), "", local, 1.0)          # a job on this computer
    queued = object()
    hub.polls.clear()                                               # no poll waits: this one stays queued
    hub.submit(job("queued-1"), key("queued-1"), "laptop", queued, 1.0)
    for device, job_id, words in [("laptop", "here-1", "runs on another computer, not on 'laptop'"),
                                  ("nas", "queued-1", "runs on another computer, not on 'nas'"),
                                  ("laptop", "queued-1", "not out on 'laptop' now (queued)"),
                                  ("nas", "turn-7-1", "never sent to 'nas'")]:
        answers, why = hub.report(device, job_id, Outcome("FORGED"), 2.0)
        assert answers == [] and words in why, (device, job_id, why)
        record, why = hub.output(device, job_id)
        assert record is None and words in why
    assert "turn-7-1" not in hub.records                             # nothing of a refused report is kept
    assert hub.records["here-1"].result is None and hub.records["queued-1"].result is None


def test_a_job_sent_that_the_device_does_not_hold_never_reached_it_and_goes_again():
    hub, poll = hub_with_laptop()
    sent_to_laptop(hub)
    second = object()
    ((waiter, work),) = hub.poll("laptop", second, [], 20.0, 2.0)
    assert waiter is second and [item["id"] for item in work.jobs] == ["job-1"]


def test_an_answer_that_could_not_leave_puts_its_job_back():
    hub, poll = hub_with_laptop()
    hub.submit(job(), key(), "laptop", object(), 1.0)
    ((_, work),) = hub.ready(1.0)
    hub.unsent("laptop", work, 1.0)
    ((_, again),) = hub.poll("laptop", object(), [], 20.0, 2.0)
    assert again.jobs == work.jobs


def test_a_poll_is_answered_with_none_after_its_wait():
    hub, poll = hub_with_laptop(now=100.0)
    assert hub.ready(119.9) == []
    assert hub.ready(120.0) == [(poll, schema.DeviceWork([], []))]
    assert hub.online("laptop", 120.0)


def test_a_poll_waits_at_most_a_third_of_the_offline_time():
    assert DeviceHub("here").poll_wait(600.0) == 20.0
    assert DeviceHub("here", offline_seconds=3.0).poll_wait(20.0) == 1.0


def test_a_device_is_offline_once_it_was_not_heard_from_for_the_offline_time():
    hub, poll = hub_with_laptop(now=0.0, offline=60.0)
    assert hub.online("laptop", 59.9) and not hub.online("laptop", 60.0)   # also with its poll still open
    rows = hub.rows(60.0, local_running=2)
    assert rows[0] == {"name": "here", "online": True, "last_seen": 60.0, "running": 2, "local": True}
    assert rows[1] == {"name": "laptop", "online": False, "last_seen": 0.0, "running": 0, "local": False}


def test_an_offline_devices_jobs_fail_keep_seconds_after_it_went_offline():
    hub, poll = hub_with_laptop(now=0.0, offline=60.0, keep=60.0)
    sent = sent_to_laptop(hub, "sent-1", now=1.0)
    hub.polls.clear()
    assert hub.expire(119.9) == []                                   # last heard at 0: offline at 60, kept till 120
    (answer,) = hub.expire(120.0)
    assert answer == (sent, schema.JobResult(key("sent-1"), "laptop is offline while the job ran: it may have run "
                                             "(uncertain, not run again)", True, True))


def test_a_device_back_in_time_reports_without_rerun_and_nothing_fails():
    hub, poll = hub_with_laptop(now=0.0, offline=60.0, keep=60.0)
    asker = sent_to_laptop(hub, now=1.0)
    hub.polls.clear()
    assert hub.poll("laptop", object(), ["job-1"], 20.0, 100.0) == []   # back, still holding it: not sent again
    assert hub.expire(130.0) == []
    assert hub.report("laptop", "job-1", Outcome("done"), 131.0) == ([(asker, result("done"))], None)


def test_a_device_that_leaves_fails_its_jobs_at_once_and_is_offline():
    hub, poll = hub_with_laptop()
    sent = sent_to_laptop(hub, "sent-1", now=1.0)
    waiting = object()
    hub.poll("laptop", waiting, ["sent-1"], 20.0, 2.0)
    queued = object()
    hub.submit(job("queued-1"), key("queued-1"), "laptop", queued, 2.5)
    hub.polls["laptop"] = (waiting, 22.0)                           # put back the poll the job would have answered
    hub.records["queued-1"].state = "queued"
    answers = dict(hub.leave("laptop", 3.0))
    assert answers[waiting] == schema.DeviceWork([], [])
    assert answers[queued] == schema.JobResult(key("queued-1"), "laptop left: the job was not run", True, False)
    assert answers[sent].uncertain and answers[sent].text.startswith("laptop left while the job ran")
    assert not hub.online("laptop", 3.0)
    (refused,), _ = hub.submit(job("next"), key("next"), "laptop", object(), 3.0)
    assert "not connected now" in refused[1].text


def test_a_removed_devices_jobs_fail_and_its_poll_is_refused():
    hub, poll = hub_with_laptop()
    asker = sent_to_laptop(hub)
    waiting = object()
    hub.poll("laptop", waiting, ["job-1"], 20.0, 2.0)
    polls, answers = hub.set_devices({"nas": OTHER_KEY}, 3.0)
    assert polls == [(waiting, "device 'laptop' was removed from this chat")]
    assert answers[0][0] is asker and answers[0][1].text.startswith("laptop was removed from this chat while")


def test_r39_an_uncertain_report_is_passed_through_to_the_asker():
    hub, poll = hub_with_laptop()
    asker = sent_to_laptop(hub)
    answers, _ = hub.report("laptop", "job-1", Outcome("may have run", True, True), 2.0)
    assert answers == [(asker, result("may have run", is_error=True, uncertain=True))]


def test_stop_jobs_answers_what_was_not_sent_and_tells_the_device_to_stop_the_rest():
    hub, poll = hub_with_laptop()
    sent_to_laptop(hub, "sent")
    second = object()
    assert hub.poll("laptop", second, ["sent"], 20.0, 2.0) == []
    queued_asker = object()
    hub.submit(job("queued"), key("queued"), "laptop", queued_asker, 2.0)     # not sent yet: no ready() since
    answers = hub.stop("main", 3.0)
    assert answers == [(queued_asker, result("stopped before it started on laptop", "queued", is_error=True)),
                       (second, schema.DeviceWork([], ["main"]))]


def test_records_expire_ten_minutes_after_their_job_ended():
    hub = DeviceHub("here")
    hub.submit(job(), key(), "", object(), 0.0)
    hub.finished("job-1", Outcome("done"), 10.0)
    hub.expire(10.0 + EXPIRY_SECONDS - 1)
    assert "job-1" in hub.records
    hub.expire(10.0 + EXPIRY_SECONDS)
    assert "job-1" not in hub.records


def test_a_job_never_taken_expires_with_an_error_and_one_never_reported_as_uncertain():
    hub, poll = hub_with_laptop(keep=EXPIRY_SECONDS * 10)
    taken = sent_to_laptop(hub, "taken")
    hub.polls.clear()
    hub.last_poll["laptop"] = 2.0
    never = object()
    hub.submit(job("never"), key("never"), "laptop", never, 2.0)
    answers = dict(hub.expire(2.0 + EXPIRY_SECONDS + 60.0))
    assert answers[never].is_error and not answers[never].uncertain
    assert answers[taken].uncertain


# ---- devices.json (actors/enrollment/actor.py) -------------------------------------------


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
    assert DeviceBook.remove(data, "laptop") == (KEY, 1)      # and the unused secret `again` is void
    assert data["removed"] == {"laptop": KEY}
    fresh, _ = DeviceBook.add_secret(data, "laptop", 4.0)
    assert DeviceBook.enroll(data, "laptop", fresh, OTHER_KEY, 5.0) is None
