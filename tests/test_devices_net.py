"""Joining another computer, for real (docs/HANDS.md §5, R39): the device hub hosted in this
test's own node bound on tcp with the chat's keys (as `everchat serve --tcp` will host it),
and each device a separate `everchat device join` process with its own `$EVERCHAT_HOME`,
joined with the command `everchat device add` printed. Every process started here is
killed in the fixtures; every job's process group is checked or killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from devices_world import WAIT, add, devices, everchat, hub, joined, lines, listen  # noqa: F401 (fixtures)
from polling import wait_until

from everchat.actors.devices.jobs import group_alive
from everchat.actors.devices.actor import DevicesActor
from everchat.transport import KeyStore, Node, PeerLost, RemoteError, schema

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups and signals")


def test_r39_a_joined_computer_runs_a_shell_job_in_its_own_work_folder(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    joined(hub, devices, laptop)
    result = hub.run("call-1", "echo ran >> side.txt; echo hello from $(pwd)")
    assert not result.is_error and not result.uncertain
    assert f"hello from {laptop / 'work' / 'main'}" in result.text
    assert lines(laptop / "work" / "main" / "side.txt") == ["ran"]
    listed = everchat("devices", "--data-dir", str(hub.chat), "--json", home=hub.home)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {"name": "laptop", "online": True, "running": 0, "local": False}.items() <= next(
        row for row in rows if row["name"] == "laptop").items()
    assert stat_mode(laptop / "device" / "keys" / "device.key") == 0o600
    assert stat_mode(hub.chat / "config" / "devices.json") == 0o600


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_r39_a_resent_job_id_gets_the_first_result_and_runs_once(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    joined(hub, devices, laptop)
    first = hub.run("call-1", "echo ran >> side.txt; echo done")
    assert hub.run("call-1", "echo ran >> side.txt; echo done") == first
    assert lines(laptop / "work" / "main" / "side.txt") == ["ran"]


def test_r39_a_device_killed_mid_job_reports_it_uncertain_and_never_reruns_it(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    link, process = joined(hub, devices, laptop)
    side = laptop / "work" / "main" / "side.txt"
    devices.groups.append(side)
    box = hub.run_in_background("call-1", "echo $$ >> side.txt; sleep 300")
    wait_until(lambda: lines(side), WAIT, "the job started")
    process.kill()
    process.wait(timeout=WAIT)
    os.killpg(int(lines(side)[0]), signal.SIGKILL)     # what a power cut would have ended too
    devices.join(laptop, link)                          # the same home: its journal
    box["thread"].join(WAIT)
    result = box["result"]
    assert result.uncertain and result.is_error, result
    assert hub.run("call-2", "echo second").text.startswith("second")
    assert hub.run("call-1", "echo $$ >> side.txt; sleep 300") == result
    assert len(lines(side)) == 1


def test_r39_a_cut_connection_is_rejoined_and_the_finished_result_arrives_once(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    joined(hub, devices, laptop)
    work = laptop / "work" / "main"
    command = "echo ran >> side.txt; while [ ! -e go ]; do sleep 0.05; done; echo finished"
    box = hub.run_in_background("call-1", command)
    wait_until(lambda: lines(work / "side.txt"), WAIT, "the job started")
    hub.stop()                                          # the connection is cut mid-job
    box["thread"].join(WAIT)
    assert "error" in box                               # that asker heard the hub stop
    (work / "go").touch()                               # the job ends while the hub is away
    hub.start()                                         # the same port and key
    wait_until(lambda: hub.node.ask("devices", schema.ListDevices(), timeout=5.0) and
               (hub.row("laptop") or {}).get("online"), WAIT, "the device back")
    result = hub.run("call-1", command)                 # asked again: the device re-presents it (P1: checked)
    assert result == schema.JobResult("call-1", "finished\n[exit 0]", False, False)
    assert lines(work / "side.txt") == ["ran"]


def test_stop_jobs_kills_a_remote_jobs_process_group(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    joined(hub, devices, laptop)
    pid_file = laptop / "work" / "main" / "group.txt"
    devices.groups.append(pid_file)
    box = hub.run_in_background("call-1", "echo $$ > group.txt; sleep 300 & sleep 300")
    wait_until(lambda: lines(pid_file), WAIT, "the job started")
    group = int(lines(pid_file)[0])
    assert group_alive(group)
    assert hub.node.ask("devices", schema.StopJobs("main"), timeout=5.0) == schema.Ack()
    box["thread"].join(WAIT)
    assert box["result"].is_error
    wait_until(lambda: not group_alive(group), WAIT, "no process of the job's group left")


def test_stop_jobs_kills_a_local_jobs_process_group(hub, tmp_path):
    pid_file = hub.home / "work" / "main" / "group.txt"
    box = hub.run_in_background("call-1", "echo $$ > group.txt; sleep 300 & sleep 300", device="")
    try:
        wait_until(lambda: lines(pid_file), WAIT, "the job started")
        group = int(lines(pid_file)[0])
        hub.node.ask("devices", schema.StopJobs("main"), timeout=5.0)
        box["thread"].join(WAIT)
        assert box["result"].is_error
        wait_until(lambda: not group_alive(group), WAIT, "no process of the job's group left")
    finally:
        if lines(pid_file):
            try:
                os.killpg(int(lines(pid_file)[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_an_unenrolled_key_is_refused_by_curve(hub, tmp_path):
    stranger = KeyStore(tmp_path / "stranger").ensure("stranger")
    node = Node("stranger", pair=stranger, connect_timeout=1.0).start()
    node.route("devices", hub.node.endpoint)
    try:
        with pytest.raises(PeerLost):
            node.ask("devices", schema.PollJobs("laptop", 1.0, []), timeout=3.0)
    finally:
        node.stop()
    assert hub.node.gateway_statistics().refused >= 1


def test_a_reused_secret_is_refused_with_the_reason(hub, devices, tmp_path):
    link, _ = joined(hub, devices, tmp_path / "laptop")
    again = everchat("device", "join", link, "--name", "laptop", home=tmp_path / "other")
    assert again.returncode == 1
    assert "used already" in again.stderr


def test_a_secret_for_another_name_is_refused(hub, tmp_path):
    link = add(hub, "laptop")
    done = everchat("device", "join", link, "--name", "nas", home=tmp_path / "nas")
    assert done.returncode == 1 and "for the device 'laptop', not 'nas'" in done.stderr


def test_a_removed_device_is_cut_off_and_its_key_revoked(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    _, process = joined(hub, devices, laptop)
    key = json.loads((hub.chat / "config" / "devices.json").read_text())["devices"]["laptop"]["key"]
    done = everchat("device", "remove", "laptop", "--data-dir", str(hub.chat), home=hub.home)
    assert done.returncode == 0, done.stderr
    assert process.wait(timeout=WAIT) == 1
    assert "everchat: the chat refused 'laptop': device 'laptop' was removed from this chat" in (
        laptop / "join-0.log").read_text()
    assert key.encode() not in KeyStore(hub.chat / "config").authorized()


def test_device_join_stops_on_sigterm_with_status_0(hub, devices, tmp_path):
    _, process = joined(hub, devices, tmp_path / "laptop")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=WAIT) == 0


def test_a_device_may_poll_only_as_the_name_its_key_was_enrolled_under(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    joined(hub, devices, laptop)
    pair = KeyStore(laptop / "device").load("device")      # what the laptop's owner holds
    node = Node("impostor", pair=pair, connect_timeout=2.0).start()
    node.route("devices", hub.node.endpoint)
    try:
        with pytest.raises(RemoteError, match="enrolled as 'laptop', not 'nas'"):
            node.ask("devices", schema.PollJobs("nas", 1.0, []), timeout=5.0)
        with pytest.raises(RemoteError, match="may not send RunJob"):
            node.ask("devices", schema.RunJob("x", "", "shell", {"command": "true"}, "main", 0.0), timeout=5.0)
    finally:
        node.stop()


def test_devices_lists_the_enrolled_computers_with_no_server_running(hub, devices, tmp_path):
    _, process = joined(hub, devices, tmp_path / "laptop")
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=WAIT)
    hub.stop()
    (hub.chat / "run" / "supervisor.json").unlink()
    listed = everchat("devices", "--data-dir", str(hub.chat), home=hub.home)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[:2] == ["laptop", "offline"]


def test_a_removed_computer_joins_again_with_a_new_link_and_the_same_key(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    _, process = joined(hub, devices, laptop)
    assert everchat("device", "remove", "laptop", "--data-dir", str(hub.chat), home=hub.home).returncode == 0
    assert process.wait(timeout=WAIT) == 1
    fresh = add(hub)
    again = devices.join(laptop, fresh)
    wait_until(lambda: (hub.row("laptop") or {}).get("online") or again.poll() is not None, WAIT, "laptop back")
    assert again.poll() is None
    assert hub.run("call-1", "echo back").text.startswith("back")


def test_device_add_without_a_running_server_says_what_to_start(tmp_path):
    chat = tmp_path / "home" / "chat"
    done = everchat("device", "add", "laptop", "--data-dir", str(chat), home=tmp_path / "home")
    assert done.returncode == 1
    assert "no Everchat server runs the chat" in done.stderr and "everchat serve --tcp" in done.stderr
    assert not (chat / "config" / "devices.json").exists()


def test_device_add_on_a_hub_that_listens_on_no_tcp_address_says_so(tmp_path):
    node = Node("supervisor", bind=f"ipc://{tmp_path}/hub.sock").start()
    try:
        node.host("devices", DevicesActor, home=tmp_path, chat=tmp_path / "chat")
        with pytest.raises(RemoteError, match="listens on no tcp address"):
            node.ask("devices", schema.AddDevice("laptop", 0.0), timeout=5.0)
    finally:
        node.stop()


@pytest.mark.parametrize("device", ["laptop", ""])
def test_shell_output_is_published_as_job_output_on_topic_device(hub, devices, tmp_path, device):
    seen = listen(hub)
    if device:
        joined(hub, devices, tmp_path / "laptop")
    result = hub.run("call-1", "echo streamed-words", device=device)
    assert result.text.startswith("streamed-words")
    wait_until(lambda: any("streamed-words" in event.text for event in seen), WAIT, "the output event")
    assert {(event.job, event.caller) for event in seen} == {("call-1", "main")}


def test_devices_on_a_server_without_a_hub_lists_the_file_and_warns(tmp_path):
    from everchat.actors.enrollment.actor import DeviceBook

    home = tmp_path / "server"
    chat = home / "chat"
    book = DeviceBook(chat)
    data = book.load()
    secret, _ = DeviceBook.add_secret(data, "laptop", 0.0, ttl=10.0)
    DeviceBook.enroll(data, "laptop", secret, "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", 1.0)
    book.save(data)
    (chat / "run").mkdir(parents=True)
    node = Node("supervisor", bind="tcp://127.0.0.1:0", keys=KeyStore(chat / "config")).start()
    try:
        info = {"version": 1, "pid": os.getpid(), "host": socket.gethostname(), "endpoint": node.endpoint,
                "placement": "single", "transport": "tcp", "attachable": True}
        (chat / "run" / "supervisor.json").write_text(json.dumps(info))
        listed = everchat("devices", "--data-dir", str(chat), home=home)
    finally:
        node.stop()
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[:2] == ["laptop", "offline"]
    assert "warning: who is online is unknown" in listed.stderr


HUB_PROCESS = """
import sys, threading, signal
from pathlib import Path
from everchat.transport import Node
from everchat.actors.devices.actor import DevicesActor
home = Path(sys.argv[1])
node = Node("hub", bind=f"ipc://{home}/hub.sock").start()
node.host("devices", DevicesActor, home=home, chat=home / "chat")
(home / "hub.ready").write_text(node.endpoint)
threading.Event().wait()
"""


def test_r39_a_local_job_the_chat_crashed_during_is_uncertain_and_not_run_again(tmp_path):
    home = tmp_path / "server"
    home.mkdir()
    side = home / "work" / "main" / "side.txt"
    hubs: list[subprocess.Popen] = []

    def start_hub() -> str:
        (home / "hub.ready").unlink(missing_ok=True)
        hubs.append(subprocess.Popen([sys.executable, "-c", HUB_PROCESS, str(home)]))
        return wait_until(lambda: (home / "hub.ready").exists() and (home / "hub.ready").read_text(), WAIT,
                          "the hub process")

    asker = Node("asker").start()
    try:
        asker.route("devices", start_hub())
        msg = schema.RunJob("call-1", "", "shell", {"command": "echo $$ >> side.txt; sleep 300"}, "main", 0.0)
        first: dict = {}

        def ask_first() -> None:
            try:
                first["result"] = asker.ask("devices", msg, timeout=WAIT)
            except Exception as error:  # the hub dies under it: read below
                first["error"] = error

        waiting = threading.Thread(target=ask_first, daemon=True)
        waiting.start()
        wait_until(lambda: lines(side), WAIT, "the job started")
        hubs[-1].kill()                                  # the chat's process dies mid-job
        hubs[-1].wait(timeout=WAIT)
        os.killpg(int(lines(side)[0]), signal.SIGKILL)
        waiting.join(WAIT)
        assert isinstance(first.get("error"), PeerLost), first
        start_hub()                                      # the same home: its journal
        result = asker.ask("devices", msg, timeout=WAIT)
        assert result.uncertain and result.is_error
        assert len(lines(side)) == 1
    finally:
        asker.stop()
        for hub in hubs:
            hub.kill()
            hub.wait(timeout=WAIT)
        if lines(side):
            try:
                os.killpg(int(lines(side)[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
