"""`everchat status` with no chat running: the usage of every run (input, output, cache
reads and writes) and the failed compaction calls (R30), as the log writer saved them in
usage.json; real processes, the fake model server for a keyed connection."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from cli_world import env, everchat  # noqa: F401 (env is a fixture)

from everchat.actors.folder.usage import USAGE_NAME, load_usage
from everchat.frontends.cli.main import main
from everchat.tools.fakemodel import FakeModelServer, Reply, Text, ToolCall
from everchat.transport import Node, schema


def status(env: dict, chat) -> dict:
    done = everchat(env, "status", "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["live"] == {"running": False}  # every figure below came from the folder
    return figures


def test_status_shows_the_usage_of_past_runs_with_cache_reads(env, tmp_path):
    """Two calls of one turn through the Anthropic SDK: the second reads the first's
    cached prefix; a long message's summary is one demo compaction call."""
    chat = tmp_path / "chat"
    with FakeModelServer() as server:
        server.script(Reply(ToolCall("zoom", {"id": 0, "n": 1})), Reply(Text("It says amber-42.")))
        run_env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="anthropic",
                       EVERCHAT_REPLY_BASE_URL=server.base_url, EVERCHAT_COMPACTION_PROVIDER="demo")
        done = everchat(run_env, "--data-dir", str(chat), "ask", "What is the code word? " + "Think hard. " * 60)
        assert done.returncode == 0, done.stderr
        served = [call.cache for call in server.model_calls]
    figures = status(env, chat)
    usage = figures["usage"]
    turns = usage["turns"]
    assert turns["calls"] == 2 and turns["failures"] == 0
    assert turns["input"] == sum(c.input_tokens for c in served)
    assert turns["cache_read"] == sum(c.cache_read for c in served) > 0
    assert turns["cache_write"] == sum(c.cache_write for c in served) > 0
    assert usage["compactions"]["calls"] >= 1 and usage["compactions"]["input"] > 0
    assert usage["cache_read"] == turns["cache_read"] + usage["compactions"]["cache_read"]
    assert figures["failures"] == 0
    # A second run adds to the first's figures.
    done = everchat(env, "--demo", "--data-dir", str(chat), "ask", "Thanks.")
    assert done.returncode == 0, done.stderr
    assert status(env, chat)["usage"]["turns"]["calls"] == 3


def test_r30_status_counts_the_failed_compaction_calls_of_past_runs(env, tmp_path):
    chat = tmp_path / "chat"
    assert main(["note", "long " * 200, "--data-dir", str(chat)]) == 0  # its leaf needs a compaction
    with FakeModelServer(api_keys=("another-key",)) as server:  # a bad key fails at once, never retried
        run_env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="demo",
                       EVERCHAT_COMPACTION_PROVIDER="anthropic", EVERCHAT_COMPACTION_BASE_URL=server.base_url)
        done = everchat(run_env, "--data-dir", str(chat), "compact", "--timeout", "5")
    assert done.returncode == 1 and "not every summary is built" in done.stderr
    assert "everchat: warning: Summarizing 0+1 failed (1 of 3): " in done.stderr  # said, not only counted
    figures = status(env, chat)
    assert figures["failures"] >= 1 and figures["usage"]["compactions"]["failures"] == figures["failures"]
    assert figures["pending"] == 1


def test_usage_reports_in_one_second_are_saved_together_and_all_of_them_at_stop(tmp_path):
    from everchat.actors.log_writer.actor import LogWriter

    chat = tmp_path / "chat"
    node = Node("usage-test").start()
    try:
        node.host("log_writer", LogWriter, chat)
        node.ask("log_writer", schema.CountMessages(), timeout=10)  # started
        first = schema.RecordUsage("turns", 100, 10, 50, 5, 1, 0)
        node.tell("log_writer", first)
        node.ask("log_writer", schema.CountMessages(), timeout=10)
        assert load_usage(chat).turns.calls == 1  # the first report is saved at once
        saved = (chat / USAGE_NAME).stat().st_mtime_ns
        node.tell("log_writer", schema.RecordUsage("compactions", 7, 1, 0, 0, 0, 1))
        node.tell("log_writer", schema.RecordUsage("nobody", 1, 1, 1, 1, 1, 1))  # dropped
        node.ask("log_writer", schema.CountMessages(), timeout=10)
        assert (chat / USAGE_NAME).stat().st_mtime_ns == saved  # held back for up to a second
        deadline = time.monotonic() + 10
        while load_usage(chat).compactions.failures == 0 and time.monotonic() < deadline:
            node.ask("log_writer", schema.CountMessages(), timeout=10)
        assert load_usage(chat).compactions.failures == 1  # saved by its tick, the chat still open
        node.tell("log_writer", schema.RecordUsage("turns", 1, 1, 1, 1, 1, 0))
    finally:
        node.stop()
    totals = load_usage(chat)
    assert totals.turns.to_dict() == {"input": 101, "output": 11, "cache_read": 51, "cache_write": 6,
                                      "calls": 2, "failures": 0}
    assert totals.compactions.to_dict() == {"input": 7, "output": 1, "cache_read": 0, "cache_write": 0,
                                            "calls": 0, "failures": 1}


def test_a_broken_usage_file_is_one_clear_line_from_status(env, tmp_path, capsys):
    chat = tmp_path / "chat"
    assert main(["note", "hello", "--data-dir", str(chat)]) == 0
    (chat / USAGE_NAME).write_text('{"version": 9}')
    assert main(["status", "--data-dir", str(chat)]) == 1
    assert capsys.readouterr().err == f"everchat: {chat / USAGE_NAME}: not a version 1 usage file\n"


def test_r12_r14_status_names_the_tree_nodes_and_the_view_lines_apart(env, tmp_path):
    """`nodes` is the tree's built nodes (what `check` counts), `view_lines` the view's
    lines (what `view` prints): after compaction merged leaves they differ."""
    chat = tmp_path / "chat"
    for k in range(12):
        assert main(["note", f"note {k}: the amber-{k} probe", "--data-dir", str(chat)]) == 0
    assert main(["--demo", "compact", "--data-dir", str(chat)]) == 0
    figures = status(env, chat)
    checked = everchat(env, "check", "--data-dir", str(chat))
    assert checked.returncode == 0, checked.stderr
    view = everchat(env, "view", "--data-dir", str(chat))
    assert view.returncode == 0, view.stderr
    lines = [line for line in view.stdout.splitlines() if line not in ("<chat>", "</chat>")]
    assert figures["nodes"] == json.loads(checked.stdout)["nodes"]
    assert figures["view_lines"] == len(lines)
    assert figures["nodes"] > figures["view_lines"]  # the halves stay built in the tree
    shutil.rmtree(chat / "index")  # a reader then finds every node in the log (held in memory)
    assert status(env, chat)["nodes"] == figures["nodes"]


def test_r12_node_count_counts_each_node_once_while_a_writer_has_an_unindexed_tail(tmp_path):
    """The figure behind `nodes`: a reader holds the nodes past the index's checkpoint in
    memory, which the running writer has also put in its slot files; each counts once."""
    from everchat.actors.folder import ChatStore

    chat = tmp_path / "chat"
    with ChatStore.open(chat, create=True) as first:
        for k in range(6):
            first.append_message("note", f"n{k}")
        first.append_nodes([(0, k, f"n{k}") for k in range(6)])
    with ChatStore.open(chat) as writer:  # stays open: no checkpoint covers what follows
        writer.append_message("note", "n6")
        writer.append_message("note", "n7")
        writer.append_nodes([(0, 6, "n6"), (0, 7, "n7"), (1, 0, "n0 n1"), (1, 1, "n2 n3")])
        with ChatStore.open(chat, writer=False) as reader:
            assert reader.node_count == writer.node_count == 10
