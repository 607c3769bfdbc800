"""Secrets are redacted before anything is logged (actors/upkeep/redact.py, `import-chats`).

A corpus: each kind of secret, in the way it shows up in a pasted chat, is caught and
only the secret becomes `[redacted]`; ordinary text (prose, code, hashes, ids, URLs
without a password, hyphenated English) is left exactly as it was. Issue 20, review P6:
a vendor token glued after `-`, `_`, `/` or `.` (a file name, a folder), and JWTs, npm,
Azure, SendGrid, Twilio, Discord and Slack webhooks and `mysql -p…`. The fake keys are
built from pieces so no scanner mistakes this file for a leak.
"""

from __future__ import annotations

import pytest

from everchat.actors.upkeep.redact import REDACTED, redact

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
NPM = "npm_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
SENDGRID = "SG." + "aBcDeFgHiJkLmNoPqRsTuV" + "." + "wXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ012"
TWILIO = "SK" + "0123456789abcdef0123456789abcdef"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq" + "/K1SZFPTOtr/KBHBeksoGMGw=="
DISCORD_HOOK = "1234567890123456789/" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdEfGhIjKlMnOpQrStUvWxYz01"
SLACK_HOOK = "T00000000/" + "B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
DISCORD_BOT = "MTIzNDU2Nzg5MDEyMzQ1Njc4" + ".GhIjKl." + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
WHSEC = "whsec_" + "AbCdEfGhIjKlMnOpQrStUvWx0123"
OPENROUTER = "sk-" + "or-v1-" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

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
    # P6 (a): a vendor token glued after -, _, / or . (file names, folders, ids)
    ("key glued in a file name", f"saved it as key-{OPENAI_PROJ}.txt", f"saved it as key-{R}.txt"),
    ("AWS id in a folder", f"cwd /home/u/proj-{AWS}/src", f"cwd /home/u/proj-{R}/src"),
    ("GitHub token after creds-", f"creds-{GITHUB}", f"creds-{R}"),
    ("GitHub token after creds_", f"creds_{GITHUB}_old", f"creds_{R}_old"),
    ("Google key after a dot", f"backup.{GOOGLE}.json", f"backup.{R}.json"),
    ("Anthropic key after a slash", f"keys/{ANTHROPIC}", f"keys/{R}"),
    ("AWS id before _old", f"{AWS}_old.csv", f"{R}_old.csv"),
    # P6 (b): the kinds the review found missing
    ("JWT alone", f"the session cookie was {JWT} yesterday", f"the session cookie was {R} yesterday"),
    ("npm token", f"//registry.npmjs.org/:_authToken={NPM}", f"//registry.npmjs.org/:_authToken={R}"),
    ("npm token alone", f"publish with {NPM}", f"publish with {R}"),
    ("Azure connection string",
     f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
     f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={R};EndpointSuffix=core.windows.net"),
    ("Azure Service Bus key", f"Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=root;"
     f"SharedAccessKey={AZURE_KEY}", f"Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=root;"
     f"SharedAccessKey={R}"),
    ("SendGrid key", f"sg = SendGridAPIClient('{SENDGRID}')", f"sg = SendGridAPIClient('{R}')"),
    ("Twilio API key", f"twilio api:core:keys {TWILIO} created", f"twilio api:core:keys {R} created"),
    ("Discord webhook", f"POST https://discord.com/api/webhooks/{DISCORD_HOOK} with the alert",
     f"POST https://discord.com/api/webhooks/{R} with the alert"),
    ("Slack webhook", f"curl -X POST https://hooks.slack.com/services/{SLACK_HOOK} -d @msg.json",
     f"curl -X POST https://hooks.slack.com/services/{R} -d @msg.json"),
    ("mysql -p", "mysql -u root -phunter2secret prod < dump.sql", f"mysql -u root -p{R} prod < dump.sql"),
    ("mysqldump -p quoted", "mysqldump -h db -u app -p'S3cr3t pass' shop > shop.sql",
     f"mysqldump -h db -u app -p'{R}' shop > shop.sql"),
    ("sshpass -p", "sshpass -p 'letmein99' ssh deploy@web1", f"sshpass -p '{R}' ssh deploy@web1"),
    # more of the same families, as chats write them
    ("Discord bot token", f"client.run('{DISCORD_BOT}')", f"client.run('{R}')"),
    ("Stripe webhook secret", f"endpoint secret {WHSEC}", f"endpoint secret {R}"),
    ("OpenRouter key", f"key {OPENROUTER}", f"key {R}"),
    ("PGPASSWORD", "PGPASSWORD=pg-Secret-42 psql -h db", f"PGPASSWORD={R} psql -h db"),
    ("x-api-key header", "curl -H 'x-api-key: a1b2c3d4e5f6' https://api.example.com",
     f"curl -H 'x-api-key: {R}' https://api.example.com"),
    ("camelCase in JS", "const config = { apiKey: \"AIzaFAKE-short\", clientSecret: 'cs-9f8e7d' };",
     f"const config = {{ apiKey: \"{R}\", clientSecret: '{R}' }};"),
    ("Go :=", 'password := "Tr0ub4dor&3"', f'password := "{R}"'),
    ("--password flag", "psql --password=Hunter2Hunter2 -U app", f"psql --password={R} -U app"),
    ("assignment in a path", "skipped /u/projects/-home-u-OPENAI_API_KEY=abc123def456/notes.jsonl: not a log",
     f"skipped /u/projects/-home-u-OPENAI_API_KEY={R} not a log"),
]

UNTOUCHED = [
    "Can you help me plan a trip to Kyoto in April? I love temples and ramen.",
    # hyphenated English and words that start like a vendor prefix
    "A well-known, state-of-the-art, up-to-date, self-hosted follow-up; a risk-free, long-term re-run.",
    "/home/u/projects/sk-learn-tutorial-for-beginners/notes.md and the task-sk-level-up-guide",
    "Ask-me-anything threads, desk-sharing rules, disk-usage reports and a whisk-and-fold recipe.",
    "SKIP-42 and SKU SK-1234 are tickets; AKIAN is not a word; eyJ is base64 for {\"",
    "ghp_ alone, npm_config_cache, hf_hub_download(), sk_live_ alone, SG.gov, xoxo-hugs",
    "The Eiffel Tower. Mozilla.Firefox.Browser-Edition.2024 is not a token.",
    # code that names a secret without holding one
    "password = request.form.get(\"password\")\nif not check_password_hash(user.pw_hash, password):",
    "client = OpenAI(api_key=api_key, timeout=30)\nself.token = token\nconfig.secret = settings.secret",
    "def login(username: str, password: str) -> bool:\n    ...\ninterface User { password: string; }",
    "max_tokens: 4096\nnum_tokens = len(tokens)\nsort_key = 'name'\nprimary_key=True\nmonkey: banana",
    "hotkey = 'ctrl+c' and sortKey: \"createdAt\" and public_key: ssh-ed25519",
    "Note: the password:\nNext line is prose, not the password.",
    "mysql -u root -p mydb\nmysql -h db -P 3306 -u app -p\npip install mysql-connector-python -pre",
    "https://discord.com/channels/1234/5678 and https://hooks.slack.com/ and https://api.slack.com/apps",
    "const willPass = await fetch(url);\nconst creds = new Credentials();",
    "The password: That is what he forgot. Our secret: Patience always wins.",
    "INFO token: refreshed for the session, a bearer state-of-the-art-design note",
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
    for secret in (ANTHROPIC, OPENAI, OPENAI_PROJ, AWS, GITHUB, GITHUB_PAT, SLACK, GOOGLE, STRIPE, JWT, NPM, SENDGRID,
                   TWILIO, AZURE_KEY, DISCORD_HOOK, SLACK_HOOK, DISCORD_BOT, WHSEC, OPENROUTER,
                   "hunter2-Secret", "Tr0ub4dor&3", "MIIEowIBAAKCAQEA7", "hunter2secret", "S3cr3t pass", "letmein99"):
        assert secret not in once
        assert secret[-12:] not in once


TOKENS = {"Anthropic": ANTHROPIC, "OpenAI": OPENAI, "OpenAI project": OPENAI_PROJ, "AWS": AWS, "GitHub": GITHUB,
          "GitHub fine-grained": GITHUB_PAT, "Slack": SLACK, "Google": GOOGLE, "Stripe": STRIPE, "JWT": JWT,
          "npm": NPM, "SendGrid": SENDGRID, "Twilio": TWILIO, "Discord bot": DISCORD_BOT, "Stripe webhook": WHSEC,
          "OpenRouter": OPENROUTER}
GLUES = ["-", "_", "/", ".", " ", "=", ":", "'", "(", "\n"]


@pytest.mark.parametrize("glue", GLUES, ids=[repr(g) for g in GLUES])
@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_p6_a_vendor_token_is_redacted_glued_after_any_separator(kind, glue):
    """P6: a token after `-`, `_`, `/`, `.` (a file name `key-sk-…`, a folder `proj-AKIA…`) as after a space."""
    token = TOKENS[kind]
    assert redact(f"word{glue}{token} end") == f"word{glue}{R} end"
    assert redact(f"{glue}{token}") == f"{glue}{R}"  # at the very start of a text too


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_a_vendor_token_inside_a_longer_word_is_not_taken_for_one(kind):
    """The other side of the rule: a token needs no letter or digit right before it."""
    text = f"x9{TOKENS[kind]}"
    assert redact(text) == text


@pytest.mark.parametrize("length", range(16, 32))
def test_bearer_tokens_of_16_to_31_characters_are_redacted(length):
    token = ("Ab3-_.~+/" * 4)[:length]
    assert redact(f"GET /me with bearer {token} today") == f"GET /me with bearer {R} today"
    assert redact(f"Authorization: Bearer {token}") == f"Authorization: Bearer {R}"


def test_a_short_bearer_word_is_prose_but_a_short_header_credential_is_not():
    assert redact("bearer abc123def45") == "bearer abc123def45"  # 15 characters: prose can say "bearer xyz"
    assert redact("Authorization: Basic dXNlcjpw") == f"Authorization: Basic {R}"


def test_text_whose_lower_case_is_longer_keeps_every_position():
    """"İ".lower() is two characters: the passes that search the lower-cased text must not
    cut the wrong span."""
    text = f"İİİ password: hunter2hunter2 İ and bearer {'x1' * 10} İ api_key={OPENAI}"
    assert redact(text) == f"İİİ password: {R} İ and bearer {R} İ api_key={R}"
