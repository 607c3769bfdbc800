"""Upkeep of a chat folder: backups, repairs, importing past chats (with redaction)."""
