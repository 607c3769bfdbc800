"""`import-chats --dry-run` against the chat's size and the export's (performance review P3, P4).

Two figures the review measured: the dry run of the same 10,000-message ChatGPT export
into an empty chat and into a big one (1.30 s against 9.94 s at 1,000,000 messages: the
command read and parsed every message for its key), and the peak memory against the
export's size (795 MB for a 110 MB export: the JSON was parsed whole, twice). Each
measurement is a fresh `everchat` process, timed whole and its peak resident set read
from its own rusage (`os.wait4`: the bench's own peak is not inherited, and the big chat
is built in a child of its own). Prints one JSON line per figure.

    python tools/bench/bench_import_chats.py [--big 1000000] [--messages 10000] [--sizes 20,80]
                                             [--dir /tmp/everchat-bench-import] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["make_export", "make_chat", "measure"]

_GROUP = 5_000


def make_export(path: Path, messages: int, seed: int = 11) -> int:
    """A ChatGPT export of `messages` messages in conversations of 50 (questions and
    answers of 20 to 2,000 characters); returns its size in bytes."""
    rng = random.Random(seed)
    words = ["fern", "water", "light", "soil", "weekly", "bright", "moist", "the", "pot", "leaf", "Kyoto", "bus"]
    convs, made = [], 0
    while made < messages:
        count = min(50, messages - made)
        mapping = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
        parent, start = "root", 1_700_000_000.0 + len(convs) * 3600
        for k in range(count):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(4, 330)))[:rng.randint(20, 2000)]
            node = f"m{k}"
            mapping[node] = {"id": node, "parent": parent, "children": [], "message": {
                "id": node, "author": {"role": "user" if k % 2 == 0 else "assistant"}, "create_time": start + k,
                "content": {"content_type": "text", "parts": [text]}, "recipient": "all", "metadata": {}}}
            mapping[parent]["children"].append(node)
            parent = node
        convs.append({"title": f"Bench {len(convs)}", "create_time": start, "mapping": mapping, "current_node": parent,
                      "conversation_id": f"bench-{len(convs):06d}"})
        made += count
    path.write_text(json.dumps(convs), encoding="utf-8")
    return path.stat().st_size


def make_chat(path: Path, messages: int) -> None:
    """A chat of `messages` keyed notes (every one has a `keys.idx` entry), written with
    group commits; no tree (the key lookup reads none)."""
    from everchat.actors.folder import ChatStore

    with ChatStore.open(path, create=True) as store:
        for first in range(0, messages, _GROUP):
            store.append_messages([{"kind": "note", "text": f"note {n} of the big chat", "key": f"big:{n}"}
                                   for n in range(first, min(messages, first + _GROUP))])


def _child(argv: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one fresh process running `argv`."""
    began = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    took = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    err = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({child.returncode}): {err[-400:]}")
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return took, usage.ru_maxrss * scale


def measure(export: Path, chat: Path, repeat: int) -> tuple[float, int]:
    """Median wall time and peak RSS of `import-chats --dry-run export` into `chat`."""
    argv = [sys.executable, "-m", "everchat.frontends.cli.main", "import-chats", str(export), "--dry-run",
            "--data-dir", str(chat)]
    runs = [_child(argv) for _ in range(repeat)]
    return statistics.median(t for t, _ in runs), int(statistics.median(r for _, r in runs))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=1_000_000, help="messages of the big chat")
    parser.add_argument("--messages", type=int, default=10_000, help="messages of the export dry-run into both chats")
    parser.add_argument("--sizes", default="20,80", help="export sizes (MB, about) for the memory figure")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/everchat-bench-import"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("EVERCHAT_HOME", str(args.dir / "home"))

    big = args.dir / f"chat-{args.big}"
    if not (big / "chat.json").exists():
        subprocess.run([sys.executable, "-c", "import sys; from everchat.tools.bench.bench_import_chats import "
                        "make_chat; from pathlib import Path; make_chat(Path(sys.argv[1]), int(sys.argv[2]))",
                        str(big), str(args.big)], check=True)
    export = args.dir / f"export-{args.messages}.json"
    size = make_export(export, args.messages)
    empty_s, _ = measure(export, args.dir / "no-chat-here", args.repeat)
    big_s, _ = measure(export, big, args.repeat)
    common = {"export_messages": args.messages, "export_bytes": size, "runs": args.repeat}
    print(json.dumps({"figure": "dry_run_empty_chat_s", "value": round(empty_s, 3), **common}))
    print(json.dumps({"figure": "dry_run_big_chat_s", "value": round(big_s, 3), "chat_messages": args.big, **common}))
    print(json.dumps({"figure": "dry_run_big_over_empty", "value": round(big_s / empty_s, 2), "chat_messages": args.big,
                      **common}))

    tiny = args.dir / "export-10.json"
    make_export(tiny, 10)
    _, baseline = measure(tiny, args.dir / "no-chat-here", 1)
    print(json.dumps({"figure": "dry_run_baseline_rss_bytes", "value": baseline, "export_bytes": tiny.stat().st_size}))
    for mb in (int(x) for x in args.sizes.split(",")):
        path = args.dir / f"export-{mb}mb.json"
        size = make_export(path, mb * 1_000_000 // 1_100)  # about 1,100 bytes of JSON a message
        _, peak = measure(path, args.dir / "no-chat-here", 1)
        print(json.dumps({"figure": "dry_run_peak_rss_over_export", "value": round((peak - baseline) / size, 2),
                          "peak_rss_bytes": peak, "baseline_rss_bytes": baseline, "export_bytes": size}))


if __name__ == "__main__":
    main()
