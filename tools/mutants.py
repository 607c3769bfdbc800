"""Break one rule at a time and show which law test catches it.

Each mutant is one small edit of the production code (a rule broken on purpose).
For each, this clones the repository's HEAD into a temporary folder, applies the
edit there (never in the work tree), and runs the tests that state the law. A
mutant whose tests still pass means a law that cannot fail: that is a bug in the
tests. Prints one JSON line per mutant.

    python tools/mutants.py [--only NAME] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Mutant", "MUTANTS", "run"]

ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("actors", "transport", "frontends", "bend", "tools")


@dataclass(frozen=True)
class Mutant:
    name: str
    law: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


LAWS = "tests/test_memory_laws.py"
EXAMPLES = "tests/test_memory_examples.py"

MUTANTS = (
    Mutant(
        "r40-age-from-first-message",
        "R18/R40 merge order: due measured from the pair's last message",
        "actors/memory/_view.py",
        "due = (messages - (up >> LEVEL_BITS) - (1 << l) + 1) << (_DUE_SHIFT - l + 1)",
        "due = (messages - (up >> LEVEL_BITS)) << (_DUE_SHIFT - l + 1)",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories", EXAMPLES + "::test_r20_push_agreement_at_every_step_up_to_20000"),
    ),
    Mutant(
        "tie-goes-right",
        "R18: on equal due the leftmost pair wins",
        "actors/memory/_view.py",
        "return (-due, up)",
        "return (-due, -up)",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories",),
    ),
    Mutant(
        "r41-merge-at-every-message",
        "R17/R19/R41: a message with no batch only appends its line",
        "actors/memory/_planner.py",
        "if view.size > budget.ceiling or view.shrinking:",
        "if True:",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories",),
    ),
    Mutant(
        "merge-unbuilt-parent",
        "R18: only pairs whose parent is built merge (only leaves are unbuilt lines)",
        "actors/memory/_view.py",
        "                    if grand in raw:\n",
        "                    if True:\n",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories",),
    ),
    Mutant(
        "batch-stops-early",
        "R19: a batch ends at or under the floor unless no pair can merge",
        "actors/memory/_view.py",
        "while size > floor and heap:",
        "while size > floor and heap and len(merged) < 1:",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories",),
    ),
    Mutant(
        "cover-loses-a-half",
        "R13: the view covers every message once",
        "actors/memory/_view.py",
        "                members.discard(right)\n",
        "",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories",),
    ),
    Mutant(
        "context-passes-unbuilt-line",
        "R27/R44: a context stops at its first unbuilt line",
        "actors/memory/_planner.py",
        "        if self.pending and self.pending[0] < cut:\n            cut = self.pending[0]\n",
        "",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories", EXAMPLES),
    ),
    Mutant(
        "cview-ignores-shrinking",
        "R21: the compaction view is fitted while it is still shrinking",
        "actors/memory/_planner.py",
        "if cview.size > budget.cceiling or cview.shrinking:",
        "if cview.size > budget.cceiling:",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories",),
    ),
    Mutant(
        "restart-forgets-shrinking",
        "R19/R24: a restart keeps a shrinking batch going",
        "actors/memory/_planner.py",
        "planner.view.load(keys, shrinking, tree)",
        "planner.view.load(keys, False, tree)",
        (LAWS + "::test_r19_r24_a_restart_in_the_middle_of_a_shrinking_batch_keeps_it_going", LAWS + "::test_r24_restart_gives_the_same_view_also_mid_batch"),
    ),
    Mutant(
        "refold-ignores-records",
        "R24/R25: a lost view.json refolds from the merge records",
        "actors/memory/_refold.py",
        "            del by_first[start(right)]\n            by_first[start(left)] = up\n",
        "",
        (LAWS + "::test_r24_restart_gives_the_same_view_also_mid_batch", "tests/test_chat.py"),
    ),
    Mutant(
        "free-parent-over-512",
        "R11: two halves join freely only when they fit in 512 bytes",
        "actors/memory/_tree.py",
        "if joined > LINE_LIMIT:",
        "if joined > LINE_LIMIT + 64:",
        (LAWS + "::test_r13_r17_r18_r19_r21_r27_r31_laws_hold_over_random_histories", EXAMPLES),
    ),
    Mutant(
        "torn-tail-not-terminated",
        "R2 (store kill law): a torn last line is terminated before the next append",
        "actors/store/_daylog.py",
        '            write_all(fd, b"\\n")\n',
        "            pass\n",
        ("tests/test_store_kill.py",),
    ),
    Mutant(
        "leaf-window-9",
        "R31: a leaf starts once fewer than 8 lines before it are unbuilt",
        "actors/memory/_planner.py",
        "_LEAF_WINDOW = 8\n",
        "_LEAF_WINDOW = 9\n",
        (EXAMPLES, "tests/test_scenario_bridge.py"),
    ),
)


def _clone(into: Path) -> Path:
    repo = into / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    namespace = into / "ns" / "everchat"
    namespace.mkdir(parents=True)
    for package in _PACKAGES:
        (namespace / package).symlink_to(repo / package)
    return repo


def run(mutant: Mutant, workdir: Path) -> dict:
    repo = workdir / "repo"
    target = repo / mutant.path
    original = target.read_text()
    if original.count(mutant.old) != 1:
        return {"mutant": mutant.name, "error": f"the edit does not apply once to {mutant.path}"}
    target.write_text(original.replace(mutant.old, mutant.new))
    try:
        env = {
            **os.environ,
            "PYTHONPATH": str(workdir / "ns"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "EVERCHAT_HYPOTHESIS_PROFILE": "mutants",  # no shrinking: a failure is all we need
        }
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests],
            cwd=repo, env=env, capture_output=True, text=True, timeout=1200,
        )
    finally:
        target.write_text(original)
    failed = [line.split(" ")[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    return {"mutant": mutant.name, "law": mutant.law, "caught": done.returncode == 1, "failed": failed[:3]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run one mutant by name")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clone")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="everchat-mutants-"))
    missed = 0
    try:
        _clone(workdir)
        for mutant in MUTANTS:
            if args.only and mutant.name != args.only:
                continue
            result = run(mutant, workdir)
            missed += not result.get("caught")
            print(json.dumps(result), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
