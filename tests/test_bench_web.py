"""The web benchmark (issue 10) on a tiny run: its JSON lines and its checks, never speed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from everchat.tools.bench import bench_web, web_pages


def _reply(deltas: int) -> str:
    return "".join(bench_web._piece(k) for k in range(deltas))


def test_a_client_that_got_every_event_in_order_passes_the_check():
    events = [[0.0, 8, "started", None], [0.0, 9, "text", "w00000 "], [0.0, 10, "status", None],
              [0.0, 11, "text", "w00001 "], [0.0, 12, "ended", None]]
    assert bench_web._check_client(7, events, _reply(2)) == (True, "")


def test_a_repeated_event_or_a_lost_delta_fails_the_check():
    repeated = [[0.0, 8, "text", "w00000 "], [0.0, 8, "text", "w00000 "], [0.0, 9, "text", "w00001 "]]
    lost = [[0.0, 8, "text", "w00000 "], [0.0, 9, "ended", None]]
    assert not bench_web._check_client(7, repeated, _reply(2))[0]
    assert not bench_web._check_client(7, lost, _reply(2))[0]


def test_the_bench_prints_its_figures_and_every_client_got_every_delta(tmp_path, capsys):
    page = Path(web_pages.CHROMIUM).exists() and importlib.util.find_spec("playwright") is not None
    args = ["--deltas", "30", "--gap", "0.5", "--turns", "1", "--clients", "5", "--messages", "2000",
            "--loads", "1", "--dir", str(tmp_path)]
    assert bench_web.main(args + (["--browsers", "1"] if page else ["--skip", "page"])) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    figures = {line["figure"]: line for line in lines}
    assert all(line["bench"] == "web" and "value" in line for line in lines)
    assert all("what" in line for line in lines if line["figure"] != "make_seconds")
    for name in ("delta_latency", "delta_hub_to_socket", "delta_model_to_hub", "delivery_lag_5_clients"):
        assert figures[f"{name}_p50_ms"]["value"] <= figures[f"{name}_p99_ms"]["value"]
    assert [(figures[f"clients_complete_{n}_clients"]["value"], figures[f"clients_complete_{n}_clients"]["problems"])
            for n in (1, 5)] == [(1, []), (5, [])]
    assert figures["turn_cpu_s_web_5_vs_1_clients"]["value"] > 0
    if page:
        fetched = figures["page_messages_fetched"]
        assert fetched["messages"] == 2000
        assert 0 < fetched["value"] <= 200 * fetched["history_requests"] < 2000  # pages, never the whole chat
        assert figures["page_bytes_fetched"]["value"] > 0
        assert (figures["pages_complete"]["value"], figures["pages_complete"]["of"]) == (1, 1)
        assert figures["page_ready_ms"]["loads"] == figures["api_history_p50_ms"]["calls"] == 1


def test_the_listening_child_reads_a_cookie_that_starts_with_a_dash():
    """A session cookie is url-safe base64, so one in 64 starts with `-`; passed as a
    separate word, argparse took it for an option and the child exited 2 (a CI failure)."""
    server = bench_web._Server(session=None, stamped=None, port=8765, cookie="-Ab_c-d")
    argv = bench_web._listener_argv(server, 3)
    args = bench_web._parser().parse_args(argv[2:])
    assert (args.cookie, args.origin, args.clients) == ("-Ab_c-d", server.origin, 3)
