"""Finding and reading the files that hold past chats, within size limits, as streams.

A path is a ChatGPT or Claude export (the ZIP, or its `conversations.json`), a session
log (`.jsonl`), or a folder searched for both. A ZIP's members are read from the archive
(`zipfile`, never extracted, so no member's name ever becomes a path here); a member is
refused when it declares more than `MAX_BYTES` or when what it holds differs from what
it declares (a ZIP bomb, or a damaged file). Images a ChatGPT message names are read from
the export's members. The format is told from the content, not the file's name. With no
path, the coding agents' logs of this computer are read: `~/.claude/projects/**/*.jsonl`
and `~/.codex/sessions/**/*.jsonl`.

Every file is read as a stream and parsed once (`_stream.py`): a JSON list one
conversation at a time, a session log line by line, so memory holds one conversation,
never the whole file (performance review P4, reliability review P12). What cannot be
read is skipped and said, one line each (P12), and the rest is imported: a conversation
that is no conversation, the unreadable lines of a session log, a file of a folder or a
member of a ZIP that holds no chat. A file named alone must be a chat, and a file or
member over the limit, or whose size lies, is refused whole.
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import chain, islice
from pathlib import Path
from typing import BinaryIO

from ._chatgpt import chatgpt_conversations, looks_like_chatgpt
from ._claude import claude_conversations, looks_like_claude
from ._claude_code import claude_code_conversations, looks_like_claude_code
from ._codex import codex_conversations, looks_like_codex
from ._jsonl import read_lines
from ._stream import CHUNK, Bounded, json_list, lines
from ._types import Conversation, SourceError

__all__ = ["MAX_BYTES", "Found", "Refused", "default_paths", "read_path", "parse_bytes", "parse_stream"]

MAX_BYTES = 512 * 1024 * 1024  # a file or a ZIP member larger than this is refused
_PEEK = 5  # conversations read to tell ChatGPT's list from Claude's
_SPACE = b" \t\n\r"


class Refused(SourceError):
    """A file or ZIP member refused whole, in a folder or a ZIP too: over the size limit,
    a size that lies (a bomb), damaged. Skipping it would hide an attack or a loss."""


@dataclass(frozen=True, slots=True)
class Found:
    """One file's conversations, and where they came from (for the preview). A file of a
    folder or a member of a ZIP that holds no chat of a known format has none and says
    why in `skipped`; `notes` say what of a file was left out (a conversation that
    cannot be read, unreadable lines), one line each."""
    origin: str  # the file, or `archive.zip:member`
    conversations: list[Conversation]
    skipped: str = ""
    notes: tuple[str, ...] = ()


def default_paths(home: Path | None = None) -> list[Path]:
    """The coding agents' session folders of this computer that exist."""
    home = Path.home() if home is None else home
    return [p for p in (home / ".claude" / "projects", home / ".codex" / "sessions") if p.is_dir()]


def _first_bytes(stream: BinaryIO) -> bytes:
    """The stream's first block that is not all white space, from its first other byte
    (white space before it is read and dropped, block by block); b"" at the end."""
    while block := stream.read(CHUNK):
        block = block.lstrip(_SPACE)
        if block:
            return block
    return b""


def parse_stream(stream: BinaryIO, name: str, notes: list[str]) -> list[Conversation]:
    """The conversations of one file, read once from `stream`, its format told from its
    content: a JSON list of ChatGPT or Claude conversations, or a Claude Code or Codex
    session log. What of it cannot be read goes to `notes`; SourceError when it is none
    of the formats."""
    first = _first_bytes(stream)
    if first[:1] == b"[":
        raws = json_list(stream, name, first)
        peeked = list(islice(raws, _PEEK))
        if looks_like_chatgpt(peeked):
            return list(chatgpt_conversations(chain(peeked, raws), notes))
        if looks_like_claude(peeked):
            return list(claude_conversations(chain(peeked, raws), notes))
        if not peeked:
            return []
        raise SourceError(f"{name}: a JSON list, but not of ChatGPT or Claude conversations")
    if first[:1] == b"{":
        numbered, unreadable = read_lines(lines(stream, first))
        objects = [obj for _, obj in numbered]
        if looks_like_codex(objects[0] if objects else None):
            found = codex_conversations(numbered, Path(name).stem)
        elif looks_like_claude_code(objects):
            found = claude_code_conversations(objects, Path(name).stem)
        else:
            found = None
        if found is not None:
            if unreadable:
                notes.append(f"{unreadable} unreadable line{'s' * (unreadable != 1)}")
            return found
    if not first:
        return []
    raise SourceError(f"{name}: not a ChatGPT or Claude export, nor a Claude Code or Codex session log")


def parse_bytes(data: bytes, name: str, notes: list[str] | None = None) -> list[Conversation]:
    """`parse_stream` of bytes in hand."""
    return parse_stream(io.BytesIO(data), name, [] if notes is None else notes)


@contextmanager
def _open_file(path: Path) -> Iterator[Bounded]:
    """A regular file as a stream, refused over MAX_BYTES (by its size, then by what is read)."""
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
            raise Refused(f"{path} is {info.st_size:,} bytes, over the {MAX_BYTES:,}-byte limit; nothing was imported")
        yield Bounded(file, MAX_BYTES, f"{path} grew past the {MAX_BYTES:,}-byte limit while read; nothing was imported",
                      error=Refused)


class _Member(Bounded):
    """A ZIP member read within its declared size; a damaged one is refused in words."""

    def read(self, n: int = CHUNK) -> bytes:
        try:
            return super().read(n)
        except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, RuntimeError, zlib.error) as error:
            raise Refused(f"{self.where} cannot be read: {error}") from None


@contextmanager
def _open_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> Iterator[_Member]:
    if info.file_size > MAX_BYTES:
        raise Refused(f"{where} declares {info.file_size:,} bytes, over the {MAX_BYTES:,}-byte limit; "
                      "nothing was imported")
    try:
        raw = archive.open(info)
    except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError) as error:
        raise Refused(f"{where} cannot be read: {error}") from None
    with raw:
        member = _Member(raw, info.file_size, f"{where} holds more than the {info.file_size:,} bytes it declares "
                         "(a ZIP bomb?); nothing was imported", exact=info.file_size,
                         short=f"{where} holds {{seen:,}} bytes but declares {info.file_size:,}; nothing was imported",
                         error=Refused)
        member.where = where
        yield member


def _with_images(archive: zipfile.ZipFile, path: Path, conversations: list[Conversation]) -> list[Conversation]:
    """ChatGPT's messages with the images their pointers name, read from the export's
    members (`file-…`/`file_…` followed by `-name.ext` or `.ext`); an image over R9's
    5 MB is left out (the text still says `[image]`)."""
    from everchat.actors.folder import MAX_ASSET_BYTES

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
                    with _open_member(archive, info, f"{path}:{info.filename}") as stream:
                        images.append(stream.read(info.file_size + 1) + stream.read())
            messages.append(replace(message, images=message.images + tuple(images)) if images else message)
        out.append(replace(conv, messages=tuple(messages)))
    return out


def _read_zip(path: Path) -> list[Found]:
    """Each `conversations.json` and `*.jsonl` member; one that holds no chat is skipped
    and said (P12: one such member refused the whole ZIP)."""
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
            notes: list[str] = []
            try:
                with _open_member(archive, info, where) as stream:
                    conversations = parse_stream(stream, where, notes)
            except Refused:
                raise
            except SourceError as error:
                found.append(Found(where, [], str(error)))
                continue
            found.append(Found(where, _with_images(archive, path, conversations), notes=tuple(notes)))
    if not found:
        raise SourceError(f"{path} holds no conversations.json (a ChatGPT or Claude export has one)")
    if all(one.skipped for one in found):
        raise SourceError(f"{path} holds no chat: {found[0].skipped}")
    return found


def _read_file(path: Path, *, alone: bool) -> Found:
    """One file's conversations. In a folder (not `alone`), a file that is not a chat of a
    known format is skipped (a folder may hold other `.jsonl` files); one over the size
    limit is still refused."""
    notes: list[str] = []
    try:
        with _open_file(path) as stream:
            return Found(str(path), parse_stream(stream, str(path), notes), notes=tuple(notes))
    except Refused:
        raise
    except SourceError as error:
        if alone:
            raise
        return Found(str(path), [], str(error))


def read_path(path: Path) -> list[Found]:
    """Every conversation under `path` (a ZIP, a JSON or JSONL file, or a folder searched
    for `conversations.json` and `*.jsonl`), file by file in name order. A file named
    alone must be a chat (SourceError otherwise); in a folder, others are skipped."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and (p.suffix == ".jsonl" or p.name == "conversations.json"))
        return [_read_file(p, alone=False) for p in files]
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    if zipfile.is_zipfile(path):
        return _read_zip(path)
    return [_read_file(path, alone=True)]
