"""The message file format, exactly persMEM's, so an existing persMEM AMQ directory is served as is:

    ---json
    {
      "schema": 1,
      "id": "20261122T185527-123456_kite_9f1c2ab4",
      "from": "kite",
      "to": "wren",
      "subject": "Short summary",
      "kind": "message",
      "priority": "normal",
      "created": "2026-11-22T18:55:27.123456+00:00"
    }
    ---
    Message body in Markdown.

The file is `<id>.md`. persmem may add `thread`, `reply_to` and `recipients` to the header; readers
that do not know them ignore them.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

import msgspec

KINDS = ("message", "question", "answer", "review_request", "review_response", "observation", "decision", "status")
PRIORITIES = ("urgent", "normal", "low")
PRIORITY_RANK = {"urgent": 0, "normal": 1, "low": 2}

OPEN = b"---json\n"
CLOSE = b"\n---\n"
SUFFIX = ".md"
# A message id is one path component: a word character first, then word characters, dots and dashes.
ID_RE = re.compile(r"\w[\w.-]{0,199}", re.ASCII)


class Header(msgspec.Struct, kw_only=True, rename={"sender": "from"}):
    """The JSON frontmatter. Unknown keys are ignored (other writers may add their own)."""

    schema: int = 1
    id: str
    sender: str
    to: str
    subject: str = ""
    kind: str = "message"
    priority: str = "normal"
    created: str
    thread: str | None = None
    reply_to: str | None = None
    recipients: list[str] | None = None


class Message(msgspec.Struct, kw_only=True):
    header: Header
    body: str


class MalformedMessage(ValueError):
    """The file is not a message in the AMQ format; the text says why."""


def new_id(sender: str, now: datetime | None = None) -> str:
    """`<UTC timestamp to the microsecond>_<sender>_<8 random hex digits>`, as persMEM makes them."""
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%S-%f')}_{sender}_{os.urandom(4).hex()}"


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def encode(header: Header, body: str) -> bytes:
    """The file's bytes. Keys in persMEM's order; persmem's extra keys only when set."""
    fields = {"schema": header.schema, "id": header.id, "from": header.sender, "to": header.to,
              "subject": header.subject, "kind": header.kind, "priority": header.priority, "created": header.created}
    for key in ("thread", "reply_to", "recipients"):
        value = getattr(header, key)
        if value is not None:
            fields[key] = value
    head = msgspec.json.format(msgspec.json.encode(fields), indent=2)
    return OPEN + head + CLOSE + body.encode("utf-8") + b"\n"


_decoder = msgspec.json.Decoder(Header)


def decode(data: bytes) -> Message:
    """Parse a message file; raises MalformedMessage naming what is wrong."""
    if not data.startswith(OPEN):
        raise MalformedMessage("no '---json' frontmatter at the start")
    end = data.find(CLOSE, len(OPEN) - 1)
    if end < 0:
        raise MalformedMessage("frontmatter is not closed by a '---' line")
    try:
        header = _decoder.decode(data[len(OPEN) - 1:end])
        body = data[end + len(CLOSE):].decode("utf-8")
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MalformedMessage(f"bad header: {exc}") from None
    except UnicodeDecodeError:
        raise MalformedMessage("body is not UTF-8") from None
    return Message(header=header, body=body[:-1] if body.endswith("\n") else body)
