"""Secrets out of text before it is logged: what `import-chats` runs on every text it logs
(messages, titles, folders, tool calls and their arguments, ids).

The log is append-only (R4): a secret logged once stays in the chat folder, in every
copy of it, and in every summary and prompt built from it. Past chats with other AIs are
full of pasted keys, tokens and `.env` files, so each imported text goes through
`redact` first, and every secret it recognises becomes `[redacted]`:

- tokens with a fixed vendor prefix, also glued after `-`, `_`, `/` or `.` (a file name
  `key-sk-proj-…`, a folder `proj-AKIA…`; review P6), never inside a longer word:
  Anthropic `sk-ant-…`, OpenAI `sk-…`/`sk-proj-…` (OpenRouter `sk-or-v1-…`), AWS key ids
  `AKIA…`/`ASIA…`, GitHub `ghp_…`/`gho_…`/`ghs_…`/`github_pat_…`, GitLab `glpat-…`, Slack
  `xox?-…`/`xapp-…`, Google `AIza…`, Stripe `sk_live_…`/`rk_live_…`/`whsec_…`, Hugging Face
  `hf_…`, npm `npm_…`, SendGrid `SG.….…`, Twilio `SK…`, Discord bot tokens, and JWTs
  (`eyJ….eyJ….…`);
- `Authorization: Bearer|Basic|Token …` credentials, and bearer tokens written alone
  (16 characters or more);
- the password of a URL (`scheme://user:password@host`), and the secret part of Discord
  and Slack webhook URLs;
- private key blocks (`-----BEGIN … PRIVATE KEY----- … -----END … PRIVATE KEY-----`);
- `mysql -pPASSWORD` (and mysqldump, mariadb …) and `sshpass -p PASSWORD`;
- assignments whose name says it is secret, the value only: `.env` lines, JSON and YAML
  fields, code, headers, query strings (`OPENAI_API_KEY=[redacted]`, `"password": "[redacted]"`,
  `x-api-key: [redacted]`, Azure's `AccountKey=[redacted];`). A name is secret when its
  last word is, or ends in, password, passwd, passphrase, secret, token or apikey; or is
  pass, pwd or key after another word (`db_pass`, `api_key`, `apiKey`; `key` only after a
  word that makes it a credential, `api`, `secret`, `access`, `account` …, or in an
  upper-case name: `OPENAI_KEY`, not `sort_key`). A value that is code is kept: a read of
  the environment (`os.environ[…]`, `$VAR`), a call, an attribute (`self.token`), the
  name itself (`api_key=api_key`), a type (`password: str`) or a literal (`None`, `true`).

It is a pattern list, not a proof: ordinary prose, code and hashes (a git sha, a UUID) are
left as they were (tests/test_redact.py keeps a corpus of both), and a password written in
prose is not caught.

Speed (performance review P4: `redact` was most of an import's CPU): each pass but the
tokens' runs only on texts that hold its cue (a substring test, C speed); every regex
starts at a rare character the engine can skip to: the vendor tokens are one regex
anchored at their first `-`, `_` or capital letter, the `Authorization`/`bearer` patterns
start with their word in the lower-cased text, and assignments are found from their `:`
or `=` in the reversed lower-cased text, the name and value then checked in Python on
the few candidates (tools/bench/bench_redact.py measures it).
"""

from __future__ import annotations

import re

__all__ = ["redact", "REDACTED"]

REDACTED = "[redacted]"

_START = r"(?<![A-Za-z0-9])"  # a token starts here: no letter or digit right before it
_END = r"(?![A-Za-z0-9])"


def _anchored(before: str, rest: str) -> str:
    """A token: the letters `before` (a fixed-width pattern, maybe empty), then `rest`, whose
    first character is a `-`, `_` or capital literal: the anchor. The match starts at the
    anchor and checks `before` behind it, so the engine skips from one `-`, `_`, `A`, `S` or
    `J` to the next instead of trying every letter (P4); `_tokens` moves the start back
    over `before`. No letter or digit may come before the token: a `-`, `_`, `/` or `.`
    may (P6: `key-sk-proj-…`, `proj-AKIA…`)."""
    behind = f"(?<={_START}{before}{re.escape(rest[0])})" if before else r"(?<![A-Za-z0-9].)"
    return re.escape(rest[0]) + behind + rest[1:] + _END


_TOKENS = [
    ("sk", r"-ant-[A-Za-z0-9_-]{20,}"),  # Anthropic
    ("sk", r"-(?:proj|svcacct|admin|None|or-v1)-[A-Za-z0-9_-]{20,}"),  # OpenAI project, service, admin; OpenRouter
    ("sk", r"-(?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]{20,}"),  # OpenAI's (and DeepSeek's) plain keys: a digit, not a word
    ("", r"AKIA[A-Z0-9]{16}"), ("", r"ASIA[A-Z0-9]{16}"),  # AWS access key ids
    ("gh[pousr]", r"_[A-Za-z0-9]{36,}"), ("github", r"_pat_[A-Za-z0-9_]{22,}"),  # GitHub
    ("glpat", r"-[A-Za-z0-9_-]{20,}"),  # GitLab
    ("xox[abposre]", r"-[A-Za-z0-9-]{10,}"), ("xapp", r"-[0-9]-[A-Za-z0-9-]{10,}"),  # Slack
    ("", r"AIza[0-9A-Za-z_-]{35}"),  # Google API key
    ("[sr]k", r"_(?:live|test)_[A-Za-z0-9]{16,}"), ("whsec", r"_[A-Za-z0-9]{24,}"),  # Stripe
    ("hf", r"_[A-Za-z0-9]{30,}"),  # Hugging Face
    ("npm", r"_[A-Za-z0-9]{36}"),  # npm
    ("", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),  # SendGrid
    ("", r"SK[0-9a-f]{32}"),  # Twilio API key
    ("ey", r"J[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),  # JWT: two base64 JSON objects, a signature
]
_TOKEN = re.compile("|".join(_anchored(before, rest) for before, rest in _TOKENS))
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Discord bot token: the user id in base64 (M, N or O first), a time, an HMAC; the hint
# (its 6-character middle between dots) starts with a literal, so it is cheap to look for
_DISCORD_BOT = re.compile(r"[MNO](?<![A-Za-z0-9].)[A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}"
                          + _END)
_DISCORD_HINT = re.compile(r"\.[A-Za-z0-9_-]{6}\.")

_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END \1-----|\Z)", re.S)

_URL_PASSWORD = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@\"'<>]+:)([^\s@/\"'<>]+)(@)")
_WEBHOOK = re.compile(r"((?<![A-Za-z0-9.-])(?:discord(?:app)?\.com/api/webhooks/"
                      r"|hooks\.slack\.com/(?:services|workflows|triggers)/))([A-Za-z0-9_/-]+)")

_COMMAND_PASSWORD = re.compile(
    r"(?<![A-Za-z0-9_-])((?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mariadb|mariadb-dump)(?=\s)"
    r"[^\n|;&]*?\s-p)(\"[^\"\n]+\"|'[^'\n]+'|[^\s\"'|;&]+)"
    r"|(?<![A-Za-z0-9_-])(sshpass\s+-p\s*)(\"[^\"\n]+\"|'[^'\n]+'|[^\s\"'|;&]+)")

# searched in the lower-cased text: a literal start lets the engine skip to it (P4)
_AUTH_HEADER = re.compile(r"authorization\s*[:=]\s*[\"']?\s*(?:bearer|basic|token)\s+([a-z0-9._~+/=-]{8,})")
_BEARER = re.compile(r"bearer\s+([a-z0-9._~+/-]{16,}=*)")
_HYPHENATED = re.compile(r"[a-z]+(?:-[a-z]+)*")

# --- assignments --------------------------------------------------------------------------

# a name's last word (lower-cased) that ends so is secret; `pass`, `pwd`, `key` need a word before them
_SECRET_ENDINGS = ("password", "passwd", "passphrase", "secret", "token", "apikey")
_KEY_AFTER = frozenset((
    "api", "secret", "access", "private", "account", "master", "signing", "encryption", "client", "auth", "app",
    "license", "subscription", "service", "shared", "storage", "consumer", "webhook", "deploy", "session", "sas",
    "bot", "admin", "write", "openai", "anthropic", "stripe", "sendgrid", "mailgun", "twilio", "groq", "mistral",
    "gemini", "google", "azure", "aws",
))
_NAME_ENDS = ("key", "token", "secret", "password", "passwd", "passphrase", "pass", "pwd", "credential",
              "credentials", "sig", "signature")
_NAME_CUES = ("key", "token", "secret", "pass", "pwd", "credential", "sig")  # one of them is in every name end
# a name's end and its separator written backwards, searched in the reversed lower-cased
# text: the search then starts at a rare character (`:` or `=`) the engine skips to (P4)
_CANDIDATE_REVERSED = re.compile(r"[:=][ \t]*[\"']?(?:" + "|".join(end[::-1] for end in _NAME_ENDS) + ")")
_NAME_CHAR = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_VALUE = re.compile(r"\"[^\"\n]+\"|'[^'\n]+'|[^\s,;\"'}{)(\[\]]+")
_ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_CODE_VALUES = frozenset(("none", "null", "nil", "true", "false", "undefined", "str", "string", "bytes", "int",
                          "number", "bool", "boolean", "any", "object", "optional", "secretstr", "required",
                          "await", "new", "function", "lambda", "async", "yield", "typeof", "self", "this"))
_PROSE_WORD = re.compile(r"[A-Za-z]+ [A-Za-z]")  # `password: That is…`: a word, then more words
_ENV_READS = ("os.environ", "os.getenv", "process.env", "$", "getenv", "env(", "{{", "%(", "<%")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _secret_name(name: str) -> bool:
    """Whether an assigned name says its value is secret (see the module)."""
    words = [word.lower() for word in _WORD.findall(name)]
    if not words:
        return False
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if last.endswith(_SECRET_ENDINGS) or last in ("credential", "credentials", "sig"):
        return True
    if last == "key":  # api_key, apiKey, AccountKey, OPENAI_KEY; not sort_key or monkey
        return before in _KEY_AFTER or (bool(before) and name.isupper() and "_" in name)
    return bool(before) and (last in ("pass", "pwd") or (last, before) == ("signature", "access"))


def _not_secret(value: str, name: str, text: str, end: int) -> bool:
    """Whether an unquoted `value` (ending at `end` in `text`) is code or prose rather than
    a secret: a call, an attribute, the name itself, a type, a literal or a keyword, or a
    plain word that a sentence goes on after (`password: That is how…`)."""
    if text[end:end + 1] == "(" or _ATTRIBUTE.fullmatch(value) or _PROSE_WORD.match(text, end - len(value)):
        return True
    low = value.lower()
    return low in _CODE_VALUES or low == name.lower() or low == _WORD.findall(name)[-1].lower()


def _assignments(text: str, low: str) -> list[tuple[int, int, str]]:
    """The values of `text`'s secret-named assignments, as spans to redact; `low` is `text`
    lower-cased, character for character."""
    size = len(low)
    found = []
    for match in _CANDIDATE_REVERSED.finditer(low[::-1]):
        separator, name_end = size - 1 - match.start(), size - match.end()  # back to forward positions
        found.append((separator, name_end))
    spans, done = [], 0
    for separator, name_end in reversed(found):  # left to right
        start = name_end
        while start > 0 and text[start - 1] in _NAME_CHAR:
            start -= 1
        name = text[start:separator].rstrip(" \t\"'")
        at = separator + 1
        if text[separator] == ":" and text[at:at + 1] == "=":  # Go's :=
            at += 1
        while text[at:at + 1] in (" ", "\t"):
            at += 1
        value = _VALUE.match(text, at)
        if value is None or start < done or not _secret_name(name):
            continue
        whole = value.group()
        quote = whole[0] if whole[0] in "\"'" else ""
        bare = whole.strip("\"'")
        if (len(bare) < 4 or bare == REDACTED or bare.startswith(_ENV_READS)
                or (not quote and _not_secret(whole, name, text, value.end()))):
            continue
        spans.append((value.start(), value.end(), f"{quote}{REDACTED}{quote}"))
        done = value.end()
    return spans


# --- the passes ---------------------------------------------------------------------------


def _lower(text: str) -> str:
    """`text` lower-cased character for character (so positions stay)."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)  # "İ".lower() is two characters


def _splice(text: str, spans: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end, replacement) span, in order, not overlapping, replaced."""
    if not spans:
        return text
    out, done = [], 0
    for start, end, replacement in spans:
        out += (text[done:start], replacement)
        done = end
    out.append(text[done:])
    return "".join(out)


def _credentials(text: str, low: str) -> list[tuple[int, int, str]]:
    """The credentials of `Authorization:` headers and bearer tokens, as spans to redact (a
    bearer "token" of small letters and hyphens only is prose: `bearer state-of-the-art`)."""
    spans: list[tuple[int, int, str]] = []
    for pattern in (_AUTH_HEADER, _BEARER):
        for match in pattern.finditer(low):
            start, end = match.span(1)
            before = low[match.start() - 1:match.start()]
            if (before.isalnum() or before == "_") or any(s < end and start < e for s, e, _ in spans):
                continue  # inside a word, or the header's credential again
            if pattern is _BEARER and _HYPHENATED.fullmatch(text, start, end):
                continue
            spans.append((start, end, REDACTED))
    return sorted(spans)


def _tokens(text: str) -> list[tuple[int, int, str]]:
    """The vendor tokens of `text`, as spans to redact (each from its first letter)."""
    spans = []
    for match in _TOKEN.finditer(text):
        start = match.start()
        while start > 0 and text[start - 1] in _ASCII_LETTERS:  # back over `before` (never further: _START)
            start -= 1
        spans.append((start, match.end(), REDACTED))
    return spans


def _keep_first(match: re.Match) -> str:
    return match.group(1) + REDACTED


def _url_password(match: re.Match) -> str:
    return match.group(1) + REDACTED + match.group(3)


def _command(match: re.Match) -> str:
    head = match.group(1) if match.group(1) is not None else match.group(3)
    value = match.group(2) if match.group(1) is not None else match.group(4)
    quote = value[0] if value[0] in "\"'" else ""
    return f"{head}{quote}{REDACTED}{quote}"


def redact(text: str) -> str:
    """`text` with every secret it recognises replaced by `[redacted]` (see the module)."""
    low = _lower(text)
    if "private key" in low:
        text = _PRIVATE_KEY.sub(REDACTED, text)
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(_url_password, text)
    if "/api/webhooks/" in low or "hooks.slack.com/" in low:
        text = _WEBHOOK.sub(_keep_first, text)
    text = _splice(text, _tokens(text))
    if _DISCORD_HINT.search(text):
        text = _DISCORD_BOT.sub(REDACTED, text)
    if "-p" in text and ("mysql" in low or "mariadb" in low or "sshpass" in low):
        text = _COMMAND_PASSWORD.sub(_command, text)
    low = _lower(text)
    if "authorization" in low or "bearer" in low:
        text = _splice(text, _credentials(text, low))
        low = _lower(text)
    if ("=" in text or ":" in text) and any(cue in low for cue in _NAME_CUES):
        text = _splice(text, _assignments(text, low))
    return text
