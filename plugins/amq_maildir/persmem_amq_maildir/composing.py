"""What a sender may write in a new message: a body that is not empty and within [amq] max_body_chars, and a
subject that is one line of visible text within [amq] max_subject_chars. The store checks every message it sends
with these, before anything is delivered."""

from __future__ import annotations

from persmem_core.sdk import UserError, control_characters, printable

from .config import AmqConfig

ZERO_WIDTH_JOINER = "\u200d"  # joins emoji into one (a family, a flag): allowed in a subject, escaped where shown


def checked_body(body: str, config: AmqConfig) -> str:
    """`body` as sent, or a UserError saying what to change."""
    if not isinstance(body, str) or not body.strip():
        raise UserError("body is empty; write the message in `body` (Markdown).")
    if len(body) > config.max_body_chars:
        raise UserError(f"body is {len(body):,} characters; the limit is {config.max_body_chars:,} "
                        "([amq] max_body_chars). Split it into several messages or store it as a memory and send its id.")
    return body


def checked_subject(subject: str, config: AmqConfig) -> str:
    """`subject` on one line (line breaks and tabs become spaces), or a UserError: it hides control or invisible
    characters, or it is too long."""
    if not isinstance(subject, str):
        raise UserError("subject must be a string: a short summary line, or empty.")
    subject = " ".join(subject.split())  # one line: line breaks and tabs become spaces
    hidden = [c for c in control_characters(subject) if c != ZERO_WIDTH_JOINER]
    if hidden:
        kinds = ", ".join(dict.fromkeys(map(printable, hidden[:5])))
        raise UserError(f"subject holds control or invisible characters ({kinds}): a subject is one line of "
                        "visible text, shown in the recipient's sessions. Remove them.")
    if len(subject) > config.max_subject_chars:
        raise UserError(f"subject is {len(subject):,} characters; the limit is {config.max_subject_chars}.")
    return subject
