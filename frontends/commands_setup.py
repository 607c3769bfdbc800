"""`setup`: ask for the connection and the models, check them, save config.toml.

Questions go to stdout and answers come from stdin one line each (so a script can
pipe them); an empty answer takes the default shown in brackets, which is the
current setting. Each model is then checked with one tiny request at its configured
base URL. The file gets the providers, models, base URLs and efforts, never a key:
keys stay in ANTHROPIC_API_KEY and OPENAI_API_KEY (R33: the compaction model is set
apart from the reply model, with its own effort).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

from everchat.frontends.commands import EXIT_FAILED, EXIT_OK, CommandError, load_settings

__all__ = ["run_setup", "check_model", "ask"]

_TRIES = 3
_CHECK_PROMPT = "This is a connection check. Reply with the single word OK."
_PROVIDER_HELP = {
    "anthropic": "Anthropic's Messages API (key: ANTHROPIC_API_KEY)",
    "openai": "OpenAI's Responses API (key: OPENAI_API_KEY)",
    "openai-chat": "an OpenAI-compatible Chat Completions server, e.g. a local one",
    "demo": "the offline demo models (no key, no network)",
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
    from everchat.actors.config import DEFAULT_MODELS
    from everchat.actors.models import PROVIDERS

    if fallback is not None and _yes("Compactions through the same connection?", True):
        provider, base_url, dummy_key = fallback["provider"], fallback["base_url"], fallback["dummy_key"]
    else:
        print("Connections: " + "; ".join(f"{p}: {_PROVIDER_HELP[p]}" for p in PROVIDERS))
        provider = ask(f"Connection for {role}", current.provider, _one_of(PROVIDERS))
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
    from everchat.actors.config import ENV, ConfigError, ModelSettings, config_file, read_file, save_file

    current = load_settings(args)
    path = config_file(args)
    try:
        kept = read_file(path)
    except ConfigError as error:
        raise CommandError(f"{error}; fix or remove it, then run setup again") from None
    print(f"Everchat setup: the settings go to {path}. Keys are never saved: they stay in your "
          "environment (ANTHROPIC_API_KEY, OPENAI_API_KEY).")
    print("Press Enter to keep the value in brackets.")
    print("-- replies: the model you talk to")
    reply = _role("reply", current.reply, None)
    print("-- compactions: the cheaper model that writes the memory's one-line summaries (R33)")
    compaction = _role("compaction", current.compaction, reply)

    failed = []
    for role, answers in (("reply", reply), ("compaction", compaction)):
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
            values[f"{role}.{key}"] = value
    save_file(path, values)
    print(f"Saved {path}." if not failed else f"Saved {path}, though the {' and '.join(failed)} check failed.")
    shadowed = [ENV[key] for key in values if "." in key and os.environ.get(ENV[key])]
    if shadowed:
        print(f"Note: {', '.join(shadowed)} in your environment still override{'s' if len(shadowed) == 1 else ''} "
              "the file.")
    return EXIT_OK if not failed else EXIT_FAILED
