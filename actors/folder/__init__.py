"""The log store: the pure core of the log writer actor (SPEC R1-R9, R22, R24, R25).

One `ChatStore` per chat folder. A writer holds the folder's OS lock (R5) and appends
messages, tree nodes and merge records, each call one `write` and one `fsync` (R4); readers
open the same folder without the lock and never write. Reads by id go through an on-disk
index and never scan the log; `check()` verifies the whole chat in one pass.

    store = ChatStore.open(path, create=True)
    ids = store.append_message("user", "hello", key="client-1")
    store.message(ids[0]).text     # 'hello'
    store.close()

The folder (R1): `main/YYYY-MM-DD.jsonl` (messages), `tree/YYYY-MM-DD.jsonl` (nodes and
merge records), `view.json`, `compaction-view.json`, `assets/<sha256>`, plus the store's own
`chat.json` (format version), `repairs.json` (torn lines terminated under R2),
`writer.lock` (R5) and `index/` (derived, rebuilt from the log when missing or wrong).
Agents' transcripts (`agents/NAME/`, R38) are `Transcripts`, which the log writer holds
beside its `ChatStore`.
"""

from ._assets import MAX_ASSET_BYTES, image_type
from ._errors import (BadInput, ChatDamaged, ChatLocked, CorruptRecord, NotAChat, ReadOnlyStore,
                      StoreBroken, StoreClosed, StoreError)
from ._cut import LogCut
from ._lock import OwnerLock
from ._records import (ECHO_KEEP_CHARS, KINDS, MAX_TEXT_BYTES, NODE_BYTES, PART_BYTES,
                       MessageRecord, clip_echo, split_text)
from ._scan import Repair
from ._store import ChatStore
from ._views import CVIEW_NAME, VIEW_NAME, view_bytes
from ._transcripts import (NoTranscript, TRANSCRIPT_KINDS, TRANSCRIPT_PAGE_BYTES, TranscriptRecord,
                           Transcripts)

__all__ = [
    "ChatStore",
    "MessageRecord",
    "OwnerLock",
    "LogCut",
    "Repair",
    "StoreError",
    "BadInput",
    "ChatDamaged",
    "CorruptRecord",
    "ChatLocked",
    "NotAChat",
    "StoreClosed",
    "StoreBroken",
    "ReadOnlyStore",
    "KINDS",
    "PART_BYTES",
    "ECHO_KEEP_CHARS",
    "NODE_BYTES",
    "MAX_TEXT_BYTES",
    "clip_echo",
    "split_text",
    "view_bytes",
    "VIEW_NAME",
    "CVIEW_NAME",
    "MAX_ASSET_BYTES",
    "image_type",
    "Transcripts",
    "TranscriptRecord",
    "NoTranscript",
    "TRANSCRIPT_KINDS",
    "TRANSCRIPT_PAGE_BYTES",
]
