"""`everchat repair`: bring a chat's derived files back in line with its log (issue 8).

The log (`main/`, `tree/`) is never rewritten (R2, R4): no repair edits or drops a record.
What a repair may do is what a writer may do: rebuild what is derived from the log, and
set aside (never delete) a file that cannot be read, into `damaged/`:

- the index (`index/`): rebuilt from the log, which walks and checks every record;
- `view.json`: when it disagrees with the merge records or cannot be read, set aside and
  refolded from them (R24: by the rule that made it, R42);
- `compaction-view.json`: set aside when unreadable, restarted as the view fitted (R24);
- `draft.json`: a partial reply is logged, marked incomplete (R37), or set aside when it
  cannot be read;
- leftover temporary files of a crash: removed.

Damage inside the log itself (a checksum that does not match, a record that is not one)
cannot be repaired here: the report names it, and the chat stays read-only past it.

    report = repair_chat(path)      # {"done": [...], "damage": None | "<file>: byte N: ..."}
"""

from __future__ import annotations

from pathlib import Path

from everchat.actors.folder.drafts import recover_draft
from everchat.actors.planner.planning import Planning
from everchat.actors.folder import ChatStore, CorruptRecord
from everchat.actors.folder._files import set_aside
from everchat.actors.folder._views import CVIEW_NAME, VIEW_NAME

__all__ = ["repair_chat"]


def repair_chat(path: str | Path, budget=None) -> dict:
    """Repair what a writer may repair (see the module docstring); returns what it did and
    the damage it could not repair (None when the chat is whole)."""
    path = Path(path)
    done: list[str] = []
    store = ChatStore.open(path)
    try:
        try:
            store.rebuild_index()
            done.append("rebuilt the index from the log")
            store.check()
        except CorruptRecord as damage:
            return {"done": done, "damage": str(damage)}
        try:
            recovered = recover_draft(store)
        except CorruptRecord as damage:
            return {"done": done, "damage": str(damage)}
        if recovered:
            done.append(f"logged the reply a crash cut short as message {recovered[0]}")
        try:
            Planning.recover(store, budget, writer=True)
        except CorruptRecord as damage:
            if not Path(damage.file).name == VIEW_NAME:
                return {"done": done, "damage": str(damage)}
            for name in (VIEW_NAME, CVIEW_NAME):
                if (path / name).exists():
                    moved = set_aside(path, name)
                    done.append(f"set {name} aside as {moved.relative_to(path)} ({damage.reason})")
            Planning.recover(store, budget, writer=True)
            done.append("refolded view.json from the merge records (R24)")
        return {"done": done, "damage": None}
    finally:
        store.close()
