"""Codex as the model (issue 13): the real `codex` binary (pinned in tools/clis) against the
fake model server, and the adapter against app-server streams recorded from that binary.

What the real binary cannot do here, and so is checked against its recorded streams and
its schema instead: run a turn on a real ChatGPT login. With a ChatGPT login Codex first
checks the account with chatgpt.com ("workspace routing discovery") before any model
call; this machine reaches no such host, so that check fails, and the connection says so
(`test_a_chatgpt_login_whose_account_cannot_be_checked_reads_clearly`). Everything after
the login is the same app-server stream whichever provider answers, which the fake
provider exercises end to end.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import pytest

from polling import wait_until

from codex_world import (
    FAKE_PROVIDER,
    MODEL,
    api_key_home,
    chatgpt_home,
    codex_executable,
    fake_connection,
    fake_home,
    png,
    recorded,
)
from everchat.actors.models import (
    BadRequest,
    ImageBlock,
    Message,
    ModelError,
    ModelNotFound,
    ModelTimeout,
    NotLoggedIn,
    Overloaded,
    ProtocolError,
    QuotaExceeded,
    RateLimited,
    Request,
    ServerError,
    Stop,
    TextBlock,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Unreachable,
    Usage,
    connect_cli,
)
from everchat.actors.models._cli import scrubbed_environment
from everchat.actors.models._cli_run import LIVE, Finished, Run
from everchat.actors.models import _codex_wire as wire
from everchat.actors.models._codex import CodexConnection, CodexDecoder
from everchat.actors.models._codex_wire import (
    CONFIG,
    error_class,
    history_items,
    login_problem,
    mcp_overrides,
    usage_between,
)
from everchat.tools.fakemodel import Latency, QuotaExceeded as QuotaFault, Reply, Text, Thinking
from everchat.tools.fakemodel import ToolCall as FakeCall
from fake_world import fake_server_fixtures

ZOOM = ToolSpec("zoom", "Read a summary's sources.", {"type": "object", "properties": {"id": {"type": "string"}}})
DATE = ToolSpec("date", "Today's date.", {"type": "object", "properties": {}})
VIEW = (Message.user("The view: an older exchange."), Message.assistant("An older answer."))
SYSTEM = "You are Everchat."


def request(*turn: object, tools: tuple[ToolSpec, ...] = (ZOOM, DATE), history: tuple[Message, ...] = VIEW) -> Request:
    return Request(model=MODEL, system=SYSTEM, messages=history + (Message.user(*turn),), tools=tools)


shared, server = fake_server_fixtures(chunk_tokens=2)


@pytest.fixture
def codex(server, tmp_path, monkeypatch):
    """A connection to the real codex, its CODEX_HOME sending it to the fake server, with
    API keys in our environment that must never reach it."""
    monkeypatch.setenv("CODEX_HOME", str(fake_home(tmp_path / "codex-home", server.openai_base_url)))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-reach-codex")
    monkeypatch.setenv("CODEX_API_KEY", "sk-must-not-reach-codex")
    connection = fake_connection(timeout=120, state_dir=tmp_path / "state")
    yield connection
    connection.close()


def texts(events: list[object]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


# --- the real binary against the fake server ---------------------------------------------


def test_connect_cli_gives_the_codex_connection(tmp_path):
    connection = connect_cli("codex", executable=codex_executable(), state_dir=tmp_path)
    assert isinstance(connection, CodexConnection)
    assert connection.provider == "codex"


def test_a_reply_streams_through_the_real_codex(codex, server):
    server.script(Reply(Text("Hello from the fake server, in several pieces.")))

    events = list(codex.stream(request("Say hello.")))

    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1  # streamed as it came, not gathered
    assert texts(events) == "Hello from the fake server, in several pieces."
    assert events[-1] == Stop("end_turn")
    usage = [e for e in events if isinstance(e, Usage)][-1]
    assert usage.input > 0 and usage.output > 0


def test_thinking_streams_and_the_effort_reaches_the_model(codex, server):
    server.script(Reply(Thinking("Weighing it up."), Text("Done.")))
    ask = request("Think first.")

    events = list(codex.stream(Request(model=MODEL, system=SYSTEM, messages=ask.messages, effort="high")))

    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Weighing it up."
    assert texts(events) == "Done."
    (call,) = server.model_calls
    assert call.body["reasoning"]["effort"] == "high"


def test_a_turn_after_a_turn_reads_its_view_from_the_cache(codex, server):
    view = tuple(m for n in range(20) for m in (Message.user(f"Question {n}: " + "word " * 60),
                                                 Message.assistant(f"Answer {n}: " + "more " * 60)))
    server.script(Reply(Text("first")), Reply(Text("second")))

    first = list(codex.stream(request("Turn one.", history=view)))
    second = list(codex.stream(request("Turn two.", history=view + (Message.user("Turn one."),
                                                                     Message.assistant("first")))))

    assert [e for e in first if isinstance(e, Usage)][-1].cache_read == 0
    reused = [e for e in second if isinstance(e, Usage)][-1]
    assert reused.cache_read == server.model_calls[1].cache.cache_read > 0  # Codex's native count, as it came
    assert reused.cache_read + reused.input == server.model_calls[1].cache.total


def test_the_view_goes_in_as_items_and_codex_adds_nothing_of_its_own(codex, server):
    server.script(Reply(Text("ok")))

    list(codex.stream(request("The turn.")))

    (call,) = server.model_calls
    items = call.body["input"]
    assert [(i.get("type"), i.get("role")) for i in items] == [
        ("message", "developer"), ("message", "user"), ("message", "assistant"), ("message", "user")]
    assert items[0]["content"] == [{"type": "input_text", "text": SYSTEM}]
    assert items[1]["content"] == [{"type": "input_text", "text": "The view: an older exchange."}]
    assert items[2]["content"][0]["text"] == "An older answer."
    assert items[3]["content"] == [{"type": "input_text", "text": "The turn."}]
    # only our tools: no shell, files, web search, images, plans, goals or agents of Codex's
    assert [t["name"] for t in call.body["tools"]] == ["zoom", "date"]
    assert "sk-must-not-reach-codex" not in json.dumps(call.headers)


def test_the_users_own_mcp_servers_and_hooks_stay_off(codex, server, tmp_path):
    config = tmp_path / "codex-home" / "config.toml"
    marker = tmp_path / "mcp-server-started"
    config.write_text(config.read_text(encoding="utf-8") + (
        "[mcp_servers.users-own]\n"
        'command = "python3"\n'
        f'args = ["-c", "open({str(marker)!r}, \'w\')"]\n'), encoding="utf-8")
    server.script(Reply(Text("ok")))

    list(codex.stream(request("The turn.")))

    (call,) = server.model_calls
    assert [t["name"] for t in call.body["tools"]] == ["zoom", "date"]
    assert not marker.exists()


def test_the_users_global_agents_md_is_the_one_thing_codex_still_adds(codex, server, tmp_path):
    # no switch for it in codex 0.171.0 (docs/SUBSCRIPTIONS.md): when a version brings one, use it here
    (tmp_path / "codex-home" / "AGENTS.md").write_text("Answer in haiku.", encoding="utf-8")
    server.script(Reply(Text("ok")))

    list(codex.stream(request("The turn.")))

    (call,) = server.model_calls
    added = [i for i in call.body["input"] if "AGENTS.md" in json.dumps(i)]
    assert [i["role"] for i in added] == ["user"]
    assert "Answer in haiku." in added[0]["content"][0]["text"]
    assert len(call.body["input"]) == 5  # system, view (2), AGENTS.md, turn


def test_a_zoom_round_trip_resumes_the_same_codex_run(codex, server):
    server.script(Reply(Text("Let me look."), FakeCall("zoom", {"id": "s12"})), Reply(Text("It says 42.")))
    first = request("What is in s12?")

    events = list(codex.stream(first))

    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert (call.name, dict(call.input)) == ("zoom", {"id": "s12"})
    assert texts(events) == "Let me look."
    assert events[-1] == Stop("tool_use")

    follow = Request(model=MODEL, system=SYSTEM, tools=first.tools, messages=first.messages + (
        Message.assistant("Let me look.", ToolUseBlock(call.id, call.name, dict(call.input))),
        Message.user(ToolResultBlock.of_text(call.id, "s12: the answer is 42"))))
    events = list(codex.stream(follow))

    assert texts(events) == "It says 42."
    assert events[-1] == Stop("end_turn")
    asked, answered = server.model_calls
    assert answered.body["prompt_cache_key"] == asked.body["prompt_cache_key"]  # the same Codex thread
    outputs = [i for i in answered.body["input"] if i.get("type") == "function_call_output"]
    assert [(o["call_id"], o["output"]) for o in outputs] == [(call.id, "s12: the answer is 42")]


def test_two_calls_in_one_message_are_answered_text_and_images_in_one_run(codex, server):
    server.script(Reply(FakeCall("zoom", {"id": "s1"}), FakeCall("date", {})), Reply(Text("Both read.")))
    picture = png()
    messages = request("Zoom and date, please.").messages
    events: list[object] = []
    for _ in range(3):  # Codex runs both at once; they may reach us together or one after the other
        events = list(codex.stream(Request(model=MODEL, system=SYSTEM, messages=messages, tools=(ZOOM, DATE))))
        calls = [e for e in events if isinstance(e, ToolCall)]
        if not calls:
            break
        messages += (Message("assistant", tuple(ToolUseBlock(c.id, c.name, dict(c.input)) for c in calls)),
                     Message.user(*(ToolResultBlock(c.id, (TextBlock(f"{c.name} done"), ImageBlock(picture, "image/png")))
                                    for c in calls)))

    assert texts(events) == "Both read."
    asked, answered = server.model_calls
    outputs = {o["call_id"]: o["output"] for o in answered.body["input"] if o.get("type") == "function_call_output"}
    assert sorted(part["text"] for output in outputs.values() for part in output if part["type"] == "input_text") == [
        "date done", "zoom done"]
    image = "data:image/png;base64," + base64.b64encode(picture).decode()
    assert all(any(part.get("image_url") == image for part in output) for output in outputs.values())


def test_tool_results_without_a_live_run_start_a_new_one_that_goes_on_from_them(codex, server):
    server.script(Reply(FakeCall("zoom", {"id": "s3"})), Reply(Text("From the sources: 3.")))
    first = request("What is in s3?")
    (call,) = [e for e in codex.stream(first) if isinstance(e, ToolCall)]
    codex.close()  # the run ends (a restart, say) before the results come

    follow = Request(model=MODEL, system=SYSTEM, tools=first.tools, messages=first.messages + (
        Message("assistant", (ToolUseBlock(call.id, call.name, dict(call.input)),)),
        Message.user(ToolResultBlock.of_text(call.id, "s3: three"))))
    events = list(codex.stream(follow))

    assert texts(events) == "From the sources: 3."
    asked, answered = server.model_calls
    assert answered.body["prompt_cache_key"] != asked.body["prompt_cache_key"]  # a new Codex thread
    last = answered.body["input"][-2:]
    assert [(i["type"], i["call_id"]) for i in last] == [("function_call", call.id), ("function_call_output", call.id)]
    assert last[1]["output"] == "s3: three"


def test_an_image_arrives_at_the_fake_server(codex, server):
    picture = png(3, 2, b"\x00\x80\xff")
    server.script(Reply(Text("A blue rectangle.")))

    events = list(codex.stream(request("What is this?", ImageBlock(picture, "image/png"))))

    assert texts(events) == "A blue rectangle."
    (call,) = server.model_calls
    turn = call.body["input"][-1]["content"]
    images = [part["image_url"] for part in turn if part["type"] == "input_image"]
    assert images == ["data:image/png;base64," + base64.b64encode(picture).decode()]


def test_a_timeout_reads_clearly(server, tmp_path, monkeypatch):
    monkeypatch.setenv("CODEX_HOME", str(fake_home(tmp_path / "codex-home", server.openai_base_url)))
    gate = server.gate()
    server.script(Reply(Text("too late"), gate=gate))
    connection = fake_connection(timeout=5, state_dir=tmp_path / "state")
    try:
        with pytest.raises(ModelTimeout) as caught:
            list(connection.stream(request("Say hello.")))
    finally:
        connection.close()
        gate.open()
    assert str(caught.value) == f"codex {MODEL}: no complete answer within 5 s (--cli-timeout)"


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_stopped_reply_ends_the_codex_process_group(codex, server):
    server.latency = Latency(per_chunk=2.0)  # room to stop between the pieces; nothing waits on it
    server.script(Reply(Text("Hello, world.", chunks=("Hello, ", "world."))))
    stream = codex.stream(request("Say hello."))
    try:
        assert next(stream) == TextDelta("Hello, ")
        (run,) = [r for r in LIVE if not r.ended]
        stream.close()  # R37: the person stopped the reply

        wait_until(lambda: _group_gone(run.proc.pid), 30, "codex and what it started end")
        assert not run.folder.exists()
    finally:
        server.latency = Latency()
        assert server.wait_idle(30)


def test_a_quota_error_reads_clearly(codex, server):
    server.script(QuotaFault())

    with pytest.raises(QuotaExceeded) as caught:
        list(codex.stream(request("Say hello.")))

    assert str(caught.value) == (
        f"codex {MODEL}: the ChatGPT plan's Codex usage limit is reached: wait until it resets or change the "
        "plan (no fallback to API billing) (Quota exceeded. Check your plan and billing details.)")


def test_the_real_binary_accepts_every_override_strictly(tmp_path, monkeypatch):
    """The overrides as a run passes them, checked by the pinned codex itself: with
    --strict-config (in argv) a key it does not know would fail here."""
    import subprocess

    monkeypatch.setenv("CODEX_HOME", str(tmp_path))
    connection = CodexConnection(codex_executable(), state_dir=tmp_path / "state")
    argv = connection.argv(Run(folder=tmp_path, slot=None), request("Say hello."))
    assert "--strict-config" in argv
    at = argv.index("--listen")
    checked = argv[:at] + argv[at + 2:] + ["--print-startup-config"]  # validates, starts no server

    done = subprocess.run(checked, capture_output=True, text=True, timeout=60,
                          env=connection.environment(Run(folder=tmp_path, slot=None), request("Say hello.")))

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["appServerVersion"] == "0.171.0"


def test_an_override_codex_does_not_know_fails_the_call_instead_of_leaving_a_tool_on(codex, server, monkeypatch):
    # a key renamed in another Codex version: without --strict-config codex ignores it silently
    monkeypatch.setattr(wire, "CONFIG", wire.CONFIG + (("features.renamed_shell_tool", "false"),))
    server.script(Reply(Text("must not be reached")))

    with pytest.raises(ProtocolError) as caught:
        list(codex.stream(request("Say hello.")))

    assert str(caught.value).endswith(
        "unknown configuration field `features.renamed_shell_tool` in -c/--config override")
    assert server.model_calls == []


# --- logins the real binary has here --------------------------------------------------------


def _stream_with_home(home: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(home))
    connection = connect_cli("codex", executable=codex_executable(), timeout=120, state_dir=tmp_path / "state")
    try:
        list(connection.stream(request("Say hello.")))
    finally:
        connection.close()


def test_a_custom_model_provider_in_the_users_config_is_not_used(server, tmp_path, monkeypatch):
    """A user's own config.toml that routes Codex through another API (here the fake
    server, with its own key in the file) must not be billed: the run forces OpenAI's
    provider, which needs the ChatGPT login this home does not have."""
    home = fake_home(tmp_path / "codex-home", server.openai_base_url)
    config = home / "config.toml"
    config.write_text(f'model_provider = "{FAKE_PROVIDER}"\n' + config.read_text(encoding="utf-8"), encoding="utf-8")
    server.script(Reply(Text("billed through another API")))

    with pytest.raises(NotLoggedIn) as caught:
        _stream_with_home(home, tmp_path, monkeypatch)

    assert "Codex is not logged in with a ChatGPT account" in str(caught.value)
    assert server.model_calls == []


def test_no_login_reads_clearly(tmp_path, monkeypatch):
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-be-used")

    with pytest.raises(NotLoggedIn) as caught:
        _stream_with_home(home, tmp_path, monkeypatch)

    assert str(caught.value) == (f"codex {MODEL}: Codex is not logged in with a ChatGPT account: run `codex login` "
                                 "(the subscription connection never falls back to an API key)")


def test_an_api_key_login_is_refused_not_billed(tmp_path, monkeypatch):
    with pytest.raises(NotLoggedIn) as caught:
        _stream_with_home(api_key_home(tmp_path / "api-key-home"), tmp_path, monkeypatch)

    assert "logged in with an API key, not a ChatGPT account" in str(caught.value)


def test_a_chatgpt_login_whose_account_cannot_be_checked_reads_clearly(tmp_path, monkeypatch):
    with pytest.raises(Unreachable) as caught:
        _stream_with_home(chatgpt_home(tmp_path / "chatgpt-home"), tmp_path, monkeypatch)

    assert str(caught.value).startswith(f"codex {MODEL}: Codex could not check its ChatGPT login (is chatgpt.com "
                                        "reachable? `codex login status` tells more)")


@pytest.mark.parametrize("write, words", [
    (lambda path: path.write_bytes(b'model = "caf\xe9"\n'), "is not UTF-8 text"),
    (lambda path: path.mkdir(), "cannot be read (Is a directory)"),  # as root, no mode refuses a read
], ids=["latin-1", "unreadable"])
def test_a_config_toml_that_cannot_be_read_is_a_model_error(tmp_path, monkeypatch, write, words):
    home = tmp_path / "codex-home"
    home.mkdir()
    write(home / "config.toml")

    with pytest.raises(ModelError) as caught:
        _stream_with_home(home, tmp_path, monkeypatch)

    assert f"Codex's config {home / 'config.toml'} {words}" in str(caught.value)


def test_the_child_environment_has_no_api_keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("CODEX_API_KEY", "sk-y")
    monkeypatch.setenv("CODEX_HOME", "/somewhere")

    env = scrubbed_environment()

    assert "OPENAI_API_KEY" not in env and "CODEX_API_KEY" not in env
    assert env["CODEX_HOME"] == "/somewhere"  # the login stays


def test_api_key_variables_never_reach_the_real_codex(server, tmp_path, monkeypatch):
    """End to end, as Claude Code's test: the real connection starts the real binary through
    a wrapper that records the environment it was given, then execs codex, which answers.
    The keys in our environment (the `codex` fixture's) are not in it; the login is."""
    home = fake_home(tmp_path / "codex-home", server.openai_base_url)
    monkeypatch.setenv("CODEX_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-reach-codex")
    monkeypatch.setenv("CODEX_API_KEY", "sk-must-not-reach-codex")
    seen = tmp_path / "codex-environment.json"
    wrapper = tmp_path / "codex"
    wrapper.write_text(f"#!{sys.executable}\n"
                       "import json, os, sys\n"
                       f"with open({str(seen)!r}, 'w') as out:\n"
                       "    json.dump(dict(os.environ), out)\n"
                       f"os.execv({codex_executable()!r}, [{codex_executable()!r}, *sys.argv[1:]])\n",
                       encoding="utf-8")
    wrapper.chmod(0o700)
    server.script(Reply(Text("On the login.")))
    connection = CodexConnection(str(wrapper), model_provider=FAKE_PROVIDER, timeout=120, state_dir=tmp_path / "state")
    try:
        assert texts(list(connection.stream(request("Say hello.")))) == "On the login."
    finally:
        connection.close()
    child = json.loads(seen.read_text(encoding="utf-8"))
    assert "OPENAI_API_KEY" not in child and "CODEX_API_KEY" not in child
    assert not [value for value in child.values() if "sk-must-not-reach-codex" in value]
    assert child["CODEX_HOME"] == str(home)  # the login stays


# --- the adapter against recorded streams ---------------------------------------------------


class Replay:
    """A decoder fed a recorded stream, with what it writes back kept."""

    def __init__(self, tmp_path: Path, req: Request, *, subscription: bool = False) -> None:
        # recorded on the fake server's provider, which only the tests' connection accepts
        self.decoder = CodexDecoder(req, model=MODEL, subscription=subscription)
        self.sent: list[dict] = []
        self.decoder.attach(Run(folder=tmp_path, slot=None), lambda data: self.sent.append(json.loads(data)))

    def play(self, lines: list[str]) -> list[object]:
        out: list[object] = []
        for line in lines:
            out += list(self.decoder.feed(line))
        return out

    def methods(self) -> list[str]:
        return [m.get("method", f"answer {m.get('id')}") for m in self.sent]


def test_the_recorded_reply_decodes_into_text_usage_and_the_end(tmp_path):
    replay = Replay(tmp_path, request("Say hello."))

    out = replay.play(recorded("reply"))

    assert texts(out) == "Hello from the fake server."
    assert out[-1] == Finished("end_turn")
    assert sum(u.input + u.cache_read for u in out if isinstance(u, Usage)) > 0
    assert replay.methods() == ["initialized", "account/read", "thread/start", "thread/inject_items", "turn/start"]


def test_the_recorded_zoom_call_is_answered_on_the_same_channel(tmp_path):
    replay = Replay(tmp_path, request("What is in s12?"))

    out = replay.play(recorded("zoom"))

    (asked,) = [o for o in out if type(o).__name__ == "BridgeCall"]
    assert (asked.name, asked.arguments) == ("zoom", {"id": "s12"})
    asked.reply([TextBlock("s12: the answer is 42")], False)
    answer = replay.sent[-1]
    ask = next(json.loads(line) for line in recorded("zoom") if '"item/tool/call"' in line)
    assert answer == {"id": ask["id"], "result": {"contentItems": [{"type": "inputText",
                                                                    "text": "s12: the answer is 42"}],
                                                   "success": True}}
    assert texts(out) == "Let me look.It says 42."
    assert out[-1] == Finished("end_turn")


def test_the_recorded_image_turn_sent_a_local_image_file(tmp_path):
    picture = png()
    replay = Replay(tmp_path, request("What is this?", ImageBlock(picture, "image/png")))

    replay.play(recorded("image"))

    (turn,) = [m for m in replay.sent if m.get("method") == "turn/start"]
    assert turn["params"]["input"] == [{"type": "text", "text": "What is this?"},
                                       {"type": "localImage", "path": str(tmp_path / "image-1.png")}]
    assert (tmp_path / "image-1.png").read_bytes() == picture


def test_the_recorded_usage_limit_becomes_quota_exceeded(tmp_path):
    out = Replay(tmp_path, request("Say hello.")).play(recorded("quota"))

    assert isinstance(out[-1], QuotaExceeded)
    assert "usage limit is reached" in str(out[-1])


@pytest.mark.parametrize("name, cls, words", [
    ("nologin", NotLoggedIn, "Codex is not logged in with a ChatGPT account: run `codex login`"),
    ("apikey", NotLoggedIn, "Codex is logged in with an API key, not a ChatGPT account"),
    ("chatgpt", Unreachable, "Codex could not check its ChatGPT login"),
], ids=["nologin", "apikey", "chatgpt"])
def test_the_recorded_logins_read_clearly_and_start_no_thread(tmp_path, name, cls, words):
    replay = Replay(tmp_path, request("Say hello."))

    out = replay.play(recorded(name))

    assert isinstance(out[-1], cls) and words in str(out[-1])
    assert "thread/start" not in replay.methods()


def test_a_provider_that_needs_no_openai_login_is_refused_by_a_subscription_decoder(tmp_path):
    replay = Replay(tmp_path, request("Say hello."), subscription=True)

    out = replay.play(recorded("reply"))

    assert isinstance(out[-1], NotLoggedIn) and "not a ChatGPT subscription" in str(out[-1])
    assert "thread/start" not in replay.methods()


def test_a_decoder_reads_nothing_before_it_is_attached():
    """The base attaches the decoder before it reads the CLI's output (`_cli.CliConnection
    ._start`); a line before that is a bug of the caller, said at once (the decoder used to
    hold its answers, and would have started the thread in the process's own folder)."""
    decoder = CodexDecoder(request("Say hello."), model=MODEL)

    with pytest.raises(RuntimeError, match=r"attach\(\) comes before"):
        decoder.feed(recorded("reply")[0])


def test_a_line_that_is_not_json_is_a_protocol_error(tmp_path):
    replay = Replay(tmp_path, request("Say hello."))

    with pytest.raises(ProtocolError) as caught:
        replay.play(["Error: something broke"])

    assert str(caught.value) == ("codex: codex app-server printed a line that is not JSON (Expecting value): "
                                 "'Error: something broke'")


def test_a_line_the_decoder_cannot_read_ends_the_call_at_once_not_at_its_timeout(tmp_path, monkeypatch):
    """The base's output reader (`_cli_run.read_output`) turns a decoder's raise into the
    call's error; it used to die with it, and the call waited out --cli-timeout and then
    read as a timeout."""
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    broken = tmp_path / "codex"
    broken.write_text("#!/bin/sh\necho 'Error: something broke'\nexec sleep 600\n")
    broken.chmod(0o755)
    connection = connect_cli("codex", executable=str(broken), timeout=600, state_dir=tmp_path / "state")
    try:
        with pytest.raises(ProtocolError) as caught:
            list(connection.stream(request("Say hello.")))
    finally:
        connection.close()
    assert "'Error: something broke'" in str(caught.value)


def test_a_refused_step_is_a_protocol_error_naming_it(tmp_path):
    replay = Replay(tmp_path, request("Say hello."))
    lines = recorded("reply")
    start = next(n for n, line in enumerate(lines) if json.loads(line).get("id") == 2)  # thread/start's answer
    refused = json.dumps({"id": 2, "error": {"code": -32600, "message": "invalid thread params"}})

    out = replay.play(lines[:start] + [refused])

    assert isinstance(out[-1], ProtocolError)
    assert str(out[-1]) == f"codex {MODEL}: codex app-server refused thread/start (invalid thread params)"


# --- the pure parts ---------------------------------------------------------------------------


def test_a_chatgpt_account_may_run_and_others_may_not():
    # shapes from `codex app-server generate-json-schema` (GetAccountResponse)
    assert login_problem({"requiresOpenaiAuth": True, "account": {"type": "chatgpt", "email": "a@b.c",
                                                                   "planType": "plus"}}) is None
    # a provider that needs no OpenAI login is some other API: refused, unless the tests chose it
    assert "not a ChatGPT subscription" in login_problem({"requiresOpenaiAuth": False, "account": None})
    assert login_problem({"requiresOpenaiAuth": False, "account": None}, subscription=False) is None
    assert "not logged in" in login_problem({"requiresOpenaiAuth": True, "account": None})
    assert "API key" in login_problem({"requiresOpenaiAuth": True, "account": {"type": "apiKey"}})


@pytest.mark.parametrize("info, cls", [
    ("usageLimitExceeded", QuotaExceeded),
    ("unauthorized", NotLoggedIn),
    ({"httpConnectionFailed": {"httpStatusCode": 401}}, NotLoggedIn),
    ({"responseStreamDisconnected": {"httpStatusCode": 429}}, RateLimited),
    ({"responseStreamConnectionFailed": {"httpStatusCode": 502}}, ServerError),
    ({"responseStreamDisconnected": {"httpStatusCode": None}}, Unreachable),
    ("contextWindowExceeded", BadRequest),
    ("other", ProtocolError),
    # what is not Codex's own follows the API paths' reading of a status (_errors._by_status)
    ({"httpConnectionFailed": {"httpStatusCode": 404}}, ModelNotFound),
    ({"responseStreamConnectionFailed": {"httpStatusCode": 503}}, Overloaded),
    ({"responseStreamConnectionFailed": {"httpStatusCode": 529}}, Overloaded),
    ({"httpConnectionFailed": {"httpStatusCode": 408}}, ModelTimeout),
    ({"responseStreamConnectionFailed": {"httpStatusCode": 504}}, ModelTimeout),
    ({"httpConnectionFailed": {"httpStatusCode": 400}}, BadRequest),
], ids=["usage-limit", "unauthorized", "http-401", "http-429", "http-502", "no-connection", "context", "other",
        "http-404", "http-503", "http-529", "http-408", "http-504", "http-400"])
def test_codex_error_kinds_map_to_our_classes(info, cls):
    # CodexErrorInfo from `codex app-server generate-json-schema` (ErrorNotification)
    found, advice = error_class({"message": "m", "codexErrorInfo": info})
    assert found is cls
    assert advice.startswith(("Codex", "the Codex", "the ChatGPT", "the view"))  # Codex's words, not an API key's


def test_usage_counts_the_stretch_and_excludes_cached_input():
    before = {"inputTokens": 100, "cachedInputTokens": 0, "outputTokens": 10}
    after = {"inputTokens": 300, "cachedInputTokens": 150, "cacheWriteInputTokens": 20, "outputTokens": 25}

    assert usage_between(after, before) == Usage(input=30, output=15, cache_read=150, cache_write=20)


def test_the_history_keeps_tool_calls_and_results_as_responses_items():
    history = (Message.user("q"), Message.assistant("a", ToolUseBlock("c1", "zoom", {"id": "s1"})),
               Message.user(ToolResultBlock.of_text("c1", "found")))

    items = [wrapped["item"] for wrapped in history_items(history)]

    assert items == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        {"type": "function_call", "call_id": "c1", "name": "zoom", "arguments": '{"id": "s1"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
    ]


def test_the_history_is_the_api_paths_items_and_the_turn_its_joined_runs(tmp_path):
    """One builder for both paths (`_openai._responses_items`, `_openai._joined`): what the
    API path sends for a view is what Codex injects, and a turn joins text as it does."""
    from everchat.actors.models._openai import _joined, _responses_items
    from everchat.actors.models._codex_wire import turn_input

    picture = ImageBlock(png(), "image/png")
    history = (Message.user("a", "b", picture, "c"), Message.assistant("d", "e"),
               Message.assistant(ToolUseBlock("c1", "zoom", {"id": "s1"})),
               Message.user(ToolResultBlock("c1", (TextBlock("found"), picture))))

    items = [wrapped["item"] for wrapped in history_items(history)]

    expected = [dict(item) for item in _responses_items(history)]
    expected[0] = {"type": "message", **expected[0]}
    expected[1] = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "de"}]}
    assert items == expected
    saved: list[str] = []
    turn = turn_input(history[0], lambda data, suffix: saved.append(suffix) or f"image.{suffix}")
    assert [part.get("text", part.get("path")) for part in turn] == [
        part if isinstance(part, str) else "image.png" for part in _joined(history[0].content)]


def test_the_users_mcp_servers_are_named_one_by_one():
    config = '[mcp_servers.docs]\ncommand = "x"\n[mcp_servers.web-2]\ncommand = "y"\n'

    assert mcp_overrides(config) == (("mcp_servers.docs.enabled", "false"), ("mcp_servers.web-2.enabled", "false"))
    assert mcp_overrides("not toml [") == ()


def test_an_mcp_server_a_run_cannot_turn_off_stops_the_run():
    with pytest.raises(ModelError) as caught:
        mcp_overrides('[mcp_servers."odd.name"]\ncommand = "y"\n')

    assert "names the MCP server 'odd.name', which a run cannot turn off" in str(caught.value)


def test_every_override_turns_something_of_codex_off():
    keys = [key for key, _ in CONFIG]
    assert len(keys) == len(set(keys))
    assert ("features.shell_tool", "false") in CONFIG and ("sandbox_mode", '"read-only"') in CONFIG
