"""`import-chats [PATH]…`: past chats with other AIs, logged into this one.

    everchat import-chats chatgpt-export.zip ~/.claude/projects --since 2025-01-01
    everchat import-chats --dry-run          # this computer's Claude Code and Codex logs

Sources (actors/chat_sources): ChatGPT's export (the ZIP or its conversations.json),
Claude's export (ZIP or JSON), Claude Code's session logs and Codex's; with no path, the
last two of this computer (`~/.claude/projects`, `~/.codex/sessions`). Each
conversation arrives as a note naming it, then its messages in order, each with its own
date (R1); the kinds and prefixes are chosen in `chat_sources/_plan.py` (and the
README's "Past chats"). Secrets are redacted before anything is logged
(actors/upkeep/redact.py). Tool calls and results only with `--with-tools`; thinking never
(R6).

Every file is read once, as a stream (chat_sources/_stream.py): what cannot be read (a
conversation that is no conversation, unreadable lines of a session log, a file or ZIP
member that holds no chat) is skipped and said in one line each, and the rest imported
(P12). Before a real import the command shows what it found (conversations, messages,
bytes, messages cut at about 2 MB, and an estimate of the summary calls and tokens they
cost) and asks; `--yes` skips the question, `--dry-run` stops after the preview and
writes nothing. Then it logs through the chat's actors exactly as `import` does
(`import_summarized`: batches, the pool summarizing as it goes so the view stays within
its budget, the progress bar with an ETA, Ctrl-C keeping what is logged, attached to a
running server when there is one), or, with `--log-only`, straight into the store as its
writer (`import_log_only`: no model call, the summaries left to the next run or
`everchat compact`; attached to a running server, that server summarizes as it logs).

Importing again brings only what is newer: every record's key is its source id
(`chat:<source>:<conversation>:<message>`, chat_sources/_plan.py), and before planning
the command asks the chat's key index which of the import's keys were ever logged
(`ChatStore.logged_keys`: 32 bytes a keyed message, no record read; performance review
P3), so neither a rerun nor a resume after a crash or `kill -9` logs a message twice,
however far back it was logged (the store's own key horizon covers only the latest keys).
The plan made for the preview is the one logged, unless the chat's keys changed
meanwhile (it is made again then).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from everchat.frontends.cli.commands import EXIT_OK, UsageError
from everchat.frontends.cli.safe_text import printable

__all__ = ["run_import_chats", "add_arguments", "Estimate", "estimate", "parse_since"]

_CONTEXT_BYTES = 24_000  # a compaction reads the compaction view (16-32 KB, R21), about this much
_SUMMARY_BYTES = 512  # what a call writes at most (R10)
_BYTES_PER_TOKEN = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="a ChatGPT or Claude export (ZIP or conversations.json), a Claude Code or Codex session "
                             "log, or a folder of them; none: this computer's ~/.claude/projects and ~/.codex/sessions")
    parser.add_argument("--yes", action="store_true", help="import without asking (for scripts)")
    parser.add_argument("--dry-run", action="store_true",
                        help="say what would be imported (conversations, messages, bytes, estimated summary calls and "
                             "tokens) and write nothing")
    parser.add_argument("--since", default=None, metavar="DATE",
                        help="only messages from this date on (YYYY-MM-DD, or an ISO date and time)")
    parser.add_argument("--with-tools", action="store_true",
                        help="also the other app's tool calls and their results (as notes)")
    parser.add_argument("--log-only", action="store_true",
                        help="only log (fast, no model calls): the summaries are built when the chat next runs, or by "
                             "`everchat compact`")


def parse_since(text: str | None) -> datetime | None:
    """`--since`: a date (midnight UTC) or an ISO date and time (UTC when it has no zone)."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r} is not a date (YYYY-MM-DD) or an ISO date and time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


@dataclass
class Estimate:
    """What an import would log and cost: per app conversations and messages, bytes, and
    the summary calls (an upper bound: a leaf over 512 bytes and every parent may need
    one, R11-R12) with their tokens (each call reads about a compaction view, R21)."""
    apps: dict[str, list[int]] = field(default_factory=dict)  # app -> [conversations, messages]
    messages: int = 0
    records: int = 0  # messages once R8 cut the long ones
    bytes: int = 0
    images: int = 0
    cut: int = 0  # messages over CUT_CHARS, cut there
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def lines(self) -> list[str]:
        out = [f"  {app}: {c} conversation{'s' * (c != 1)}, {m} message{'s' * (m != 1)}"
               for app, (c, m) in self.apps.items()]
        images = f", {self.images} image{'s' * (self.images != 1)}" if self.images else ""
        out.append(f"  {self.records} records, {self.bytes:,} bytes{images}")
        if self.cut:
            from everchat.actors.upkeep.importing import CUT_CHARS

            out.append(f"  {self.cut} message{'s' * (self.cut != 1)} over {CUT_CHARS:,} characters (about 2 MB): "
                       "cut there, the rest not imported")
        out.append(f"  summaries: up to about {self.calls:,} model calls, about {self.input_tokens:,} input and "
                   f"{self.output_tokens:,} output tokens")
        return out


def estimate(plans: list[tuple[str, list]]) -> Estimate:
    """The figures of `plans` ((app, its items) per conversation)."""
    from everchat.actors.folder import NODE_BYTES, PART_BYTES

    out = Estimate()
    leaves_to_build = 0
    for app, items in plans:
        figures = out.apps.setdefault(app, [0, 0])
        figures[0] += 1
        figures[1] += len(items)
        for item in items:
            size = len(item.text.encode())
            parts = max(1, math.ceil(size / PART_BYTES))
            out.messages += 1
            out.records += parts
            out.bytes += size
            out.images += len(item.images)
            out.cut += item.cut > 0
            line = len(item.kind.encode()) + 2 + size  # "kind: text" (R11)
            leaves_to_build += parts if line > NODE_BYTES else 0
    out.calls = leaves_to_build + max(0, out.records - 1)
    out.input_tokens = out.calls * _CONTEXT_BYTES // _BYTES_PER_TOKEN + out.bytes // _BYTES_PER_TOKEN
    out.output_tokens = out.calls * _SUMMARY_BYTES // _BYTES_PER_TOKEN
    return out


_LOOK_BACK = 256  # messages read back from the end for the last imported one


def _last_imported(store) -> str | None:
    """The naming-note key of the conversation of the log's last imported record (among
    its latest messages), or None: a run interrupted inside a conversation goes on in it
    without a second naming note."""
    from everchat.actors.upkeep.importing import KEY_PREFIX, head_key

    last = store.message_count - 1
    for i in range(last, max(-1, last - _LOOK_BACK), -1):
        record = store.message(i)
        if record.key and record.key.startswith(KEY_PREFIX):
            meta = record.meta or {}
            if isinstance(meta.get("chat"), str) and isinstance(meta.get("conversation"), str):
                return head_key(meta["chat"], meta["conversation"])
            return record.key
    return None


def _known_in(store, conversations: list) -> tuple[set[str], str | None, int]:
    """The import's source ids the chat holds (from its key index, P3), the last imported
    conversation, and how many of the import's records were logged before."""
    from everchat.actors.upkeep.importing import candidate_keys, known_count, remember

    known: set[str] = set()
    for key in store.logged_keys(key for conv in conversations for key in candidate_keys(conv)):
        remember(known, key)
    return known, _last_imported(store), sum(known_count(conv, known) for conv in conversations)


def _known_before(data_dir: Path, conversations: list) -> tuple[set[str], str | None, int]:
    """`_known_in` the chat in `data_dir`, read-only (never takes the lock, R5)."""
    from everchat.actors.folder import ChatStore, NotAChat, StoreError

    if not data_dir.exists():
        return set(), None, 0
    try:
        with ChatStore.open(data_dir, writer=False, quiet=True) as store:
            return _known_in(store, conversations)
    except NotAChat:
        return set(), None, 0
    except StoreError as error:
        raise UsageError(f"cannot read the chat in {data_dir}: {error}") from None


_SAID = 20  # skipped files and notes said one line each, per path; the rest counted


def _read(paths: list[Path]) -> tuple[list, list[str]]:
    """Every conversation of `paths`, oldest first, and what was read where (what was
    skipped, one line each, P12)."""
    from everchat.actors.upkeep.importing import SourceError, read_path
    from everchat.actors.upkeep.redact import redact

    conversations, said = [], []
    for path in paths:
        try:
            found = read_path(path.expanduser())
        except SourceError as error:
            raise UsageError(redact(f"{error}")) from None  # a file name can hold a key (P6)
        lines = []
        for one in found:
            conversations.extend(one.conversations)
            if one.skipped:
                lines.append(f"skipped {one.skipped}")
            lines += [f"{one.origin}: skipped {note}" for note in one.notes]
        # Claude Code's folder names are its cwd, so what was skipped is redacted too (P6)
        said += [redact(line) for line in lines[:_SAID]]
        if len(lines) > _SAID:
            said.append(redact(f"... and {len(lines) - _SAID} more skipped in {path}"))
        count = sum(len(one.conversations) for one in found)
        said.append(redact(f"{path}: {count} conversation{'s' * (count != 1)} in {len(found)} "
                           f"file{'s' * (len(found) != 1)}"))
    far = datetime.max.replace(tzinfo=timezone.utc)
    conversations.sort(key=lambda c: c.date or far)
    return conversations, said


def _plans(conversations: list, known: set[str], last: str | None, args) -> list[tuple[str, list]]:
    """Each conversation's items to log; a message two files hold (a resumed Claude Code
    session's copies) is planned once."""
    from everchat.actors.upkeep.importing import conversation_items, remember

    known = set(known)
    out = []
    for conv in conversations:
        items = conversation_items(conv, known, last, with_tools=args.with_tools, since=args.since_moment)
        if items:
            out.append((conv.app, items))
        for item in items:
            remember(known, item.key)
    return out


def _as_items(plans: list[tuple[str, list]]) -> Iterator[tuple[int, dict]]:
    """What `import_summarized` logs: (bytes so far, the message) in order."""
    done = 0
    for _, items in plans:
        for item in items:
            done += len(item.text.encode())
            yield done, {"kind": item.kind, "text": item.text, "key": item.key, "meta": item.meta, "date": item.date,
                         "images": item.images}


def _latest(plans: list[tuple[str, list]], shown: int = 5) -> list[str]:
    """The newest conversations of the import, one line each, newest first (a preview)."""
    if not plans:
        return []
    out = ["  latest:" if len(plans) > shown else "  conversations:"]
    for app, items in sorted(plans, key=lambda plan: plan[1][-1].date or "", reverse=True)[:shown]:
        head = items[0].text if items[0].kind == "note" and not items[0].text.startswith("[") else f"{app}: …"
        out.append(printable(f"    {head.removesuffix(', imported')} ({len(items)} messages)"))
    return out


def _confirmed(what: str) -> bool:
    try:
        answer = input(f"{what} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def run_import_chats(args: argparse.Namespace) -> int:
    from everchat.actors.session.attached import server_info
    from everchat.actors.upkeep.importing import default_paths
    from everchat.frontends.cli.import_file import Count, import_log_only, import_summarized

    args.since_moment = parse_since(args.since)
    paths = list(args.paths) or default_paths()
    if not paths:
        raise UsageError("no path given, and this computer has no Claude Code (~/.claude/projects) or Codex "
                         "(~/.codex/sessions) logs; give a ChatGPT or Claude export, or a log folder")
    conversations, said = _read(paths)
    known, last, logged = _known_before(args.data_dir, conversations)
    plans = _plans(conversations, known, last, args)
    figures = estimate(plans)
    for line in said:
        print(printable(line))
    if not plans:
        print(f"nothing new to import ({logged} messages imported before)")
        return EXIT_OK
    before = f" ({logged} messages imported before are left out)" if logged else ""
    print(f"to import into {args.data_dir}{before}:")
    for line in figures.lines():
        print(line)
    for line in _latest(plans):
        print(line)
    if args.dry_run:
        print("dry run: nothing was written")
        return EXIT_OK
    if not args.yes:
        sys.stdout.flush()
        if not _confirmed(f"import {figures.messages} messages of {len(plans)} conversations?"):
            print("nothing was imported (--yes imports without asking)")
            return EXIT_OK
    count = Count("messages")

    def plan(store):
        """The preview's plan, or planned again from the chat's own keys when they changed
        since (the session holds the chat now: nothing else logs meanwhile)."""
        known_now, last_now, _ = _known_in(store, conversations)
        same = known_now == known and last_now == last
        return _as_items(plans if same else _plans(conversations, known_now, last_now, args))

    what = f"{len(plans)} conversation{'s' * (len(plans) != 1)}"
    if getattr(args, "log_only", False) and server_info(args.data_dir) is None:
        return import_log_only(args, "importing chats", figures.bytes, plan, count, lambda: count.said(what))
    return import_summarized(args, "importing chats", figures.bytes, plan, count, lambda: count.said(what))
