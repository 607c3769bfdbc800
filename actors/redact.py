"""Secrets out of text before it is logged: what `import-chats` runs on every message.

The log is append-only (R4): a secret logged once stays in the chat folder, in every
copy of it, and in every summary and prompt built from it. Past chats with other AIs are
full of pasted keys, tokens and `.env` files, so each imported text goes through
`redact` first, and every secret it recognises becomes `[redacted]`:

- vendor API keys: Anthropic `sk-ant-…`, OpenAI `sk-…` / `sk-proj-…`, AWS access key ids
  `AKIA…`/`ASIA…`, GitHub `ghp_…`/`gho_…`/`ghs_…`/`github_pat_…`, Slack `xox?-…`, Google
  `AIza…`, Stripe `sk_live_…`/`rk_live_…`;
- `Authorization: Bearer …` and `Basic …` credentials, and bearer tokens written alone;
- the password of a URL (`scheme://user:password@host`);
- private key blocks (`-----BEGIN … PRIVATE KEY----- … -----END … PRIVATE KEY-----`);
- `.env`-style assignments whose name says it is secret (`*_KEY`, `*_TOKEN`, `*_SECRET`,
  `PASSWORD`, `PASSWD`, `*_PASS`, …), the value only: `OPENAI_API_KEY=[redacted]`.

It is a pattern list, not a proof: ordinary prose, code and hashes (a git sha, a UUID)
are left as they were (tests/test_redact.py keeps a corpus of both).
"""

from __future__ import annotations

import re

__all__ = ["redact", "REDACTED"]

REDACTED = "[redacted]"

_B = r"(?<![A-Za-z0-9_-])"  # a token starts here: not inside a longer word
_E = r"(?![A-Za-z0-9_-])"

_TOKENS = [
    r"sk-ant-[A-Za-z0-9_-]{20,}",                        # Anthropic
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",    # OpenAI
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",                         # AWS access key id
    r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}",          # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{22,}",                      # GitHub fine-grained token
    r"xox[abposr]-[A-Za-z0-9-]{10,}",                     # Slack
    r"AIza[0-9A-Za-z_-]{35}",                             # Google API key
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",          # Stripe
    r"glpat-[A-Za-z0-9_-]{20,}",                          # GitLab
    r"hf_[A-Za-z0-9]{30,}",                               # Hugging Face
]
_TOKEN = re.compile(_B + "(?:" + "|".join(_TOKENS) + ")" + _E)

_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END \1-----|\Z)", re.S)

_AUTH_HEADER = re.compile(r"(?i)\b(authorization\s*[:=]\s*[\"']?\s*(?:bearer|basic|token)\s+)([A-Za-z0-9._~+/=-]{8,})")
_BEARER = re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]{16,}=*)")

_URL_PASSWORD = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@\"'<>]+:)([^\s@/\"'<>]+)(@)")

# NAME=value, NAME: value, "NAME": "value", export NAME="value" with a secret-sounding name.
_SECRET_NAME = (r"[A-Za-z0-9_]*(?:_KEY|_TOKEN|_SECRET|_PASSWORD|_PASSWD|_PASS|_PWD|_CREDENTIALS?|_API_?KEY)"
                r"|PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|SECRET_KEY|ACCESS_KEY")
_ASSIGNMENT = re.compile(
    r"(?i)(?<![A-Za-z0-9_])((?:export\s+)?[\"']?(?:" + _SECRET_NAME + r")[\"']?\s*[:=]\s*)"
    r"(\"[^\"\n]+\"|'[^'\n]+'|[^\s,;\"'}{)(\[\]]+)")


def _assigned(match: re.Match) -> str:
    value = match.group(2)
    if value.lower() in ("none", "null", "true", "false", "''", '""') or value == REDACTED:
        return match.group(0)
    if value.startswith(("os.environ", "process.env", "$", "getenv", "env(")):
        return match.group(0)  # code that reads a secret names no secret
    if len(value.strip("\"'")) < 4:
        return match.group(0)
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match.group(1)}{quote}{REDACTED}{quote}"


def redact(text: str) -> str:
    """`text` with every secret it recognises replaced by `[redacted]` (see the module)."""
    text = _PRIVATE_KEY.sub(REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _TOKEN.sub(REDACTED, text)
    return _ASSIGNMENT.sub(_assigned, text)
