"""`everchat ask` and `everchat compact`: one turn over a ChatSession in a real process,
then every summary built before it exits (R36, R37); the memory carries across
processes through the chat folder alone (R50: nothing else carries over)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_world import env, everchat  # noqa: F401 (env is a fixture)

from everchat.actors.session.local import Chat
from everchat.actors.folder import ChatStore
from everchat.frontends.cli.main import main
from everchat.tools.fakemodel import FakeModelServer, Reply, Text, ToolCall

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def records(chat: Path) -> list:
    with ChatStore.open(chat, writer=False) as store:
        return [store.message(i) for i in range(store.message_count)]


def test_r35_amber_42_is_remembered_by_a_new_process_by_zooming(env, tmp_path):
    first = everchat(env, "--demo", "ask", "Remember amber-42.")
    assert first.returncode == 0, first.stderr
    second = everchat(env, "--demo", "ask", "What did I ask you to remember?")
    assert second.returncode == 0, second.stderr
    assert "amber-42" in second.stdout
    assert "· zoom(0, 1)" in second.stderr  # the answer came through the zoom tool
    log = records(tmp_path / "home" / "chat")
    assert [r.kind for r in log] == ["user", "everchat", "user", "tool", "echo", "everchat"]
    assert json.loads(log[3].text.removeprefix("zoom ")) == {"id": 0, "n": 1}
    assert log[4].text == "user: Remember amber-42." and "amber-42" in log[5].text


def test_r36_ask_waits_for_its_summaries_so_nothing_is_left_pending(env, tmp_path):
    chat = tmp_path / "chat"
    long = "The launch checklist for the amber-42 probe: " + "verify the seals, " * 60
    done = everchat(env, "ask", long, "--demo", "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    with Chat.open(chat, writer=False) as reader:
        assert reader.messages == 2 and reader.status()["unbuilt_lines"] == 0
        assert "not summarized yet" not in reader.render_view()
    # The same with --no-wait leaves the new message's summary to the next run.
    done = everchat(env, "--demo", "--data-dir", str(chat), "ask", long, "--no-wait")
    assert done.returncode == 0, done.stderr


def test_p18_ask_waits_for_its_own_summaries_not_for_a_backlog_logged_before_it(env, tmp_path):
    """After a `--log-only` import, `ask` builds the lines of its own turn (R36) and
    leaves the import's backlog to the pool's next run: it once built all of it first."""
    chat, source = tmp_path / "chat", tmp_path / "notes.txt"
    words = ["amber", "basalt", "cedar", "delta", "ember", "fjord", "garnet", "harbor"]
    source.write_text("\n".join(f"{n} " + " ".join(words[(n + k) % 8] for k in range(40)) for n in range(12_000)))
    done = everchat(env, "--demo", "--data-dir", str(chat), "import", str(source), "--log-only")
    assert done.returncode == 0, done.stderr
    with Chat.open(chat, writer=False) as reader:
        backlog = reader.status()["unbuilt_lines"]
        turn = reader.messages
    assert backlog > 100
    done = everchat(env, "--demo", "--settle-timeout", "0.2", "--data-dir", str(chat), "ask", "What is in there?")
    assert done.returncode == 0, done.stderr
    with Chat.open(chat, writer=False) as reader:
        assert reader.messages >= turn + 2  # the question, the reply (and any tool calls between)
        assert reader.planner.unbuilt_between(turn, reader.messages) == 0  # its own lines: built
        assert reader.status()["unbuilt_lines"] > backlog / 2  # the backlog: mostly left


def test_r9_ask_logs_its_images_and_refuses_a_file_that_is_no_image(env, tmp_path):
    chat = tmp_path / "chat"
    (tmp_path / "dot.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("not an image")
    done = everchat(env, "--demo", "--data-dir", str(chat), "ask", "What is in this picture?",
                    "--image", str(tmp_path / "dot.png"))
    assert done.returncode == 0, done.stderr
    assert records(chat)[0].images == (hashlib.sha256(PNG).hexdigest(),)
    before = records(chat)
    for bad, why in (("notes.txt", "is not a PNG, JPEG, GIF or WebP image"), ("gone.png", "no such image")):
        refused = everchat(env, "--demo", "--data-dir", str(chat), "ask", "and this?", "--image",
                           str(tmp_path / bad))
        assert refused.returncode == 2 and why in refused.stderr
    assert records(chat) == before


def test_r5_ask_on_a_chat_open_elsewhere_names_the_owner_and_changes_nothing(env, tmp_path):
    chat = tmp_path / "chat"
    with Chat.open(chat, create=True) as holder:
        holder.add("note", "held open")
        done = everchat(env, "--demo", "--data-dir", str(chat), "ask", "hello?")
        assert done.returncode == 1
        assert f"is locked by its writer, pid {os.getpid()}" in done.stderr
        assert holder.store.message_count == 1


def test_compact_builds_every_pending_summary_of_an_import(env, tmp_path):
    chat = tmp_path / "chat"
    (tmp_path / "notes.txt").write_text("".join(f"Note {k}: the amber-{k} probe has {k} seals.\n"
                                                for k in range(3000)))
    assert everchat(env, "--data-dir", str(chat), "import", str(tmp_path / "notes.txt"), "--log-only").returncode == 0
    with Chat.open(chat, writer=False) as reader:
        assert reader.status()["unbuilt_lines"] == reader.messages > 1
    done = everchat(env, "--demo", "compact", "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    assert "every summary is built" in done.stdout
    with Chat.open(chat, writer=False) as reader:
        status = reader.status()
        assert status["unbuilt_lines"] == 0 and status["ready_merges"] == 0


def test_ask_goes_through_the_configured_model_with_the_real_sdk(env, tmp_path):
    """Replies from an Anthropic model at the fake server's URL; the model zooms first."""
    chat = tmp_path / "chat"
    with FakeModelServer() as server:
        server.script(Reply(ToolCall("zoom", {"id": 0, "n": 1})), Reply(Text("It says amber-42.")))
        run_env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="anthropic",
                       EVERCHAT_REPLY_BASE_URL=server.base_url, EVERCHAT_COMPACTION_PROVIDER="demo")
        assert main(["note", "The code word is amber-42.", "--data-dir", str(chat)]) == 0
        done = everchat(run_env, "--data-dir", str(chat), "ask", "What is the code word?")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "It says amber-42.\n"
        calls = server.model_calls
        assert [c.model for c in calls] == ["claude-sonnet-5-5", "claude-sonnet-5-5"]
        assert "test-key" not in done.stdout + done.stderr
    assert [r.kind for r in records(chat)] == ["note", "user", "tool", "echo", "everchat"]


def test_a_turn_that_fails_exits_1_with_its_reason(env, tmp_path):
    chat = tmp_path / "chat"
    with FakeModelServer(api_keys=("another-key",)) as server:
        run_env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="anthropic",
                       EVERCHAT_REPLY_BASE_URL=server.base_url, EVERCHAT_COMPACTION_PROVIDER="demo")
        done = everchat(run_env, "--data-dir", str(chat), "ask", "hello?")
    assert done.returncode == 1
    assert "the turn failed" in done.stderr and "test-key" not in done.stderr


def test_options_go_before_or_after_the_command(tmp_path, capsys):
    chat = tmp_path / "chat"
    assert main(["--data-dir", str(chat), "note", "first"]) == 0
    assert main(["note", "second", "--data-dir", str(chat)]) == 0
    assert main(["--data-dir", str(tmp_path / "other"), "view", "--data-dir", str(chat)]) == 0
    assert "1+1|note: second" in capsys.readouterr().out


def test_an_unknown_command_is_a_usage_error_that_makes_nothing(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path / "chat"), "remember", "this"]) == 2
    assert "invalid choice: 'remember'" in capsys.readouterr().err
    assert main(["ask", "--data-dir", str(tmp_path / "chat")]) == 2
    assert "the following arguments are required: message" in capsys.readouterr().err
    assert not (tmp_path / "chat").exists()


def test_everchat_alone_opens_the_terminal_chat(env, tmp_path):
    """Without a terminal on stdin the terminal front end says so (status 2)."""
    for args in ((), ("chat",)):
        done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "--demo", *args], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "the terminal chat needs a terminal" in done.stderr


def test_r5_note_and_import_on_a_chat_open_elsewhere_name_the_owner(env, tmp_path):
    chat = tmp_path / "chat"
    (tmp_path / "a.txt").write_text("a memory\n")
    with Chat.open(chat, create=True) as holder:
        for args in (["note", "hello"], ["import", str(tmp_path / "a.txt")]):
            done = everchat(env, "--data-dir", str(chat), *args)
            assert done.returncode == 1
            assert f"is locked by its writer, pid {os.getpid()}" in done.stderr
            assert "read-only commands such as `view` and `status` work meanwhile" in done.stderr
        assert holder.store.message_count == 0


def test_a_note_can_come_from_stdin_whole(env, tmp_path):
    chat = tmp_path / "chat"
    text = "line one\nline two: amber-42\n" * 1200  # 36,000 bytes: R8 logs three notes
    done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "note", "-", "--data-dir", str(chat)],
                          input=text, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "logged messages 0-2\n"
    assert "".join(r.text for r in records(chat)) == text


def test_r37_ctrl_c_stops_the_call_and_exits_130(env, tmp_path):
    """Ctrl-C during the call: the CLI stops the turn (StopTurn) and waits for its end."""
    import signal

    from everchat.tools.fakemodel import Gate

    chat = tmp_path / "chat"
    gate = Gate()
    with FakeModelServer() as server:
        server.script(Reply(Text("never sent"), gate=gate))
        run_env = dict(env, ANTHROPIC_API_KEY="test-key", EVERCHAT_REPLY_PROVIDER="anthropic",
                       EVERCHAT_REPLY_BASE_URL=server.base_url, EVERCHAT_COMPACTION_PROVIDER="demo")
        # The child takes SIGINT as a terminal's Ctrl-C would reach it, even when this
        # pytest was started with SIGINT ignored (which a child inherits).
        child = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", "--data-dir", str(chat),
                                  "ask", "Tell me a long story."], env=run_env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            assert server.wait_for_requests(1, timeout=60)  # the call is running, held at the gate
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=60)
        finally:
            gate.open()
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == 130, err
    assert "interrupted" in err
    # The gate held the reply's first byte: the message is logged, no reply at all.
    assert [(r.kind, r.text) for r in records(chat)] == [("user", "Tell me a long story.")]


def test_compact_on_a_folder_without_a_chat_fails_and_makes_nothing(tmp_path, capsys):
    assert main(["--demo", "compact", "--data-dir", str(tmp_path / "none")]) == 1
    assert "holds no chat" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
    assert main(["--demo", "compact", "--timeout", "0", "--data-dir", str(tmp_path / "none")]) == 2


def test_processes_runs_every_actor_in_its_own_process_with_the_sessions_models(env, tmp_path):
    """`everchat … --processes`: the turn runner and the workers run in processes of their
    own and still use the session's models (`--demo` here, with a key in the environment
    that a worker loading its own settings would have chosen, and failed with)."""
    chat = tmp_path / "chat"
    env = dict(env, ANTHROPIC_API_KEY="sk-ant-test-never-sent")
    long = "The launch checklist for the amber-42 probe: " + "verify the seals, " * 60
    done = everchat(env, "--demo", "--processes", "ask", long, "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    assert "amber-42" in done.stdout
    # Each actor process logged to its own file (kept after the exit, unlike the sockets).
    assert {path.name for path in (chat / "run").glob("*.log")} >= {"log_writer.log", "planner.log",
                                                                     "turn_runner.log", "compactor.0.log"}
    status = json.loads(everchat(env, "status", "--data-dir", str(chat)).stdout)
    # P18: ask waits for its own lines, not for the merge they make ready (that one may be
    # cut by the exit and built by the next run); what matters here is that none failed.
    assert (status["pending_lines"], status["failures"]) == (0, 0)
    assert status["usage"]["compactions"]["calls"] >= 1


def test_serve_listening_on_every_interface_is_a_usage_error(env, tmp_path):
    done = everchat(env, "serve", "--processes", "--tcp", "--listen", "0.0.0.0", "--data-dir", str(tmp_path / "c"))
    assert done.returncode == 2 and "other hosts can dial" in done.stderr
    assert not (tmp_path / "c").exists()
