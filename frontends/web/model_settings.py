"""`POST /api/settings` and `/api/me`'s `saved_models` (docs/WEB.md): the page changes the
reply model, the summary (compaction) model and each one's reasoning effort, and the
connection (`api`, or a `subscription` through the `cli` claudecode or codex, issue 13)
in the config file, the way `everchat setup` saves it (`actors.settings.read_file` and
`save_file`: the rest of the file stays as it is; keys are never written). The running
chat keeps its models until `everchat web` starts again. Private to
`everchat.frontends.web`."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from everchat.actors.settings import CLIS, CONNECTIONS, ConfigError, read_file, save_file
from everchat.actors.models import EFFORTS

__all__ = ["FIELDS", "MODEL_LIMIT", "SavingError", "check", "config_path", "running_models", "saved_models", "save"]

MODEL_LIMIT = 200
"""A model name is at most 200 characters."""
FIELDS = {"reply_model": "reply.model", "summary_model": "compaction.model",
          "reply_effort": "reply.effort", "summary_effort": "compaction.effort",
          "connection": "connection", "cli": "cli"}
"""The body's fields and the config file's settings they change."""
_ANSWER = {"connection": "connection", "cli": "cli",  # the connection first: a model may follow from it
           "reply.model": "reply", "compaction.model": "summary",
           "reply.effort": "reply_effort", "compaction.effort": "summary_effort"}
_CHOICES = {"connection": CONNECTIONS, "cli": CLIS}
_LOCK = threading.Lock()  # one read-change-write of the file at a time


class SavingError(ValueError):
    """Why a body is refused (its words go back to the page as the 400's error)."""


def _control(text: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029" for c in text)


def check(body: dict) -> dict[str, Any]:
    """The body's changes as config settings ("reply.model": …; an effort None: the
    model's own default). Refused: no field, an unknown field (API keys and base URLs
    among them), a blank, overlong or control-character model name, an effort outside
    `EFFORTS`, a connection other than api or subscription, a cli other than claudecode
    or codex. An empty model ("") is None: no model named, which `save` takes under a
    subscription only (the CLI's own default)."""
    unknown = sorted(name for name in body if name not in FIELDS)
    if any("key" in name.lower() for name in unknown):
        raise SavingError("API keys stay in the environment, never in the config file")
    if unknown:
        raise SavingError(f"no setting {unknown[0][:40]!r} here (known: {', '.join(FIELDS)})")
    if not body:
        raise SavingError("nothing to save")
    out: dict[str, Any] = {}
    for name, value in body.items():
        if name in _CHOICES:
            if not isinstance(value, str) or value not in _CHOICES[name]:
                raise SavingError(f"{name} is one of {', '.join(_CHOICES[name])}")
            out[FIELDS[name]] = value
        elif name.endswith("_model"):
            if value == "":  # no model named: the CLI's own default, under a subscription only (`save`)
                out[FIELDS[name]] = None
                continue
            if not isinstance(value, str) or not value.strip():
                raise SavingError(f"{name} is a model's name, not empty")
            if len(value) > MODEL_LIMIT:
                raise SavingError(f"{name} is at most {MODEL_LIMIT} characters")
            if _control(value):
                raise SavingError(f"{name} has a control character")
            if value != value.strip():
                raise SavingError(f"{name} starts or ends with a space")
            out[FIELDS[name]] = value
        else:
            if value in (None, ""):
                out[FIELDS[name]] = None
            elif isinstance(value, str) and value in EFFORTS:
                out[FIELDS[name]] = value
            else:
                raise SavingError(f"{name} is one of {', '.join(EFFORTS)} (or empty for the model's own default)")
    return out


def config_path(settings) -> Path:
    """The file the running settings came from (`--config`, EVERCHAT_CONFIG), else the
    home's config.toml, where `setup` saves it (a named file must exist to be loaded)."""
    return settings.config_file or Path(settings.home) / "config.toml"


def running_models(settings) -> dict[str, Any]:
    """The models in use; under a subscription a model "" is the CLI's own default."""
    return {"reply": settings.reply.model, "summary": settings.compaction.model,
            "reply_effort": settings.reply.effort, "summary_effort": settings.compaction.effort,
            "connection": settings.reply.connection,
            "cli": settings.reply.cli if settings.reply.connection == "subscription" else None}


def _from_file(settings, values: dict[str, Any]) -> dict[str, Any]:
    """The models as they will be after a restart with the same flags and environment:
    the file's, except where a flag or a variable sets one (it still wins) or the file
    names no model (the running one stays; a subscription that starts uses the CLI's own
    default)."""
    out = running_models(settings)
    sources = getattr(settings, "sources", {}) or {}
    for key, name in _ANSWER.items():
        if sources.get(key) in ("flag", "env"):
            continue
        if key.endswith(".effort"):
            out[name] = values.get(key)
        elif key == "connection":
            out[name] = values.get(key) or "api"
        elif key == "cli":  # a CLI counts under a subscription only
            out[name] = (values.get(key) or out[name]) if out["connection"] == "subscription" else None
        elif values.get(key):
            out[name] = values[key]
        elif out["connection"] == "subscription":
            out[name] = ""  # a subscription starting without a model named: the CLI's own default
    return out


def saved_models(settings) -> dict[str, Any] | None:
    """The config file's models when they differ from the running ones (None otherwise,
    or when there is no readable file)."""
    path = config_path(settings)
    try:
        if not path.exists():
            return None
        values = read_file(path)
    except (ConfigError, OSError):
        return None
    saved = _from_file(settings, values)
    return saved if saved != running_models(settings) else None


def save(settings, changes: dict[str, Any]) -> dict[str, Any]:
    """Write `changes` into the config file, keeping everything else in it; the models
    as they will be after a restart. SavingError when the file cannot be read."""
    path = config_path(settings)
    with _LOCK:
        try:
            values = read_file(path)
        except ConfigError as error:
            raise SavingError(f"{error}; fix or remove it (or run everchat setup)") from None
        values.update(changes)
        sources = getattr(settings, "sources", {}) or {}
        connection = (settings.reply.connection if sources.get("connection") in ("flag", "env")
                      else values.get("connection") or "api")
        for field, key in FIELDS.items():
            if key.endswith(".model") and key in changes and changes[key] is None and connection != "subscription":
                raise SavingError(f"{field} is a model's name, not empty")
        flagged = sources.get("cli") in ("flag", "env")
        if values.get("connection") == "subscription" and not values.get("cli") and not flagged:
            raise SavingError(f"a subscription needs its CLI: cli is one of {', '.join(CLIS)}")
        try:
            save_file(path, values)
        except (ConfigError, OSError) as error:
            raise SavingError(f"not saved: {error}") from None
    return _from_file(settings, {k: v for k, v in values.items() if v is not None})
