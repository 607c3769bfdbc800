"""Every rule a one-line change can break has a test that catches it: tools/mutants.py runs
its catalogue (tools/mutant_list.py) over clones of HEAD, after a baseline in which every
named test passes without a mutant, and every mutant must be caught by the tests it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from everchat.tools.mutant_list import MUTANTS

ROOT = Path(__file__).resolve().parent.parent


def test_every_mutant_of_the_catalogue_is_caught_by_the_tests_it_names():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "mutants.py"), "--jobs", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[0].get("baseline") == "passed", done.stdout[-2000:] + done.stderr[-2000:]
    results = {line["mutant"]: line for line in lines if "mutant" in line}
    assert sorted(results) == sorted(mutant.name for mutant in MUTANTS)
    missed = {name: result for name, result in results.items() if not result["caught"]}
    assert missed == {}
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_catalogue_names_each_mutant_once_and_each_edit_applies_once_to_head():
    names = [mutant.name for mutant in MUTANTS]
    assert len(names) == len(set(names))
    for mutant in MUTANTS:
        text = (ROOT / mutant.path).read_text()
        assert text.count(mutant.old) == 1, mutant.name
        assert mutant.old != mutant.new and mutant.tests, mutant.name
        for test in mutant.tests:
            assert (ROOT / test.split("::")[0]).is_file(), (mutant.name, test)
