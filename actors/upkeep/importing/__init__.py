"""Past chats from other apps, parsed: ChatGPT's and Claude's exports, Claude Code's and
Codex's session logs (`everchat import-chats`).

Each format is one module with one pure function from a file's parsed items to
`Conversation`s (STYLE 15); `read_path` finds and reads the files (streamed and parsed
once, `_stream.py`; ZIPs read in place, sizes limited; what cannot be read skipped and
said) and `plan` turns conversations into the messages to log (kinds, prefixes, dates,
keys, redaction). The command that asks and logs is
`frontends/cli/import_chats.py`.
"""

from ._chatgpt import parse_chatgpt
from ._claude import parse_claude
from ._files import MAX_BYTES, Found, Refused, default_paths, parse_bytes, parse_stream, read_path
from ._plan import (CUT_CHARS, KEY_PREFIX, Item, candidate_keys, conversation_items, head_key, imported_ids,
                    known_count, remember, source_prefix)
from ._claude_code import parse_claude_code
from ._codex import parse_codex
from ._types import APPS, ChatMessage, Conversation, SourceError

__all__ = [
    "APPS",
    "ChatMessage",
    "Conversation",
    "SourceError",
    "Found",
    "Refused",
    "parse_stream",
    "Item",
    "KEY_PREFIX",
    "CUT_CHARS",
    "candidate_keys",
    "head_key",
    "known_count",
    "MAX_BYTES",
    "parse_chatgpt",
    "parse_claude",
    "parse_claude_code",
    "parse_codex",
    "parse_bytes",
    "read_path",
    "default_paths",
    "conversation_items",
    "imported_ids",
    "remember",
    "source_prefix",
]
