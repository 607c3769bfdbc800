"""The backup or restore that tests/test_backup_kill.py kills with SIGKILL (P11).

    python backup_kill_child.py backup CHAT ZIP BOUNDARY READY
    python backup_kill_child.py restore ZIP TARGET BOUNDARY READY

runs the real `snapshot` or `restore` and, at the write boundary named BOUNDARY, writes
the file READY and waits for ever (the test kills it there):

- backup `member`: the first member is written into the temporary ZIP;
- backup `synced`: the whole temporary ZIP is written and fsynced, before its rename;
- restore `member`: the first member is extracted into the temporary folder;
- restore `checked`: the whole chat is extracted and checked, before its rename.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from everchat.actors.upkeep.backup import _restore, _snapshot, restore, snapshot


def stop_here(ready: Path) -> None:
    ready.write_text("ready\n")
    threading.Event().wait()  # until the SIGKILL


def main() -> None:
    command, source, dest, boundary, ready = sys.argv[1:6]
    ready = Path(ready)
    if command == "backup" and boundary == "member":
        real_add = _snapshot._Writer.add

        def add(self, name, chunks):
            real_add(self, name, chunks)
            stop_here(ready)

        _snapshot._Writer.add = add
    elif command == "backup" and boundary == "synced":
        real_rename = _snapshot.os.rename

        def rename(src, dst):
            stop_here(ready)
            real_rename(src, dst)

        _snapshot.os.rename = rename
    elif command == "restore" and boundary == "member":
        real_read = _restore._bounded_read

        def bounded_read(zf, info, declared):
            yield from real_read(zf, info, declared)
            if info.filename != _restore.MANIFEST_NAME:
                stop_here(ready)

        _restore._bounded_read = bounded_read
    elif command == "restore" and boundary == "checked":
        real_pause = _restore._pause_goal

        def pause_goal(folder):
            done = real_pause(folder)
            stop_here(ready)
            return done

        _restore._pause_goal = pause_goal
    else:
        raise SystemExit(f"unknown command or boundary: {command} {boundary}")
    if command == "backup":
        snapshot(source, dest)
    else:
        restore(source, dest)


if __name__ == "__main__":
    main()
