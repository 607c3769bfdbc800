"""P8: an agent's transcript that cannot be read (a garbage `agents/NAME/transcript.jsonl`,
as a hostile or damaged backup planted one) is found by `everchat check`, and skipped with
a warning, not fatal, by `everchat agents`, `everchat zoom NAME`, the chat's agents actor
and the model's zoom("NAME") (R35, R38): the other agents and the rest of the chat go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_world import clean_home, env, everchat  # noqa: F401 (env is a fixture)
from everchat.actors import settings as config
from everchat.actors.session.local import Chat
from everchat.actors.folder import Transcripts

GARBAGE = b'{"not": "a transcript"}\n'
UNREADABLE = ("The transcript of agent 'evil' cannot be read (agents/evil/transcript.jsonl: byte 0: not a version 1 "
              "transcript header for 'evil'); it is skipped.")


def chat_with_a_garbage_transcript(folder: Path) -> None:
    """A chat with one note, agent Ann's real transcript and a garbage one for 'evil'."""
    with Chat.open(folder, create=True) as chat:
        chat.add("note", "a note")
    transcripts = Transcripts(folder, writer=True)
    transcripts.append("Ann", "user", "find the amber", "spawn:Ann", {"task": True, "run": 1})
    (folder / "agents" / "evil").mkdir(mode=0o700)
    (folder / "agents" / "evil" / "transcript.jsonl").write_bytes(GARBAGE)


def test_p8_check_reads_every_transcript_and_names_the_garbage_one(env, tmp_path):  # noqa: F811
    chat = tmp_path / "chat"
    chat_with_a_garbage_transcript(chat)
    done = everchat(env, "check", "--data-dir", str(chat))
    assert done.returncode == 1
    assert "agents/evil/transcript.jsonl: byte 0: not a version 1 transcript header" in done.stderr
    (chat / "agents" / "evil" / "transcript.jsonl").unlink()
    done = everchat(env, "check", "--data-dir", str(chat))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["agents"] == 1


def test_p8_agents_and_zoom_skip_the_unreadable_transcript_with_one_line(env, tmp_path):  # noqa: F811
    chat = tmp_path / "chat"
    chat_with_a_garbage_transcript(chat)
    listed = everchat(env, "agents", "--json", "--data-dir", str(chat))
    assert listed.returncode == 0, listed.stderr
    assert [row["name"] for row in json.loads(listed.stdout)] == ["Ann"]
    assert listed.stderr == f"everchat: warning: {UNREADABLE}\n"
    zoomed = everchat(env, "zoom", "evil", "--data-dir", str(chat))
    assert zoomed.returncode == 2 and "Traceback" not in zoomed.stderr
    assert UNREADABLE in zoomed.stderr
    ann = everchat(env, "zoom", "Ann", "--data-dir", str(chat))
    assert (ann.returncode, ann.stdout) == (0, "0 user: find the amber\n")


def test_p8_the_running_chat_starts_its_agents_and_the_models_zoom_says_the_transcript_is_skipped(tmp_path,
                                                                                                 monkeypatch):
    """The agents actor rebuilds its book from every readable transcript (it failed its
    start on the garbage one); the session's zoom("Name") is the model's tool code."""
    from everchat.actors.session.session import ChatSession, ZoomError

    clean_home(tmp_path, monkeypatch)
    chat = tmp_path / "chat"
    chat_with_a_garbage_transcript(chat)
    settings = config.load({"demo": True, "data_dir": str(chat)}, env={}, home=tmp_path / "home")
    with ChatSession.open(settings) as session:
        assert [row["name"] for row in session.agents()] == ["Ann"]
        with pytest.raises(ZoomError, match="cannot be read .*; it is skipped"):
            session.zoom("evil")
        assert session.zoom("Ann").startswith("0 user: find the amber")  # Ann, queued, may have run meanwhile
