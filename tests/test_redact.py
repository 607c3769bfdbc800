"""Secrets are redacted before anything is logged (actors/redact.py, `import-chats`).

A corpus: each kind of secret, in the way it shows up in a pasted chat, is caught and
only the secret becomes `[redacted]`; ordinary text (prose, code, hashes, ids, URLs
without a password) is left exactly as it was. The fake keys are built from pieces so no
scanner mistakes this file for a leak.
"""

from __future__ import annotations

import pytest

from everchat.actors.redact import REDACTED, redact

R = REDACTED
ANTHROPIC = "sk-ant-" + "api03-" + "Xq7vB2mN9pL4kR8sT1wY6zA3cD5fG0hJ-_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
OPENAI = "sk-" + "4fTq9ZbL2xWm8RkY1vNc7HsD3gJp6QaE0uBiCoFl"
OPENAI_PROJ = "sk-" + "proj-" + "Zr3T8yQw1-Lk5Nv2Bx7Mc9Pd4Hf6Gj0Sa_EXAMPLEonly"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "1aB2cD3eF4gH5iJ6kL7mN8oP9qR0sT1uV2wX3"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP"
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
GOOGLE = "AIza" + "SyD3x4mPl3K3y_0nlyF0rT3st1ngPurp0s3"
STRIPE = "sk_live_" + "51HxYzAbCdEfGhIjKlMnOpQr"
JWT = "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

CAUGHT = [
    ("Anthropic key", f"my key is {ANTHROPIC}, why does it fail?", f"my key is {R}, why does it fail?"),
    ("OpenAI key", f"client = OpenAI(api_key=\"{OPENAI}\")", f"client = OpenAI(api_key=\"{R}\")"),
    ("OpenAI project key", f"use {OPENAI_PROJ} for now", f"use {R} for now"),
    ("AWS access key id", f"aws_access_key_id = {AWS}\nregion = eu-west-1",
     f"aws_access_key_id = {R}\nregion = eu-west-1"),
    ("GitHub token", f"git clone https://{GITHUB}@github.com/me/repo.git",
     f"git clone https://{R}@github.com/me/repo.git"),
    ("GitHub fine-grained token", f"token: {GITHUB_PAT}", f"token: {R}"),
    ("Slack token", f"SLACK_BOT={SLACK} in the bot", f"SLACK_BOT={R} in the bot"),
    ("Google API key", f"https://maps.googleapis.com/maps/api/geocode/json?key={GOOGLE}",
     f"https://maps.googleapis.com/maps/api/geocode/json?key={R}"),
    ("Stripe live key", f"stripe.api_key = '{STRIPE}'", f"stripe.api_key = '{R}'"),
    ("bearer header", f"curl -H 'Authorization: Bearer {JWT}' https://api.example.com/me",
     f"curl -H 'Authorization: Bearer {R}' https://api.example.com/me"),
    ("bearer alone", f"the response said bearer {JWT} expired", f"the response said bearer {R} expired"),
    ("basic auth header", "Authorization: Basic dXNlcjpodW50ZXIy", f"Authorization: Basic {R}"),
    ("password in a URL", "DATABASE_URL postgres://app:hunter2-Secret@db.internal:5432/prod",
     f"DATABASE_URL postgres://app:{R}@db.internal:5432/prod"),
    ("private key block", "here:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9u\n"
     "ZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQy\n-----END OPENSSH PRIVATE KEY-----\nthanks", f"here:\n{R}\nthanks"),
    ("RSA private key block", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
     R),
    (".env assignments", "OPENAI_API_KEY=abc123def456\nDB_PASSWORD=\"correct horse battery\"\nDEBUG=true\n"
     "export GITHUB_TOKEN='tok-value-1234'\nSTRIPE_SECRET=whsec_9f8e7d6c\nPORT=8080",
     f"OPENAI_API_KEY={R}\nDB_PASSWORD=\"{R}\"\nDEBUG=true\nexport GITHUB_TOKEN='{R}'\nSTRIPE_SECRET={R}\nPORT=8080"),
    ("PASSWORD in JSON", '{"user": "ana", "password": "Tr0ub4dor&3"}', f'{{"user": "ana", "password": "{R}"}}'),
    ("YAML secret", "aws:\n  secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
     f"aws:\n  secret_access_key: {R}\n"),
]

UNTOUCHED = [
    "Can you help me plan a trip to Kyoto in April? I love temples and ramen.",
    "The commit 3f9a2c1d4e5b6a7f8091a2b3c4d5e6f708192a3b broke the build; revert it.",
    "uuid 550e8400-e29b-41d4-a716-446655440000 and sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "api_key = os.environ[\"OPENAI_API_KEY\"]\ntoken = process.env.GITHUB_TOKEN",
    "PASSWORD=$DB_PASSWORD and SECRET_KEY=None and API_KEY=null",
    "Visit https://example.com/path?q=kyoto&lang=ja or http://user@host.example.org/",
    "A risk-assessment of ask-anything tools; the task-runner sk-learn isn't a key.",
    "Use the Bearer scheme in the Authorization header; bearer tokens expire.",
    "def password_strength(password: str) -> int:\n    return len(set(password))",
    "日本語のテキストと emoji 🙂 stay as they are, même les accents.",
    "The key insight: keys of a dict, token counts (4,096 tokens), a secret recipe.",
]


@pytest.mark.parametrize("what, text, expected", CAUGHT, ids=[c[0] for c in CAUGHT])
def test_each_kind_of_secret_is_redacted_and_only_the_secret(what, text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", UNTOUCHED)
def test_ordinary_text_is_left_exactly_as_it_was(text):
    assert redact(text) == text


def test_redaction_is_idempotent_and_leaves_no_piece_of_a_secret():
    text = "\n".join(t for _, t, _ in CAUGHT)
    once = redact(text)
    assert redact(once) == once
    for secret in (ANTHROPIC, OPENAI, OPENAI_PROJ, AWS, GITHUB, GITHUB_PAT, SLACK, GOOGLE, STRIPE, JWT,
                   "hunter2-Secret", "Tr0ub4dor&3", "MIIEowIBAAKCAQEA7"):
        assert secret not in once
        assert secret[-12:] not in once
