"""R24/R25's recovery order where it matters most: a batch's merge record reaches the disk
before the views that fold it. A store whose k-th `append_merge` fails (the folder a crash
between the two writes leaves) must give a chat that reopens, passes the R24 check against
every record, and recovers to the view a run without the failure has."""

from __future__ import annotations

import pytest

from everchat.actors.tree import Budget
from everchat.actors.planner.planning import Planning
from everchat.actors.folder import ChatStore

BUDGET = Budget(ceiling=300, floor=150, cceiling=200, cfloor=100, jobs=2)
MESSAGES = 40


class _Crash(Exception):
    pass


class _MergeFails:
    """A ChatStore whose `fail_at`-th `append_merge` raises before writing anything."""

    def __init__(self, store: ChatStore, fail_at: int | None) -> None:
        self._store = store
        self.fail_at = fail_at
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def append_merge(self, merges, t, still_open):
        self.calls += 1
        if self.calls == self.fail_at:
            raise _Crash("the process ended before the merge record")
        return self._store.append_merge(merges, t, still_open)


def _run(path, fail_at: int | None, messages: int = MESSAGES) -> int:
    """Log and plan short notes (free leaves and parents, R11, so batches merge without a
    model) until the end or the failed merge record; returns the messages logged."""
    store = ChatStore.open(path, create=True)
    planning = Planning.recover(_MergeFails(store, fail_at), BUDGET)
    try:
        for n in range(messages):
            (i,) = store.append_message("note", f"note {n}: the tide tables for harbour {n}")
            planning.plan([i])
    except _Crash:
        pass
    finally:
        store.close()
    return n + 1


def _view(path) -> list:
    with ChatStore.open(path) as store:
        planning = Planning.recover(store, BUDGET)  # R24 at open: the view agrees with the records
        planning.verify_views()  # `check`: against every record, from the first
        return planning.planner.saved_views()[0]["view"]


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_r24_r25_a_crash_before_a_batchs_merge_record_leaves_a_chat_that_checks_and_recovers(tmp_path, fail_at):
    logged = _run(tmp_path / "crashed", fail_at)
    assert logged < MESSAGES, "the failure came before the end"
    _run(tmp_path / "reference", None, messages=logged)
    assert _view(tmp_path / "crashed") == _view(tmp_path / "reference")
