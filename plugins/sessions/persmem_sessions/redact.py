"""Secrets out of transcripts, before anything is archived, indexed or logged.

A transcript holds whatever went through the session: a `cat .env`, a `curl -H "Authorization: Bearer ..."`,
a pasted key. Each rule finds one kind of secret and replaces it (only the secret, not its label) with
`[REDACTED:<kind>]`; `redact(text)` returns the new text and how many secrets it replaced, `redact_line(line)` does
the same for one transcript line (JSON, value by value). The rules themselves are secret_rules.py's (a secret's
shape, or what stands before it) and named_secrets.py's (a secret's name, cookies); docs/sessions.md lists them all.

Cost: redaction runs on every captured line. A rule runs only where its needle, gate or anchor says it can match
(secret_rules.py); the name=value rules run only on the lines holding a telling word (secret, pass, token, key).
What a transcript line can hold is worked out once for the line (`plan`), so its many small strings (ids, times,
paths) cost little. The rules are linear (no nested repetition, no unbounded scan that can fail and start again),
so a multi-megabyte line costs a scan, not a hang.

What no rule can see stays: a secret with no recognisable shape and no telling name around it (or only
base64-encoded, or split across two messages), `curl -u user:pass`, JSON escaped twice.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .named_secrets import NAME_WORDS, harmless, redact_named, secret_name
from .secret_rules import MARK, Rule, rules

_MARK_ONLY = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
_LABEL = re.compile(r"[A-Za-z_]{3,40}=")  # AccountKey= in a detect-secrets match: the label stays
_DELIMITERS = " \t\r\n\"'=:"


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
            if harmless(match.group(rule.group)):
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
                "cookie" in lower or "-b " in lower, any(word in lower for word in NAME_WORDS))


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
    text = redact_named(text, lower, counter, within is None or within.cookies, within is None or within.names)
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
        if not (isinstance(key, str) and secret_name(key)):
            return walk(item)
        if isinstance(item, str) and not harmless(item) and len(item) >= 4:
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
