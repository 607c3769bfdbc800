"""A log writer and a planner actor in one node, with the test as the compactor worker:
it asks for jobs and tells their results (tests/test_planner_wait.py, test_planner_failures.py)."""

from __future__ import annotations

from pathlib import Path

from everchat.actors.log_writer.actor import LogWriter
from everchat.actors.tree import Budget, key_of, name
from everchat.actors.planner.actor import PlannerActor
from everchat.transport import Node, schema

__all__ = ["PlannerWorld"]


class PlannerWorld:
    def __init__(self, chat: Path, jobs: int) -> None:
        self.chat = chat
        self.budget = Budget(jobs=jobs)
        self.node = Node("planner-test").start()
        self.node.host("log_writer", LogWriter, chat)
        self.start_planner()

    def start_planner(self) -> None:
        self.node.host("planner", PlannerActor, self.budget, "log_writer", "off")  # no prefix gate (R23)

    def restart_planner(self) -> None:
        """The planner stops and a new one recovers from the chat folder, as after a crash."""
        assert self.node.stop_actor("planner", timeout=10)
        self.start_planner()

    def close(self) -> None:
        self.node.stop()

    def append(self, text: str) -> None:
        self.node.ask("log_writer", schema.Append("user", text, None, [], None), timeout=10)

    def next_job(self) -> schema.BuildJob:
        job = self.node.ask("planner", schema.NextJob(worker="test"), timeout=30)
        assert isinstance(job, schema.BuildJob), job
        return job

    def next_name(self) -> str:
        job = self.next_job()
        return name(key_of(job.l, job.i))

    def built(self, l: int, i: int, text: str) -> None:  # noqa: E741
        self.node.tell("planner", schema.Built(l=l, i=i, text=text, worker="test"))

    def failed(self, l: int, i: int) -> None:  # noqa: E741
        self.node.tell("planner", schema.BuildFailed(l=l, i=i, reason="the model refused", worker="test"))

    def status(self) -> dict:
        return self.node.ask("planner", schema.PlannerStatus(), timeout=10).status

    def node_text(self, l: int, i: int) -> str | None:  # noqa: E741
        return self.node.ask("log_writer", schema.ReadNodes(nodes=[(l, i)]), timeout=10).texts[0]

    def actor(self, actor_name: str):
        """The hosted actor object (its state is read only after an ask it answered)."""
        return self.node._mailboxes[actor_name].actor
