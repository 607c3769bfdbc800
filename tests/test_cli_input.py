"""Bad input on the command line gets a clear error (status 2) and changes nothing: not
even a new chat folder is made for a note or a message that is refused."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from everchat.actors.folder import MAX_TEXT_BYTES, ChatStore
from everchat.frontends.cli.main import main


def test_a_note_over_8_mb_is_refused_before_a_chat_is_made(tmp_path, monkeypatch, capsys):
    chat = tmp_path / "chat"
    monkeypatch.setattr(sys, "stdin", io.StringIO("y" * (MAX_TEXT_BYTES + 1)))
    assert main(["note", "-", "--data-dir", str(chat)]) == 2
    assert capsys.readouterr().err == (
        "everchat: the note is 8,388,609 bytes; one message is at most 8,388,608 bytes "
        "(for more, `everchat import FILE`); nothing was logged\n")
    assert not chat.exists()


def test_a_note_or_message_that_is_not_utf8_is_refused_before_a_chat_is_made(tmp_path):
    """A byte that is not UTF-8 reaches Python's argv as a lone surrogate."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    chat = tmp_path / "chat"
    for command, what in (("note", "the note"), ("ask", "the message")):
        done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", "--demo", "--data-dir", str(chat),
                               command, b"bad \xff byte"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert done.stderr == f"everchat: {what} is not UTF-8 text (character 4); nothing was logged\n"
        assert not chat.exists()


def test_ask_whose_reader_leaves_early_exits_quietly_with_the_reply_logged(tmp_path):
    """`everchat ask … | head -c 20`: the closed pipe is the reader's choice, not a failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    chat = tmp_path / "chat"
    child = subprocess.Popen([sys.executable, "-m", "everchat.frontends.cli.main", "--demo", "--data-dir", str(chat),
                              "ask", "Remember amber-42."], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    child.stdout.close()  # the reader is gone before the first byte
    err = child.stderr.read()
    assert child.wait(timeout=60) == 0 and err == ""
    child.stderr.close()
    with ChatStore.open(chat, writer=False) as store:  # the turn is logged whole
        assert [store.message(i).kind for i in range(store.message_count)] == ["user", "everchat"]


@pytest.mark.parametrize("command", [["ask", "hello"], ["compact"], ["chat"], ["serve"]])
def test_a_compaction_model_without_its_key_is_one_clear_line_before_anything_starts(tmp_path, command):
    """Its workers could not start: `ask` and `compact` waited for summaries for good."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVERCHAT_", "ANTHROPIC_", "OPENAI_"))}
    env.update(EVERCHAT_REPLY_PROVIDER="demo", EVERCHAT_COMPACTION_PROVIDER="anthropic")
    chat = tmp_path / "chat"
    assert main(["note", "a memory", "--data-dir", str(chat)]) == 0
    before = sorted(p.name for p in chat.iterdir())
    done = subprocess.run([sys.executable, "-m", "everchat.frontends.cli.main", *command, "--data-dir", str(chat)],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == ("everchat: the compaction model cannot start: anthropic: ANTHROPIC_API_KEY is not set: "
                           "export it, or choose another provider (the demo model works offline)\n")
    assert sorted(p.name for p in chat.iterdir()) == before


@pytest.mark.parametrize("command", [["note", "hello"], ["--demo", "ask", "hello"], ["import", "FILE"]])
def test_r1_a_writer_refuses_a_folder_of_other_files_and_leaves_it_alone(tmp_path, capsys, command):
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (tmp_path / "part.txt").write_text("a note to import")
    args = [str(tmp_path / "part.txt") if word == "FILE" else word for word in command]
    assert main([*args, "--data-dir", str(folder)]) == 1
    assert "holds other files (notes.txt) and no chat" in capsys.readouterr().err
    assert [entry.name for entry in folder.iterdir()] == ["notes.txt"]
