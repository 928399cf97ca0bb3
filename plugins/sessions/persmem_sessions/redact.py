"""Secrets out of transcripts, before anything is archived, indexed or logged.

A transcript holds whatever went through the session: a `cat .env`, a `curl -H "Authorization: Bearer ..."`,
a pasted key. Each rule finds one kind of secret and replaces it (only the secret, not its label) with
`[REDACTED:<kind>]`; `redact(text)` returns the new text and how many secrets it replaced.

The shapes of provider tokens come from detect-secrets (Yelp's maintained ruleset, a dependency: its regex
plugins, run as they ship, each match confirmed by the plugin itself, e.g. a JWT must decode). Those left out, and
why, are in `_DETECT_SECRETS_LEFT_OUT`. persmem's own rules cover what that ruleset has no rule for, or none that
fits redaction (`_OWN_SHAPES`, `_CONTEXT_RULES`, the assignment rules); docs/sessions.md lists them all. A match of a
detect-secrets rule is widened to the end of the token it stops inside (its Stripe rule matches 24 characters of
a 99-character key; its JWT rule stops before the signature), so no tail of a secret is left behind.

Cost: redaction runs on every captured line. A rule whose pattern starts with a literal (`sk-ant-`, `AKIA`, `eyJ`)
is as cheap to run as to look for, so it just runs; one that would be tried at every position (a character class
first, case-insensitive, a lookbehind first) runs only where a needle or a cheap gate pattern says it can match.
The name=value rules run only on the lines holding a telling word (secret, pass, token, key). What a transcript
line can hold is worked out once for the line (`plan`), so its many small strings (ids, times, paths) cost little.
The rules are linear (no nested repetition, no unbounded scan that can fail and start again), so a multi-megabyte
line costs a scan, not a hang.

What no rule can see stays: a secret with no recognisable shape and no telling name around it (or only
base64-encoded, or split across two messages), `curl -u user:pass`, JSON escaped twice.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

MARK = "[REDACTED:{}]"
_MARK_ONLY = re.compile(r"\[REDACTED:[a-z0-9_]+\]")

_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|PASSPHRASE|APIKEY|ACCESSKEY|PRIVATEKEY|TOKEN(?!S|IZ)")
_NAME_WORDS = ("secret", "pass", "token", "key")  # every _SECRET_NAME match holds one (lower-cased)
_KEY_OWNERS = ("api", "access", "private")
_HARMLESS_VALUES = {"true", "false", "null", "none", "nil", "yes", "no", "on", "off", "redacted"}
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
_LABEL = re.compile(r"[A-Za-z_]{3,40}=")  # AccountKey= in a detect-secrets match: the label stays
_DELIMITERS = " \t\r\n\"'=:"


def _secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name.upper().replace("_", "").replace("-", "")))


def _harmless(value: str) -> bool:
    bare = value.strip().lower()
    return (bare in _HARMLESS_VALUES or bare.startswith("[redacted")
            or bool(re.fullmatch(r"[\d.,_]+", bare)))  # a number: a count, a limit, a port


@dataclass(frozen=True)
class Rule:
    kind: str  # what the mark says: [REDACTED:<kind>]
    pattern: re.Pattern[str]
    group: int = 0  # the group holding the secret (0: the whole match)
    needles: tuple[str, ...] = ()  # lower-case substrings; if any: the rule runs only on a text holding one
    gate: re.Pattern[str] | None = None  # a cheap pattern the text must match for the rule to run
    accept: Callable[[str], bool] | None = None  # the detect-secrets plugin's own verdict on the match
    whole_token: bool = False  # widen the match to the end of the token it stops inside
    anchor: str = ""  # a lower-case literal every match starts with: the rule is tried only where it stands
    origin: str = "persmem"


# -- detect-secrets' rules ------------------------------------------------------------------------------------------

# Its regex plugins by secret_type: the kind each pattern of the plugin's denylist redacts as (in order; a
# pattern whose secret is a group, or that starts with a case-insensitive literal: (kind, group, anchor); None: not
# used), and for a plugin whose patterns cannot skip ahead to a literal, the needles (a tuple) or the gate (a
# pattern) that must match first. A plugin a later version adds is used too, named after its secret_type.
_DETECT_SECRETS = {
    "AWS Access Key": (["aws_access_key", ("aws_secret_key", 1)], ()),
    "Azure Storage Account access key": (["azure_storage_key"], ()),
    "Discord Bot Token": (["discord_token"], re.compile(r"\.[a-zA-Z0-9_-]{6}\.[a-zA-Z0-9_-]{27}")),
    "GitHub Token": (["github_token"], ()),
    "GitLab Token": (["gitlab_token"], ()),
    "JSON Web Token": (["jwt"], ()),
    "Mailchimp Access Key": (["mailchimp_key"], re.compile(r"-us[0-9]")),
    "OpenAI Token": (["openai_key"], ()),
    "PyPI Token": (["pypi_token"], ()),
    "SendGrid API Key": (["sendgrid_key"], ()),
    "Slack Token": ([("slack_token", 0, "xox"), ("slack_webhook", 0, "https://hooks.slack.com/")], ()),
    "Square OAuth Secret": (["square_oauth_secret"], ()),
    "Stripe Access Key": (["stripe_key"], ("k_live_",)),
    "Telegram Bot Token": (["telegram_token"], re.compile(r":[0-9A-Za-z_-]{35}")),
    "Twilio API Key": (["twilio_key"], ()),
    # its second pattern (AP + a hex digit + 8 letters) is also a word (APFSContainer, APDUCommand): not used
    "Artifactory Credentials": (["artifactory_token", None], ("akc",)),
}

# Its plugins not used, and why.
_DETECT_SECRETS_LEFT_OUT = {
    "Basic Auth Credentials": "an unbounded scan that a long line of URLs makes quadratic; url_password is bounded",
    "Cloudant Credentials": "any `pass: <64 hex>`; the assignment rules find the same values by their name",
    "IBM Cloud IAM Key": "any `key = <44 characters>` named IBM's; the assignment rules find these by name",
    "IBM COS HMAC Credentials": "any `secret_key = <48 hex>`; the assignment rules find these by name",
    "SoftLayer Credentials": "any `key = <64 characters>`; the assignment rules find these by name",
    "NPM tokens": "only npm_ and UUID values, by an unbounded scan; npm_token takes any .npmrc credential",
    "Private Key": "it finds the BEGIN line only; private_key redacts the whole block",
    "Public IP (ipv4)": "an address is not a secret, and logs are full of them",
    "Secret Keyword": "not a regex plugin (needs a file type); the assignment rules do this, JSON keys included",
    "Base64 High Entropy String": "flags git SHAs, UUIDs, digests and base64 of plain text (measured: 106 of the "
                                  "112 look-alikes of tests/secrets_corpus.py)",
    "Hex High Entropy String": "flags git SHAs, UUIDs and digests",
}


def _detect_secrets_rules() -> list[Rule]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    rules = []
    for secret_type, plugin_class in sorted(get_mapping_from_secret_type_to_class().items()):
        if secret_type in _DETECT_SECRETS_LEFT_OUT or not issubclass(plugin_class, RegexBasedDetector):
            continue
        default = re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")
        kinds, first = _DETECT_SECRETS.get(secret_type, ([default], ()))
        needles, gate = (first, None) if isinstance(first, tuple) else ((), first)
        plugin = plugin_class()
        accept = lambda text, plugin=plugin: any(True for _ in plugin.analyze_string(text))  # noqa: E731
        for index, pattern in enumerate(plugin.denylist):
            spec = kinds[index] if index < len(kinds) else kinds[-1]
            if spec is None:
                continue
            kind, group, anchor = (spec, 0, "") if isinstance(spec, str) else (*spec, "")[:3]
            rules.append(Rule(kind, pattern, group, needles, gate, accept, whole_token=not group, anchor=anchor,
                              origin=f"detect-secrets {plugin_class.__name__}"))
    return rules


# -- persmem's own rules: where detect-secrets has none (each says what it adds) ------------------------------------

# A pattern starts with its literal where it can (a boundary check right after it, as a lookbehind), so the regex
# engine jumps from one occurrence of the literal to the next instead of trying every position.
_PRIVATE_KEY = Rule("private_key", re.compile(  # the whole block (detect-secrets: the BEGIN line), PuTTY's too
    r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?"
    r"-----|\Z)|PuTTY-User-Key-File-[0-9]+:[\s\S]*?(?:Private-MAC:[^\n]*|\Z)"),
    needles=("private key", "putty-user-key-file"))

_OWN_SHAPES = [
    Rule("anthropic_key", re.compile(r"sk-ant-(?<![A-Za-z0-9_-]sk-ant-)[A-Za-z0-9_-]{20,}")),
    # detect-secrets knows the keys holding T3BlbkFJ only; project, service-account and admin keys may not
    Rule("openai_key", re.compile(r"sk-(?<![A-Za-z0-9_-]sk-)(?:proj-|svcacct-|admin-)?(?=[A-Za-z_-]{0,300}\d)"
                                  r"[A-Za-z0-9_-]{20,}")),
    # detect-secrets wants it quoted and after a lower-case "aws"; the credentials file has neither
    Rule("aws_secret_key", re.compile(r"(?i:secret_?access_?key)[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})"
                                      r"(?![A-Za-z0-9/+=])"), 1, anchor="secret"),
    # fine-grained tokens (detect-secrets: the classic gh*_ ones)
    Rule("github_token", re.compile(r"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{22,}")),
    # app-level and refresh tokens (detect-secrets: xoxb/xoxp/... and webhooks)
    Rule("slack_token", re.compile(r"(?:xapp-(?<![A-Za-z0-9_-]xapp-)|xoxe(?<![A-Za-z0-9_-]xoxe)[.-])"
                                   r"[A-Za-z0-9.-]{10,}")),
    Rule("google_api_key", re.compile(r"AIza(?<![A-Za-z0-9_-]AIza)[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")),
    # test-mode keys and webhook signing secrets (detect-secrets: live keys)
    *(Rule("stripe_key", re.compile(rf"{prefix}(?<![A-Za-z0-9_]{prefix})[0-9A-Za-z]{{16,}}"))
      for prefix in ("sk_test_", "rk_test_", "whsec_")),
    *(Rule("huggingface_token", re.compile(rf"{prefix}(?<![A-Za-z0-9_]{prefix})[A-Za-z0-9]{{34,40}}(?![A-Za-z0-9_])"))
      for prefix in ("hf_", "api_org_")),
    # .npmrc: `//registry/:_authToken=...`, `_auth=`, `_password=` at a line's start or after the registry's `:`
    # (detect-secrets: npm_ or UUID values only); not a ${TEMPLATE}, not `self._password = ...` (assignment rules)
    Rule("npm_token", re.compile(r"_(?:authToken(?<![^:\n]_authToken)|auth(?<![^:\n]_auth)"
                                 r"|password(?<![^:\n]_password))[ \t]*=[ \t]*[\"']?([^\s\"'$][^\s\"']{3,})"), 1),
    Rule("persmem_token", re.compile(r"pm_(?<![A-Za-z0-9_-]pm_)[A-Za-z0-9_-]{32,}")),
]

# Context rules: the secret is known by what stands before it
_CONTEXT_RULES = [
    Rule("authorization", re.compile(r"(?i:authorization)[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z]+\s+)?"
                                     r"([A-Za-z0-9._~+/=:-]{8,})"), 1, anchor="authorization"),
    Rule("authorization", re.compile(r"(?i:bearer)(?<![A-Za-z0-9_]......)\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1,
         anchor="bearer"),
    # the password of scheme://user:password@host (the scheme is not needed to know it)
    Rule("url_password", re.compile(r"://[^\s:/@\"'<>]{0,200}:([^\s@/\"'<>]{1,200})@"), 1),
    # mysql -pSECRET, mysqldump -p'SECRET' (attached: a bare -p asks for the password, -P is the port)
    Rule("mysql_password", re.compile(
        r"(?:mysql(?<![\w.-]mysql)|mariadb(?<![\w.-]mariadb))[\w-]*[ \t][^\n|;&]{0,200}?(?<=\s)-p([\"']?)"
        r"([^\s\"']+)\1"), 2),
]

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


@functools.cache
def rules() -> tuple[Rule, ...]:
    """The shape and context rules in the order they run (the name=value rules come after them). Built on first
    use: importing detect-secrets takes a quarter of a second, which a process that never redacts should not pay."""
    return (_PRIVATE_KEY, *_detect_secrets_rules(), *_OWN_SHAPES, *_CONTEXT_RULES)


def _matches(rule: Rule, text: str, lower: str):
    """rule.pattern.finditer(text); with an anchor, tried only where the anchor stands (a case-insensitive
    pattern cannot skip ahead to its literal the way a case-sensitive one does)."""
    if not rule.anchor or len(lower) != len(text):
        yield from rule.pattern.finditer(text)
        return
    at = lower.find(rule.anchor)
    while at != -1:
        match = rule.pattern.match(text, at)
        if match:
            yield match
        at = lower.find(rule.anchor, max(match.end(), at + 1) if match else at + 1)


def _apply(rule: Rule, text: str, lower: str, counter: list[int]) -> str:
    pieces, last = [], 0
    for match in _matches(rule, text, lower):
        whole = match.group(0)
        start, end = match.span(rule.group)
        if start < last or start == end or "[REDACTED:" in whole:  # a mark an earlier rule left: not again
            continue
        if rule.accept is not None and not rule.accept(whole):
            continue
        if rule.group:
            if _harmless(match.group(rule.group)):
                continue
        else:  # a detect-secrets match may hold the delimiters around it, or a label (AccountKey=)
            while start < end and text[start] in _DELIMITERS:
                start += 1
            while end > start and text[end - 1] in _DELIMITERS:
                end -= 1
            label = _LABEL.match(text, start, end)
            if label and label.end() < end:
                start = label.end()
        if rule.whole_token:
            end = _TOKEN_TAIL.match(text, end).end()
        pieces += [text[last:start], MARK.format(rule.kind)]
        last = end
        counter[0] += 1
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


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
        if not _secret_name(match.group(1)) or _harmless(value) or \
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
    for word in _NAME_WORDS:
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


@dataclass(frozen=True)
class Plan:
    """What can match in a text: the rules that can (their needles or gate pass, their pattern matches somewhere),
    whether a cookie header may be in it, whether a telling name is. Made once for a transcript line, it spares
    each of the line's strings the rules the whole line gives no chance."""
    rules: tuple[Rule, ...]
    cookies: bool
    names: bool


def _may_match(rule: Rule, text: str, lower: str) -> bool:
    """The cheap checks: a needle, the gate, the anchor (a rule with none: True)."""
    if rule.needles and not any(needle in lower for needle in rule.needles):
        return False
    if rule.gate is not None and not rule.gate.search(text):
        return False
    return not rule.anchor or rule.anchor in lower


def plan(text: str, lower: str | None = None) -> Plan:
    lower = text.lower() if lower is None else lower
    return Plan(tuple(rule for rule in rules() if _may_match(rule, text, lower) and (
                    rule.needles or rule.gate or rule.anchor or rule.pattern.search(text))),
                "cookie" in lower or "-b " in lower, any(word in lower for word in _NAME_WORDS))


def redact(text: str, within: Plan | None = None) -> tuple[str, int]:
    """`text` with every secret the rules recognise replaced by `[REDACTED:<kind>]`, and how many were. `within`:
    the plan of a text holding this one (its transcript line): only the rules it names are tried."""
    if len(text) < 8:  # nothing fits: the shortest is a named value (`key=abcd`)
        return text, 0
    counter = [0]
    lower = text.lower()
    for rule in (within or plan(text, lower)).rules:
        if within is not None and not _may_match(rule, text, lower):
            continue
        changed = _apply(rule, text, lower, counter)
        if changed is not text:
            text, lower = changed, changed.lower()
    if (within is None or within.cookies) and ("cookie" in lower or "-b " in lower):
        text = _cookies(text, lower, counter)
        lower = text.lower()
    spans = _named_lines(text, lower) if within is None or within.names else []
    if spans:
        pieces, last = [], 0
        for start, end in spans:
            pieces += [text[last:start], _assignments(text[start:end], counter)]
            last = end
        pieces.append(text[last:])
        text = "".join(pieces)
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


def _strings(node, out: list[str]) -> None:
    """Every string `redact_line` will redact in `node`, keys included, JSON text inside a string decoded."""
    if isinstance(node, str):
        nested = _nested_json(node)
        if nested is None:
            out.append(node)
        else:
            _strings(nested, out)
    elif isinstance(node, list):
        for item in node:
            _strings(item, out)
    elif isinstance(node, dict):
        for key, item in node.items():
            _strings(key, out)
            _strings(item, out)


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
            cleaned, found = redact(node, within)
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
            cleaned, found = redact(item, within)
            if found and _MARK_ONLY.fullmatch(cleaned):  # the value is one known shape: keep its kind
                counter[0] += found
                return cleaned
            counter[0] += 1
            return MARK.format("assignment")
        if isinstance(item, list):  # {"passwords": ["...", "..."]}: each string of the list
            return [named(key, value) if isinstance(value, str) else walk(value) for value in item]
        return walk(item)

    try:
        strings: list[str] = []
        _strings(value, strings)
        within = plan("\n".join(strings))  # what the line's strings (decoded) can hold, worked out once
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
