"""`persmem amq migrate`: copy every message of the Maildir mail root into the mail backend in use (another
plugin's `amq_backend`, hookspecs.py), keeping read state.

Each message file of new/ and cur/ is copied byte for byte (a sealed one stays sealed: no key is needed) under
its own name, so its id is the same in the backend; a message that was read (cur/) is then claimed there. A name
the backend already holds is skipped, so running it twice (or after an interrupted run) copies only what is
missing and never makes a second copy; a read message skipped that way is still marked read. Files that are not
messages (links, FIFOs, oversized or unparseable files) are counted and left where they are. The Maildir is only
read: it stays as it was, a fallback until you remove it.
"""

from __future__ import annotations

from collections.abc import Callable

from persmem_core.sdk import is_sealed

from .message import MalformedMessage, decode
from .reseal import _read_message_file
from .store import MailStore

FOLDERS = ("new", "cur")


def migrate_mail(maildir: MailStore, backend, progress: Callable[[int, int], None] = lambda done, total: None) -> dict:
    """Copy the Maildir store `maildir`'s messages into `backend`. Returns the counts: copied (of them read),
    already there, marked read there, not messages."""
    counts = {"mailboxes": 0, "copied": 0, "copied_read": 0, "already_there": 0, "marked_read": 0,
              "not_messages": 0}
    files = [(agent, folder, name) for agent in maildir.on_disk() for folder in FOLDERS
             for name in maildir.box(agent).names(folder)]
    counts["mailboxes"] = len({agent for agent, _, _ in files})
    for done, (agent, folder, name) in enumerate(files, 1):
        box = maildir.box(agent)
        found = _read_message_file(box.inbox / folder / name)
        if found is None:  # gone meanwhile (a reader beside us), or a link, FIFO, folder
            found = _read_message_file(box.inbox / "cur" / name) if folder == "new" else None
            folder = "cur"
        if found is None or len(found[0]) > maildir.config.max_file_bytes or not _is_message(found[0]):
            counts["not_messages"] += 1
            progress(done, len(files))
            continue
        try:
            backend.deliver(agent, name, found[0])
            counts["copied"] += 1
            counts["copied_read"] += folder == "cur"
        except FileExistsError:
            counts["already_there"] += 1
        if folder == "cur" and backend.claim(agent, name):
            counts["marked_read"] += 1
        progress(done, len(files))
    return counts


def _is_message(data: bytes) -> bool:
    """A plain message that parses, or a sealed one (opened only by whoever reads it, with the key)."""
    if is_sealed(data):
        return True
    try:
        decode(data)
    except MalformedMessage:
        return False
    return True
