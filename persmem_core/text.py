"""Text as every part of persmem can store it."""

from __future__ import annotations


def valid_text(text: str) -> str:
    """`text` as valid Unicode: a lone surrogate (what a JSON escape like `\\ud83d` decodes to when a client cut a
    string inside an emoji) becomes U+FFFD, a pair split in two stays one character. UTF-8 encoders, msgspec and
    the embedder refuse lone surrogates."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
