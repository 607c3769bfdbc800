"""P1 (issue 20): a joined computer cannot forge the result of a job, nor show output in
one, unless the job was sent to it; every refusal is logged with its name, and nothing of
a refused report is kept. The attacker is an enrolled computer driven by the test with
its own key (`rogue`: a stolen laptop); the honest `laptop` is a real `device join`."""

from __future__ import annotations

import logging
import sys
import threading

import pytest

from devices_world import WAIT, devices, hub, joined, lines, listen, rogue  # noqa: F401 (fixtures)
from polling import wait_until

from everchat.actors.devices.hub import job_id
from everchat.actors.devices.actor import _Refusals, load_job_secret
from everchat.transport import RemoteError, schema

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups and signals")

FORGED = "FORGED BY laptop2: the command printed 'all 412 tests passed'"


@pytest.fixture
def laptop2(hub, tmp_path):
    node = rogue(hub, tmp_path / "laptop2")
    try:
        yield node
    finally:
        node.stop()


def forge(node, job: str) -> RemoteError:
    """laptop2 reports `job` done, as forge.py did; the refusal it gets."""
    with pytest.raises(RemoteError) as refused:
        node.ask("devices", schema.ReportJob("laptop2", job, FORGED, False, False), timeout=WAIT)
    return refused.value


def test_p1_reports_planted_for_the_predictable_ids_are_refused_and_the_jobs_run(hub, devices, laptop2, tmp_path,
                                                                                 caplog):
    laptop = tmp_path / "laptop"
    joined(hub, devices, laptop)
    keys = [f"turn-{m}-{n}" for m in range(5) for n in range(1, 9)]      # the next turns' tool calls
    with caplog.at_level(logging.WARNING, logger="everchat.devices"):
        refusals = [forge(laptop2, key) for key in keys]
    assert {refused.kind for refused in refusals} == {"LookupError"}
    assert "never sent to 'laptop2'" in refusals[0].text
    assert any("refused from device 'laptop2': a result for job 'turn-0-1'" in r.getMessage()
               for r in caplog.records)
    with hub.actor._lock:                      # nothing of them is kept (the hub's memory stays bounded)
        assert not hub.actor.core.records
    here = hub.run("turn-2-1", "echo ran-here >> side.txt; echo real-here", device="")
    there = hub.run("turn-2-2", "echo ran-there >> side.txt; echo real-there", device="laptop")
    assert here.text == "real-here\n[exit 0]" and there.text == "real-there\n[exit 0]"
    assert lines(hub.home / "work" / "main" / "side.txt") == ["ran-here"]
    assert lines(laptop / "work" / "main" / "side.txt") == ["ran-there"]


def gated(folder, tag: str) -> str:
    """A command that says it started, then waits for the file `go` in its work folder."""
    return f"echo started-{tag}; while [ ! -e go ]; do sleep 0.05; done; echo real-{tag}"


@pytest.mark.parametrize("where", ["this computer", "another device"])
def test_p1_even_knowing_a_jobs_real_id_another_device_cannot_report_it_nor_show_output_in_it(
        hub, devices, laptop2, tmp_path, caplog, where):
    """The ids are secret; should one leak, ownership still holds: the job is not laptop2's."""
    device, folder = ("", hub.home) if where == "this computer" else ("laptop", tmp_path / "laptop")
    if device:
        joined(hub, devices, folder)
    seen = listen(hub)
    work = folder / "work" / "main"
    box = hub.run_in_background("turn-9-1", gated(work, "run"), device=device)
    try:
        wait_until(lambda: any("started-run" in event.text for event in seen), WAIT, "the job started")
        leaked = job_id(load_job_secret(hub.home / "devices" / "job-ids.key"), "turn-9-1")
        with caplog.at_level(logging.WARNING, logger="everchat.devices"):
            refused = forge(laptop2, leaked)
            laptop2.tell("devices", schema.DeviceOutput("laptop2", leaked, "INJECTED OUTPUT by laptop2\n"))
            laptop2.tell("devices", schema.DeviceOutput("laptop2", "turn-9-1", "INJECTED OUTPUT by laptop2\n"))
            marker = laptop2.ask("devices", schema.PollJobs("laptop2", 0.0, []), timeout=WAIT)   # after the tells
        assert refused.kind == "LookupError" and "runs on another computer, not on 'laptop2'" in refused.text
        assert marker == schema.DeviceWork([], [])
        assert any("'laptop2'" in record.getMessage() and "refused" in record.getMessage()
                   for record in caplog.records)
    finally:
        work.mkdir(parents=True, exist_ok=True)
        (work / "go").touch()
        box["thread"].join(WAIT)
    assert box["result"].text == "started-run\nreal-run\n[exit 0]"
    assert not [event for event in seen if "INJECTED" in event.text]


def test_p1_a_device_may_report_and_show_output_only_for_a_job_sent_to_it(hub, laptop2):
    """The honest path through the same door: laptop2 takes its own job and reports it."""
    seen = listen(hub)
    laptop2.ask("devices", schema.PollJobs("laptop2", 0.0, []), timeout=WAIT)      # online
    box = hub.run_in_background("turn-3-1", "true", device="laptop2")
    work = wait_until(lambda: (found := laptop2.ask("devices", schema.PollJobs("laptop2", 1.0, []), timeout=WAIT)).jobs
                      and found, WAIT, "the job sent to laptop2")
    (item,) = work.jobs
    assert item["id"].startswith("job-") and "turn-3-1" not in item["id"]      # the hub's own id
    laptop2.tell("devices", schema.DeviceOutput("laptop2", item["id"], "its own output\n"))
    assert laptop2.ask("devices", schema.ReportJob("laptop2", item["id"], "done", False, False),
                       timeout=WAIT) == schema.Ack()
    box["thread"].join(WAIT)
    assert box["result"] == schema.JobResult("turn-3-1", "done", False, False)
    wait_until(lambda: [event for event in seen if event.text == "its own output\n"], WAIT, "its output shown")
    assert {(event.job, event.caller) for event in seen} == {("turn-3-1", "main")}


def test_p1_every_refusal_is_logged_and_a_flood_is_one_line_with_a_count(caplog):
    refusals = _Refusals(every=10.0)
    with caplog.at_level(logging.WARNING, logger="everchat.devices"):
        for n in range(1000):
            refusals.note("hub", "laptop2", f"a result for job 'turn-{n}-1'", 100.0 + n / 1000)
        refusals.note("hub", "nas", "output for job 'x'", 100.5)
        refusals.flush("hub", 105.0)                    # laptop2's quiet time is not over yet
        refusals.flush("hub", 110.0)
    assert [record.getMessage() for record in caplog.records] == [
        "hub: refused from device 'laptop2': a result for job 'turn-0-1'",
        "hub: refused from device 'nas': output for job 'x'",
        "hub: refused 999 more reports or output from device 'laptop2'",
    ]


def test_p1_after_a_hub_restart_a_job_re_presented_by_the_device_is_checked_against_the_asking_call(
        hub, devices, tmp_path):
    """The crash guarantee kept (R39): a device that finished a job while the hub was away
    keeps its report until the hub asks for the job again (the same call gets it once:
    test_devices_net.py's test_r39_a_cut_connection_...); the same id asked for another
    call gets a refusal, and nothing runs."""
    laptop = tmp_path / "laptop"
    joined(hub, devices, laptop)
    work = laptop / "work" / "main"
    command = "echo ran >> side.txt; while [ ! -e go ]; do sleep 0.05; done; echo finished"
    box = hub.run_in_background("call-1", command)
    wait_until(lambda: lines(work / "side.txt"), WAIT, "the job started")
    hub.stop()
    box["thread"].join(WAIT)
    (work / "go").touch()                                # it ends while the hub is away
    hub.start()
    wait_until(lambda: (hub.row("laptop") or {}).get("online"), WAIT, "the device back")
    wrong = hub.run("call-1", "echo something else >> side.txt")
    assert wrong.is_error and "ran another call under this job's id before; this one was not run" in wrong.text
    assert lines(work / "side.txt") == ["ran"]


def test_p1_the_job_id_secret_is_private_and_a_bad_one_is_refused_in_words(tmp_path):
    path = tmp_path / "job-ids.key"
    secret = load_job_secret(path)
    assert len(secret) == 32 and load_job_secret(path) == secret and (path.stat().st_mode & 0o777) == 0o600
    path.write_text("not hex\n")
    with pytest.raises(ValueError, match="is not a job-id key"):
        load_job_secret(path)


def test_p1_output_refused_for_a_job_of_another_device_while_it_runs(hub, devices, laptop2, tmp_path):
    """As outinject.py did: output told for every likely id while a job runs is not shown."""
    seen = listen(hub)
    stop = threading.Event()

    def inject() -> None:
        while not stop.is_set():
            for m in range(4):
                for n in range(1, 5):
                    laptop2.tell("devices", schema.DeviceOutput("laptop2", f"turn-{m}-{n}", f"INJECTED {m}-{n}\n"))
            stop.wait(0.02)

    thread = threading.Thread(target=inject, name="test-inject", daemon=True)
    thread.start()
    try:
        result = hub.run("turn-2-1", "sleep 1; echo local-done", device="")
    finally:
        stop.set()
        thread.join(WAIT)
    assert result.text == "local-done\n[exit 0]"
    wait_until(lambda: any("local-done" in event.text for event in seen), WAIT, "the job's own output")
    assert not [event for event in seen if "INJECTED" in event.text]
