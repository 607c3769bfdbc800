"""One chat in one process: the log store and the planner, without sockets.

The one-shot commands and the tests use `Chat`; the actors split the same work
between the log writer (the store) and the planner (`Planning`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from everchat.actors.folder.drafts import load_draft, recover_draft
from everchat.actors.tree import Budget, Step
from everchat.actors.planner.planning import ZOOM_PAGE_BYTES, Planning, ZoomError
from everchat.actors.folder import ChatStore, StoreError, Transcripts
from everchat.actors.folder._chat import is_chat

__all__ = ["Chat", "ZoomError", "ZOOM_PAGE_BYTES", "LoggedButUnsaved", "open_writer_store"]


class LoggedButUnsaved(StoreError):
    """P7: the message was logged (it has ids and stays, R2), but planning it or saving the
    views failed afterwards. The next open recovers the views from the log, so the caller
    must not send it again (a retry would log it twice). `ids` and `cause` say which."""

    def __init__(self, ids: list[int], cause: BaseException) -> None:
        self.ids = list(ids)
        self.cause = cause
        which = f"message {ids[0]}" if len(ids) == 1 else f"messages {ids[0]}-{ids[-1]}"
        super().__init__(f"logged as {which}, but saving the view failed: {cause}")


def open_writer_store(path: str | Path, *, create: bool = False, clock=None) -> ChatStore:
    """Open a chat as its one writer (R5), looking before writing (P11).

    An existing chat is first opened read-only and its planner brought back in memory,
    which checks the saved view against the merge records (R24) and every record since
    the index's checkpoint: a chat the writer would refuse is refused before it wrote a
    byte (a torn line terminated, an index rebuilt). Then the writer opens it and logs a
    draft a crash left (R37, P18), so the reply lands before anything new."""
    path = Path(path)
    if is_chat(path):
        with ChatStore.open(path, writer=False, quiet=True) as reader:
            Planning.recover(reader, writer=False)
    store = ChatStore.open(path, create=create, clock=clock)
    try:
        recover_draft(store)
    except BaseException:
        store.close()
        raise
    return store


class Chat(Planning):
    """A chat folder opened for planning: the store plus the planner core.

    Open with `Chat.open`; a writer holds the folder's lock (R5), a reader never
    writes (its recovery stays in memory).
    """

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        budget: Budget | None = None,
        writer: bool = True,
        create: bool = False,
        clock=None,
    ) -> "Chat":
        """Open a chat folder and bring its planner back (R22, R24) in O(view)."""
        if writer:
            store = open_writer_store(path, create=create, clock=clock)
        else:
            store = ChatStore.open(path, create=create, writer=False, clock=clock)
        try:
            return cls.recover(store, budget, writer)
        except BaseException:
            store.close()
            raise

    def check(self) -> dict:
        """`everchat check`: every record of the log and the tree with its checksum (R2,
        R25), every referenced image (R9), the saved view against all merge records (R24),
        the draft of a reply in progress (R37) and every agent's transcript (R38, P8: a
        garbage transcript restored from a backup passed, then broke `agents`). Raises
        CorruptRecord at the first problem, naming its file and byte offset; returns the
        store's counts, and how many transcripts (`agents`) it read."""
        report = self.store.check()
        self.verify_views()
        load_draft(self.store.path)
        transcripts = Transcripts(self.store.path, writer=False)
        names = transcripts.names()
        for name in names:
            transcripts.records(name)  # reads and checks every record of it (R2, P3)
        report["agents"] = len(names)
        return report

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Chat":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(
        self,
        kind: str,
        text: str,
        *,
        key: str | None = None,
        images: Sequence[str] = (),
        meta: dict | None = None,
    ) -> tuple[list[int], list[Step]]:
        """Log one message (R1-R9) and plan it: returns its ids and the planner steps.

        A resent `key` returns the ids it got the first time and plans nothing.
        """
        self._need_writer()
        ids = self.store.append_message(kind, text, key=key, images=images, meta=meta)
        return ids, self._plan_logged(ids)

    def add_many(self, items: Iterable) -> tuple[list[list[int]], list[Step]]:
        """Group commit (issue 2): many messages, one fsync, then their planning."""
        self._need_writer()
        id_lists = self.store.append_messages(list(items))
        return id_lists, self._plan_logged([i for ids in id_lists for i in ids])

    def _plan_logged(self, ids: list[int]) -> list[Step]:
        """Plan messages that are logged already: a failure now is a LoggedButUnsaved (P7)."""
        try:
            return self.plan(ids)
        except (StoreError, OSError) as error:
            raise LoggedButUnsaved(ids, error) from error
