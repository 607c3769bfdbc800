"""R24 at open: the saved view must agree with the merge records, or the chat stops.

`view.json` is written by the planner and never recomputed (R22), but it must equal the
view the merge records fold to (R24, R25). A view edited or damaged into another valid
cover would otherwise be used silently by every command and built on by writers.

Refolding every record at every open would cost O(history). So the check keeps a *fold
checkpoint*, `index/fold.json`: the records' fold after the first K of them,
`{"v": 1, "merges": K, "t": T, "open": bool, "view": [[l, i], ...]}`. Opening folds only
the records after it (those since the last open, as a rule) and compares. The checkpoint is
derived, like the rest of `index/`: when the comparison fails from it, the check refolds
from the first record to tell a bad checkpoint (rebuilt, with a warning) from a bad view
(a loud error naming `view.json`). `everchat check` always refolds from the first record.

    check_saved_view(store, view, first, writer=True)      # raises CorruptRecord or returns
"""

from __future__ import annotations

import logging
from pathlib import Path

from everchat.actors.tree import PlannerError, refold
from everchat.actors.folder import CorruptRecord

__all__ = ["check_saved_view", "check_view_shape", "FOLD_VERSION"]

log = logging.getLogger("everchat.view_check")

FOLD_VERSION = 1


def _pairs(value) -> bool:
    return isinstance(value, list) and all(
        isinstance(pair, list) and len(pair) == 2 and all(type(x) is int and x >= 0 for x in pair)
        for pair in value)


def check_view_shape(view: dict, where: str) -> None:
    """A saved view is `{"version", "t", "open", "view": [[l, i], ...]}` (R1, R22), with
    `merges` from version 2 on; anything else is a CorruptRecord naming the file."""
    version = view.get("version")
    if version not in (1, 2):
        raise CorruptRecord(where, 0, f"a view of version {version!r}; this Everchat reads versions 1 and 2")
    t, still_open, lines = view.get("t"), view.get("open"), view.get("view")
    if type(t) is not int or t < 0 or type(still_open) is not bool or not _pairs(lines):
        raise CorruptRecord(where, 0, "not a saved view: it needs t (a count), open (true or false) "
                                      "and view (a list of [l, i] pairs)")
    merges = view.get("merges")
    if version == 2 and (type(merges) is not int or merges < 0):
        raise CorruptRecord(where, 0, f"a version 2 view needs merges (a count), not {merges!r}")


def _fold_shape(fold) -> bool:
    return (isinstance(fold, dict) and fold.get("v") == FOLD_VERSION and type(fold.get("merges")) is int
            and fold["merges"] >= 0 and type(fold.get("t")) is int and type(fold.get("open")) is bool
            and _pairs(fold.get("view")))


def _fold(store, upto: int, start: dict | None) -> tuple[int, list, bool]:
    """The fold of the first `upto` merge records, from `start` (a checkpoint) or from the
    empty chat. A record that does not fold is a CorruptRecord at its own file and offset."""
    begin = start["merges"] if start else 0
    records = store.merge_records_at(first=begin)[: upto - begin]
    lines, t, still_open = (start["view"], start["t"], start["open"]) if start else ([], 0, False)
    try:
        return refold(records, lines, t, still_open)
    except PlannerError as error:
        n = getattr(error, "record", None)
        if n is None or start is not None:
            raise
        _, _, _, file, offset = records[n]
        raise CorruptRecord(str(file), offset, f"this merge record does not fold into the view: {error} "
                                               "(R24, R25)") from None


def _expected(fold: tuple[int, list, bool], view: dict) -> bool:
    """Does the saved view equal the fold plus the leaves of the messages after its last
    record (each appended without a batch, R17: a batch would have logged a record)?"""
    t, lines, still_open = fold
    if t > view["t"] or (t < view["t"] and still_open):
        return False
    expected = [list(pair) for pair in lines] + [[0, leaf] for leaf in range(t, view["t"])]
    return expected == view["view"] and still_open == view["open"]


def check_saved_view(store, view: dict | None, first: int, *, writer: bool, full: bool = False) -> None:
    """R24: `view` (view.json as loaded; None when missing) folds the first `first` merge
    records; it must equal their fold. From the fold checkpoint unless `full`; a writer
    moves the checkpoint up to `first` once the view agreed."""
    if view is None:
        return
    where = str(Path(store.path) / "view.json")
    check_view_shape(view, where)
    saved = None if full else store.load_fold()
    start = saved if _fold_shape(saved) and saved["merges"] <= first else None
    fold = None
    if start is not None:
        try:
            fold = _fold(store, first, start)
        except PlannerError:
            fold = None
        if fold is None or not _expected(fold, view):
            log.log(logging.DEBUG if getattr(store, "quiet", False) else logging.WARNING,
                    "%s: the fold checkpoint disagreed with the merge records; refolding from the first",
                    Path(store.path) / "index" / "fold.json")
            start, fold = None, None
    if fold is None:
        try:
            fold = _fold(store, first, None)
        except PlannerError as error:  # a record without a place (never from the store)
            raise CorruptRecord(where, 0, f"the merge records do not fold: {error}") from None
    if not _expected(fold, view):
        raise CorruptRecord(where, 0, "view.json disagrees with the view refolded from the merge records (R24); "
                                      "if the records are right, move view.json aside and the chat refolds it")
    if writer and (start is None or start["merges"] < first):
        t, lines, still_open = fold
        store.save_fold({"v": FOLD_VERSION, "merges": first, "t": t, "open": still_open,
                         "view": [list(pair) for pair in lines]})
