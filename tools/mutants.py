"""Break one rule at a time and show which test catches it.

Each mutant (tools/mutant_list.py) is one small edit of the production code: a rule of
SPEC.md broken on purpose. This clones the repository's HEAD into a temporary folder (one
clone per worker; never the work tree) and puts an `everchat` namespace of symlinks to the
clone's packages first on PYTHONPATH, so the clone's code is what the tests import (checked:
every mutated module must resolve inside the clone, else nothing is counted).

First the baseline: every test the catalogue names runs once without a mutant. If any of
them fails, a catch would mean nothing, so the run stops there (exit status 2). Then each
mutant is applied in a clone, its own tests run (`pytest -x`, hypothesis profile `mutants`:
no shrinking, a failure is all we need), and the edit is undone. A mutant whose tests
still pass is a rule no test can see: a bug in the tests (exit status 1). Prints one JSON
line per mutant, then a summary line.

    python tools/mutants.py [--only NAME ...] [--jobs N] [--keep] [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the catalogue sits beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mutant_list import MUTANTS, Mutant
else:
    from .mutant_list import MUTANTS, Mutant

__all__ = ["Mutant", "MUTANTS", "run", "baseline", "main"]

ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("actors", "transport", "frontends", "tools")
_TIMEOUT = 600  # seconds for one pytest run; a mutant that hangs its tests is not counted as caught


def _clone(into: Path) -> Path:
    """A clone of HEAD at `into/repo`, and `into/ns/everchat` naming its packages."""
    repo = into / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    namespace = into / "ns" / "everchat"
    namespace.mkdir(parents=True)
    for package in _PACKAGES:
        (namespace / package).symlink_to(repo / package)
    return repo


def _env(workdir: Path) -> dict:
    return {
        **os.environ,
        "PYTHONPATH": str(workdir / "ns"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "EVERCHAT_HYPOTHESIS_PROFILE": "mutants",
    }


def _pytest(workdir: Path, tests) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests],
        cwd=workdir / "repo", env=_env(workdir), capture_output=True, text=True, timeout=_TIMEOUT,
    )


def _failed(done: subprocess.CompletedProcess) -> list[str]:
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return [words[1] for words in lines if len(words) > 1]


def imports_the_clone(workdir: Path, mutants=MUTANTS) -> list[str]:
    """The mutated modules that do not resolve inside the clone (should be none)."""
    modules = sorted({"everchat." + m.path[: -len(".py")].replace("/", ".") for m in mutants})
    probe = "import importlib, os, sys\nfor name in sys.argv[1:]:\n" \
            "    print(name, os.path.realpath(importlib.import_module(name).__file__))\n"
    done = subprocess.run([sys.executable, "-c", probe, *modules], cwd=workdir / "repo", env=_env(workdir),
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
        return [f"the probe failed: {done.stderr.strip()[-500:]}"]
    repo = os.path.realpath(workdir / "repo") + os.sep
    return [line for line in done.stdout.splitlines() if not line.split(" ", 1)[1].startswith(repo)]


def baseline(workdirs: list[Path], mutants=MUTANTS) -> dict:
    """Every named test once, without a mutant, split over the clones; all must pass."""
    tests = sorted({test for mutant in mutants for test in mutant.tests})
    # A whole file named also covers its tests named one by one.
    files = {test for test in tests if "::" not in test}
    tests = [test for test in tests if test in files or test.split("::")[0] not in files]
    chunks = [tests[k::len(workdirs)] for k in range(len(workdirs))]
    results: list = [None] * len(workdirs)

    def one(k: int) -> None:
        try:
            results[k] = _pytest(workdirs[k], chunks[k]) if chunks[k] else None
        except subprocess.TimeoutExpired:
            results[k] = f"timed out: {' '.join(chunks[k])}"

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(workdirs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed, passed = [], True
    for done in results:
        if done is None:
            continue
        if isinstance(done, str):
            passed = False
            failed.append(done)
            continue
        passed = passed and done.returncode == 0
        failed += _failed(done) or ([] if done.returncode == 0 else [done.stdout[-300:] + done.stderr[-300:]])
    return {"baseline": "passed" if passed else "FAILED", "tests": len(tests), "failed": failed[:5]}


def run(mutant: Mutant, workdir: Path) -> dict:
    """Apply one mutant in the clone at `workdir`, run its tests, undo it."""
    target = workdir / "repo" / mutant.path
    original = target.read_text()
    if original.count(mutant.old) != 1:
        return {"mutant": mutant.name, "law": mutant.law, "caught": False,
                "error": f"the edit does not apply once to {mutant.path}"}
    target.write_text(original.replace(mutant.old, mutant.new))
    began = time.monotonic()
    try:
        done = _pytest(workdir, mutant.tests)
    except subprocess.TimeoutExpired:
        return {"mutant": mutant.name, "law": mutant.law, "caught": False, "error": f"timed out ({_TIMEOUT} s)"}
    finally:
        target.write_text(original)
    failed = _failed(done)
    # pytest exits 1 when a test failed; 2+ (a collection error, an internal error) is no catch.
    caught = done.returncode == 1 and bool(failed)
    result = {"mutant": mutant.name, "law": mutant.law, "caught": caught, "failed": failed[:3],
              "seconds": round(time.monotonic() - began, 1)}
    if not caught and done.returncode not in (0, 1):
        result["error"] = (done.stdout[-400:] + done.stderr[-400:]).strip()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    parser.add_argument("--jobs", type=int, default=2, help="clones run side by side (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clones")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.only and len(mutants) != len(set(args.only)):
        parser.error(f"no mutant called {sorted(set(args.only) - {m.name for m in mutants})}")
    if args.list:
        for mutant in mutants:
            print(json.dumps({"mutant": mutant.name, "law": mutant.law, "path": mutant.path, "tests": mutant.tests}))
        return 0
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="everchat-mutants-"))
    try:
        workdirs = [root / str(k) for k in range(max(1, min(args.jobs, len(mutants))))]
        for workdir in workdirs:
            workdir.mkdir()
            _clone(workdir)
        strays = imports_the_clone(workdirs[0], mutants)
        if strays:
            print(json.dumps({"error": "the tests would not import the clone", "modules": strays}), flush=True)
            return 2
        base = baseline(workdirs, mutants)
        print(json.dumps(base), flush=True)
        if base["baseline"] != "passed":
            return 2
        results = _run_all(mutants, workdirs)
        caught = sum(result["caught"] for result in results)
        print(json.dumps({"mutants": len(results), "caught": caught, "missed": len(results) - caught,
                          "seconds": round(time.monotonic() - began, 1), "jobs": len(workdirs)}), flush=True)
        return 0 if caught == len(results) else 1
    finally:
        if args.keep:
            print(json.dumps({"kept": str(root)}), flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


def _run_all(mutants: list[Mutant], workdirs: list[Path]) -> list[dict]:
    """The mutants over the clones, one at a time per clone; results in catalogue order."""
    todo: queue.Queue = queue.Queue()
    for k, mutant in enumerate(mutants):
        todo.put((k, mutant))
    results: list = [None] * len(mutants)
    lock = threading.Lock()

    def worker(workdir: Path) -> None:
        while True:
            try:
                k, mutant = todo.get_nowait()
            except queue.Empty:
                return
            result = run(mutant, workdir)
            results[k] = result
            with lock:
                print(json.dumps(result), flush=True)

    threads = [threading.Thread(target=worker, args=(workdir,)) for workdir in workdirs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


if __name__ == "__main__":
    sys.exit(main())
