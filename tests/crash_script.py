"""A scripted conversation through the production persistence, for the crash-point walk.

    python tests/crash_script.py CHAT [--crash KIND:K] [--cut KEY:TEXT]

It writes what the log writer and `Planning` write, with their own code: messages and
notes through `Chat` (the store, `open_writer_store`, `Planning`), every compaction built
at once with a text fixed by its node, a reply streamed as two drafts (`save_draft`, as the
log writer saves the turn runner's) then logged, and the usage figures (`save_usage`).
Run again, it picks up where the chat is: keyed appends are idempotent, a reply whose key
is logged (or whose draft a crash left, logged by the open, R37) is not streamed again.

`--crash KIND:K` arms the test-only crash point (actors/folder/_crash.py): the process ends
right after its K-th write of that kind. Each acknowledged append prints one JSON line
`{"ack": KEY, "ids": [...]}`; the last line is `{"counts": {...}}`, the writes of each kind.
`--cut KEY:TEXT` logs that reply as a crash after its draft TEXT would have (the reference
of a draft crash point).

Builds follow one canonical order (the smallest running node first, everything built
before the next message), so the chat after each message is a function of the log alone,
whatever order a crash and its recovery started the compactions in.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_world import FakeClock  # noqa: E402

from everchat.actors.session.local import Chat  # noqa: E402
from everchat.actors.folder.drafts import save_draft  # noqa: E402
from everchat.actors.tree import Budget, name  # noqa: E402
from everchat.actors.folder import ChatStore, _crash  # noqa: E402
from everchat.actors.turns.turn import incomplete_text  # noqa: E402
from everchat.actors.folder.usage import Tally, UsageTotals, save_usage  # noqa: E402

BUDGET = Budget(ceiling=1400, floor=700, cceiling=600, cfloor=300, jobs=3)
TURNS = 10
CHECKPOINT_BYTES = 3_000  # small, so the walk meets index checkpoints too


def conversation() -> list[tuple]:
    """The steps: ("note" | "user", key, text), ("reply", key, turn, chunks), ("usage", turn)."""
    steps: list[tuple] = []
    for n in range(TURNS):
        if n % 4 == 3:
            steps.append(("note", f"note-{n}", f"note {n}: " + "the basalt ledger " * (8 + 9 * n)))
        steps.append(("user", f"user-{n}", f"question {n}: " + "where is amber? " * (2 + 11 * (n % 5))))
        chunks = (f"reply {n} begins ", "and goes on " * (3 + 13 * (n % 3)))
        steps.append(("reply", f"reply-{n}", n, chunks))
        steps.append(("usage", n))
    return steps


def summary(key: int) -> str:
    return f"summary of {name(key)} " + "s" * (key % 300)


def build_all(chat: Chat) -> None:
    """Every compaction that can start, built: the smallest running node first."""
    chat.start_all()
    while chat.planner.running:
        key = min(chat.planner.running)
        chat.built(key, summary(key))


def ack(key: str, ids: list[int]) -> None:
    print(json.dumps({"ack": key, "ids": ids}), flush=True)


def run(chat_dir: Path, cut: tuple[str, str] | None = None) -> None:
    """The conversation (resumed where the folder stops), with small index checkpoints;
    ChatStore's own setting is put back after, so a test can call it in process."""
    default, ChatStore.CHECKPOINT_BYTES = ChatStore.CHECKPOINT_BYTES, CHECKPOINT_BYTES
    try:
        _run(chat_dir, cut)
    finally:
        ChatStore.CHECKPOINT_BYTES = default


def _run(chat_dir: Path, cut: tuple[str, str] | None) -> None:
    with Chat.open(chat_dir, create=True, budget=BUDGET, clock=FakeClock()) as chat:
        logged = {chat.store.message(i).key for i in range(chat.messages)}
        build_all(chat)
        for step in conversation():
            if step[0] in ("note", "user"):
                kind, key, text = step
                ids, _ = chat.add(kind, text, key=key)
                ack(key, ids)
            elif step[0] == "reply":
                _, key, turn, chunks = step
                text, meta = "".join(chunks), {"turn": turn}
                if cut is not None and cut[0] == key:
                    text, meta = incomplete_text(cut[1], "crashed"), {"turn": turn, "incomplete": "crashed"}
                elif key not in logged:
                    save_draft(chat_dir, key, chunks[0], meta)
                    save_draft(chat_dir, key, text, meta)
                ids, _ = chat.add("everchat", text, key=key, meta=meta)
                save_draft(chat_dir, None, "", None)
                ack(key, ids)
            else:
                turn = step[1]
                totals = UsageTotals()
                totals.role("turns").add(Tally(input=100 * (turn + 1), output=10 * (turn + 1), calls=turn + 1))
                save_usage(chat_dir, totals)
                continue
            build_all(chat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("chat", type=Path)
    parser.add_argument("--crash", default=None, help="KIND:K")
    parser.add_argument("--cut", default=None, help="KEY:TEXT")
    args = parser.parse_args(argv)
    if args.crash:
        kind, _, k = args.crash.partition(":")
        _crash.arm(kind, int(k))
    run(args.chat, tuple(args.cut.split(":", 1)) if args.cut else None)
    print(json.dumps({"counts": _crash.counts()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
