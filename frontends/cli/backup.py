"""`everchat backup FILE.zip [--with-keys]` and `everchat restore FILE.zip --data-dir NEW`.

`backup` reads the chat as a reader (R5: no lock, no byte written), so it works while the
chat runs; `restore` writes only a new folder, and only once the backup checked out
(actors/upkeep/backup/ says what goes in and what is refused).
"""

from __future__ import annotations

import argparse
import json

from everchat.frontends.cli.commands import EXIT_OK, CommandError, os_error_words
from everchat.frontends.cli.edge import say

__all__ = ["add_arguments", "run_backup", "run_restore"]


def add_arguments(backup: argparse.ArgumentParser, restore: argparse.ArgumentParser) -> None:
    """The two commands' own arguments (`--data-dir` is everyone's)."""
    from pathlib import Path

    backup.add_argument("file", type=Path, help="the ZIP file to make (it must not exist)")
    backup.add_argument("--with-keys", action="store_true",
                        help="include config/keys/ (the CURVE secret keys of the actors on other hosts)")
    restore.add_argument("file", type=Path, help="a ZIP file `everchat backup` made")


def run_backup(args: argparse.Namespace) -> int:
    """Back the chat in --data-dir up; one line on stdout with what went in."""
    from everchat.actors.upkeep.backup import BackupError, snapshot
    from everchat.actors.folder import NotAChat, StoreError

    try:
        manifest = snapshot(args.data_dir, args.file, with_keys=args.with_keys)
    except NotAChat:
        raise CommandError(f"{args.data_dir} holds no chat (pick another folder with --data-dir)") from None
    except (BackupError, StoreError) as error:
        raise CommandError(f"no backup made: {error}") from None
    except OSError as error:
        raise CommandError(f"no backup made: {os_error_words(error)}") from None
    print(f"everchat: backed up {manifest['messages']} messages, {manifest['nodes']} summaries, "
          f"{manifest['merges']} merge records and {manifest['assets']} images of {args.data_dir} "
          f"into {args.file} ({len(manifest['files']) + 1} files{', keys included' if manifest['with_keys'] else ''})")
    if manifest.get("goal"):
        print(f"everchat: the chat's goal ({manifest['goal']}) is in it; a restore brings it back paused")
    later = manifest["log_messages"] - manifest["messages"]
    if later:
        say(f"everchat: {later} newer messages were not yet planned and are left for the next backup")
    return EXIT_OK


def run_restore(args: argparse.Namespace) -> int:
    """Restore a backup into --data-dir (new or empty); the check's report as JSON."""
    from everchat.actors.upkeep.backup import RestoreRefused, restore

    try:
        report = restore(args.file, args.data_dir)
    except RestoreRefused as error:
        raise CommandError(f"restore refused, nothing written: {error}") from None
    except OSError as error:
        raise CommandError(f"restore failed, nothing written: {os_error_words(error)}") from None
    print(json.dumps({"ok": True, "restored": str(args.data_dir), **report}))
    if report.get("goal"):
        say(f"everchat: the chat's goal is restored paused (it does no work until you send a message; /halt "
            f"drops it): {report['goal']['text'][:200]}")
    return EXIT_OK
