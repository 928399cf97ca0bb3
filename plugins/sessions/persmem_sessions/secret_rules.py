"""The redaction ruleset: the secrets known by their shape (a provider's token format) or by what stands just before
them (`Authorization:`, `Bearer`, `://user:`, `mysql -p`), each a `Rule` that redact.py applies.

The shapes of provider tokens come from detect-secrets (Yelp's maintained ruleset, a dependency: its regex
plugins, run as they ship, each match confirmed by the plugin itself, e.g. a JWT must decode). Those left out, and
why, are in `_DETECT_SECRETS_LEFT_OUT`. persmem's own rules cover what that ruleset has no rule for, or none that
fits redaction (`_OWN_SHAPES`, `_CONTEXT_RULES`; the secrets known by their name are named_secrets.py's);
docs/sessions.md lists them all. A match of a detect-secrets rule is widened to the end of the token it stops
inside (its Stripe rule matches 24 characters of a 99-character key; its JWT rule stops before the signature), so
no tail of a secret is left behind.

A rule whose pattern starts with a literal (`sk-ant-`, `AKIA`, `eyJ`) is as cheap to run as to look for, so it just
runs; one that would be tried at every position (a character class first, case-insensitive, a lookbehind first)
carries the needles, the gate or the anchor that say where it can match. Every pattern is linear (no nested
repetition, no unbounded scan that can fail and start again).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

MARK = "[REDACTED:{}]"  # what a secret is replaced with, its rule's kind in it


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


@functools.cache
def rules() -> tuple[Rule, ...]:
    """The shape and context rules in the order they run (the name=value rules come after them). Built on first
    use: importing detect-secrets takes a quarter of a second, which a process that never redacts should not pay."""
    return (_PRIVATE_KEY, *_detect_secrets_rules(), *_OWN_SHAPES, *_CONTEXT_RULES)
