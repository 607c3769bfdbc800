"""A seeded random driver that plays planner scenarios (SPEC section 8) against any planner.

The driver writes a parameters line, then events: messages (``m``, sometimes carrying new
view budgets), and answers (``b`` builds, ``f`` failures) for the compactions that the
planner's ``start=`` lists report as running. Every choice depends only on the seed and the
output lines read so far, so two correct planners played with one seed see the same events.

A planner is either an in-process callable ``feed(line) -> str`` (the parameters line is fed
first and its return ignored; any exception is a rejection) or a command run as a
subprocess, spoken to line by line over pipes (a rejection is exit status 2).

Python API::

    play(planner, seed, events, bad=False) -> Transcript
    cross_check(planner, seed, events, reference=None, bad=False) -> CrossCheck
    play_push_check(planner, steps, seed=0) -> Transcript   # R20 in lines mode
    push_check_mismatch(transcript) -> str | None

Command line::

    python tools/scenario_driver.py --seed 7 --events 300 [--cmd "python tools/planner_scenario.py"]
        [--compare] [--bad] [--runs 100] [--write-events run-{seed}.jsonl] [--timeout 10]
        [--params-answer]
    python tools/scenario_driver.py --push-check 2000 [--cmd "..."]

Without ``--cmd`` the in-process reference planner is played. ``--compare`` plays ``--cmd``
and the reference in lockstep and reports the first line where they differ (exit 1).
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import re
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol

try:
    from everchat.tools.push_model import push_steps
    from everchat.tools.reference_planner import ReferencePlanner
except ImportError:  # run as `python tools/scenario_driver.py` outside the installed package
    from push_model import push_steps
    from reference_planner import ReferencePlanner

__all__ = [
    "CallablePlanner",
    "CrossCheck",
    "Driver",
    "DriverError",
    "Output",
    "Planner",
    "PlannerRejected",
    "Step",
    "SubprocessPlanner",
    "Transcript",
    "as_planner",
    "cross_check",
    "main",
    "node_of_name",
    "parse_output",
    "play",
    "play_push_check",
    "push_check_mismatch",
]

DEFAULT_BUDGETS = {"ceiling": 128000, "floor": 64000, "cceiling": 32000, "cfloor": 16000}


class PlannerRejected(Exception):
    """The planner refused a line: an exception in process, or exit status 2 from a command."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status  # the exit status of a command; None in process


class DriverError(Exception):
    """The planner's answer could not be read: a bad output line, a timeout, a crash, or an
    exit without the status 2 that section 8 prescribes."""


# --- output lines ---------------------------------------------------------------------------

_OUTPUT = re.compile(
    r"T=(\d+) view=(\S*) size=(\d+) shrink=([01]) cview=(\S*) csize=(\d+)"
    r" cshrink=([01]) start=(\S*)"
)


class Output(NamedTuple):
    """One parsed output line of section 8."""

    T: int
    view: list[str]
    size: int
    shrink: int
    cview: list[str]
    csize: int
    cshrink: int
    start: list[str]


def _names(text: str) -> list[str]:
    return text.split(",") if text else []


def parse_output(line: str) -> Output:
    """Parse ``T=.. view=.. size=.. shrink=.. cview=.. csize=.. cshrink=.. start=..``."""
    match = _OUTPUT.fullmatch(line)
    if match is None:
        raise DriverError(f"not an output line: {line!r}")
    t, view, size, shrink, cview, csize, cshrink, start = match.groups()
    return Output(
        int(t), _names(view), int(size), int(shrink), _names(cview), int(csize), int(cshrink),
        _names(start),
    )


def node_of_name(name: str) -> tuple[int, int]:
    """``id+n`` to (l, i) of R10; DriverError when it is not a tree node."""
    match = re.fullmatch(r"(\d+)\+(\d+)", name)
    if match is None:
        raise DriverError(f"not a node name: {name!r}")
    first, n = int(match[1]), int(match[2])
    if n < 1 or n & (n - 1) or first % n:
        raise DriverError(f"not a tree node: {name!r}")
    return n.bit_length() - 1, first // n


# --- planners -------------------------------------------------------------------------------


class Planner(Protocol):
    """What the driver talks to."""

    def parameters(self, line: str) -> None: ...
    def event(self, line: str) -> str: ...
    def close(self) -> None: ...


class CallablePlanner:
    """An in-process planner given as ``feed(line) -> str``."""

    def __init__(self, feed: Callable[[str], str | None], name: str = "in-process") -> None:
        self._feed = feed
        self.name = name

    def __repr__(self) -> str:
        return f"<CallablePlanner {self.name}>"

    def parameters(self, line: str) -> None:
        self._call(line)

    def event(self, line: str) -> str:
        out = self._call(line)
        if not isinstance(out, str):
            raise DriverError(f"{self.name} returned {out!r} for {line!r}")
        return out.rstrip("\n")

    def _call(self, line: str) -> str | None:
        try:
            return self._feed(line)
        except Exception as error:  # any refusal counts; its text goes in the transcript
            raise PlannerRejected(f"{type(error).__name__}: {error}") from error

    def close(self) -> None:
        """Nothing to release in process."""


class SubprocessPlanner:
    """A planner command, fed one line at a time over pipes (section 8's command form)."""

    def __init__(self, cmd: str | list[str], timeout: float = 10.0, answers_parameters: bool = False) -> None:
        self.args = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        self.timeout = timeout
        # Section 8 prints one line per event, and the parameters line is not an event; a
        # planner that answers it anyway can still be compared: its answer is read here.
        self.answers_parameters = answers_parameters
        self.parameters_answer: str | None = None
        self._proc = subprocess.Popen(
            self.args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def __repr__(self) -> str:
        return f"<SubprocessPlanner pid={self._proc.pid} {shlex.join(self.args)!r}>"

    def _read_stdout(self) -> None:
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _read_stderr(self) -> None:
        for line in self._proc.stderr:
            self._stderr.append(line)

    def _write(self, line: str) -> None:
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            # The planner has already exited; _read reports how (its status and stderr).
            return

    def parameters(self, line: str) -> None:
        self._write(line)
        if self.answers_parameters:
            self.parameters_answer = self._read(line)

    def event(self, line: str) -> str:
        self._write(line)
        return self._read(line)

    def _read(self, line: str) -> str:
        try:
            out = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise DriverError(f"{self!r} gave no answer to {line!r} in {self.timeout} s") from None
        if out is not None:
            return out.rstrip("\n")
        status = self._proc.wait(timeout=self.timeout)
        for reader in self._readers:
            reader.join(timeout=self.timeout)
        stderr = "".join(self._stderr).strip()
        if status == 2:
            raise PlannerRejected(stderr.removeprefix("error: "), status)
        raise DriverError(f"{self!r} exited with status {status} at {line!r}: {stderr}")

    def close(self) -> None:
        """Close its stdin and wait for it; kill it if it does not exit in time."""
        if self._proc.stdin and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:
                pass  # already exited: there is nothing left to flush to it
        try:
            self._proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for reader in self._readers:
            reader.join(timeout=self.timeout)


def as_planner(planner: object, timeout: float = 10.0) -> Planner:
    """A Planner from a Planner, a command (str or list) or a ``feed`` callable."""
    if isinstance(planner, (str, list)):
        return SubprocessPlanner(planner, timeout)
    if hasattr(planner, "event") and hasattr(planner, "parameters"):
        return planner  # type: ignore[return-value]
    if callable(planner):
        return CallablePlanner(planner, getattr(planner, "__qualname__", repr(planner)))
    raise TypeError(f"not a planner: {planner!r}")


# --- transcripts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One event and what the planner answered: an output line, or a rejection."""

    line: str
    output: str | None = None
    error: str | None = None


@dataclass
class Transcript:
    """A played scenario: the parameters line and every step."""

    seed: int
    parameters: str
    steps: list[Step] = field(default_factory=list)

    def event_lines(self) -> list[str]:
        """The scenario file: the parameters line, then every event, as played."""
        return [self.parameters] + [step.line for step in self.steps]

    def events_text(self) -> str:
        return "".join(line + "\n" for line in self.event_lines())

    def outputs(self) -> list[str]:
        return [step.output for step in self.steps if step.output is not None]

    def render(self) -> str:
        """``> event``, ``< output`` and ``! error`` lines, one per line."""
        lines = [f"# seed {self.seed}", f"> {self.parameters}"]
        for step in self.steps:
            lines.append(f"> {step.line}")
            if step.output is not None:
                lines.append(f"< {step.output}")
            if step.error is not None:
                lines.append(f"! {step.error}")
        return "\n".join(lines) + "\n"


# --- the random driver ----------------------------------------------------------------------


def _line(obj: dict) -> str:
    return json.dumps(obj)


class Driver:
    """The seeded chooser of events; it learns what is running from the output lines."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.running: list[tuple[int, int]] = []  # (l, i), in start order
        self.T = 0
        self.unit = "bytes"

    def __repr__(self) -> str:
        return f"<Driver seed={self.seed} T={self.T} running={len(self.running)}>"

    def _byte_budgets(self) -> tuple[int, int]:
        ceiling = self.rng.randint(300, 3000)
        return ceiling, self.rng.randint(ceiling // 4, ceiling - 1)

    def _line_budgets(self) -> tuple[int, int]:
        ceiling = self.rng.randint(2, 12)
        return ceiling, self.rng.randint(1, ceiling - 1)

    def parameters(self) -> str:
        """Small budgets most of the time so that batches happen often."""
        kind = self.rng.random()
        jobs = self.rng.randint(1, 8)
        if kind < 0.15:
            params = dict(DEFAULT_BUDGETS)
        elif kind < 0.45:
            self.unit = "lines"
            ceiling, floor = self._line_budgets()
            cceiling = self.rng.randint(2, max(2, ceiling))
            params = {"ceiling": ceiling, "floor": floor, "cceiling": cceiling,
                      "cfloor": self.rng.randint(1, cceiling - 1)}
        else:
            ceiling, floor = self._byte_budgets()
            cceiling = self.rng.randint(max(150, ceiling // 4), ceiling)
            params = {"ceiling": ceiling, "floor": floor, "cceiling": cceiling,
                      "cfloor": self.rng.randint(cceiling // 4, cceiling - 1)}
        return _line({**params, "jobs": jobs, "unit": self.unit})

    def _message_size(self) -> int:
        r = self.rng.random()
        if r < 0.25:
            return self.rng.randint(1, 40)  # tiny: free leaves that cascade (R11)
        if r < 0.45:
            return self.rng.randint(200, 512)  # free leaves, parents often not free
        if r < 0.5:
            return self.rng.choice([511, 512, 513])
        return self.rng.randint(513, 5000)  # leaves that need a compaction

    def _build_size(self) -> int:
        r = self.rng.random()
        if r < 0.3:
            return self.rng.randint(1, 20)
        if r < 0.6:
            return self.rng.randint(480, 512)
        return self.rng.randint(1, 512)

    def next_event(self) -> str:
        """A message, or a b/f for one running compaction chosen at random."""
        if self.running and self.rng.random() < 0.5:
            node = self.running.pop(self.rng.randrange(len(self.running)))
            if self.rng.random() < 0.15:
                return _line({"f": list(node)})
            return _line({"b": list(node), "s": self._build_size()})
        event: dict = {"m": self._message_size()}
        if self.rng.random() < 0.04:
            ceiling, floor = self._line_budgets() if self.unit == "lines" else self._byte_budgets()
            event.update(ceiling=ceiling, floor=floor)
        return _line(event)

    def observe(self, output: str) -> None:
        """Read an output line: T and the compactions it started."""
        parsed = parse_output(output)
        self.T = parsed.T
        self.running.extend(node_of_name(name) for name in parsed.start)

    def bad_line(self) -> str:
        """A line every planner must refuse (section 8's error path)."""
        kind = self.rng.randrange(4)
        if kind == 0:
            return '{"m": '
        if kind == 1:
            return '["m", 5]'
        idle = [(0, i) for i in range(self.T + 2) if (0, i) not in self.running]
        node = list(self.rng.choice(idle))
        return _line({"b": node, "s": 10} if kind == 2 else {"f": node})


def play(planner: object, seed: int, events: int, bad: bool = False, timeout: float = 10.0) -> Transcript:
    """Play ``events`` random events against ``planner`` (plus one bad line if ``bad``)."""
    driver = Driver(seed)
    transcript = Transcript(seed, driver.parameters())
    p = as_planner(planner, timeout)
    try:
        p.parameters(transcript.parameters)
        for _ in range(events):
            line = driver.next_event()
            if not _play_line(p, line, transcript, driver):
                return transcript
        if bad:
            _play_line(p, driver.bad_line(), transcript, None)
    finally:
        p.close()
    return transcript


def _play_line(p: Planner, line: str, transcript: Transcript, driver: Driver | None) -> bool:
    try:
        out = p.event(line)
    except PlannerRejected as rejected:
        transcript.steps.append(Step(line, error=f"error: {rejected}"))
        return False
    transcript.steps.append(Step(line, output=out))
    if driver is not None:
        driver.observe(out)
    return True


# --- lockstep comparison --------------------------------------------------------------------


@dataclass
class CrossCheck:
    """Two planners played in lockstep: both transcripts and the first difference, if any."""

    planner: Transcript
    reference: Transcript
    difference: str | None = None

    @property
    def agree(self) -> bool:
        return self.difference is None


def _answer(p: Planner, line: str) -> tuple[str, str]:
    """('out', line), ('error', reason) for a refusal, or ('broken', why) for a crash,
    a timeout or an exit status other than 2."""
    try:
        return "out", p.event(line)
    except PlannerRejected as rejected:
        return "error", f"error: {rejected}"
    except DriverError as error:
        return "broken", str(error)


def cross_check(
    planner: object,
    seed: int,
    events: int,
    reference: object | None = None,
    bad: bool = False,
    timeout: float = 10.0,
) -> CrossCheck:
    """Play ``planner`` and ``reference`` (default: ReferencePlanner) on one seed in lockstep.

    The driver reads the reference's outputs; the run stops at the first event where the two
    answer differently (different lines, or one refuses and the other does not).
    """
    driver = Driver(seed)
    params = driver.parameters()
    result = CrossCheck(Transcript(seed, params), Transcript(seed, params))
    a = as_planner(planner, timeout)
    b = as_planner(reference if reference is not None else ReferencePlanner().feed, timeout)
    try:
        for name, p in (("planner", a), ("reference", b)):
            try:
                p.parameters(params)
            except (PlannerRejected, DriverError) as error:
                result.difference = f"seed {seed}, parameters line: {params}\n  {name}: {error}"
                return result
        for index in range(events + bad):
            line = driver.next_event() if index < events else driver.bad_line()
            (kind_a, text_a), (kind_b, text_b) = _answer(a, line), _answer(b, line)
            for transcript, kind, text in ((result.planner, kind_a, text_a), (result.reference, kind_b, text_b)):
                transcript.steps.append(Step(line, output=text) if kind == "out" else Step(line, error=text))
            if kind_a != kind_b or (kind_a == "out" and text_a != text_b) or kind_a == "broken":
                result.difference = (
                    f"seed {seed}, event {index + 1}: {line}\n  planner:   {text_a}\n  reference: {text_b}"
                )
                return result
            if kind_a != "out":
                return result
            driver.observe(text_b)
    finally:
        a.close()
        b.close()
    return result


# --- R20 --------------------------------------------------------------------------------------


def play_push_check(planner: object, steps: int, seed: int = 0, timeout: float = 10.0) -> Transcript:
    """R20's check: lines mode, ceiling = floor = the push list's length at each T.

    Messages are 1..255 bytes, so every leaf and every pair of leaves is free (R11): a pair
    of leaves is due the moment its second leaf arrives. Every compaction a start list
    reports is answered at once with a build, so larger parents are built before they are due.
    """
    rng = random.Random(seed)
    params = _line({"ceiling": 1, "floor": 1, "cceiling": 4, "cfloor": 2, "jobs": 8, "unit": "lines"})
    transcript = Transcript(seed, params)
    p = as_planner(planner, timeout)
    try:
        p.parameters(params)
        for _t, _nodes, length in push_steps(steps):
            line = _line({"m": rng.randint(1, 255), "ceiling": length, "floor": length})
            pending = _push_check_line(p, line, transcript)
            while pending:
                node = pending.pop(0)
                pending += _push_check_line(p, _line({"b": list(node), "s": rng.randint(1, 512)}), transcript)
    finally:
        p.close()
    return transcript


def _push_check_line(p: Planner, line: str, transcript: Transcript) -> list[tuple[int, int]]:
    out = p.event(line)
    transcript.steps.append(Step(line, output=out))
    return [node_of_name(name) for name in parse_output(out).start]


def push_check_mismatch(transcript: Transcript) -> str | None:
    """The first message of a push-check transcript whose view is not push's list, or None."""
    expected = {t: nodes for t, nodes, _length in push_steps(len(transcript.steps) + 1)}
    for step in transcript.steps:
        if "m" in json.loads(step.line):
            out = parse_output(step.output)
            if out.view != expected[out.T] or out.shrink:
                return f"T={out.T}: view {','.join(out.view)} shrink={out.shrink}, push {','.join(expected[out.T])}"
    return None


# --- command line -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Play, compare or push-check; 0 when everything agreed, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--events", type=int, default=200, help="random events per scenario")
    parser.add_argument("--cmd", help="planner command (default: the in-process reference)")
    parser.add_argument("--compare", action="store_true", help="play --cmd against the reference in lockstep")
    parser.add_argument("--bad", action="store_true", help="end with a line the planner must refuse")
    parser.add_argument("--runs", type=int, default=1, help="seeds seed .. seed+runs-1")
    parser.add_argument("--write-events", metavar="PATH", help="write the scenario file ({seed} in PATH is replaced)")
    parser.add_argument("--push-check", type=int, metavar="STEPS", help="R20: compare views with push's list")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for one answer")
    parser.add_argument(
        "--params-answer", action="store_true", help="--cmd prints a line for the parameters line too; skip it"
    )
    args = parser.parse_args(argv)

    def planner() -> object:
        if args.cmd:
            return SubprocessPlanner(args.cmd, args.timeout, answers_parameters=args.params_answer)
        return ReferencePlanner().feed

    if args.push_check is not None:
        mismatch = push_check_mismatch(play_push_check(planner(), args.push_check, args.seed, args.timeout))
        print(mismatch or f"R20: the view is push's list at every T = 1 .. {args.push_check}")
        return 1 if mismatch else 0
    if args.compare and not args.cmd:
        parser.error("--compare needs --cmd")

    failures = 0
    for seed in range(args.seed, args.seed + args.runs):
        if args.compare:
            check = cross_check(planner(), seed, args.events, bad=args.bad, timeout=args.timeout)
            transcript = check.planner
            if args.runs == 1:
                print(transcript.render(), end="")
            print(check.difference or f"seed {seed}: {len(transcript.steps)} events, planner and reference agree")
            failures += not check.agree
        else:
            transcript = play(planner(), seed, args.events, bad=args.bad, timeout=args.timeout)
            if args.runs == 1:
                print(transcript.render(), end="")
            else:
                print(f"seed {seed}: {len(transcript.steps)} events")
        if args.write_events:
            with open(args.write_events.replace("{seed}", str(seed)), "w", encoding="utf-8") as file:
                file.write(transcript.events_text())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
