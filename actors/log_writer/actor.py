"""The log writer actor: the only owner of the chat folder (R4, R5).

A thin shell around `ChatStore`. Every other actor asks it to append and to read;
appends are idempotent by key, so a retried ask never logs twice. After each
append's fsync it tells the planner the new messages' lines (a reliable tell: the
planner must see every message) and publishes one `MessageLogged` event per
append for whoever else listens. It also adds up the model calls' token usage and
failed compaction calls in usage.json (actors/folder/usage.py), saved at most once a second
while reports keep coming, and when it stops. The agents' transcripts (`agents/NAME/`,
R38) are written here too, and only here (`AppendTranscript`), and so is the chat's goal
(`goal.json`, issue 13: `SaveGoal`, `LoadGoal`).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from everchat.actors.session.local import open_writer_store
from everchat.actors.folder.drafts import save_draft
from everchat.actors.turns.goals import Goal, load_goal, save_goal
from everchat.actors.planner.planning import records_after
from everchat.actors.folder import ChatStore, CorruptRecord, Transcripts
from everchat.actors.folder.usage import ROLES, Tally, UsageNotSaved, UsageTotals, load_usage, save_usage
from everchat.transport import Actor, ActorStopped, TransportError, schema

__all__ = ["LogWriter"]

log = logging.getLogger("everchat.log_writer")

_RECORDS_BATCH = 256  # transcript records per reply at most
_RECORDS_BYTES = 4 * 1024 * 1024  # and about this much text (a char counted as 4 bytes): under MAX_FRAME
_USAGE_SECONDS = 1.0  # usage.json is replaced at most this often while reports keep coming


class LogWriter(Actor):
    """Owns the chat folder; its `on_*` handlers run in the actor's own thread."""

    def __init__(self, path: str | Path, planner: str = "planner") -> None:
        super().__init__()
        self.path = Path(path)
        self.planner = planner
        self.store: ChatStore | None = None
        self.transcripts: Transcripts | None = None
        self.usage = None
        self._usage_dirty = False
        self._usage_saved = -_USAGE_SECONDS
        self._usage_timer: threading.Timer | None = None
        self._usage_warned = False  # P19: a failing usage.json is said once, not per report

    def on_start(self) -> None:
        """Runs in the actor's thread before any message. Opening fails loudly
        (ChatLocked names the owner, CorruptRecord the file and offset); the
        supervisor sees the failure and does not retry a locked folder forever."""
        super().on_start()
        # Looks before it writes (P11, R24) and logs a reply a crash cut short (R37).
        self.store = open_writer_store(self.path, create=True)
        self.transcripts = Transcripts(self.path, writer=True)  # under the store's lock (R5)
        try:
            self.usage = load_usage(self.path)
        except ValueError as error:  # figures only: the chat opens, counting from zero
            log.error("%s: %s; usage is counted from zero", self, error)
            self.usage = UsageTotals()

    def on_stop(self) -> None:
        """Runs in the actor's thread after the last message: saves the usage it held
        back, then releases the lock."""
        if self._usage_timer is not None:
            self._usage_timer.cancel()
        if self.store is not None:
            try:
                self._save_usage()
            finally:
                self.store.close()
        super().on_stop()

    # -- appends -------------------------------------------------------------------

    def on_append(self, msg: schema.Append, delivery) -> schema.Appended:
        before = self.store.message_count
        ids = self.store.append_message(msg.kind, msg.text, key=msg.key, images=msg.images, meta=msg.meta,
                                         date=msg.date)
        self._announce(ids, before)
        return schema.Appended(ids=ids)

    def on_append_many(self, msg: schema.AppendMany, delivery) -> schema.AppendedMany:
        before = self.store.message_count
        items = [(item.kind, item.text, item.key, item.images, item.meta, item.date) for item in msg.items]
        id_lists = self.store.append_messages(items)
        self._announce([i for ids in id_lists for i in ids], before)
        return schema.AppendedMany(ids=id_lists)

    def _announce(self, ids: list[int], before: int) -> None:
        new = [i for i in ids if i >= before]
        if not new:
            return  # a resent key: announced the first time
        lines = [self.store.message_line(i) for i in new]
        try:
            self.node.tell(self.planner, schema.Logged(first=new[0], lines=lines))
        except ActorStopped as error:
            # The chat is closing and the planner stopped first (P10): the message is
            # logged, and the next planner plans it from the log as it starts (R22).
            log.info("%s: messages %d ... %d logged while %s is stopped (%s); planned at the next start",
                     self, new[0], new[-1], self.planner, error)
        self.node.publish("logged", schema.MessageLogged(i=new[-1], line_bytes=len(lines[-1].encode())))

    # -- reads -----------------------------------------------------------------------

    def on_read_message(self, msg: schema.ReadMessage, delivery) -> schema.MessageRecord:
        record = self.store.message(msg.i)
        return schema.MessageRecord(
            i=record.i,
            kind=record.kind,
            text=record.text,
            size=record.size,
            date=record.date,
            images=list(record.images),
            meta=record.meta,
        )

    def on_read_nodes(self, msg: schema.ReadNodes, delivery) -> schema.NodeTexts:
        return schema.NodeTexts(texts=[self.store.node(l, i) for l, i in msg.nodes])

    def on_load_state(self, msg: schema.LoadState, delivery) -> schema.ChatState:
        view, cview = self.store.load_views()
        first, records = records_after(self.store, view)
        records = [(list(merges), t, still_open) for merges, t, still_open in records]
        return schema.ChatState(messages=self.store.message_count, view=view, cview=cview, records=records,
                                first=first)

    def on_count_messages(self, msg: schema.CountMessages, delivery) -> schema.MessageCount:
        return schema.MessageCount(messages=self.store.message_count)

    # -- the planner's saves ------------------------------------------------------------

    def on_save_nodes(self, msg: schema.SaveNodes, delivery) -> schema.Ack:
        self.store.append_nodes(msg.nodes)
        return schema.Ack()

    def on_save_merge(self, msg: schema.SaveMerge, delivery) -> schema.Ack:
        self.store.append_merge(msg.merges, msg.t, msg.open)
        return schema.Ack()

    def on_save_views(self, msg: schema.SaveViews, delivery) -> schema.Ack:
        self.store.save_views(msg.view, msg.cview)
        return schema.Ack()

    # -- usage (actors/folder/usage.py) ----------------------------------------------------------

    def on_record_usage(self, msg: schema.RecordUsage, delivery) -> None:
        """Add one report to the totals; a report that is not one is logged and dropped."""
        if msg.role not in ROLES:
            log.warning("%s: usage for an unknown role %r from %s, dropped", self, msg.role, delivery.sender)
            return
        try:
            tally = Tally.from_dict({name: getattr(msg, name) for name in Tally().to_dict()}, "RecordUsage")
        except ValueError as error:
            log.warning("%s: a bad usage report from %s, dropped: %s", self, delivery.sender, error)
            return
        self.usage.role(msg.role).add(tally)
        self._usage_dirty = True
        wait = self._usage_saved + _USAGE_SECONDS - time.monotonic()
        if wait <= 0:
            self._save_usage()
        elif self._usage_timer is None:
            self._usage_timer = threading.Timer(wait, self._tick)
            self._usage_timer.daemon = True
            self._usage_timer.start()

    def _tick(self) -> None:
        """Runs in the timer's thread."""
        try:
            self.node.tell(self.name, schema.Tick())
        except TransportError as error:  # stopping: on_stop saves what is left
            log.info("%s: no tick for usage.json (%s)", self, error)

    def on_tick(self, msg: schema.Tick, delivery) -> None:
        """The usage it held back is due."""
        self._usage_timer = None
        self._save_usage()

    def _save_usage(self) -> None:
        """P19: usage.json that cannot be replaced costs the figures only, never the chat:
        said once (log and a notice to the front ends), kept in memory and tried again at
        the next report or at stop."""
        if not self._usage_dirty:
            return
        self._usage_saved = time.monotonic()
        try:
            save_usage(self.path, self.usage)
        except UsageNotSaved as error:
            if not self._usage_warned:
                self._usage_warned = True
                log.info("%s: %s; the usage figures are kept in memory and saved when it can be", self, error)
                self.node.publish("turn", schema.Notice("warning", f"usage figures not saved: {error}"))
            return
        self._usage_dirty = False
        self._usage_warned = False

    # -- the turn runner's drafts and the front ends' images (R9, R37) -------------------

    def on_save_draft(self, msg: schema.SaveDraft, delivery) -> schema.Ack:
        save_draft(self.store.path, msg.key, msg.text, msg.meta)
        return schema.Ack()

    # -- the chat's goal (issue 13, actors/turns/goals.py) ---------------------------------------

    def on_save_goal(self, msg: schema.SaveGoal, delivery) -> schema.Ack:
        """Replace goal.json (atomically), or remove it."""
        save_goal(self.store.path, None if msg.goal is None else Goal.from_record(msg.goal, "SaveGoal"))
        return schema.Ack()

    def on_load_goal(self, msg: schema.LoadGoal, delivery) -> schema.GoalState:
        """The saved goal. A goal.json that is not one is said (log and notice) and read as
        no goal: it never keeps the chat from opening."""
        try:
            goal = load_goal(self.store.path)
        except CorruptRecord as error:
            log.error("%s: %s; the chat has no goal", self, error)
            self.node.publish("turn", schema.Notice("warning", f"the saved goal was not read: {error}"))
            return schema.GoalState(goal=None)
        return schema.GoalState(goal=goal.to_record() if goal else None)

    def on_put_asset(self, msg: schema.PutAsset, delivery) -> schema.AssetPut:
        return schema.AssetPut(digest=self.store.put_asset(msg.data))

    def on_read_asset(self, msg: schema.ReadAsset, delivery) -> schema.AssetData:
        return schema.AssetData(data=self.store.asset(msg.digest))

    # -- the agents' transcripts (R38, actors/folder/_transcripts.py) ---------------------

    def on_append_transcript(self, msg: schema.AppendTranscript, delivery) -> schema.Appended:
        """One record of an agent's transcript, fsynced before the answer; idempotent by key."""
        ids = self.transcripts.append(msg.agent, msg.kind, msg.text, msg.key, msg.meta)
        return schema.Appended(ids=ids)

    def on_read_transcript(self, msg: schema.ReadTranscript, delivery) -> schema.TranscriptPage:
        """R35's zoom("Name"): one page of the transcript, `i kind: text` per record."""
        text, pages = self.transcripts.page(msg.agent, msg.page)
        return schema.TranscriptPage(agent=msg.agent, text=text, page=msg.page, pages=pages)

    def on_read_transcript_records(self, msg: schema.ReadTranscriptRecords, delivery) -> schema.TranscriptRecords:
        """The records from `first` on, in batches of at most `_RECORDS_BATCH` records and
        about `_RECORDS_BYTES` of text (at least one record), so a reply fits a frame."""
        records = self.transcripts.records(msg.agent, msg.first)
        batch, size = [], 0
        for record in records[:_RECORDS_BATCH]:
            if batch and size + len(record.text) * 4 > _RECORDS_BYTES:
                break
            batch.append(record)
            size += len(record.text) * 4
        return schema.TranscriptRecords(agent=msg.agent, records=[r.to_dict() for r in batch],
                                        more=len(records) > len(batch))

    def on_list_transcripts(self, msg: schema.ListTranscripts, delivery) -> schema.TranscriptList:
        return schema.TranscriptList(agents=self.transcripts.names())
