"""Secrets out of transcripts, before anything is archived, indexed or logged.

A transcript holds whatever went through the session: a `cat .env`, a `curl -H "Authorization: Bearer ..."`,
a pasted key. Each rule below finds one kind of secret and replaces it (only the secret, not its label) with
`[REDACTED:<rule>]`; `redact(text)` returns the new text and how many secrets it replaced. The rules, in the
order they run (docs/sessions.md lists them with examples):

- `private_key`    PEM / OpenSSH / PGP private key blocks, BEGIN to END (to the end of the text if cut)
- `anthropic_key`  sk-ant-...
- `openai_key`     sk-..., sk-proj-..., sk-svcacct-..., sk-admin-... (20+ characters, at least one digit)
- `aws_access_key` AKIA / ASIA / ABIA / ACCA + 16 upper-case letters or digits
- `aws_secret_key` the 40-character value after aws_secret_access_key / SecretAccessKey
- `github_token`   ghp_ gho_ ghu_ ghs_ ghr_ (36+) and github_pat_ (22+)
- `gitlab_token`   glpat-...
- `slack_token`    xoxb- xoxp- xoxa- xoxo- xoxr- xoxs- and xapp- tokens
- `google_api_key` AIza + 35 characters
- `stripe_key`     sk_live_ rk_live_ sk_test_ rk_test_ ...
- `persmem_token`  pm_ + 32 or more URL-safe characters (an agent's bearer token)
- `authorization`  the credentials of an Authorization header (Bearer, Basic, Token, ...) and any
                   `Bearer <token>` of 16+ characters
- `url_password`   the password in scheme://user:password@host
- `assignment`     the value of an assignment whose name contains SECRET, TOKEN (not TOKENS, TOKENIZER),
                   PASSWORD, PASSWD, PASSPHRASE, API_KEY, ACCESS_KEY or PRIVATE_KEY (any case, _ and - ignored):
                   `.env` lines (`export GITHUB_TOKEN=...`), shell words (`cd app && DB_PASSWORD=... ./run`),
                   YAML/TOML (`password: ...`), headers (`-H 'X-Api-Key: ...'`), flags (`--password ...`,
                   `--api-key=...`; not `--password-stdin`, `--token-file`), JSON and code (`"client_secret":
                   "..."`, `api_key = '...'`, `os.environ["DB_PASSWORD"] = "..."`), every string of a JSON list
                   under such a key (`{"passwords": [...]}`). Numbers and true/false/null are kept
                   (`max_tokens: 4096` is not a secret).

What no rule can see stays: a secret with no recognisable shape and no telling name around it (or only
base64-encoded, or split across two messages), `curl -u user:pass`, JSON escaped twice. The rules are linear
regular expressions (no nested repetition, and no repetition right after a lookbehind that every position
passes), so a multi-megabyte line costs a scan, not a hang.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

MARK = "[REDACTED:{}]"

_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|PASSPHRASE|APIKEY|ACCESSKEY|PRIVATEKEY|TOKEN(?!S|IZ)")
_HARMLESS_VALUES = {"true", "false", "null", "none", "nil", "yes", "no", "on", "off", "redacted"}


def _secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name.upper().replace("_", "").replace("-", "")))


def _harmless(value: str) -> bool:
    bare = value.strip().lower()
    return (bare in _HARMLESS_VALUES or bare.startswith("[redacted")
            or bool(re.fullmatch(r"[\d.,_]+", bare)))  # a number: a count, a limit, a port


# (rule, pattern, group holding the secret: 0 = the whole match)
_SHAPES: list[tuple[str, re.Pattern[str], int]] = [
    ("private_key", re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
                               r"[\s\S]*?(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)"), 0),
    ("anthropic_key", re.compile(r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,}"), 0),
    ("openai_key", re.compile(r"(?<![A-Za-z0-9_-])sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z_-]{0,300}\d)"
                              r"[A-Za-z0-9_-]{20,}"), 0),
    ("aws_access_key", re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"), 0),
    ("aws_secret_key", re.compile(r"(?i:aws_?secret_?access_?key|secret_?access_?key)[\"']?\s*[:=]\s*[\"']?"
                                  r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"), 1),
    ("github_token", re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"), 0),
    ("gitlab_token", re.compile(r"(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,}"), 0),
    ("slack_token", re.compile(r"(?<![A-Za-z0-9_-])(?:xox[abposr]|xapp)-[A-Za-z0-9-]{10,}"), 0),
    ("google_api_key", re.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), 0),
    ("stripe_key", re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}"), 0),
    ("persmem_token", re.compile(r"(?<![A-Za-z0-9_-])pm_[A-Za-z0-9_-]{32,}"), 0),
    ("authorization", re.compile(r"(?i:authorization)[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z]+\s+)?"
                                 r"([A-Za-z0-9._~+/=:-]{8,})"), 1),
    ("authorization", re.compile(r"(?i:\bbearer)\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1),
    ("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@\"'<>]{0,200}:([^\s@/\"'<>]{1,200})@"), 1),
]

# name = value, the value quoted (JSON, code, YAML, TOML; also inside JSON-escaped text: \"password\": \"...\";
# and a subscript: os.environ["DB_PASSWORD"] = "...") ...
_QUOTED_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]{1,100})\\?[\"']?\]?[ \t]*[:=][ \t]*\\?([\"'])"
                                r"([^\"'\n\\]{4,}?)\\?\2")
# ... or bare at the start of a line (.env, YAML, shell export) or of a shell word (`cd app && DB_PASSWORD=... ./run`;
# `^[ \t]*` only at a line's start: spaces after a lookbehind would be rescanned at every position) ...
_BARE_ASSIGNMENT = re.compile(r"(?m)(?:^[ \t]*|(?<=[\s;&|(]))(?:export[ \t]+)?([A-Za-z0-9_.-]{1,100})[ \t]*[:=][ \t]*"
                              r"([^\s\"'#,;]{4,})")
# ... or a header anywhere (`curl -H 'X-Api-Key: ...'`, `PRIVATE-TOKEN: ...`) ...
_HEADER = re.compile(r"(?<![A-Za-z0-9_-])([A-Za-z0-9_-]{1,100}):[ \t]*([^\s\"',;]{4,})")
# ... or a command-line flag's value (`--password VALUE`, `--api-key=VALUE`), not a flag naming a file or stdin
_FLAG = re.compile(r"(?<![A-Za-z0-9_-])--([A-Za-z0-9_-]{1,100})(?:=|[ \t]+)[\"']?([^\s\"'-][^\s\"']{3,})")
_FLAG_NAMES_NO_SECRET = re.compile(r"(?:FILE|PATH|DIR|STDIN|FD|ENV|LENGTH|LEN)$")


def _replace_group(rule: str, group: int, counter: list[int]) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        if group and (_harmless(match.group(group)) or "[REDACTED:" in match.group(0)):
            return match.group(0)  # a value, or a mark an earlier rule left (https://[REDACTED:github_token]@...)
        counter[0] += 1
        start, end = match.span(group)
        offset = match.start(0)
        whole = match.group(0)
        return whole[:start - offset] + MARK.format(rule) + whole[end - offset:]

    return replace


def _replace_assignment(value_group: int, counter: list[int], flag: bool = False) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        value = match.group(value_group)
        if not _secret_name(match.group(1)) or _harmless(value) or \
                (flag and _FLAG_NAMES_NO_SECRET.search(match.group(1).upper().replace("_", "").replace("-", ""))):
            return match.group(0)
        counter[0] += 1
        start, end = match.span(value_group)
        offset = match.start(0)
        whole = match.group(0)
        return whole[:start - offset] + MARK.format("assignment") + whole[end - offset:]

    return replace


def redact(text: str) -> tuple[str, int]:
    """`text` with every secret the rules recognise replaced by `[REDACTED:<rule>]`, and how many were."""
    counter = [0]
    for rule, pattern, group in _SHAPES:
        text = pattern.sub(_replace_group(rule, group, counter), text)
    text = _QUOTED_ASSIGNMENT.sub(_replace_assignment(3, counter), text)
    text = _BARE_ASSIGNMENT.sub(_replace_assignment(2, counter), text)
    text = _HEADER.sub(_replace_assignment(2, counter), text)
    text = _FLAG.sub(_replace_assignment(2, counter, flag=True), text)
    return text, counter[0]


def _nested_json(text: str):
    """The value of `text` when it is a JSON object or array, else None."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes (`cat deep.json`)
        return None
    return value if isinstance(value, (dict, list)) else None


def redact_line(line: str) -> tuple[str, int]:
    """One transcript line redacted. A JSON line is redacted value by value (its strings decoded first, so a
    key split by JSON escapes like `\\n` is still found) and written back as JSON, so it stays a valid line;
    it is written back only when something was redacted. Any other line, or one nested deeper than the parser
    goes, is redacted as text."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return redact(line)
    counter = [0]

    def walk(node):
        if isinstance(node, str):
            nested = _nested_json(node)
            if nested is not None:  # a tool output that is JSON text itself (Codex's {"output", "metadata"})
                before = counter[0]
                cleaned = walk(nested)
                return node if counter[0] == before else json.dumps(cleaned, ensure_ascii=False)
            cleaned, found = redact(node)
            counter[0] += found
            return cleaned
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            # keys too: a secret can be a key ({"sk-...": ...} in a tool's JSON output)
            return {walk(key): named(key, item) for key, item in node.items()}
        return node

    def named(key, item):  # {"password": "hunter22"}: the name is the key, the value a string of its own
        if not (isinstance(key, str) and _secret_name(key)):
            return walk(item)
        if isinstance(item, str) and not _harmless(item) and len(item) >= 4:
            counter[0] += 1
            return MARK.format("assignment")
        if isinstance(item, list):  # {"passwords": ["...", "..."]}: each string of the list
            return [named(key, value) if isinstance(value, str) else walk(value) for value in item]
        return walk(item)

    try:
        cleaned = walk(value)
        if not counter[0]:
            return line, 0
        text = json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:  # walking (or writing back) a line nested this deep: redact it as text instead
        return redact(line)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a string cut inside an emoji): keep it escaped, as it came
        text = json.dumps(cleaned, separators=(",", ":"))
    return text, counter[0]
