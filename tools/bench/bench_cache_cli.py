"""Cache share through Claude Code (issue 13): what the subscription path reads from the
prompt cache, against the perfect prefix cache, for turns and for compactions.

A growing chat replays through the real `claude` binary (pinned in tools/clis) on a dummy
subscription login, pointed at the fake model server, whose cache model (marks, 20-block
lookback, lifetimes, 1,024-token minimum) sits beside a perfect prefix cache. Each turn
sends the view and the turn text as the turn runner builds them (R23's marks, R36), and
every second turn zooms once (the tool result continues the same CLI run); after each
turn the chat's two new messages get leaf summaries and every second turn a merge, as the
compactor builds them (`Compaction.request`). Calls go one at a time. With `--path both`
the same calls also go through the API path (`AnthropicConnection`) for comparison.

One JSON line per path and kind: requests, input (uncached), cache_read, cache_write
(fake tokens: bytes / 4), share = cache_read / all input, perfect_share, and
ratio = share / perfect_share, as `bench_cache.py` prints for the API.

    python tools/bench/bench_cache_cli.py [--turns 20] [--lines 120] [--path claudecode|api|both]
                                          [--claude PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

from everchat.actors.prompt.tasks import turn_text
from everchat.actors.compactor.compaction import Compaction, CompactionJob
from everchat.actors.models import (
    AnthropicConnection,
    Connection,
    Message,
    Request,
    TextBlock,
    ToolResultBlock,
    connect_cli,
)
from everchat.actors.prompt import Prompt, turn_header, view_blocks
from everchat.tools.bench.bench_cache import environment
from everchat.tools.fakemodel import CacheStats, Exchange, FakeModelServer, Reply, Text, ToolCall

__all__ = ["main", "replay", "figures"]

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = ROOT / "tools" / "clis" / "node_modules" / ".bin" / "claude"
TOKEN = "sk-ant-oat01-everchat-bench-login"
MODEL = "claude-sonnet-4-5"
KINDS = ("turn", "compaction")
_NOON = datetime(2026, 12, 4, 12, 0).astimezone()  # every turn's header the same day and time


def _words(seed: str, size: int) -> str:
    """`size` bytes of varied, repeatable text."""
    out, n = [], 0
    while sum(map(len, out)) < size:
        out.append(hashlib.sha256(f"{seed}/{n}".encode()).hexdigest()[: 5 + n % 7] + " ")
        n += 1
    return "".join(out)[:size].strip()


@contextlib.contextmanager
def claude_login(server: FakeModelServer) -> Iterator[None]:
    """A dummy subscription login in a temporary config folder, and the fake server as
    Claude Code's API (the variables are put back afterwards)."""
    with tempfile.TemporaryDirectory() as home:
        config = Path(home) / ".claude"
        config.mkdir()
        login = {"claudeAiOauth": {"accessToken": TOKEN, "refreshToken": "sk-ant-ort01-bench",
                                   "expiresAt": int(time.time() * 1000) + 86_400_000,
                                   "scopes": ["user:inference"], "subscriptionType": "max"}}
        (config / ".credentials.json").write_text(json.dumps(login))
        with environment({"HOME": home, "CLAUDE_CONFIG_DIR": str(config), "ANTHROPIC_BASE_URL": server.url}):
            yield


def replay(connection: Connection, server: FakeModelServer, turns: int, lines: int,
           tool_prefix: str) -> dict[str, list[Exchange]]:
    """Play the chat through `connection`; the model calls of each kind."""
    prompt = Prompt.make()
    view = [f"{n}: user: {_words(f'line{n}', 300)}" for n in range(lines)]
    kinds: dict[str, list[Exchange]] = {kind: [] for kind in KINDS}

    def call(kind: str, request: Request, answers: list, loop: Callable[[Request, object], Request | None]) -> None:
        seen = len(server.model_calls)
        server.script(*answers)
        while request is not None:
            reply = connection.complete(request)
            request = loop(request, reply)
        server.wait_idle()
        kinds[kind] += server.model_calls[seen:]

    def turn_request(convo: list[Message]) -> Request:
        """As `TurnRunner.request`: one mark at the very end, besides the view's (R23)."""
        *head, last = convo
        marked = Message(last.role, (*last.content[:-1], replace(last.content[-1], cache=True)))
        return Request(model=MODEL, system=prompt.system, tools=prompt.tools, messages=(*head, marked),
                       label="turn")

    for t in range(turns):
        text = turn_text(turn_header(_NOON), f"[turn {t}] {_words(f'ask{t}', 200)}")
        convo = [Message("user", (*view_blocks(view), TextBlock(text)))]
        zoom = t % 2 == 1
        answers = ([Reply(ToolCall(tool_prefix + "zoom", {"id": t}))] if zoom else []) + [
            Reply(Text(_words(f"reply{t}", 900)))]

        def tool_loop(sent: Request, reply, convo=convo) -> Request | None:
            if not reply.tool_calls:
                return None
            results = tuple(ToolResultBlock.of_text(c.id, _words(f"zoom{c.id}", 1200)) for c in reply.tool_calls)
            convo += [reply.message(), Message("user", results)]
            return turn_request(convo)

        request = turn_request(convo)
        call("turn", request, answers, tool_loop)
        added = [f"{lines + 2 * t}: user: {_words(f'ask{t}', 200)}",
                 f"{lines + 2 * t + 1}: everchat: {_words(f'reply{t}', 300)}"]
        for n, line in enumerate(added):  # leaf summaries of the two new messages, over the old view
            job = CompactionJob(0, lines + 2 * t + n, tuple(view), (line,))
            call("compaction", Compaction(job, prompt, model=MODEL).request(), [Reply(Text(_words(line, 420)))],
                 lambda sent, reply: None)
        if t % 2 == 1:  # and a merge of two earlier lines
            job = CompactionJob(1, t, tuple(view), (view[t], view[t + 1]))
            call("compaction", Compaction(job, prompt, model=MODEL).request(), [Reply(Text(_words(f"m{t}", 440)))],
                 lambda sent, reply: None)
        view = view + added
    return kinds


def figures(path: str, kinds: dict[str, list[Exchange]]) -> list[dict]:
    rows = []
    for kind, exchanges in kinds.items():
        stats = CacheStats.of(exchanges)
        ratio = stats.read_share / stats.perfect_share if stats.perfect_share else 1.0
        rows.append({"bench": "cache_cli", "path": path, "kind": kind + "s", "requests": stats.requests,
                     "input": stats.input_tokens, "cache_read": stats.cache_read, "cache_write": stats.cache_write,
                     "share": round(stats.read_share, 4), "perfect_share": round(stats.perfect_share, 4),
                     "ratio": round(ratio, 4)})
    return rows


def run(path: str, turns: int, lines: int, claude: str) -> list[dict]:
    with FakeModelServer(api_keys=(TOKEN, "test-key"), chunk_tokens=64) as server, \
            tempfile.TemporaryDirectory() as state:
        if path == "claudecode":
            with claude_login(server):
                connection = connect_cli("claudecode", executable=claude, timeout=300, state_dir=state)
                with connection:
                    kinds = replay(connection, server, turns, lines, "mcp__everchat__")
        else:
            with AnthropicConnection("test-key", server.base_url) as connection:
                kinds = replay(connection, server, turns, lines, "")
        if server.errors:
            raise RuntimeError(f"the fake model server failed: {server.errors[0][1]}")
        return figures(path, kinds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--lines", type=int, default=120, help="view lines (about 300 bytes each) at the start")
    parser.add_argument("--path", choices=("claudecode", "api", "both"), default="both")
    parser.add_argument("--claude", default=str(CLAUDE), help="the claude binary (default: the pinned one)")
    args = parser.parse_args()
    if args.path != "api" and not Path(args.claude).exists():
        raise SystemExit(f"{args.claude} is missing: run `npm ci --prefix tools/clis`")
    for path in (("claudecode", "api") if args.path == "both" else (args.path,)):
        for row in run(path, args.turns, args.lines, args.claude):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
