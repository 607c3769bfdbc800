"""P4 (issue 20): what the device hub publishes of a job's output (`JobOutput`, topic
"device") is bounded per job whatever the command prints: the first 15,000 characters
live, a line saying more comes, and at the end the last 15,000 after R7's marker. Local
jobs, jobs of a joined computer, and a joined computer that floods the hub itself."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devices_world import WAIT, devices, hub, joined, listen, rogue  # noqa: F401 (fixtures)
from polling import wait_until

from everchat.actors.devices.jobs import OutputClip
from everchat.actors.folder import ECHO_KEEP_CHARS, clip_echo
from everchat.transport import schema

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups and signals")

BOUND = 2 * ECHO_KEEP_CHARS + 200          # R7's two parts, the "more output" line and the marker
FLOOD = "head -c 200000000 /dev/zero | tr '\\0' B; echo; echo FLOOD-DONE"


def without_note(published: list[str]) -> str:
    return "".join(part for part in published if not part.startswith("\n[more output:"))


@given(st.lists(st.text(max_size=30), max_size=12))
def test_p4_a_clip_publishes_what_r7_keeps_of_the_whole_output(chunks):
    published: list[str] = []
    clip = OutputClip(published.append, keep=10)
    for chunk in chunks:
        clip.add(chunk)
    live = "".join(published)
    clip.close()
    whole = "".join(chunks)
    assert without_note(published) == clip_echo_with(whole, 10)
    assert live.startswith(whole[:10]) and len(without_note(published[:len(published)])) <= 2 * 10 + 40
    clip.add("after the end")                               # nothing more once closed
    assert without_note(published) == clip_echo_with(whole, 10)


def clip_echo_with(text: str, keep: int) -> str:
    """R7's clip (`clip_echo`) with `keep` characters each side."""
    if len(text) <= 2 * keep:
        return text
    return f"{text[:keep]}\n[{len(text) - 2 * keep} characters cut]\n{text[-keep:]}"


def test_p4_the_clip_of_a_long_output_is_r7s_clip_itself():
    published: list[str] = []
    clip = OutputClip(published.append)
    whole = "".join(str(k % 10) for k in range(100_000))
    for start in range(0, len(whole), 4096):
        clip.add(whole[start:start + 4096])
    clip.close()
    assert without_note(published) == clip_echo(whole)[0]


def published_bytes(seen: list) -> int:
    return sum(len(event.text.encode("utf-8")) for event in seen)


def test_p4_a_local_job_printing_200_mb_publishes_a_bounded_output(hub):
    seen = listen(hub)
    result = hub.run("turn-1-1", FLOOD, device="")
    assert result.text.endswith("FLOOD-DONE\n[exit 0]") and "characters cut]" in result.text
    wait_until(lambda: seen and seen[-1].text.endswith("FLOOD-DONE\n"), WAIT, "the output's last part")
    assert published_bytes(seen) <= BOUND
    assert seen[0].text.startswith("B") and {(event.job, event.caller) for event in seen} == {("turn-1-1", "main")}


def test_p4_a_joined_computer_printing_200_mb_makes_the_hub_publish_a_bounded_output(hub, devices, tmp_path):
    joined(hub, devices, tmp_path / "laptop")
    seen = listen(hub)
    result = hub.run("turn-1-1", FLOOD, device="laptop")
    assert result.text.endswith("FLOOD-DONE\n[exit 0]")
    wait_until(lambda: seen and seen[-1].text.endswith("FLOOD-DONE\n"), WAIT, "the output's last part")
    assert published_bytes(seen) <= BOUND


def test_p4_a_joined_computer_flooding_output_for_its_own_job_is_clipped_by_the_hub(hub, tmp_path):
    laptop2 = rogue(hub, tmp_path / "laptop2")
    try:
        seen = listen(hub)
        laptop2.ask("devices", schema.PollJobs("laptop2", 0.0, []), timeout=WAIT)
        box = hub.run_in_background("turn-1-1", "true", device="laptop2")
        work = wait_until(lambda: (got := laptop2.ask("devices", schema.PollJobs("laptop2", 1.0, []),
                                                      timeout=WAIT)).jobs and got, WAIT, "its job")
        job = work.jobs[0]["id"]
        chunk = "F" * 65536
        for _ in range(300):                                  # about 20 MB
            laptop2.tell("devices", schema.DeviceOutput("laptop2", job, chunk))
        laptop2.tell("devices", schema.DeviceOutput("laptop2", job, "THE-END\n"))
        laptop2.ask("devices", schema.ReportJob("laptop2", job, "done", False, False), timeout=WAIT)
        box["thread"].join(WAIT)
    finally:
        laptop2.stop()
    assert box["result"].text == "done"
    wait_until(lambda: seen and seen[-1].text.endswith("THE-END\n"), WAIT, "the output's last part")
    assert published_bytes(seen) <= BOUND
    with hub.actor._lock:
        assert not hub.actor._clips                            # nothing held once the job ended
