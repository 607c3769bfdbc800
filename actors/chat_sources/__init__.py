"""Past chats from other apps, parsed: ChatGPT's and Claude's exports, Claude Code's and
Codex's session logs (`everchat import-chats`).

Each format is one module with one pure function from a file's bytes to
`Conversation`s (STYLE 15); `read_path` finds and reads the files (ZIPs in memory,
sizes limited) and `plan` turns conversations into the messages to log (kinds,
prefixes, dates, keys, redaction). The command that asks and logs is
`frontends/commands_import_chats.py`.
"""

from ._chatgpt import parse_chatgpt
from ._claude import parse_claude
from ._files import MAX_BYTES, Found, default_paths, parse_bytes, read_path
from ._plan import KEY_PREFIX, Item, conversation_items, imported_ids, remember, source_prefix
from ._claude_code import parse_claude_code
from ._codex import parse_codex
from ._types import APPS, ChatMessage, Conversation, SourceError

__all__ = [
    "APPS",
    "ChatMessage",
    "Conversation",
    "SourceError",
    "Found",
    "Item",
    "KEY_PREFIX",
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
