"""Issue 20: when a joined computer goes away, its jobs do not hang the chat (HANDS.md §5).
One that leaves (Ctrl-C, SIGTERM) tells the hub and its jobs fail at once; one that dies
unannounced is offline `offline_seconds` after it was last heard from and its jobs fail
`keep_seconds` after that. And removal ends it for good: the old join command exits with
one line, and no link made for the removed device joins. Times are tested as ratios of the
configured figures, measured from the hub's own `last_seen`."""

from __future__ import annotations

import json
import math
import signal
import sys
import time

import pytest

from devices_world import WAIT, Hub, add, devices, everchat, joined, lines, rogue  # noqa: F401 (fixtures)
from polling import wait_until

from everchat.actors.devices.hub import OFFLINE_SECONDS
from everchat.actors.enrollment.actor import POLL_WAIT
from everchat.transport import schema

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups and signals")

OFFLINE, KEEP = 2.0, 2.0


@pytest.fixture
def quick_hub(tmp_path):
    """A hub whose devices are offline after OFFLINE s and whose jobs wait KEEP s more."""
    hub = Hub(tmp_path / "server", offline_seconds=OFFLINE, keep_seconds=KEEP)
    try:
        yield hub.start()
    finally:
        hub.stop()


@pytest.fixture
def hub(tmp_path):
    hub = Hub(tmp_path / "server")          # the real figures: 60 s and 60 s
    try:
        yield hub.start()
    finally:
        hub.stop()


def done(box: dict, timeout: float = WAIT) -> schema.JobResult:
    box["thread"].join(timeout)
    assert "result" in box, box
    return box["result"]


def test_a_device_stopped_with_sigterm_tells_the_hub_and_its_jobs_end_at_once(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    _, process = joined(hub, devices, laptop)
    box = hub.run_in_background("call-1", "echo started >> side.txt; sleep 300")
    wait_until(lambda: lines(laptop / "work" / "main" / "side.txt"), WAIT, "the job started")
    stopped = time.time()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=WAIT) == 0
    result = done(box)
    assert result.is_error and (result.text.endswith("[stopped]") or result.text.startswith("laptop left"))
    assert box["at"] - stopped < OFFLINE_SECONDS / 2      # at once: well inside the time it takes to notice
    assert not hub.row("laptop")["online"]          # it said it left: no waiting for it
    refused = hub.run("call-2", "echo never")
    assert refused.is_error and "not connected now" in refused.text


def test_a_job_out_on_a_device_that_leaves_fails_with_laptop_left(hub, tmp_path):
    laptop = rogue(hub, tmp_path / "laptop", "laptop")       # a device that takes the job and then leaves
    try:
        laptop.ask("devices", schema.PollJobs("laptop", 0.0, []), timeout=WAIT)
        box = hub.run_in_background("call-1", "sleep 300")
        wait_until(lambda: laptop.ask("devices", schema.PollJobs("laptop", 1.0, []), timeout=WAIT).jobs, WAIT,
                   "the job sent")
        laptop.ask("devices", schema.LeaveDevice("laptop"), timeout=WAIT)
        box["thread"].join(WAIT)
    finally:
        laptop.stop()
    assert box["result"] == schema.JobResult("call-1", "laptop left while the job ran: it may have run (uncertain, "
                                             "not run again)", True, True)


def test_a_device_killed_unannounced_is_offline_then_its_jobs_fail_on_time(quick_hub, devices, tmp_path):
    hub = quick_hub
    laptop = tmp_path / "laptop"
    _, process = joined(hub, devices, laptop)
    side = laptop / "work" / "main" / "side.txt"
    devices.groups.append(side)
    box = hub.run_in_background("call-1", "echo $$ >> side.txt; sleep 300")
    wait_until(lambda: lines(side), WAIT, "the job started")
    process.kill()                                   # no word to the hub
    process.wait(timeout=WAIT)
    last_seen = hub.row("laptop")["last_seen"]
    offline_at = wait_until(lambda: not hub.row("laptop")["online"] and time.time(), WAIT, "laptop offline")
    result = done(box, WAIT * 3)
    answered = box["at"]
    assert result.is_error and result.uncertain and result.text.startswith("laptop is offline")
    assert hub.row("laptop")["last_seen"] == last_seen   # nothing heard from it since
    # offline within OFFLINE of the last word, the jobs KEEP after that (the ticker looks twice a second)
    assert OFFLINE <= offline_at - last_seen <= OFFLINE * 3 + 1.0
    assert OFFLINE + KEEP <= answered - last_seen <= (OFFLINE + KEEP) * 3 + 1.0
    assert len(lines(side)) == 1


def test_a_device_killed_and_back_within_the_keep_time_delivers_without_rerun(devices, tmp_path):
    hub = Hub(tmp_path / "server", offline_seconds=OFFLINE, keep_seconds=WAIT * 5)   # time to come back, loaded
    try:
        back_in_time(hub.start(), devices, tmp_path)
    finally:
        hub.stop()


def back_in_time(hub: Hub, devices, tmp_path) -> None:
    laptop = tmp_path / "laptop"
    link, process = joined(hub, devices, laptop)
    work = laptop / "work" / "main"
    box = hub.run_in_background("call-1", "echo ran >> side.txt; while [ ! -e go ]; do sleep 0.05; done; echo ok")
    wait_until(lambda: lines(work / "side.txt"), WAIT, "the job started")
    process.kill()
    process.wait(timeout=WAIT)
    (work / "go").touch()                            # its orphaned job ends meanwhile
    wait_until(lambda: not hub.row("laptop")["online"], WAIT, "laptop offline")   # seen gone, then back
    devices.join(laptop, link)
    result = done(box, WAIT * 2)
    assert result.uncertain or result.text.endswith("ok\n[exit 0]"), result     # its journal's word
    assert lines(work / "side.txt") == ["ran"]


def test_after_remove_the_old_join_command_exits_with_one_line(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    link, process = joined(hub, devices, laptop)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=WAIT) == 0
    assert everchat("device", "remove", "laptop", "--data-dir", str(hub.chat), home=hub.home).returncode == 0
    started = time.monotonic()
    again = devices.join(laptop, link)               # the old command, run again
    assert again.wait(timeout=WAIT) == 1
    assert time.monotonic() - started < POLL_WAIT    # at the refused handshake, not at a poll's deadline
    output = (laptop / "join-1.log").read_text().splitlines()
    assert output[0] == "everchat: joining as laptop; Ctrl-C stops"
    assert output[1:] == ["everchat: the chat refused 'laptop': this computer's key is refused there: it was removed "
                          "from the chat (on the chat's computer, `everchat device add laptop` makes a new link)"]


def test_a_second_unused_link_of_a_removed_device_no_longer_joins(hub, devices, tmp_path):
    first, second = add(hub), add(hub)
    process = devices.join(tmp_path / "laptop", first)
    wait_until(lambda: (hub.row("laptop") or {}).get("online") or process.poll() is not None, WAIT, "laptop online")
    assert everchat("device", "remove", "laptop", "--data-dir", str(hub.chat), home=hub.home).returncode == 0
    assert process.wait(timeout=WAIT) == 1
    late = everchat("device", "join", second, "--name", "laptop", home=tmp_path / "other")
    assert late.returncode == 1 and "not one this chat made" in late.stderr
    assert "laptop" not in json.loads((hub.chat / "config" / "devices.json").read_text())["devices"]


def test_device_add_ttl_limits_the_links_life(hub, tmp_path):
    asked = time.time()
    made = everchat("device", "add", "laptop", "--ttl", "1.5", "--data-dir", str(hub.chat), home=hub.home)
    assert made.returncode == 0, made.stderr
    link = made.stdout.split("'")[1]
    expires = json.loads((hub.chat / "config" / "devices.json").read_text())["secrets"][0]["expires"]
    assert asked + 1.5 <= expires <= time.time() + 1.5
    wait_until(lambda: time.time() > expires, WAIT, "the link's life over")
    late = everchat("device", "join", link, "--name", "laptop", home=tmp_path / "laptop")
    assert late.returncode == 1 and "expired" in late.stderr


@pytest.mark.parametrize("ttl", ["0", "-5", "nan", "inf"])
def test_a_bad_ttl_is_refused_and_nothing_is_made(hub, ttl):
    done = everchat("device", "add", "laptop", f"--ttl={ttl}", "--data-dir", str(hub.chat), home=hub.home)
    assert done.returncode == 2 and done.stdout == ""
    assert "--ttl is the join link's life in seconds, more than 0" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (hub.chat / "config" / "devices.json").exists()


def test_a_bad_ttl_asked_of_the_hub_directly_is_refused(hub):
    from everchat.transport import RemoteError

    for ttl in (-1.0, math.nan, math.inf):
        with pytest.raises(RemoteError, match="life"):
            hub.node.ask("devices", schema.AddDevice("laptop", ttl), timeout=WAIT)
    assert not (hub.chat / "config" / "devices.json").exists()


@pytest.mark.parametrize("link", ["", "   "])
def test_device_join_with_an_empty_link_is_refused_and_writes_nothing(tmp_path, link):
    home = tmp_path / "laptop"
    done = everchat("device", "join", link, "--name", "laptop", home=home)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == ("everchat: the join link is empty: give the one `everchat device add NAME` "
                                   "printed on the chat's computer")
    assert not home.exists()
