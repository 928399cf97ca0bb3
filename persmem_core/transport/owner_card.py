"""Who owns a home, as one local process tells another: the owner's card and the local socket's paths. Light (no
MCP or web framework): `persmem serve` takes the home (transport/takeover.py) before it imports those, so its
plugins start loading while they import."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from persmem_core import __version__

LOCAL_BASE_URL = "http://persmem.local"  # the Host local clients name: the socket has no host name of its own
OWNER_PATH = "/_local/owner"
HANDOVER_PATH = "/_local/handover"


@dataclass
class OwnerCard:
    """What the owner tells other local processes about itself."""

    # "http": `persmem serve`; "stdio": a stdio session (hands over on request); else the persmem command holding
    # the home, e.g. "dashboard" or "sessions import" (they stay, like serve)
    role: str
    mcp_url: str = ""
    pid: int = field(default_factory=os.getpid)
    version: str = __version__
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


ROLE = re.compile(r"^[a-z][a-z -]{0,39}$")  # "http", "stdio", or the persmem command holding the home ("dashboard")


def read_card(text: bytes) -> OwnerCard | None:
    """The owner card an answer carries, if every field is what an owner would send: it ends up in a message to
    the operator, so a lying process must not put shell text or terminal escapes there."""
    try:
        data = json.loads(text)
        card = OwnerCard(**{k: data[k] for k in ("role", "mcp_url", "pid", "version", "started")})
    except (ValueError, KeyError, TypeError):
        return None
    texts = (card.mcp_url, card.version, card.started)
    if (type(card.pid) is not int or card.pid <= 0 or not isinstance(card.role, str) or not ROLE.match(card.role)
            or not all(isinstance(t, str) and len(t) <= 200 and t.isprintable() and t.isascii() for t in texts)):
        return None
    return card
