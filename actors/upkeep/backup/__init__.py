"""`everchat backup` and `everchat restore`: a chat folder into one ZIP and back (R1-R5).

**The snapshot is a cut, taken without the lock.** The log is append-only and every
record is fsynced before it is acknowledged (R4), so a reader can copy a consistent chat
while its writer goes on (R5: readers never lock, never write). `view.json` says how many
messages T the planner's last saved view covers and how many merge records K it folds
(R22, R24). Two cases (issue 20):

- **No view is saved while the cut is taken** (the chat is at rest, or a crash left
  messages or merge records after its saved view): the cut is the whole log, N messages
  and M merge records, with the view as saved. The restored chat recovers the records
  after the view exactly as the original does (R24), so both show the same view.
- **A view is saved meanwhile** (the chat runs): the cut is the view read first, T
  messages and K merge records, which its planner saved as one state; later messages
  are left for the next backup (the manifest's `log_messages` says how many the log held).

Then the backup holds

- `main/` up to the end of the cut's last message, byte for byte (a prefix: every offset
  stays true);
- `tree/` with every node of the cut's messages and its merge records, nothing else
  (`store.cut`, actors/folder/_cut.py);
- `view.json` **refolded** from its K records with the production fold (R24) and written
  as the planner writes it, after checking that the live file agrees; the compaction view
  when it belongs to the same T (read again while the writer is between its two renames,
  so it is the one of this view; else it is left out: R24, it restarts as the view fitted);
- `chat.json` and `repairs.json`, their positions moved to match the copied tree;
- the images (R9) the cut's messages reference, each checked against its name;
- the agents' transcripts (`agents/`) as complete lines up to their size at the cut;
- `usage.json` and `config/` (devices, settings), but never `config/keys/` (the CURVE
  secret keys) unless `with_keys`;
- `goal.json` (issue 13, docs/GOALS.md), the chat's goal as last saved (it may be newer
  than the cut); a file that is not a goal is left out and said. The restore writes it
  back **paused**, "restored from a backup" (`goals.restored`): a restored chat never
  starts working on its own;
- `everchat-backup.json`, the manifest (version 2; `restore` reads 1 too): counts (and
  under `view` the saved view's T and K), the goal's state (or null), and each member's
  size and SHA-256.

Never in it: the locks, `run/` (sockets, run file, actor logs), `index/` (derived: the
restored chat's first open rebuilds it), `draft.json` (a reply past the cut), `damaged/`,
temporary files, anything outside the chat folder.

**A restore writes nothing it has not checked.** `restore` refuses a target that is not an
empty or missing folder, and a ZIP with absolute or `..` names, symlinks or other special
members, duplicate names, names a backup of its kind never holds (a lock, `run/`,
`index/`, a draft, `config/keys/` in a backup made without `with_keys`, any file of
`agents/` but a transcript and its repairs.json: whatever its sums say, P8; `goal.json` in a
version 1 backup), members the manifest does not
list (or listed ones missing), a `goal.json` that is not a goal, a
member larger than the manifest says or than the space left (a zip bomb: members are
read in chunks and the read stops past the declared size), or a wrong sum. It extracts
into a temporary folder beside the target, runs the same check as `everchat check`
(every record, the view against every merge record, R24, every agent's transcript),
compares the counts with the
manifest, and only then renames the folder into place. On any failure it removes the
temporary folder: the target is as it was.

**A killed run leaves its temporary behind, and the next run removes it (P11).** Nothing
can clean up after SIGKILL: `backup` leaves `.NAME.zip.tmp.PID` beside the ZIP, `restore`
its `.TARGET.restore-PID-…` folder (a whole copy of the chat) beside the target. Each
command, when it starts, removes its own temporaries of that name whose process is gone
(`_common.remove_stale`), and says so; a live process's are left alone.

    manifest = snapshot(chat_dir, "chat.zip")                  # while the chat runs or not
    report = restore("chat.zip", new_dir)                       # RestoreRefused: nothing written
"""

from ._common import BACKUP_FORMAT, BACKUP_VERSION, MANIFEST_NAME, BackupError, RestoreRefused
from ._restore import read_manifest, restore
from ._snapshot import snapshot

__all__ = ["snapshot", "restore", "read_manifest", "BackupError", "RestoreRefused", "MANIFEST_NAME",
           "BACKUP_FORMAT", "BACKUP_VERSION"]
