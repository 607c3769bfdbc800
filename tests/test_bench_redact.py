"""The redaction benchmark (issue 20, performance review P4) on a tiny run: its JSON lines
and its corpus, never speed."""

from __future__ import annotations

import json
import random

import pytest

from everchat.actors.upkeep.redact import redact
from everchat.tools.bench import bench_redact


def test_the_bench_prints_one_line_per_figure_and_misses_no_secret(capsys):
    assert bench_redact.main(["--megabytes", "0.2", "--rounds", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(line["bench"] == "redact" and "value" in line for line in lines)
    rates = {line["kind"]: line["value"] for line in lines if line["figure"] == "mb_per_s"}
    assert set(rates) == {"mixed", *bench_redact.KINDS} and all(rate > 0 for rate in rates.values())
    (missed,) = [line for line in lines if line["figure"] == "missed_secrets"]
    assert missed["value"] == 0 and missed["secrets"] > 0


def test_the_corpus_is_the_same_for_the_same_seed_and_about_the_size_asked():
    first, again = bench_redact.corpus(3, 0.1), bench_redact.corpus(3, 0.1)
    assert first == again
    assert 100_000 <= sum(len(text.encode()) for text in first) < 110_000


@pytest.mark.parametrize("n", range(len(bench_redact.SECRETS)))
def test_every_secret_the_corpus_plants_is_one_redact_catches(n):
    line = bench_redact.SECRETS[n](random.Random(n))
    assert redact(line) != line and "[redacted]" in redact(line)
