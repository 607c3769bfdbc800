"""What runs in an actor process besides the supervisor: each actor's class and arguments
(`build_actor`), the budget's wire form, and `NodeAgent`, the one agent per process that
applies directory updates and reports its mailboxes.

Apart from `supervisor.py` so an actor process (`process.py`, forked by `forkserver.py`)
needs none of the supervisor's code: the modules import one way (tests/test_boundaries.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from everchat.actors.compactor.actor import CompactorWorker
from everchat.actors.log_writer.actor import LogWriter
from everchat.actors.tree import Budget
from everchat.actors.planner.actor import PlannerActor
from everchat.actors.turns.actor import TurnRunnerActor
from everchat.transport import Actor, Node, parse_address, schema

__all__ = ["build_actor", "budget_to_json", "budget_from_json", "node_rows", "NodeAgent"]


def build_actor(name: str, chat: Path, budget: Budget, summarizer: str = "configured", settings=None,
                extra_tools: tuple = ()):
    """The class and arguments of the actor called `name`. The turn runner takes the
    session's `settings` (None: it reads them itself) and its extra tools, `(ToolSpec,
    handler)` pairs; the compactors take their specs."""
    if name == "log_writer":
        return LogWriter, (chat,)
    if name == "planner":
        return PlannerActor, (budget,)
    if name.startswith("compactor."):  # the turn's extra tools too: compactions send its very tools (R26)
        return CompactorWorker, ("planner", summarizer, "log_writer", settings,
                                 tuple(spec for spec, _ in extra_tools))
    if name == "devices":  # R39: the device hub; `work/` and its journal live in Everchat's home
        from everchat.actors.devices.actor import DevicesActor

        return DevicesActor, (_home(settings), chat)
    if name == "agents":  # R38: the agents and their report outbox
        from everchat.actors.agents.actor import AgentsActor

        return AgentsActor, (settings if settings is not None else "configured", None, "log_writer", "planner",
                             "devices", tuple(extra_tools))
    if name == "turn_runner":
        return TurnRunnerActor, (settings if settings is not None else "configured", tuple(extra_tools))
    raise ValueError(f"no actor is called {name!r}")


def _home(settings) -> Path:
    """Everchat's home: the session's, else the one this process was started with."""
    if settings is None:
        from everchat.actors.turns.actor import configured_settings

        settings = configured_settings()
    return Path(settings.home).expanduser()


def budget_to_json(budget: Budget) -> str:
    return json.dumps(budget.__dict__)


def budget_from_json(text: str) -> Budget:
    return Budget(**json.loads(text))


def node_rows(node: Node) -> list[dict]:
    """One statistics row per actor of `node`, then one named "gateway" for what belongs
    to no actor there (frames without a readable header, tells to names not hosted): a
    bad frame is counted somewhere the ops console shows."""
    return [stats.to_dict() for stats in node.statistics()] + [node.gateway_statistics().to_dict()]


class NodeAgent(Actor):
    """One per process: applies directory updates and reports this node's mailboxes."""

    def on_directory(self, msg: schema.Directory, delivery) -> None:
        """Every endpoint is checked before any is applied: a bad entry changes no route."""
        for endpoint in msg.routes.values():
            parse_address(endpoint)
        for target, endpoint in msg.routes.items():
            self.node.route(target, endpoint)

    def on_stats_request(self, msg: schema.StatsRequest, delivery) -> schema.StatsReply:
        return schema.StatsReply(actors=node_rows(self.node))

    def on_ping(self, msg: schema.Ping, delivery) -> schema.Pong:
        return schema.Pong(payload=msg.payload)
