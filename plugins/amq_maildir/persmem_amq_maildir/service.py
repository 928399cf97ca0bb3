"""The AMQ plugin's service: the mail store of this host, opened at startup and kept in `host.state`.

- `open_service(host)` opens the store on the mail root ([amq] root, or the plugin's own data folder), or on
  the mail backend another plugin answers the `amq_backend` hook with (hookspecs.py). The `startup` hook puts it
  in `host.state` (`shutdown` closes it); CLI commands (no server) open their own for the command's length.
- `service(host)` is how entry points (tools, panel, /amq routes) get it: before startup, or after shutdown,
  that is `NotReady`, never a second store opened on the side.
"""

from __future__ import annotations

from pathlib import Path

from persmem_core.sdk import prompt_line

from .store import MailStore

NAME = "amq_maildir"  # the plugin's entry-point name: its key in host.state
DATA_FOLDER = "amq"  # the default mail root, <home>/amq
BRIEFING_MESSAGES = 5  # the newest unread messages a session's briefing names (sender and subject)
BRIEFING_SHARE = 0.1  # of the whole briefing's size


def mail_root(host) -> Path:
    root = host.section("amq").root
    return Path(root).expanduser() if root else host.data_dir(DATA_FOLDER)


def open_service(host) -> MailStore:
    """The mail store on the host's mail root, or on the mail backend a plugin answers `amq_backend` with
    (hookspecs.py); sealed mail is opened (and, with [amq] encrypt, new mail sealed) with the home's Sealer,
    loaded only when first needed. The caller closes it (`store.close()`)."""
    return MailStore(mail_root(host), host.section("amq"), host.agents.names, lambda: host.sealer,
                     backend=mail_backend(host)).open()


def mail_backend(host):
    """The backend another plugin keeps the mail in (`amq_backend`), or None: the Maildir root."""
    ask = getattr(host.hook, "amq_backend", None)
    return ask(host=host) if ask is not None else None


def service(host) -> MailStore:
    return host.state.get(NAME)


def briefing_section(store: MailStore, agent: str, budget_chars: int) -> dict | None:
    """The Mail section of a session's briefing: how many messages `agent` has unread and who sent the newest,
    about what (no bodies: amq_read gives them). None when nothing is unread. Nothing is marked read.
    Each message is one line of JSON (persmem_core.sdk.prompt_line): whatever a sender put in its subject (or
    a writer of the Maildir in any header), it stays inside that line's values, never a line of its own."""
    entries, _ = store.box(agent).scan(("new",))
    if not entries:
        return None
    entries.sort(key=lambda e: e.message.header.created, reverse=True)
    left = max(300, int(budget_chars * BRIEFING_SHARE))
    lines = [f"{len(entries)} unread message{'s' if len(entries) != 1 else ''} (amq_check lists them, amq_read "
             "reads one):"]
    left -= len(lines[0])
    for entry in entries[:BRIEFING_MESSAGES]:
        line = _message_line(entry.message.header, min(200, left - 1))
        if line is None:
            break
        lines.append(line)
        left -= len(line) + 1
    return {"title": "Unread mail", "text": "\n".join(lines), "priority": 2, "memory_ids": []}


def _message_line(header, width: int) -> str | None:
    """{"from", "at", "subject", "priority"?} within `width` characters, a long subject cut rather than the
    message left out; None when not even 20 characters of its subject fit."""
    fields = {"from": str(header.sender), "at": str(header.created)[:16]}
    extra = {"priority": str(header.priority)} if header.priority != "normal" else {}
    subject = " ".join(str(header.subject).split()) or "(no subject)"
    room = min(120, width - len(prompt_line({**fields, "subject": "", **extra})))
    for _ in range(6):  # escapes make a line longer than its subject: cut again by what is still over
        if room < 20:
            return None
        shown = subject if len(subject) <= room else subject[:room - 1] + "…"
        line = prompt_line({**fields, "subject": shown, **extra})
        if len(line) <= width:
            return line
        room -= len(line) - width
    return None
