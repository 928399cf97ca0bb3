"""Text as every part of persmem can store it, and as a terminal can show it."""

from __future__ import annotations

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
