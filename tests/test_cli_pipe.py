"""A closed stdout ends a command quietly (issue 20): `everchat status | head -c 10` said
`cannot read the chat …: Broken pipe`. Each command here writes into a real pipe whose
reader has already gone (its read end closed before the command starts, so the first
write fails with EPIPE however small the output): exit 0, nothing on stderr, as other
Unix tools end. The writing commands still do their work first."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_world import env, everchat  # noqa: F401 (env is a fixture)
from test_attach import Server

from everchat.actors.folder import ChatStore

EVERCHAT = [sys.executable, "-m", "everchat.frontends.cli.main"]


def closed_pipe_run(env, *args: str) -> subprocess.CompletedProcess:
    """`everchat ARGS` with its stdout a pipe nobody reads any more."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([*EVERCHAT, *args], env=env, stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(write)


@pytest.fixture
def chat(env, tmp_path):
    """A chat of a few messages and one agent's transcript, nothing running."""
    folder = tmp_path / "chat"
    done = everchat(env, "--demo", "--data-dir", str(folder), "ask", "Remember amber-42.")
    assert done.returncode == 0, done.stderr
    return folder


READERS = [["status"], ["view"], ["zoom", "0", "1"], ["date", "0"], ["check"], ["agents"], ["agents", "--json"]]


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_reading_command_ends_quietly_when_its_reader_left(env, chat, command):
    done = closed_pipe_run(env, "--data-dir", str(chat), *command)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("command", [["ask", "Hello again."], ["compact"], ["note", "a note"]], ids=" ".join)
def test_a_writing_command_does_its_work_and_ends_quietly_when_its_reader_left(env, chat, command):
    with ChatStore.open(chat, writer=False) as store:
        before = store.message_count
    done = closed_pipe_run(env, "--demo", "--data-dir", str(chat), *command)
    assert (done.returncode, done.stderr) == (0, "")
    with ChatStore.open(chat, writer=False) as store:
        assert store.message_count > before or command == ["compact"]


def test_reading_a_running_chat_ends_quietly_when_the_reader_left(env, chat):
    server = Server(env, chat, "--demo")
    try:
        for command in (["status"], ["view"], ["agents"], ["ops", "--once"], ["ops", "--once", "--json"]):
            done = closed_pipe_run(env, "--data-dir", str(chat), *command)
            assert (command, done.returncode, done.stderr) == (command, 0, "")
        asked = closed_pipe_run(env, "--demo", "--data-dir", str(chat), "ask", "Hello.")
        assert (asked.returncode, asked.stderr) == (0, server.attached_line)
    finally:
        assert server.stop() == (0, "")
    assert json.loads(everchat(env, "--data-dir", str(chat), "status").stdout)["messages"] >= 4
