"""Secrets known by the name they are given rather than by their shape: the value of a name=value assignment (.env,
shell, code, YAML, TOML, query parameters), of a header or of a command-line flag, when the name holds SECRET,
TOKEN, PASSWORD, API_KEY...; and each long value of a cookie header. What counts as a secret's name
(`secret_name`) and as a value that is none (`harmless`) is decided here, for redact.py's JSON keys too.

The name=value rules run only on the lines holding a telling word (secret, pass, token, key) and cookies only where
`cookie` or `-b` stands, so a text that names nothing costs a few substring searches.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .secret_rules import MARK

_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|PASSPHRASE|APIKEY|ACCESSKEY|PRIVATEKEY|TOKEN(?!S|IZ)")
NAME_WORDS = ("secret", "pass", "token", "key")  # every _SECRET_NAME match holds one (lower-cased)
_KEY_OWNERS = ("api", "access", "private")
_HARMLESS_VALUES = {"true", "false", "null", "none", "nil", "yes", "no", "on", "off", "redacted"}


def secret_name(name: str) -> bool:
    """Whether `name` names a secret (DB_PASSWORD, apiKey, X-Auth-Token; not TOKENS, not a tokenizer)."""
    return bool(_SECRET_NAME.search(name.upper().replace("_", "").replace("-", "")))


def harmless(value: str) -> bool:
    """Whether `value` cannot be a secret: true/false/null and the like, a number, a mark already left."""
    bare = value.strip().lower()
    return (bare in _HARMLESS_VALUES or bare.startswith("[redacted")
            or bool(re.fullmatch(r"[\d.,_]+", bare)))  # a number: a count, a limit, a port


# Cookie / Set-Cookie headers and curl's -b / --cookie: each value of 16+ characters (a session id; `theme=dark`
# stays); a JWT in one is already marked `jwt`
_COOKIE_HEADER = re.compile(r"(?<![A-Za-z0-9_-])(?i:set-)?(?i:cookie)[\"']?[ \t]*:[ \t]*[\"']?([^\r\n\"']{0,4000})")
_COOKIE_FLAG = re.compile(r"(?<![\w-])(?:-b|--cookie)[ \t]+[\"']?([^\r\n\"']{0,4000})")
_COOKIE = re.compile(r"([^=;\s]{1,100})=([^;\s]{16,})")

# name = value, the value quoted (JSON, code, YAML, TOML; also inside JSON-escaped text: \"password\": \"...\";
# and a subscript: os.environ["DB_PASSWORD"] = "...") ...
_QUOTED_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]{1,100})\\?[\"']?\]?[ \t]*[:=][ \t]*\\?([\"'])"
                                r"([^\"'\n\\]{4,}?)\\?\2")
# ... or bare at the start of a line (.env, YAML, shell export): the value runs to the first blank, `#` `,` `;`
# inside it included (`DB_PASSWORD=a#b,c;d`), a `,` or `;` ending it left out ...
_LINE_ASSIGNMENT = re.compile(r"(?m)^[ \t]*(?:export[ \t]+)?([A-Za-z0-9_.-]{1,100})[ \t]*[:=][ \t]*"
                              r"([^\s\"']{4,}?)[,;]?(?=[\s\"']|$)")
# ... or bare after a blank or a separator: a shell word (`cd app && DB_PASSWORD=... ./run`), a query parameter
# (`?api_key=...&`, first or not); the value stops at the next separator (so a scan never runs twice over one) ...
_WORD_ASSIGNMENT = re.compile(r"(?<=[\s;&|(?])(?:export[ \t]+)?([A-Za-z0-9_.-]{1,100})[ \t]*[:=][ \t]*"
                              r"([^\s\"';&|?()]{4,}?),?(?=[\s\"';&|?()]|$)")
# ... or a header anywhere (`curl -H 'X-Api-Key: ...'`, `PRIVATE-TOKEN: ...`) ...
_HEADER = re.compile(r"(?<![A-Za-z0-9_-])([A-Za-z0-9_-]{1,100}):[ \t]*([^\s\"',;]{4,})")
# ... or a command-line flag's value (`--password VALUE`, `--api-key=VALUE`), not a flag naming a file or stdin
_FLAG = re.compile(r"(?<![A-Za-z0-9_-])--([A-Za-z0-9_-]{1,100})(?:=|[ \t]+)[\"']?([^\s\"'-][^\s\"']{3,})")
_FLAG_NAMES_NO_SECRET = re.compile(r"(?:FILE|PATH|DIR|STDIN|FD|ENV|LENGTH|LEN)$")
# an unquoted value that is code, not a secret: a call (`token = header.partition(`, `password = getpass()`)
_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\(")


def _cookie_headers(text: str, lower: str):
    """The Cookie / Set-Cookie headers and curl -b / --cookie flags of `text`, in order, not overlapping; tried only
    where `cookie` or `-b` stands (a case-insensitive pattern would be tried at every position)."""
    found = []
    for anchor in ("cookie", "-b"):
        at = lower.find(anchor)
        while at != -1:
            if anchor == "-b":
                starts = [(_COOKIE_FLAG, at)]
            else:
                starts = [(_COOKIE_HEADER, at - 4 if lower.startswith("set-", at - 4) else at),
                          (_COOKIE_FLAG, at - 2)]
            for pattern, start in starts:
                match = pattern.match(text, start) if start >= 0 else None
                if match:
                    found.append(match)
            at = lower.find(anchor, at + 1)
    found.sort(key=lambda match: match.start())
    last = 0
    for match in found:
        if match.start() >= last:
            yield match
            last = match.end()


def _cookies(text: str, lower: str, counter: list[int]) -> str:
    def one(pair: re.Match[str]) -> str:
        if "[REDACTED:" in pair.group(2):
            return pair.group(0)
        counter[0] += 1
        return f"{pair.group(1)}={MARK.format('cookie')}"

    pieces, last = [], 0
    for match in _cookie_headers(text, lower):
        value = match.group(1)
        if match.re is _COOKIE_HEADER and lower.startswith("set-", match.start()):  # one cookie, then attributes
            first, separator, attributes = value.partition(";")
            value = _COOKIE.sub(one, first) + separator + attributes
        else:
            value = _COOKIE.sub(one, value)
        pieces += [text[last:match.start(1)], value]
        last = match.end(1)
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _replace_assignment(value_group: int, counter: list[int], flag: bool = False,
                        bare: bool = False) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        value = match.group(value_group)
        if not secret_name(match.group(1)) or harmless(value) or \
                (bare and _CALL.match(match.string, match.start(value_group))) or \
                (flag and _FLAG_NAMES_NO_SECRET.search(match.group(1).upper().replace("_", "").replace("-", ""))):
            return match.group(0)
        counter[0] += 1
        start, end = match.span(value_group)
        offset = match.start(0)
        whole = match.group(0)
        return whole[:start - offset] + MARK.format("assignment") + whole[end - offset:]

    return replace


_SPAN_GAP = 512  # characters between two such lines scanned as well rather than scanned apart


def _telling(lower: str, at: int, word: str) -> bool:
    """Whether the word at `at` can be part of a secret's name: pass as in password / passwd / passphrase, key as in
    api_key / accesskey / private-key (a Python `pass`, a dict's `key` are not)."""
    if word == "pass":
        return lower[at + 4:at + 16].lstrip("_-").startswith(("w", "phrase"))
    if word == "key":
        return lower[max(0, at - 16):at].rstrip("_-").endswith(_KEY_OWNERS)
    return True


def _named_lines(text: str, lower: str) -> list[tuple[int, int]]:
    """The spans of the lines holding a telling word, merged, in order (every name=value rule stays on one line)."""
    if len(lower) != len(text):  # lower-casing changed the length (a rare letter): positions differ, take it all
        return [(0, len(text))]
    spans = []
    for word in NAME_WORDS:
        at = lower.find(word)
        while at != -1:
            if not _telling(lower, at, word):
                at = lower.find(word, at + 1)
                continue
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end == -1 else end
            spans.append((start, end))
            at = lower.find(word, end)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1] + _SPAN_GAP:  # near lines go together: fewer, longer scans
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _assignments(line: str, counter: list[int]) -> str:
    line = _QUOTED_ASSIGNMENT.sub(_replace_assignment(3, counter), line)
    line = _LINE_ASSIGNMENT.sub(_replace_assignment(2, counter, bare=True), line)
    line = _WORD_ASSIGNMENT.sub(_replace_assignment(2, counter, bare=True), line)
    line = _HEADER.sub(_replace_assignment(2, counter), line)
    return _FLAG.sub(_replace_assignment(2, counter, flag=True), line)



def redact_named(text: str, lower: str, counter: list[int], cookies: bool = True, names: bool = True) -> str:
    """`text` (`lower`: its lower-cased form) with its cookie values and the values given to a secret's name
    replaced by marks, `counter[0]` counting them. `cookies`, `names`: whether the text can hold either at all (a
    transcript line's plan says so once for all its strings)."""
    if cookies and ("cookie" in lower or "-b " in lower):
        text = _cookies(text, lower, counter)
        lower = text.lower()
    spans = _named_lines(text, lower) if names else []
    if spans:
        pieces, last = [], 0
        for start, end in spans:
            pieces += [text[last:start], _assignments(text[start:end], counter)]
            last = end
        pieces.append(text[last:])
        text = "".join(pieces)
    return text
