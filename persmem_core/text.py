"""Text as every part of persmem can store it, and as a terminal can show it."""

from __future__ import annotations

import json
import re
import unicodedata


def valid_text(text: str) -> str:
    """`text` as valid Unicode: a lone surrogate (what a JSON escape like `\\ud83d` decodes to when a client cut a
    string inside an emoji) becomes U+FFFD, a pair split in two stays one character. UTF-8 encoders, msgspec and
    the embedder refuse lone surrogates."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def control_characters(text: str) -> list[str]:
    """The characters of `text` that change what a terminal or a page shows beyond themselves: C0 and C1
    controls (escape sequences, newlines that forge rows), DEL, and the Unicode format characters among them
    bidirectional overrides and line/paragraph separators (category Cc, Cf, Zl, Zp)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


def printable(text: str) -> str:
    """`text` with every control_characters() character shown as its escape (`\\x1b`, `\\u202e`): what a
    client chose to call itself, printed in the operator's terminal, cannot move the cursor or forge a line."""
    return "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")
                   else c for c in text)


HIDDEN = ("Cc", "Cf", "Cs", "Zl", "Zp")  # categories escaped wherever stored text reaches a prompt
_TAG_OPENING = re.compile(r"<(?=[A-Za-z/!?])")


def _escaped(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a character beyond the BMP as its UTF-16 pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def prompt_line(fields: dict) -> str:
    """`fields` as one line of JSON, for stored text that reaches an AI's prompt (a session's briefing, a
    prompt's recall): whatever its values hold, the line stays one line and one object, so what one agent wrote
    can never pass for structure around it (a heading, another item, an attribution) in another agent's
    prompt. JSON escapes quotes, backslashes and C0 controls; this also escapes, as JSON \\u escapes, DEL and C1
    controls, format characters (bidirectional overrides, zero-width characters), lone surrogates, line and
    paragraph separators (U+2028, U+2029), and every "<" that could open a tag (`</system-reminder>` would
    close the wrapper a client puts around hook output). json.loads gives the values back unchanged."""
    text = json.dumps(fields, ensure_ascii=False)
    text = "".join(_escaped(c) if unicodedata.category(c) in HIDDEN else c for c in text)
    return _TAG_OPENING.sub(r"\\u003c", text)  # "<" stands only inside JSON strings, where \u003c means it
