"""A process that owns a parked CLI run and is then killed (tests/test_cli_bridge.py):
it streams the fake CLI up to its tool call, prints the CLI's pid, and waits. That fake
CLI never ends by itself, so only the bridge's lifeline can end it."""

import sys
from pathlib import Path

from everchat.actors.models import Message, Request
from everchat.actors.models._claudecode import ClaudeDecoder, user_line
from everchat.actors.models._cli import CliConnection
from everchat.actors.prompt import memory_tools

CHILD = str(Path(__file__).parent / "fake_cli_child.py")


class FakeCli(CliConnection):
    provider = "fakecli"

    def argv(self, run, request):
        return [self.executable, CHILD, str(run.folder), "stubborn"]

    def opening(self, run, request):
        return user_line(request).encode() + b"\n"

    def decoder(self, request):
        return ClaudeDecoder(self.provider, request.model)


conn = FakeCli(sys.executable, timeout=60, state_dir=sys.argv[1])
events = list(conn.stream(Request(model="m", system="s", tools=memory_tools(), messages=(Message.user("hi"),))))
(pid,) = conn.parked_pids()
print(pid, flush=True)
sys.stdin.read()  # until killed
