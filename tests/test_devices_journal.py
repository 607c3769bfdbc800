"""P13 (issue 20): a damaged record in a journal does not stop a joined computer, nor the
hub, with "internal error: JournalError": the damaged part is set aside with one line
naming the file and the offset, and no job it names is run again (R39)."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import pytest

from devices_world import WAIT, Hub, devices, hub, joined, lines  # noqa: F401 (fixtures)
from polling import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups and signals")

BOGUS = b'{"v":1,"op":"bogus"}\n'


def damage(path: Path) -> int:
    """A bad record after the first line (a job's "begin"); its offset."""
    data = path.read_bytes()
    first = data.index(b"\n") + 1
    path.write_bytes(data[:first] + BOGUS + data[first:])
    return first


def test_p13_a_device_with_a_damaged_journal_starts_and_runs_nothing_again(hub, devices, tmp_path):
    laptop = tmp_path / "laptop"
    link, process = joined(hub, devices, laptop)
    command = "echo ran >> side.txt; echo done"
    assert hub.run("call-1", command).text == "done\n[exit 0]"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=WAIT) == 0
    journal = laptop / "device" / "journal.jsonl"
    offset = damage(journal)
    hub.stop()                                     # the hub forgets the job: only the device's journal knows it
    hub.start()
    again = devices.join(laptop, link)
    wait_until(lambda: (hub.row("laptop") or {}).get("online") or again.poll() is not None, WAIT, "laptop online")
    assert again.poll() is None, (laptop / "join-1.log").read_text()
    assert hub.run("call-1", command).text == "done\n[exit 0]"      # its recorded outcome: not run again
    assert lines(laptop / "work" / "main" / "side.txt") == ["ran"]
    log = (laptop / "join-1.log").read_text()
    assert "internal error" not in log
    (warning,) = [line for line in log.splitlines() if "damaged record" in line]
    assert f"{journal}: a damaged record at byte {offset}" in warning
    assert (journal.parent / f"journal.jsonl.damaged-{offset}").read_bytes().startswith(BOGUS)


def test_p13_the_hubs_own_journal_is_mended_the_same_way(tmp_path, caplog):
    hub = Hub(tmp_path / "server")
    try:
        command = "echo ran >> side.txt; echo done"
        assert hub.start().run("call-1", command, device="").text == "done\n[exit 0]"
        hub.stop()
        journal = hub.home / "devices" / "local-journal.jsonl"
        offset = damage(journal)
        with caplog.at_level(logging.WARNING, logger="everchat.actors.devices.jobs"):
            hub.start()
        assert hub.run("call-1", command, device="").text == "done\n[exit 0]"   # read from the set-aside part
        assert lines(hub.home / "work" / "main" / "side.txt") == ["ran"]
        (warning,) = [record.getMessage() for record in caplog.records if "damaged record" in record.getMessage()]
        assert warning.startswith(f"{journal}: a damaged record at byte {offset}")
    finally:
        hub.stop()
