"""Settings: the reply model and the compaction model (R33), the turn limits, the pool size.

Each setting comes from, in order of precedence: a command-line flag, an
environment variable, the config file (`$EVERCHAT_HOME/config.toml`, by default
`~/.everchat/config.toml`; `--config` or `EVERCHAT_CONFIG` name another), then the
default. API keys come only from `ANTHROPIC_API_KEY` and `OPENAI_API_KEY`: a key in
the file is an error, and no repr, log line or error shows one.

    settle_timeout = 20          # R36, seconds
    tool_rounds = 50             # tool rounds per turn
    compaction_jobs = 8          # R31, 1 to 8
    agent_jobs = 8               # R38, agents working at once, 1 to 8
    tools = "on"                 # "off": no device tools (shell, read, write, edit), R34
    search = "on"                # "off": no web tools (search, fetch), docs/SEARCH.md
    allow_local_fetch = "off"    # "on": fetch may read private and loopback addresses
    instructions = "instructions.md"   # the person's own instructions (R34), beside the file
    after_turn = "make test"     # a local command run after each turn (issue 13, docs/GOALS.md)
    connection = "api"           # "subscription": every call through a CLI's own login (issue 13)
    cli = "claudecode"           # claudecode | codex, with connection = "subscription"
    cli_executable = "/opt/bin/claude"   # default: the CLI's name on PATH
    cli_timeout = 300            # seconds one CLI call may take
    cli_concurrency = 1          # CLI calls at once, 1 to 8, shared by the chat's processes

    [reply]
    provider = "anthropic"       # anthropic | openai | openai-chat | demo
    model = "claude-sonnet-5-5"
    base_url = "https://api.anthropic.com"
    effort = "medium"            # none, minimal, low, medium, high, xhigh, max

    [compaction]
    provider = "openai-chat"     # e.g. a local server
    model = "qwen3:8b"
    base_url = "http://localhost:11434/v1"
    dummy_key = "ollama"         # sent when OPENAI_API_KEY is unset (a local server needs none)

Defaults: with `ANTHROPIC_API_KEY`, replies from Claude Sonnet and compactions from
Claude Haiku (R33); else with `OPENAI_API_KEY`, OpenAI's models; else the offline
demo. A configured provider is never swapped for another: without its key the
connection fails with `MissingKey`.

With `connection = "subscription"` every reply, agent and compaction call goes through
the CLI (`connect_cli`): no API key is read or needed, the providers, base URLs and dummy
keys are ignored, and a role's model is optional (the CLI's own default when unset).
`--demo` still wins over it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from everchat.actors.models import CLIS, EFFORTS, PROVIDERS, Connection, connect

__all__ = [
    "DEFAULT_MODELS",
    "ENV",
    "ConfigError",
    "ModelSettings",
    "Settings",
    "add_arguments",
    "config_file",
    "load",
    "read_file",
    "save_file",
]

DEFAULT_MODELS = {
    ("anthropic", "reply"): "claude-sonnet-5-5",
    ("anthropic", "compaction"): "claude-haiku-5-5",
    ("openai", "reply"): "gpt-5.5",
    ("openai", "compaction"): "gpt-5.4-mini",
    ("demo", "reply"): "demo",
    ("demo", "compaction"): "demo",
}

_MODEL_KEYS = ("provider", "model", "base_url", "effort", "dummy_key")
_CLI_KEYS = ("connection", "cli", "cli_executable", "cli_timeout", "cli_concurrency")
_TOP_KEYS = ("settle_timeout", "tool_rounds", "compaction_jobs", "instructions", "agent_jobs", "tools", "search",
             "allow_local_fetch", "after_turn") + _CLI_KEYS
KEYS = tuple(f"{role}.{key}" for role in ("reply", "compaction") for key in _MODEL_KEYS) + _TOP_KEYS

ENV = {key: "EVERCHAT_" + key.replace(".", "_").upper() for key in KEYS}
"""The environment variable of each setting, e.g. EVERCHAT_REPLY_MODEL, EVERCHAT_SETTLE_TIMEOUT."""

_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "openai-chat": "OPENAI_API_KEY"}

CONNECTIONS = ("api", "subscription")
"""`connection`: "api" (a provider and its key) or "subscription" (a CLI's own login)."""
CLI_TIMEOUT = 300.0
"""`cli_timeout`'s default, in seconds."""


class ConfigError(ValueError):
    """A setting that cannot be used: a bad value, an unknown key, a key in the file. The
    message names where it came from."""


@dataclass(frozen=True)
class ModelSettings:
    """One role's model: the provider, the model name, an optional base URL and effort.
    `api_key` is read from the provider's variable; it never shows in a repr.

    Under `connection="subscription"` the provider is the CLI ("claudecode", "codex"),
    `model` may be "" (the CLI's own default), there is no key, and `connect` asks
    `everchat.actors.models.connect_cli` with the `cli_*` settings; `state_dir` (the
    home) holds the CLI calls' gate shared by the chat's processes."""

    provider: str
    model: str
    base_url: str | None = None
    effort: str | None = None
    dummy_key: str | None = None
    api_key: str | None = field(default=None, repr=False, compare=False)
    connection: str = "api"
    cli: str | None = None
    cli_executable: str | None = None
    cli_timeout: float = CLI_TIMEOUT
    cli_concurrency: int = 1
    state_dir: Path | None = field(default=None, compare=False)

    @property
    def subscription(self) -> bool:
        """Whether calls go through a CLI's own login (no key)."""
        return self.connection == "subscription"

    @property
    def label(self) -> str:
        """What `status` and the page show: the model, or `subscription (claudecode)`
        (after the model's name when one is set)."""
        if not self.subscription:
            return self.model
        where = f"subscription ({self.cli})"
        return f"{self.model} via {where}" if self.model else where

    def __repr__(self) -> str:
        effort = f", effort={self.effort!r}" if self.effort else ""
        if self.subscription:
            model = f", model={self.model!r}" if self.model else ""
            executable = f", executable={self.cli_executable!r}" if self.cli_executable else ""
            return (f"ModelSettings(subscription ({self.cli}){model}{effort}{executable}, "
                    f"timeout={self.cli_timeout:g}, concurrency={self.cli_concurrency})")
        key = "set" if self.api_key else ("dummy" if self.dummy_key else "unset")
        url = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"ModelSettings({self.provider}, {self.model!r}{url}{effort}, key={key})"

    @property
    def key_variable(self) -> str | None:
        """The environment variable the key comes from (None for the demo and a subscription)."""
        return None if self.subscription else _KEY_ENV.get(self.provider)

    def connect(self, max_retries: int = 2) -> Connection:
        """The connection (raises `MissingKey` when the provider needs a key and has none).
        Under a subscription, the CLI's (`models.connect_cli`, imported here so that a
        build without it still runs the API connections); `max_retries` is the API's."""
        if self.subscription:
            return self._connect_cli()
        return connect(self.provider, api_key=self.api_key or "", base_url=self.base_url,
                       dummy_key=self.dummy_key, max_retries=max_retries)

    def _connect_cli(self) -> Connection:
        from everchat.actors import models

        connect_cli = getattr(models, "connect_cli", None)
        if connect_cli is None:
            raise models.ModelError("this Everchat has no subscription connection (models.connect_cli); "
                                    "use connection = \"api\" or update Everchat", provider=self.cli or "",
                                    model=self.model)
        return connect_cli(self.cli, executable=self.cli_executable, model=self.model or None,
                           timeout=self.cli_timeout, concurrency=self.cli_concurrency, effort=self.effort,
                           state_dir=self.state_dir)

    def describe(self) -> dict[str, Any]:
        """For `status` and `setup`: everything but the key."""
        out = {"provider": self.provider, "model": self.model or None, "base_url": self.base_url, "effort": self.effort,
               "key": "set" if self.api_key else ("dummy" if self.dummy_key else "unset"),
               "key_variable": self.key_variable, "connection": self.connection, "label": self.label}
        if self.subscription:
            out.update(key="none needed", cli=self.cli, cli_executable=self.cli_executable,
                       cli_timeout=self.cli_timeout, cli_concurrency=self.cli_concurrency)
        return out


@dataclass(frozen=True)
class Settings:
    """Everything configurable, resolved. `sources` says where each setting came from
    ("flag", "env", "file", "default")."""

    reply: ModelSettings
    compaction: ModelSettings
    settle_timeout: float = 20.0
    tool_rounds: int = 50
    compaction_jobs: int = 8
    instructions_file: Path | None = None
    home: Path = Path("~/.everchat")
    config_file: Path | None = None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    data_dir: Path | None = None
    """The chat folder (`--data-dir`, else `chat/` in the home); see `chat_dir`."""
    agent_jobs: int = 8
    """R38: agents working at once (1 … 8); the others queue."""
    tools: str = "on"
    """"on" or "off": with "off" a run offers no device tools and no computers paragraph (R34)."""
    search: str = "on"
    """"on" or "off": whether a run offers the web tools, search and fetch (docs/SEARCH.md)."""
    allow_local_fetch: str = "off"
    """"on": fetch may read private, loopback and link-local addresses (docs/SEARCH.md)."""
    after_turn: str = ""
    """A command run after each turn (issue 13, actors/turns/after_turn.py); "" for none."""

    @property
    def connection(self) -> str:
        """"api" or "subscription" (issue 13): the same for both roles ("api" under --demo)."""
        return self.reply.connection

    @property
    def devices(self) -> bool:
        """Whether this run offers the device tools (R39; fixed for the run, R34)."""
        return self.tools == "on"

    @property
    def web(self) -> bool:
        """Whether this run offers the web tools (fixed for the run, like the device tools)."""
        return self.search == "on"

    @property
    def chat_dir(self) -> Path:
        """The chat folder: `--data-dir`, else `chat/` beside the config file in the home."""
        return self.data_dir if self.data_dir is not None else self.home / "chat"

    def __repr__(self) -> str:
        return (f"Settings(reply={self.reply!r}, compaction={self.compaction!r}, "
                f"settle_timeout={self.settle_timeout:g}, tool_rounds={self.tool_rounds}, "
                f"compaction_jobs={self.compaction_jobs}, agent_jobs={self.agent_jobs}, tools={self.tools}, "
                f"search={self.search}, allow_local_fetch={self.allow_local_fetch}, "
                f"instructions_file={self.instructions_file})")

    def instructions(self) -> str:
        """The person's own instructions (R34), read once per chat life; "" without a file."""
        if self.instructions_file is None:
            return ""
        try:
            return self.instructions_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            if self.sources.get("instructions", "default") == "default":
                return ""
            raise ConfigError(f"the instructions file {self.instructions_file} does not exist") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"cannot read the instructions file {self.instructions_file}: {error}") from None

    def describe(self) -> dict[str, Any]:
        return {"reply": self.reply.describe(), "compaction": self.compaction.describe(),
                "settle_timeout": self.settle_timeout, "tool_rounds": self.tool_rounds,
                "compaction_jobs": self.compaction_jobs, "agent_jobs": self.agent_jobs, "tools": self.tools,
                "search": self.search, "allow_local_fetch": self.allow_local_fetch,
                "instructions": str(self.instructions_file) if self.instructions_file else None,
                "after_turn": self.after_turn or None, "connection": self.connection,
                "config_file": str(self.config_file) if self.config_file else None}


# --- reading ---------------------------------------------------------------------------


def _flag_values(flags: Mapping[str, Any] | argparse.Namespace | None) -> dict[str, Any]:
    if flags is None:
        return {}
    items = vars(flags) if isinstance(flags, argparse.Namespace) else dict(flags)
    out = {}
    for name, value in items.items():
        if value is None:
            continue
        key = name if name in KEYS or name in ("config", "demo", "data_dir") else None
        if key is None:
            for candidate in KEYS:
                if candidate.replace(".", "_") == name:
                    key = candidate
        if key is not None:
            out[key] = value
    return out


def _read_file(path: Path, explicit: bool) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"the config file {path} does not exist") from None
        return {}
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:  # P9: a binary file
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except RecursionError:  # P9: arrays or tables nested thousands deep
        raise ConfigError(f"{path}: not valid TOML: it nests too deeply") from None
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    out: dict[str, Any] = {}
    for name, value in data.items():
        if name in ("reply", "compaction") and isinstance(value, dict):
            for key, inner in value.items():
                if "key" in key and key != "dummy_key":
                    raise ConfigError(f"{path}: [{name}] {key}: API keys stay in the environment "
                                      f"(ANTHROPIC_API_KEY, OPENAI_API_KEY), never in the config file")
                if key not in _MODEL_KEYS:
                    raise ConfigError(f"{path}: [{name}] has no setting {key!r} (known: {', '.join(_MODEL_KEYS)})")
                out[f"{name}.{key}"] = inner
        elif name in _TOP_KEYS:
            out[name] = value
        elif "key" in name:
            raise ConfigError(f"{path}: {name}: API keys stay in the environment, never in the config file")
        else:
            raise ConfigError(f"{path}: no setting {name!r} (known: {', '.join(_TOP_KEYS)}, [reply], [compaction])")
    return out


def _number(key: str, value: Any, source: str, kind: type, low: float, high: float | None = None) -> Any:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = kind(value)
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        if not math.isfinite(number):  # "nan" and "inf" parse as floats
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"{key} ({source}) must be a {'whole ' if kind is int else ''}number, not {value!r}") from None
    if number < low or (high is not None and number > high):
        span = f"{low:g} to {high:g}" if high is not None else f"at least {low:g}"
        raise ConfigError(f"{key} ({source}) must be {span}, not {value!r}")
    return number


def _guess_provider(model: str | None, base_url: str | None) -> str | None:
    if not model:
        return None
    name = model.lower()
    if name == "demo":
        return "demo"
    if base_url:
        return None  # a server of its own: the provider must be named (or follows the keys)
    if name.startswith("claude"):
        return "anthropic"
    if name.startswith(("gpt", "o1", "o3", "o4", "chatgpt")):
        return "openai"
    return None


def _config_path(given: Mapping[str, Any], env: Mapping[str, str], home: Path) -> tuple[Path, bool]:
    """The config file and whether it was named (`--config`, EVERCHAT_CONFIG)."""
    if "config" in given:
        return Path(str(given["config"])).expanduser(), True
    if env.get("EVERCHAT_CONFIG"):
        return Path(env["EVERCHAT_CONFIG"]).expanduser(), True
    return home / "config.toml", False


def config_file(flags: Mapping[str, Any] | argparse.Namespace | None = None, *,
                env: Mapping[str, str] | None = None, home: str | Path | None = None) -> Path:
    """Where `load` reads the config file from (and `setup` saves it), existing or not."""
    env = os.environ if env is None else env
    home_path = Path(home or env.get("EVERCHAT_HOME") or "~/.everchat").expanduser()
    return _config_path(_flag_values(flags), env, home_path)[0]


def read_file(path: Path) -> dict[str, Any]:
    """The config file's settings as `load` reads them ("reply.model": …), {} when it
    does not exist; ConfigError for a bad file (a key in it included)."""
    return _read_file(path, False)


def save_file(path: Path, values: Mapping[str, Any]) -> None:
    """Write `values` ("reply.model": …, "settle_timeout": …) as the config file,
    atomically (temporary file, fsync, rename). API keys are refused: they stay in the
    environment. What `read_file` gives back equals `values` minus None values."""
    top, tables = [], {"reply": [], "compaction": []}
    for key, value in values.items():
        if value is None:
            continue
        if key not in KEYS:
            raise ConfigError(f"no setting {key!r}")
        if "key" in key.split(".")[-1] and not key.endswith("dummy_key"):
            raise ConfigError("API keys stay in the environment, never in the config file")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(f"{key} must be text or a number, not {value!r}")
        # A JSON string is a valid TOML basic string (the same escapes).
        if isinstance(value, str):  # TOML also wants DEL escaped; JSON leaves it raw
            shown = json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
        else:
            shown = repr(value)
        line = f"{key.split('.')[-1]} = {shown}"
        (tables[key.split(".")[0]] if "." in key else top).append(line)
    text = "# Everchat settings (see `everchat setup`). API keys stay in the environment:\n" \
           "# ANTHROPIC_API_KEY, OPENAI_API_KEY.\n" + "".join(line + "\n" for line in top)
    for name, lines in tables.items():
        if lines:
            text += f"\n[{name}]\n" + "".join(line + "\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def load(flags: Mapping[str, Any] | argparse.Namespace | None = None, *, env: Mapping[str, str] | None = None,
         home: str | Path | None = None) -> Settings:
    """Settings from flags, then environment, then the config file, then defaults.

    `flags` is an argparse namespace from `add_arguments` or a dict keyed like
    "reply.model" (or "reply_model"); None values are unset. `env` defaults to
    `os.environ`."""
    env = os.environ if env is None else env
    given = _flag_values(flags)
    home_path = Path(home or env.get("EVERCHAT_HOME") or "~/.everchat").expanduser()
    config_path, explicit = _config_path(given, env, home_path)
    from_file = _read_file(config_path, explicit)

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in KEYS:
        if key in given:
            values[key], sources[key] = given[key], "flag"
        elif env.get(ENV[key]):
            values[key], sources[key] = env[ENV[key]], "env"
        elif key in from_file:
            values[key], sources[key] = from_file[key], "file"

    def where(key: str) -> str:
        source = sources.get(key, "default")
        return {"flag": f"flag --{key.replace('.', '-').replace('_', '-')}", "env": ENV[key],
                "file": str(config_path)}.get(source, "default")

    demo = bool(given.get("demo")) or env.get("EVERCHAT_DEMO", "") not in ("", "0")
    cli = _cli_settings(values, where, home_path,
                        config_path.parent if sources.get("cli_executable") == "file" else None)
    subscription = cli["connection"] == "subscription" and not demo
    # Under a subscription no key is read at all: a missing one is neither the demo nor MissingKey.
    anthropic_key = None if subscription else env.get("ANTHROPIC_API_KEY") or None
    openai_key = None if subscription else env.get("OPENAI_API_KEY") or None
    by_keys = "anthropic" if anthropic_key else "openai" if openai_key else "demo"

    def role(name: str, fallback: ModelSettings | None) -> ModelSettings:
        def get(key: str) -> Any:
            value = values.get(f"{name}.{key}")
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{name}.{key} ({where(f'{name}.{key}')}) must be text, not {value!r}")
            return value or None

        provider, model, base_url = get("provider"), get("model"), get("base_url")
        effort, dummy_key = get("effort"), get("dummy_key")
        if effort is not None and effort not in EFFORTS:
            raise ConfigError(f"{name}.effort ({where(name + '.effort')}) is one of {', '.join(EFFORTS)}, "
                              f"not {effort!r}")
        if subscription:  # the CLI chooses its vendor; the model is its default unless named
            return ModelSettings(cli["cli"], model or "", None, effort, None, **cli)
        if demo:
            provider, model, base_url = "demo", "demo", None
        if provider is None:
            provider = _guess_provider(model, base_url)
        if provider is None:
            if name == "compaction" and fallback is not None and not anthropic_key:
                provider = fallback.provider  # R33's Haiku needs the Anthropic key; else the reply's vendor
            else:
                provider = by_keys
        if provider not in PROVIDERS:
            raise ConfigError(f"{name}.provider ({where(name + '.provider')}) is one of {', '.join(PROVIDERS)}, "
                              f"not {provider!r}")
        same_server = fallback is not None and fallback.provider == provider
        if base_url is None and same_server:
            base_url, dummy_key = fallback.base_url, dummy_key or fallback.dummy_key
        if model is None:
            model = DEFAULT_MODELS.get((provider, name))
            if model is None and same_server:
                model = fallback.model
            if model is None:
                raise ConfigError(f"{name}.model is needed for {provider} (the model name the server knows); "
                                  f"set it with --{name}-model, {ENV[name + '.model']} or [{name}] model")
        key = {"anthropic": anthropic_key, "openai": openai_key, "openai-chat": openai_key}.get(provider)
        # The CLI's settings ride along unused (setup and the page show them).
        return ModelSettings(provider, model, base_url, effort, dummy_key, api_key=key, **dict(cli, connection="api"))

    reply = role("reply", None)
    compaction = role("compaction", reply)

    settle = _number("settle_timeout", values.get("settle_timeout", 20.0), where("settle_timeout"), float, 0.001)
    rounds = _number("tool_rounds", values.get("tool_rounds", 50), where("tool_rounds"), int, 1)
    jobs = _number("compaction_jobs", values.get("compaction_jobs", 8), where("compaction_jobs"), int, 1, 8)
    agent_jobs = _number("agent_jobs", values.get("agent_jobs", 8), where("agent_jobs"), int, 1, 8)
    tools = values.get("tools", "on")
    if tools not in ("on", "off"):
        raise ConfigError(f"tools ({where('tools')}) is on or off, not {tools!r}")
    switches = {}
    for key, default in (("search", "on"), ("allow_local_fetch", "off")):
        switches[key] = values.get(key, default)
        if switches[key] not in ("on", "off"):
            raise ConfigError(f"{key} ({where(key)}) is on or off, not {switches[key]!r}")
    instructions = values.get("instructions")
    if instructions is None:
        instructions_file: Path | None = home_path / "instructions.md"
    else:
        instructions_file = Path(str(instructions)).expanduser()
        if not instructions_file.is_absolute() and sources["instructions"] == "file":
            instructions_file = config_path.parent / instructions_file
    after_turn = values.get("after_turn") or ""
    if not isinstance(after_turn, str):
        raise ConfigError(f"after_turn ({where('after_turn')}) is a command (text), not {after_turn!r}")
    data_dir = Path(str(given["data_dir"])).expanduser() if given.get("data_dir") else None
    return Settings(reply, compaction, settle, rounds, jobs, instructions_file, home_path,
                    config_path if config_path.exists() else None,
                    {key: sources.get(key, "default") for key in KEYS}, data_dir, agent_jobs=agent_jobs, tools=tools,
                    after_turn=after_turn, **switches)


def _cli_settings(values: Mapping[str, Any], where: Callable[[str], str], home: Path,
                  file_folder: Path | None) -> dict[str, Any]:
    """The `connection` and `cli_*` settings, checked (each error names its source), as
    `ModelSettings` fields; `state_dir` is the home (the CLI calls' gate). A relative
    `cli_executable` path is made absolute against `file_folder` (when the config file set
    it), else the folder the command runs in: each CLI run starts in a folder of its own, where a
    relative path would name nothing; a bare name is looked up on PATH."""
    connection = values.get("connection") or "api"
    if connection not in CONNECTIONS:
        raise ConfigError(f"connection ({where('connection')}) is one of {', '.join(CONNECTIONS)}, "
                          f"not {connection!r}")
    cli = values.get("cli") or None
    if cli is not None and cli not in CLIS:
        raise ConfigError(f"cli ({where('cli')}) is one of {', '.join(CLIS)}, not {cli!r}")
    if connection == "subscription" and cli is None:
        raise ConfigError(f"connection = subscription ({where('connection')}) needs its CLI: "
                          f"--cli {'|'.join(CLIS)}, {ENV['cli']} or cli = \"claudecode\" in the config file")
    executable = values.get("cli_executable") or None
    if executable is not None:
        if not isinstance(executable, str):
            raise ConfigError(f"cli_executable ({where('cli_executable')}) is a path (text), not {executable!r}")
        if "/" in executable or executable.startswith("~"):
            executable = str((file_folder or Path.cwd()) / Path(executable).expanduser())
    timeout = _number("cli_timeout", values.get("cli_timeout", CLI_TIMEOUT), where("cli_timeout"), float,
                      float("-inf"))
    if timeout <= 0:
        raise ConfigError(f"cli_timeout ({where('cli_timeout')}) must be more than 0 seconds, "
                          f"not {values.get('cli_timeout')!r}")
    concurrency = _number("cli_concurrency", values.get("cli_concurrency", 1), where("cli_concurrency"), int, 1, 8)
    return {"connection": connection, "cli": cli, "cli_executable": executable, "cli_timeout": timeout,
            "cli_concurrency": concurrency, "state_dir": home}


def add_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """The settings' flags (`--reply-model` …, `--demo`, `--config`); pass the parsed
    namespace to `load`. Every default is None, so an absent flag never overrides.

    With `suppress` an absent flag leaves no attribute at all (argparse.SUPPRESS): the
    CLI adds the same flags before and after its command, and a subcommand's default
    must not erase a flag given before the command."""
    unset = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("models and limits")
    group.add_argument("--config", default=unset, help="the config file (default $EVERCHAT_HOME/config.toml)")
    group.add_argument("--demo", action="store_true", default=unset, help="use the offline demo models")
    for role in ("reply", "compaction"):
        group.add_argument(f"--{role}-provider", dest=f"{role}_provider", default=unset, choices=PROVIDERS)
        group.add_argument(f"--{role}-model", dest=f"{role}_model", default=unset)
        group.add_argument(f"--{role}-base-url", dest=f"{role}_base_url", default=unset)
        group.add_argument(f"--{role}-effort", dest=f"{role}_effort", default=unset, choices=EFFORTS)
    group.add_argument("--settle-timeout", dest="settle_timeout", type=float, default=unset,
                       help="seconds a turn waits for its view's summaries (R36, default 20)")
    group.add_argument("--tool-rounds", dest="tool_rounds", type=int, default=unset,
                       help="tool rounds per turn (default 50)")
    group.add_argument("--compaction-jobs", dest="compaction_jobs", type=int, default=unset,
                       help="compactions at once, 1 to 8 (R31, default 8)")
    group.add_argument("--agent-jobs", dest="agent_jobs", type=int, default=unset,
                       help="agents working at once, 1 to 8 (R38, default 8); the others queue")
    group.add_argument("--tools", default=unset, choices=("on", "off"),
                       help="off: no device tools (shell, read, write, edit) for this run (R34, default on)")
    group.add_argument("--search", default=unset, choices=("on", "off"),
                       help="off: no web tools (search, fetch) for this run (default on)")
    group.add_argument("--allow-local-fetch", dest="allow_local_fetch", action="store_const", const="on",
                       default=unset, help="let fetch read private, loopback and link-local addresses")
    group.add_argument("--instructions", default=unset, help="a file with your own instructions (R34)")
    group.add_argument("--after-turn", dest="after_turn", default=unset, metavar="COMMAND",
                       help="a local command run after each turn (/bin/sh -c, 30 s, no keys; docs/GOALS.md)")
    group.add_argument("--connection", default=unset, choices=CONNECTIONS,
                       help="api (a provider and its key, the default) or subscription (every call through --cli)")
    group.add_argument("--cli", default=unset, choices=CLIS,
                       help="with --connection subscription: Claude Code or Codex, logged in with your subscription")
    group.add_argument("--cli-executable", dest="cli_executable", default=unset, metavar="PATH",
                       help="the CLI's program (default: claude or codex on PATH)")
    group.add_argument("--cli-timeout", dest="cli_timeout", type=float, default=unset, metavar="SECONDS",
                       help="seconds one CLI call may take (default 300)")
    group.add_argument("--cli-concurrency", dest="cli_concurrency", type=int, default=unset, metavar="N",
                       help="CLI calls at once, 1 to 8 (default 1): replies first, then summaries")
