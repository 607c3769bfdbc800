"""Finding and reading the files that hold past chats, within size limits.

A path is a ChatGPT or Claude export (the ZIP, or its `conversations.json`), a session
log (`.jsonl`), or a folder searched for both. A ZIP's members are read in memory
(`zipfile`, never extracted, so no member's name ever becomes a path here); a member is
refused when it declares more than `MAX_BYTES` or when what it holds differs from what
it declares (a ZIP bomb, or a damaged file). Images a ChatGPT message names are read from
the export's members. The format is told from the content, not
the file's name. With no path, the coding agents' logs of this computer are read:
`~/.claude/projects/**/*.jsonl` and `~/.codex/sessions/**/*.jsonl`.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from ._chatgpt import looks_like_chatgpt, parse_chatgpt
from ._claude import looks_like_claude, parse_claude
from ._claude_code import looks_like_claude_code, parse_claude_code
from ._codex import looks_like_codex, parse_codex
from ._types import Conversation, SourceError

__all__ = ["MAX_BYTES", "Found", "default_paths", "read_path", "parse_bytes"]

MAX_BYTES = 512 * 1024 * 1024  # a file or a ZIP member larger than this is refused
_READ = 1 << 20


@dataclass(frozen=True, slots=True)
class Found:
    """One file's conversations, and where they came from (for the preview). A file of a
    folder that holds no chat of a known format has none and says why in `skipped`."""
    origin: str  # the file, or `archive.zip:member`
    conversations: list[Conversation]
    skipped: str = ""


def default_paths(home: Path | None = None) -> list[Path]:
    """The coding agents' session folders of this computer that exist."""
    home = Path.home() if home is None else home
    return [p for p in (home / ".claude" / "projects", home / ".codex" / "sessions") if p.is_dir()]


def parse_bytes(data: bytes, name: str) -> list[Conversation]:
    """The conversations of one file's bytes, its format told from its content: a JSON
    list of ChatGPT or Claude conversations, or a Claude Code or Codex session log.
    SourceError when it is none of them."""
    head = data.lstrip()[:1]
    if head == b"[":
        try:
            loaded = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as error:
            raise SourceError(f"{name}: not JSON ({error})") from None
        if looks_like_chatgpt(loaded):
            return parse_chatgpt(data)
        if looks_like_claude(loaded):
            return parse_claude(data)
        if loaded == []:
            return []
        raise SourceError(f"{name}: a JSON list, but not of ChatGPT or Claude conversations")
    if head == b"{":
        if looks_like_codex(data):
            return parse_codex(data, Path(name).stem)
        if looks_like_claude_code(data):
            return parse_claude_code(data, Path(name).stem)
    if not data.strip():
        return []
    raise SourceError(f"{name}: not a ChatGPT or Claude export, nor a Claude Code or Codex session log")


def _read_file(path: Path) -> bytes:
    """A regular file's bytes, refused over MAX_BYTES (by its size, then by what is read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except OSError as error:
        raise SourceError(f"cannot read {path}: {error.strerror or error}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SourceError(f"{path} is not a regular file")
        if info.st_size > MAX_BYTES:
            raise SourceError(f"{path} is {info.st_size:,} bytes, over the {MAX_BYTES:,}-byte limit; nothing was imported")
        data = file.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise SourceError(f"{path} grew past the {MAX_BYTES:,}-byte limit while read; nothing was imported")
    return data


def _zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> bytes:
    if info.file_size > MAX_BYTES:
        raise SourceError(f"{where} declares {info.file_size:,} bytes, over the {MAX_BYTES:,}-byte limit; "
                          "nothing was imported")
    chunks, total = [], 0
    try:
        with archive.open(info) as member:
            while block := member.read(_READ):
                total += len(block)
                if total > info.file_size or total > MAX_BYTES:
                    raise SourceError(f"{where} holds more than the {info.file_size:,} bytes it declares "
                                      "(a ZIP bomb?); nothing was imported")
                chunks.append(block)
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, RuntimeError) as error:
        raise SourceError(f"{where} cannot be read: {error}") from None
    if total != info.file_size:
        raise SourceError(f"{where} holds {total:,} bytes but declares {info.file_size:,}; nothing was imported")
    return b"".join(chunks)


def _with_images(archive: zipfile.ZipFile, path: Path, conversations: list[Conversation]) -> list[Conversation]:
    """ChatGPT's messages with the images their pointers name, read from the export's
    members (`file-…`/`file_…` followed by `-name.ext` or `.ext`); an image over R9's
    5 MB is left out (the text still says `[image]`)."""
    from everchat.actors.store import MAX_ASSET_BYTES

    members = {}
    for info in archive.infolist():
        if not info.is_dir():
            members.setdefault(info.filename.rsplit("/", 1)[-1].split(".", 1)[0], info)

    def member(pointer: str) -> zipfile.ZipInfo | None:
        exact = members.get(pointer)
        if exact is not None:
            return exact
        return next((info for name, info in members.items() if name.startswith(pointer + "-")), None)

    out = []
    for conv in conversations:
        messages = []
        for message in conv.messages:
            images = []
            for pointer in message.pointers:
                info = member(pointer)
                if info is not None and info.file_size <= MAX_ASSET_BYTES:
                    images.append(_zip_member(archive, info, f"{path}:{info.filename}"))
            messages.append(replace(message, images=message.images + tuple(images)) if images else message)
        out.append(replace(conv, messages=tuple(messages)))
    return out


def _read_zip(path: Path) -> list[Found]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise SourceError(f"{path} is not a readable ZIP: {error}") from None
    found = []
    with archive:
        for info in archive.infolist():
            base = info.filename.rsplit("/", 1)[-1]
            if info.is_dir() or not (base == "conversations.json" or base.endswith(".jsonl")):
                continue
            where = f"{path}:{info.filename}"
            conversations = parse_bytes(_zip_member(archive, info, where), where)
            found.append(Found(where, _with_images(archive, path, conversations)))
    if not found:
        raise SourceError(f"{path} holds no conversations.json (a ChatGPT or Claude export has one)")
    return found


def _in_folder(path: Path) -> Found:
    """A file found in a folder: one that is not a chat of a known format is skipped (a
    folder may hold other `.jsonl` files); one over the size limit is still refused."""
    data = _read_file(path)
    try:
        return Found(str(path), parse_bytes(data, str(path)))
    except SourceError as error:
        return Found(str(path), [], str(error))


def read_path(path: Path) -> list[Found]:
    """Every conversation under `path` (a ZIP, a JSON or JSONL file, or a folder searched
    for `conversations.json` and `*.jsonl`), file by file in name order. A file named
    alone must be a chat (SourceError otherwise); in a folder, others are skipped."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and (p.suffix == ".jsonl" or p.name == "conversations.json"))
        return [_in_folder(p) for p in files]
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    if zipfile.is_zipfile(path):
        return _read_zip(path)
    return [Found(str(path), parse_bytes(_read_file(path), str(path)))]
