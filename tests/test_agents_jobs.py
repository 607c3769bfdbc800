"""R38's limit: at most `agent_jobs` agents work at once (8 by default, `--agent-jobs`,
`agent_jobs` in config.toml); the rest queue and start, in order, as others end.

The real chat (every actor) with the fake model server answering every call through one
gate the test holds: the agents' calls are in flight, so who works and who waits is what
the agents actor decided, seen both in its own list and at the model server."""

from __future__ import annotations

import pytest
from cli_world import clean_home, env, everchat  # noqa: F401 (env is a fixture)
from polling import wait_until

from everchat.actors import settings as config
from everchat.actors.session.session import ChatSession
from everchat.actors.supervisor.actor import Placement
from everchat.tools.fakemodel import FakeModelServer, Gate, Reply, Text

NAMES = ("Ada", "Bob", "Cy")


def _agent_calls(rows) -> list:
    return [row for row in rows if row.is_model_call and row.headers.get("x-everchat-call") == "agent"]


@pytest.mark.parametrize("jobs, mode", [(1, "single"), (2, "single"), (2, "processes")])
def test_r38_agent_jobs_agents_work_at_once_and_the_rest_queue_in_order(tmp_path, monkeypatch, jobs, mode):
    clean_home(tmp_path, monkeypatch)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")  # the actor processes take their keys from it
    gate = Gate()
    with FakeModelServer() as server:
        server.rule(lambda request: Reply(Text("Done."), gate=gate))
        flags = {"reply.provider": "anthropic", "reply.model": "claude-test", "reply.base_url": server.base_url,
                 "compaction.provider": "demo", "agent_jobs": jobs}
        settings = config.load(flags, home=tmp_path / "home")
        assert settings.agent_jobs == jobs
        placement = Placement(mode, workers=1) if mode == "processes" else None  # its own process reads the limit
        with ChatSession.open(settings, placement=placement) as session:
            states = [session.agent(name, f"the task of {name}")[0].state for name in NAMES]
            assert states == ["working"] * jobs + ["queued"] * (len(NAMES) - jobs)
            assert server.wait_until(lambda rows: len(_agent_calls(rows)) >= jobs, 60), "the working agents' calls"
            rows = {row["name"]: row["state"] for row in session.agents()}
            assert rows == dict(zip(NAMES, states))
            assert len(_agent_calls(server.model_calls)) == jobs  # the queued ones called nothing
            gate.open()
            wait_until(lambda: {row["state"] for row in session.agents()} == {"done"}, 120, "every agent done")
        calls = _agent_calls(server.model_calls)
    # Never more than `jobs` agent calls in flight at once, counted at the server.
    moments = sorted([(call.started, 1) for call in calls] + [(call.ended, -1) for call in calls])
    in_flight = peak = 0
    for _, step in moments:
        in_flight += step
        peak = max(peak, in_flight)
    assert peak == jobs and len(calls) >= len(NAMES)


def test_r38_the_agent_jobs_flag_sets_the_limit_and_a_value_out_of_range_is_one_line(env, tmp_path):
    from everchat.frontends.cli.main import _parser
    from everchat.frontends.cli.commands import load_settings

    args = _parser().parse_args(["--agent-jobs", "3", "--data-dir", str(tmp_path / "chat"), "status"])
    assert load_settings(args).agent_jobs == 3
    for bad in ("0", "9"):
        done = everchat(env, "--agent-jobs", bad, "--data-dir", str(tmp_path / "chat"), "ask", "hi")
        assert (done.returncode, done.stderr) == (2, f"everchat: agent_jobs (flag --agent-jobs) must be 1 to 8, "
                                                     f"not {bad}\n")
        assert not (tmp_path / "chat").exists()  # nothing was made
