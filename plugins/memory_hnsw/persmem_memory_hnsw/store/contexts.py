"""The text around a chunk of a conversation or document (memory_bulk_store's `context_chars`): kept with
the chunk and indexed for keyword search only, so a turn like "Yes, a sunrise over the lake." is found by the
words of the question before it. A chunk that follows a question also keeps that question (`reply_to`), whose
words count in full: in a conversation the answer to a question is the turn after it.

Questions themselves rank a little lower in a search (search/ranking.py): a stored question is rarely what a search
for its subject is after, and the chunk after it now carries its words."""

from __future__ import annotations

import re

CONTEXT_CHARS_PER_SIDE = 2000  # most characters of neighbours kept on each side (memory_bulk_store context_chars)
MAX_CONTEXT_CHARS = 2 * CONTEXT_CHARS_PER_SIDE + 1  # before + "\n" + after
MAX_QUESTION_CHARS = 1000  # a longer text ending in "?" is not taken as one question (nor kept as reply_to)
# What may follow a question's "?" at the end of a text: closing quotes and brackets, emphasis, spaces
_TRAILING = re.compile(r"[\s\"'\u2019\u201d)\]*_]+$")


def is_question(text: str) -> bool:
    """Is `text` a question: short (at most MAX_QUESTION_CHARS) and ending in "?" (closing quotes aside)?"""
    return len(text) <= MAX_QUESTION_CHARS and _TRAILING.sub("", text).endswith("?")


def questions_before(texts: list[str]) -> list[str]:
    """For each of `texts` (consecutive chunks of one conversation), the chunk before it if that one is a
    question, else "": the chunk's `reply_to`."""
    return ["" if i == 0 or not is_question(texts[i - 1]) else texts[i - 1] for i in range(len(texts))]


def conversation_contexts(texts: list[str], chars: int) -> list[tuple[str, str]]:
    """For each of `texts` (consecutive chunks of one conversation or document): (its context, up to `chars`
    characters of its neighbours each side; its `reply_to`, the question just before it)."""
    return list(zip(neighbour_contexts(texts, chars), questions_before(texts), strict=True))


def neighbour_contexts(texts: list[str], chars: int) -> list[str]:
    """For each of `texts` (consecutive chunks of one conversation or document), up to `chars` characters of
    the chunks before it and up to `chars` after it, cut at word boundaries: what BM25 indexes with it."""
    if chars <= 0:
        return [""] * len(texts)
    out = []
    for i in range(len(texts)):
        before, j = "", i - 1
        while j >= 0 and len(before) < chars:
            before, j = f"{texts[j][-chars:]}\n{before}", j - 1
        after, j = "", i + 1
        while j < len(texts) and len(after) < chars:
            after, j = f"{after}\n{texts[j][:chars]}", j + 1
        if len(before) > chars:  # drop the word cut in half, if the kept part has a space
            cut = before[-chars:]
            before = cut.split(maxsplit=1)[-1] if " " in cut else cut
        if len(after) > chars:
            cut = after[:chars]
            after = cut.rsplit(maxsplit=1)[0] if " " in cut else cut
        out.append(f"{before.strip()}\n{after.strip()}".strip())
    return out
