"""[amq] section of persmem.toml."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from persmem_core.sdk import ConfigSection


class AmqConfig(ConfigSection):
    root: Annotated[
        str,
        Meta(description="Mail root holding one folder per agent (<agent>/inbox/{tmp,new,cur}). Empty: <home>/amq. "
                         "Point it at an existing persMEM AMQ directory to serve that mail as is."),
    ] = ""
    agents: Annotated[
        list[str],
        Meta(description="Mailboxes that exist besides the agents of `persmem agent add` (for example a human operator)."),
    ] = []
    readers: Annotated[
        dict[str, list[str]],
        Meta(description='Extra inboxes an agent may read, without claiming their mail: {operator = ["*"], kite = ["wren"]}. '
                         "Every agent always reads its own inbox."),
    ] = {}
    max_body_chars: Annotated[int, Meta(ge=1, description="Longest message body accepted, in characters.")] = 200_000
    max_subject_chars: Annotated[int, Meta(ge=1, description="Longest subject accepted, in characters.")] = 300
    max_recipients: Annotated[int, Meta(ge=1, description="Most recipients of one broadcast.")] = 32
    max_file_bytes: Annotated[
        int, Meta(ge=1024, description="A mailbox file larger than this is quarantined instead of read.")
    ] = 4_000_000
    tmp_max_age_hours: Annotated[
        float, Meta(gt=0, description="Files left in tmp/ (interrupted deliveries) older than this are removed at startup.")
    ] = 36.0
    encrypt: Annotated[
        bool,
        Meta(description="Seal each delivered message with the home's key (AES-256-GCM; needs [encryption] enabled). "
                         "Off (the default): mail stays in persMEM's plain Maildir format, readable by persMEM and mail "
                         "tools. Either way persmem reads both; `persmem key migrate` rewrites existing mail to match."),
    ] = False
    poll_seconds: Annotated[
        float, Meta(gt=0, le=60, description="How often the event stream looks for mail written by other processes.")
    ] = 1.0
