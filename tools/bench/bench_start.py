"""How long a chat takes to start, one process against one process per actor (issue 9).

Each run is `everchat --demo ask hi --no-wait` on a fresh chat folder, in a fresh
interpreter, as a person would type it; the single placement and `--processes` take turns
(A B A B …) so a drift of the shared machine's speed touches both alike. Two figures per
placement, each the median of the runs:

- `open_s`: from the moment the command asks for the chat until every actor is up and
  the log writer holds the chat open (`ChatSession.open`: the supervisor's `start()` and,
  for `--processes`, the turn runner's subscription), timed inside the command;
- `command_s`: the whole command, from the interpreter's start to its exit (its imports,
  the demo reply and the stop included).

Then `ratio`: processes over single, per figure (the issue's target: `open_s` within 5x).
One JSON line per figure:

    python -m everchat.tools.bench.bench_start [--runs 7] [--compaction-jobs 8]

The compaction jobs (one worker process each with `--processes`) default to the
configured default, 8: thirteen actors in all (the device hub and the agents included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "run_once", "MODES"]

MODES = ("single", "processes")
_MARK = "bench_start open_s="

# Runs the CLI's own main in this interpreter with ChatSession.open timed: the command is
# the real one, only a clock is wrapped around the call every front end makes.
_TIMED_CLI = """
import sys, time
from everchat.actors.session import session
opened = session.ChatSession.open.__func__
def timed(cls, *args, **kwargs):
    start = time.perf_counter()
    result = opened(cls, *args, **kwargs)
    sys.stderr.write("%s%.6f\\n" % (MARK, time.perf_counter() - start))
    return result
session.ChatSession.open = classmethod(timed)
from everchat.frontends.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def run_once(mode: str, folder: Path, jobs: int) -> dict:
    """One `ask hi --no-wait` on a fresh chat under `folder`: its open and command seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    env["EVERCHAT_HOME"] = str(folder / "home")
    command = [sys.executable, "-c", _TIMED_CLI.replace("MARK", repr(_MARK)), "--demo", "--data-dir",
               str(folder / "chat"), "--compaction-jobs", str(jobs)]
    if mode == "processes":
        command.append("--processes")
    command += ["ask", "hi", "--no-wait"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{mode}: exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    opened = [line for line in done.stderr.splitlines() if line.startswith(_MARK)]
    if len(opened) != 1:
        raise RuntimeError(f"{mode}: the command opened the chat {len(opened)} times: {done.stderr[-2000:]}")
    return {"open_s": float(opened[0][len(_MARK):]), "command_s": seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="counted runs per placement (after one warm-up each)")
    parser.add_argument("--compaction-jobs", type=int, default=8, help="compaction workers (1 to 8)")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
        for index in range(args.runs + 1):
            for mode in MODES:
                figures = run_once(mode, Path(tmp) / f"{mode}-{index}", args.compaction_jobs)
                if index:  # the first of each is a warm-up (bytecode, page cache)
                    runs[mode].append(figures)
    medians = {mode: {figure: statistics.median(run[figure] for run in runs[mode])
                      for figure in ("open_s", "command_s")} for mode in MODES}
    for figure in ("open_s", "command_s"):
        for mode in MODES:
            values = [run[figure] for run in runs[mode]]
            print(json.dumps({"bench": "start", "figure": figure, "placement": mode, "runs": len(values),
                              "median": round(medians[mode][figure], 4), "min": round(min(values), 4),
                              "max": round(max(values), 4), "compaction_jobs": args.compaction_jobs}), flush=True)
        print(json.dumps({"bench": "start", "figure": figure, "placement": "ratio",
                          "median": round(medians["processes"][figure] / medians["single"][figure], 2),
                          "target": 5.0 if figure == "open_s" else None}), flush=True)


if __name__ == "__main__":
    main()
