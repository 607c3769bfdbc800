"""Redaction's speed (issue 20, performance review P4): `redact` over a seeded corpus shaped
like an `import-chats` run, one JSON line per figure.

`import-chats` calls `redact` once per message and per conversation heading; in the
review's 100,000-message dry run that was 153,000 texts (56 MB, about 370 bytes a text)
and 8.7 s of its 14 s. The corpus here is drawn from one seed, so two runs redact the same
bytes:

- `prose`: questions and replies in English words, with the punctuation chats have (colons,
  quotes, lists, hyphenated words) and the words that sound like secrets (key, token,
  password, pass, secret, bearer) used as words;
- `code`: Python, JavaScript, shell and config snippets: assignments, dicts, URLs, hashes,
  UUIDs, `os.environ[...]` reads, `Authorization` built from a variable;
- `tool`: tool calls as compact JSON and their results (command output, logs, tracebacks);
- and one text in 50 with a real-looking secret of one of the kinds `redact` knows.

Texts are 20 to 2,000 bytes, log-uniform. Figures (MB is 10^6 bytes of UTF-8; seconds
are this process's CPU time, so other work on the machine does not count):

- `mb_per_s` for the whole mixed corpus and for each kind alone (`kind`), best of
  `--rounds` with the median beside it;
- `texts_per_s` over the mixed corpus;
- `changed_texts`: how many texts of the mixed corpus `redact` changed (about one in 50
  holds a secret; the rest it changed are innocent texts it took for secrets), and
  `missed_secrets`: how many of the secret lines it left as they were (0).

    python tools/bench/bench_redact.py [--megabytes 8] [--rounds 5] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time

from everchat.actors.upkeep.redact import redact

__all__ = ["main", "corpus", "KINDS", "SECRETS"]

KINDS = ("prose", "code", "tool")

_WORDS = (
    "the a of to and in that is for it with as was on be at by this have from or an they which you one we "
    "all were her would there their will when who him been has more if no out so said what up its about "
    "into than them can only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world still own "
    "see men work long get here between both life being under never day same another know while last "
    "cache build view summary merge budget error test server socket config path file function class "
    "import return value list dict string number request response header timeout retry thread process "
    "memory queue worker tree leaf node parent child key keys keyboard monkey token tokens secret secrets "
    "password passwords pass passed passing bearer auth author credit credentials api endpoint deploy "
    "risk-free well-known up-to-date state-of-the-art re-run built-in follow-up long-term self-hosted "
    "Kyoto Python Rust JavaScript Postgres Docker Kubernetes GitHub Linux macOS Windows Chrome"
).split()

_CODE = [
    'def {w}_{v}(self, {w}: str, timeout: float = 30.0) -> dict:\n    """{s}"""\n    return {{"{w}": {w}, "n": {n}}}',
    'api_key = os.environ["OPENAI_API_KEY"]\nclient = OpenAI(api_key=api_key, timeout={n})',
    'const {w}{V} = await fetch(`https://api.example.com/v1/{w}/${{id}}?limit={n}`, {{ headers }});',
    'headers = {{"Authorization": f"Bearer {{token}}", "Content-Type": "application/json"}}',
    'for i in range({n}):\n    if {w}[i] == {v}[i]:\n        count += 1  # {s}',
    'export PATH="$HOME/.local/bin:$PATH"\nexport {W}_URL=http://localhost:{n}/{w}',
    'git log --oneline | head\n{h7} {s}\n{h7} fix the {w} {v}',
    '{{"id": "{uuid}", "{w}": {n}, "{v}": "{s}", "sha": "{h40}"}}',
    'SELECT {w}, {v} FROM {w}s WHERE id = {n} AND created_at > now() - interval \'1 day\';',
    'max_tokens: {n}\ntemperature: 0.{d}\nmodel: claude-sonnet-4\nstream: true',
    'password = request.form.get("password")\nif not check_password_hash(user.pw_hash, password):',
    'let {w} = {v}.iter().map(|x| x * {n}).collect::<Vec<_>>();',
    'docker run -p {n}:{n} -v $(pwd):/app -e DEBUG=1 {w}/{v}:latest',
    '<div class="{w}-{v}"><a href="https://example.org/{w}?q={v}&page={d}">{s}</a></div>',
]

_TOOL = [
    '{{"command":"ls -la /home/u/projects/{w}-{v}","description":"List the {w} folder"}}',
    '{{"file_path":"/home/u/src/{w}/{v}.py","old_string":"{s}","new_string":"{s} {w}"}}',
    'Traceback (most recent call last):\n  File "/usr/lib/python3.11/{w}.py", line {n}, in {v}\n    {s}\n'
    'KeyError: \'{w}\'',
    '{n} passed, {d} failed in {d}.{n}s\nFAILED tests/test_{w}.py::test_{v} - AssertionError: {s}',
    '2025-03-02T09:{d}{d}:{d}{d}Z INFO {w}: {s} (took {n} ms, id={uuid})',
    '{{"pattern":"{w}_{v}","path":"/home/u/src","output_mode":"content","-n":true}}',
    'drwxr-xr-x  {d} u u  4096 Mar  2 09:15 {w}\n-rw-r--r--  1 u u {n} Mar  2 09:15 {v}.json',
]

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _random(rng: random.Random, n: int, alphabet: str = _B64) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


_UPPER = _B64[:26] + "0123456789"
SECRETS = [  # one secret of a kind `redact` knows, in a line (pieces joined: no scanner takes this file for a leak)
    lambda rng: "my key is sk-" + "proj-" + _random(rng, 48) + " and it fails",
    lambda rng: "export ANTHROPIC_API_KEY=sk-" + "ant-api03-" + _random(rng, 60),
    lambda rng: "aws_access_key_id = AKIA" + _random(rng, 16, _UPPER),
    lambda rng: "git clone https://ghp" + "_" + _random(rng, 36) + "@github.com/u/repo.git",
    lambda rng: "curl -H 'Authorization: Bearer " + _random(rng, 40) + "' https://api.example.com",
    lambda rng: "DATABASE_URL=postgres://app:" + _random(rng, 12) + "@db.internal:5432/prod",
    lambda rng: '{"user": "ana", "password": "' + _random(rng, 14) + '"}',
    lambda rng: "token eyJ" + _random(rng, 20) + ".eyJ" + _random(rng, 40) + "." + _random(rng, 43),
    lambda rng: "/home/u/proj-AKIA" + _random(rng, 16, _UPPER) + "/notes.txt",
    lambda rng: "mysql -u root -p" + _random(rng, 10) + " prod < dump.sql",
    lambda rng: "npm config set //registry.npmjs.org/:_authToken npm" + "_" + _random(rng, 36),
    lambda rng: "AccountName=acme;AccountKey=" + _random(rng, 86) + "==;EndpointSuffix=core.windows.net",
]


def _secret(rng: random.Random) -> str:
    return rng.choice(SECRETS)(rng)


def _fill(template: str, rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(3)]
    return template.format(
        w=words[0].lower().replace("-", "_"), v=words[1].lower().replace("-", "_"), V=words[1].capitalize(),
        W=words[2].upper().replace("-", "_"), s=" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))),
        n=rng.randint(1, 65535), d=rng.randint(0, 9), h7="%07x" % rng.getrandbits(28),
        h40="%040x" % rng.getrandbits(160), uuid="%08x-%04x-4%03x-a%03x-%012x" % (
            rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12), rng.getrandbits(12), rng.getrandbits(48)))


def _prose(rng: random.Random, size: int) -> str:
    out, length = [], 0
    while length < size:
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 18)))
        sentence = sentence[0].upper() + sentence[1:]
        shape = rng.random()
        if shape < 0.1:
            sentence = f"- {sentence}"
        elif shape < 0.2:
            sentence = f"Note: {sentence}"
        elif shape < 0.25:
            sentence = f'He said "{sentence}"'
        out.append(sentence + rng.choice([".", ".", ".", "?", "!", ":", ";"]))
        length += len(out[-1]) + 1
    return (" " if rng.random() < 0.7 else "\n").join(out)[:size]


def _snippets(rng: random.Random, size: int, templates: list[str]) -> str:
    out, length = [], 0
    while length < size:
        out.append(_fill(rng.choice(templates), rng))
        length += len(out[-1]) + 1
    return "\n".join(out)[:size]


def corpus(seed: int, megabytes: float, kind: str | None = None, secrets: list[str] | None = None) -> list[str]:
    """Texts of `kind` (or mixed: half prose, a third code, the rest tool calls and
    results) totalling about `megabytes` MB; one text in 50 (mixed) holds a secret, whose
    line is added to `secrets`."""
    rng = random.Random(seed)
    texts, total = [], 0
    while total < megabytes * 1e6:
        size = int(math.exp(rng.uniform(math.log(20), math.log(2000))))
        pick = kind or rng.choices(KINDS, weights=(3, 2, 1))[0]
        if pick == "prose":
            text = _prose(rng, size)
        else:
            text = _snippets(rng, size, _CODE if pick == "code" else _TOOL)
        if kind is None and rng.random() < 0.02:
            secret = _secret(rng)
            text = f"{text[:size // 2]}\n{secret}\n{text[size // 2:]}"
            if secrets is not None:
                secrets.append(secret)
        texts.append(text)
        total += len(text.encode())
    return texts


def _emit(figure: str, value: float, **extra: object) -> None:
    print(json.dumps({"bench": "redact", "figure": figure, "value": round(value, 2), **extra}), flush=True)


def _rates(texts: list[str], rounds: int) -> tuple[list[float], float]:
    """MB per CPU second of each round, and the CPU seconds of the best (CPU time, not the
    wall clock: the machine is shared, and `redact` is pure computation)."""
    size = sum(len(t.encode()) for t in texts) / 1e6
    seconds = []
    for _ in range(rounds):
        began = time.process_time()
        for text in texts:
            redact(text)
        seconds.append(time.process_time() - began)
    return [size / s for s in seconds], min(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=8.0, help="size of the mixed corpus (each kind: half)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    secrets: list[str] = []
    mixed = corpus(args.seed, args.megabytes, secrets=secrets)
    size = sum(len(t.encode()) for t in mixed)
    rates, best = _rates(mixed, args.rounds)
    _emit("mb_per_s", max(rates), kind="mixed", median=round(statistics.median(rates), 2), texts=len(mixed),
          megabytes=round(size / 1e6, 2), mean_text_bytes=round(size / len(mixed)))
    _emit("texts_per_s", len(mixed) / best, kind="mixed")
    _emit("changed_texts", sum(redact(t) != t for t in mixed), kind="mixed", texts=len(mixed),
          with_a_secret=len(secrets))
    _emit("missed_secrets", sum(redact(line) == line for line in secrets), kind="mixed", secrets=len(secrets))
    for kind in KINDS:
        rates, _ = _rates(corpus(args.seed + 1, args.megabytes / 2, kind), args.rounds)
        _emit("mb_per_s", max(rates), kind=kind, median=round(statistics.median(rates), 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
