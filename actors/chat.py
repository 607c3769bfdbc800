"""One chat in one process: the log store and the planner, without sockets.

The one-shot commands and the tests use `Chat`; the actors split the same work
between the log writer (the store) and the planner (`Planning`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from everchat.actors.memory import Budget, Step
from everchat.actors.planning import ZOOM_PAGE_BYTES, Planning, ZoomError
from everchat.actors.store import ChatStore

__all__ = ["Chat", "ZoomError", "ZOOM_PAGE_BYTES"]


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
        store = ChatStore.open(path, create=create, writer=writer, clock=clock)
        try:
            return cls.recover(store, budget, writer)
        except BaseException:
            store.close()
            raise

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
        return ids, self.plan(ids)

    def add_many(self, items: Iterable) -> tuple[list[list[int]], list[Step]]:
        """Group commit (issue 2): many messages, one fsync, then their planning."""
        self._need_writer()
        id_lists = self.store.append_messages(list(items))
        return id_lists, self.plan([i for ids in id_lists for i in ids])
