"""Run a planner scenario file through the production planner core (SPEC section 8).

    python tools/planner_scenario.py < scenario.jsonl

One event a line in, one state line out, flushed at once, so a driver can answer
the compactions that `start=` reports. A malformed line, or a build or failure of
a node that is not running, prints `error: <reason>` on stderr and exits with 2.
"""

from __future__ import annotations

import json
import sys

from everchat.actors.tree import Budget, Planner, PlannerError, key_of, name

__all__ = ["ScenarioError", "ScenarioSession", "main"]

_PARAMS = ("ceiling", "floor", "cceiling", "cfloor", "jobs", "unit")


class ScenarioError(ValueError):
    """A scenario line the planner cannot take; the session is over."""


def _whole(value: object, label: str, low: int = 0, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ScenarioError(f"{label} must be a whole number, not {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"{low} … {high}" if high is not None else f">= {low}"
        raise ScenarioError(f"{label} must be {bound}, not {value}")
    return value


def _node(value: object, label: str) -> int:
    if not (isinstance(value, list) and len(value) == 2):
        raise ScenarioError(f"{label} must be a node [l, i], not {value!r}")
    return key_of(_whole(value[0], f"{label} level", 0, 40), _whole(value[1], f"{label} index"))


class ScenarioSession:
    """Feeds scenario lines to one `Planner` and renders its state lines."""

    def __init__(self) -> None:
        self.planner: Planner | None = None

    def feed(self, line: str) -> str | None:
        """One scenario line in; its state line out (None for the parameters line)."""
        try:
            event = json.loads(line)
        except ValueError as error:
            raise ScenarioError(f"not JSON: {error}") from None
        if not isinstance(event, dict):
            raise ScenarioError(f"an event is a JSON object, not {line.strip()!r}")
        try:
            if self.planner is None:
                self.planner = Planner(self._budget(event))
                return None  # the parameters line is not an event: nothing to print
            return self._event(self.planner, event)
        except PlannerError as error:
            raise ScenarioError(str(error)) from None

    @staticmethod
    def _budget(event: dict) -> Budget:
        unknown = set(event) - set(_PARAMS)
        if unknown:
            raise ScenarioError(f"unknown parameter {sorted(unknown)[0]!r}")
        values = {label: _whole(event[label], label) for label in _PARAMS[:5] if label in event}
        unit = event.get("unit", "bytes")
        if unit not in ("bytes", "lines"):
            raise ScenarioError(f"unit must be 'bytes' or 'lines', not {unit!r}")
        return Budget(unit=unit, **values)

    def _event(self, planner: Planner, event: dict) -> str:
        if "m" in event:
            unknown = set(event) - {"m", "ceiling", "floor"}
            if unknown:
                raise ScenarioError(f"unknown field {sorted(unknown)[0]!r} in a message event")
            size = _whole(event["m"], "m")
            budget = None
            if "ceiling" in event or "floor" in event:
                old = planner.budget
                budget = Budget(
                    ceiling=_whole(event.get("ceiling", old.ceiling), "ceiling"),
                    floor=_whole(event.get("floor", old.floor), "floor"),
                    cceiling=old.cceiling,
                    cfloor=old.cfloor,
                    jobs=old.jobs,
                    unit=old.unit,
                )
            step = planner.add_message(size, budget=budget)
        elif "b" in event:
            if set(event) != {"b", "s"}:
                raise ScenarioError("a build event is {\"b\": [l, i], \"s\": S}")
            step = planner.node_built(_node(event["b"], "b"), _whole(event["s"], "s", 1, 512))
        elif "f" in event:
            if set(event) != {"f"}:
                raise ScenarioError("a failure event is {\"f\": [l, i]}")
            step = planner.node_failed(_node(event["f"], "f"))
        else:
            raise ScenarioError(f"unknown event {json.dumps(event)}")
        return self._state(step.started)

    def _state(self, started: list[int]) -> str:
        planner = self.planner
        assert planner is not None
        view, cview = planner.view, planner.cview
        return (
            f"T={planner.messages}"
            f" view={','.join(map(name, view.ordered()))} size={view.size} shrink={int(view.shrinking)}"
            f" cview={','.join(map(name, cview.ordered()))} csize={cview.size} cshrink={int(cview.shrinking)}"
            f" start={','.join(map(name, started))}"
        )


def main() -> int:
    session = ScenarioSession()
    out = sys.stdout
    for line in sys.stdin:
        try:
            state = session.feed(line)
        except ScenarioError as error:
            out.flush()
            print(f"error: {error}", file=sys.stderr, flush=True)
            return 2
        if state is not None:
            out.write(state + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
