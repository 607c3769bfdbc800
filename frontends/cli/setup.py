"""`setup`: ask for the connection and the models, check them, save config.toml.

Questions go to stdout and answers come from stdin one line each (so a script can
pipe them); an empty answer takes the default shown in brackets, which is the
current setting. Each model is then checked with one tiny request at its configured
base URL. The file gets the providers, models, base URLs and efforts, never a key:
keys stay in ANTHROPIC_API_KEY and OPENAI_API_KEY (R33: the compaction model is set
apart from the reply model, with its own effort).

A subscription (issue 13) is chosen as the replies' connection, `claudecode` or `codex`:
then no key is asked for or needed, compactions go through the same CLI, a model is
optional (`-`: the CLI's own default), and the file gets `connection = "subscription"`
and `cli`, with `--cli-executable`, `--cli-timeout` and `--cli-concurrency` when given
as flags to setup.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

from everchat.frontends.cli.commands import EXIT_FAILED, EXIT_OK, CommandError, load_settings

__all__ = ["run_setup", "check_model", "ask"]

_TRIES = 3
_CHECK_PROMPT = "This is a connection check. Reply with the single word OK."
_PROVIDER_HELP = {
    "anthropic": "Anthropic's Messages API (key: ANTHROPIC_API_KEY)",
    "openai": "OpenAI's Responses API (key: OPENAI_API_KEY)",
    "openai-chat": "an OpenAI-compatible Chat Completions server, e.g. a local one",
    "demo": "the offline demo models (no key, no network)",
    "claudecode": "your Claude subscription through Claude Code (the `claude` CLI, logged in; no key)",
    "codex": "your ChatGPT subscription through Codex (the `codex` CLI, logged in; no key)",
}


def ask(question: str, default: str | None, check: Callable[[str], str | None] | None = None) -> str:
    """One question; an empty answer takes `default`. `check` returns why an answer is
    refused (None: fine); after three refusals, or at the end of input, setup stops."""
    shown = f" [{default}]" if default else ""
    for _ in range(_TRIES):
        print(f"{question}{shown}: ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            print()
            raise CommandError("setup stopped: no answer (end of input); nothing was saved")
        answer = line.strip() or (default or "")
        problem = check(answer) if check else None
        if problem is None:
            return answer
        print(f"  {problem}")
    raise CommandError(f"setup stopped: no usable answer to {question!r}; nothing was saved")


def _yes(question: str, default: bool) -> bool:
    answer = ask(question, "y" if default else "n",
                 lambda a: None if a.lower() in ("y", "yes", "n", "no") else "answer y or n")
    return answer.lower() in ("y", "yes")


def _one_of(choices) -> Callable[[str], str | None]:
    return lambda answer: None if answer in choices else f"one of: {', '.join(choices)}"


def _url(answer: str) -> str | None:
    if answer in ("", "-") or answer.startswith(("http://", "https://")):
        return None
    return "a URL starting with http:// or https:// (or - for the vendor's own)"


def _effort(answer: str) -> str | None:
    from everchat.actors.models import EFFORTS

    if answer in ("", "-") or answer in EFFORTS:
        return None
    return f"one of: {', '.join(EFFORTS)} (or - for the model's own default)"


def _role(role: str, current, fallback: dict | None) -> dict:
    """The questions for one role; returns its settings ("provider", "model", …)."""
    from everchat.actors.settings import CLIS, DEFAULT_MODELS
    from everchat.actors.models import PROVIDERS

    if fallback is not None and fallback["provider"] in CLIS:
        print(f"Compactions go through the same subscription ({fallback['provider']}).")
        return _subscription_role(role, current, fallback["provider"])
    if fallback is not None and _yes("Compactions through the same connection?", True):
        provider, base_url, dummy_key = fallback["provider"], fallback["base_url"], fallback["dummy_key"]
    else:
        # A subscription serves both roles: it is chosen with the replies' connection.
        choices = PROVIDERS + CLIS if fallback is None else PROVIDERS
        print("Connections: " + "; ".join(f"{p}: {_PROVIDER_HELP[p]}" for p in choices))
        provider = ask(f"Connection for {role}", current.provider, _one_of(choices))
        if provider in CLIS:
            return _subscription_role(role, current, provider)
        base_url = dummy_key = None
        if provider != "demo":
            same = provider == current.provider
            url_default = (current.base_url if same else None) or ("-" if provider != "openai-chat" else None)
            base_url = ask("Base URL (- for the vendor's own)", url_default,
                           lambda a: "this connection needs its server's URL" if provider == "openai-chat"
                           and a in ("", "-") else _url(a))
            base_url = None if base_url in ("", "-") else base_url
            if provider == "openai-chat" or (provider == "openai" and base_url):
                dummy_key = ask("Key sent when OPENAI_API_KEY is unset (- for none; a local server may need none)",
                                (current.dummy_key if same else None) or "-")
                dummy_key = None if dummy_key in ("", "-") else dummy_key
    if provider == "demo":
        return {"provider": "demo", "model": "demo", "base_url": None, "effort": None, "dummy_key": None}
    model_default = current.model if current.provider == provider else DEFAULT_MODELS.get((provider, role))
    model = ask(f"Model for {role}", model_default, lambda a: None if a else "the model's name, as the server knows it")
    effort = ask("Reasoning effort (- for the model's own default)", current.effort or "-", _effort)
    return {"provider": provider, "model": model, "base_url": base_url,
            "effort": None if effort in ("", "-") else effort, "dummy_key": dummy_key}


def _subscription_role(role: str, current, cli: str) -> dict:
    """The questions for one role under a subscription: the model (optional) and effort."""
    same = current.connection == "subscription" and current.cli == cli
    model = ask(f"Model for {role} (- for the CLI's own default)", (current.model if same else None) or "-")
    effort = ask("Reasoning effort (- for the model's own default)", (current.effort if same else None) or "-",
                 _effort)
    return {"provider": cli, "model": None if model in ("", "-") else model, "base_url": None,
            "effort": None if effort in ("", "-") else effort, "dummy_key": None}


def check_model(model_settings, timeout: float = 60.0) -> str | None:
    """One tiny request to the model at its configured URL: None when it answered, else
    why not (the model error's words; never a key)."""
    from everchat.actors.models import Message, ModelError, Request

    try:
        connection = model_settings.connect(max_retries=0)
        request = Request(model=model_settings.model, system="You check a connection.",
                          messages=(Message.user(_CHECK_PROMPT),), cache_system=False,
                          max_tokens=64, timeout=timeout, label="setup-check")
        connection.complete(request)
    except ModelError as error:
        return str(error)
    return None


def run_setup(args: argparse.Namespace) -> int:
    from everchat.actors.settings import CLIS, ENV, ConfigError, ModelSettings, config_file, read_file, save_file

    current = load_settings(args)
    path = config_file(args)
    try:
        kept = read_file(path)
    except ConfigError as error:
        raise CommandError(f"{error}; fix or remove it, then run setup again") from None
    print(f"Everchat setup: the settings go to {path}. Keys are never saved: they stay in your "
          "environment (ANTHROPIC_API_KEY, OPENAI_API_KEY). A subscription (claudecode, codex) needs none: "
          "its CLI's own login is used.")
    print("Press Enter to keep the value in brackets.")
    print("-- replies: the model you talk to")
    reply = _role("reply", current.reply, None)
    print("-- compactions: the cheaper model that writes the memory's one-line summaries (R33)")
    compaction = _role("compaction", current.compaction, reply)

    subscription = reply["provider"] in CLIS
    cli = {key: getattr(current.reply, key) for key in ("cli_executable", "cli_timeout", "cli_concurrency")}
    failed = []
    for role, answers in (("reply", reply), ("compaction", compaction)):
        if subscription:  # no key at all: the CLI's own login
            chosen = ModelSettings(answers["provider"], answers["model"] or "", effort=answers["effort"],
                                   connection="subscription", cli=answers["provider"], state_dir=current.home, **cli)
            print(f"Checking the {role} model, {chosen.label} ... ", end="", flush=True)
        else:
            variable = {"anthropic": "ANTHROPIC_API_KEY"}.get(answers["provider"], "OPENAI_API_KEY")
            key = os.environ.get(variable) if answers["provider"] != "demo" else None
            chosen = ModelSettings(answers["provider"], answers["model"], answers["base_url"], answers["effort"],
                                   answers["dummy_key"], api_key=key or None)
            where = f" at {chosen.base_url}" if chosen.base_url else ""
            print(f"Checking the {role} model {chosen.model} ({chosen.provider}{where}) ... ", end="", flush=True)
        started = time.monotonic()
        problem = check_model(chosen)
        if problem is None:
            print(f"ok ({time.monotonic() - started:.1f} s)")
        else:
            print("failed")
            print(f"  {problem}")
            failed.append(role)
    if failed and not _yes("Save these settings anyway?", False):
        print("Nothing was saved.")
        return EXIT_FAILED

    values = {key: value for key, value in kept.items() if "." not in key}
    for role, answers in (("reply", reply), ("compaction", compaction)):
        for key, value in answers.items():
            if not (subscription and key == "provider"):  # under a subscription the CLI is `cli`
                values[f"{role}.{key}"] = value
    if subscription:
        values.update(connection="subscription", cli=reply["provider"])
        for key in ("cli_executable", "cli_timeout", "cli_concurrency"):
            if current.sources.get(key) == "flag":  # setup --cli-timeout 600 …: saved with the rest
                values[key] = cli[key]
    elif "connection" in values:
        values["connection"] = "api"
    save_file(path, values)
    print(f"Saved {path}." if not failed else f"Saved {path}, though the {' and '.join(failed)} check failed.")
    shadowed = [ENV[key] for key in values
                if ("." in key or key in ("connection", "cli")) and os.environ.get(ENV[key])]
    if shadowed:
        print(f"Note: {', '.join(shadowed)} in your environment still override{'s' if len(shadowed) == 1 else ''} "
              "the file.")
    return EXIT_OK if not failed else EXIT_FAILED
