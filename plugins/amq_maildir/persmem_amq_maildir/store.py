"""The mail root: which mailboxes exist, who may read what, and the operations the tools expose.

Rules:
- the sender of a message is the authenticated caller, never a tool argument;
- an agent reads (and claims) only its own inbox; `[amq] readers` lets an agent look into other
  inboxes without claiming anything (a human operator, a supervisor agent);
- the roster is: `[amq] agents` + the agents of `persmem agent add` + mailboxes already on disk.
  Mailboxes are created on first delivery.
- with `[amq] encrypt` and the home's Sealer enabled, each delivered file is the message sealed as one blob
  (maildir.PURPOSE); otherwise persMEM's plain format. Reading opens either (maildir.py).
- the mail is kept in the Maildir root, or in a mail backend another plugin answers the `amq_backend` hook with
  (hookspecs.py; remote.py adapts it): the rules above are the same for both.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from persmem_core.sdk import NAME_RE, Sealer, UserError

from .composing import checked_body, checked_subject
from .config import AmqConfig
from .maildir import PURPOSE, Entry, Mailbox, Quarantined
from .message import ID_RE, KINDS, PRIORITIES, PRIORITY_RANK, SUFFIX, Header, encode, new_id, now_iso
from .remote import RemoteBox
from .rows import full, headers, newest, row, with_problems

log = logging.getLogger("persmem.amq")


def normalize(name: str) -> str:
    return name.strip().lower() if isinstance(name, str) else name


class MailStore:
    """The mail root. `sealer` gives the home's Sealer (asked for only when a message is sealed or read sealed:
    a command that lists mailboxes needs no key); None: plain Maildir only. `backend`: a mail backend (the
    `amq_backend` hook) that keeps the mail instead of the Maildir folders under `root`; None: the Maildir."""

    def __init__(self, root: Path, config: AmqConfig, registered_agents: Callable[[], Iterable[str]] = tuple,
                 sealer: Callable[[], Sealer] | None = None, backend=None):
        self.root = root
        self.config = config
        self.backend = backend
        self._registered = registered_agents
        self._sealer = sealer
        self._boxes: dict[str, Mailbox | RemoteBox] = {}
        self._lock = threading.Lock()
        self.changed = threading.Condition()
        self._generation = 0  # bumped on every send/claim in this process

    @property
    def generation(self) -> int:
        """Changes on every send and claim of this process and, with a backend, on every change it sees (other
        nodes' too): the event stream wakes on it."""
        return self._generation + (self.backend.generation if self.backend is not None else 0)

    def where(self) -> str:
        """Where the mail is kept, for people."""
        return self.backend.describe() if self.backend is not None else f"Maildir root {self.root}"

    def close(self) -> None:
        """Let go of the backend (a Maildir holds nothing open)."""
        if self.backend is not None:
            self.backend.close()

    # -- roster ----------------------------------------------------------------------------------------
    def open(self) -> MailStore:
        if self.backend is not None:
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        removed = sum(self.box(name).clean_tmp(self.config.tmp_max_age_hours * 3600) for name in self.on_disk())
        if removed:
            log.info("amq: removed %d interrupted deliveries from tmp/", removed)
        return self

    def on_disk(self) -> list[str]:
        """The mailboxes that exist: folders under the Maildir root, or the backend's mailboxes."""
        if self.backend is not None:
            return [n for n in self.backend.mailboxes() if NAME_RE.match(n)]
        try:
            return sorted(n for n in os.listdir(self.root) if NAME_RE.match(n) and (self.root / n / "inbox").is_dir())
        except FileNotFoundError:
            return []

    def roster(self) -> list[str]:
        names = set(self.config.agents) | set(self._registered()) | set(self.on_disk())
        return sorted(n for n in names if NAME_RE.match(n))

    def box(self, name: str) -> Mailbox | RemoteBox:
        with self._lock:
            box = self._boxes.get(name)
            if box is None:
                if self.backend is not None:
                    box = RemoteBox(self.backend, name, self.config.max_file_bytes, self._sealer)
                else:
                    box = Mailbox(self.root / name, self.config.max_file_bytes, self._sealer)
                self._boxes[name] = box
            return box

    def _known(self, name: str, role: str, caller: str) -> str:
        name = normalize(name)
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise UserError(f"{role} {name!r} is not an agent name; agents are: {', '.join(self.roster())}.")
        if name != caller and name not in self.roster():
            raise UserError(f"unknown {role} {name!r}; agents are: {', '.join(self.roster())}. "
                            "Add one with `persmem agent add NAME` or [amq] agents in persmem.toml.")
        return name

    def readable(self, caller: str) -> set[str] | None:
        """Inboxes `caller` may look into besides its own; None means all."""
        granted = self.config.readers.get(caller, [])
        return None if "*" in granted else set(granted)

    def inbox_for(self, caller: str, agent: str, tool: str) -> str:
        """The inbox a tool call looks at: the caller's own, or one `[amq] readers` grants."""
        agent = normalize(agent) or caller
        if agent == caller:
            return caller
        granted = self.readable(caller)
        if granted is None or agent in granted:
            return self._known(agent, "agent", caller)
        raise UserError(f"you are authenticated as {caller!r}; {tool} reads only your own inbox "
                        f"(leave `agent` empty or pass {caller!r}). An operator can grant more with "
                        f"[amq] readers = {{{caller} = [\"{agent}\"]}}.")

    # -- sending ---------------------------------------------------------------------------------------
    def send(self, caller: str, to: str | list[str], body: str, subject: str = "", kind: str = "message",
             priority: str = "normal", reply_to: str | None = None, thread: str | None = None) -> dict:
        recipients = self._recipients(caller, to)
        kind, priority = self._check_kind(kind), self._check_priority(priority)
        body, subject = checked_body(body, self.config), checked_subject(subject, self.config)
        reply_to, thread = self._conversation(caller, reply_to, thread)
        msg_id = new_id(caller)
        header = Header(id=msg_id, sender=caller, to=recipients[0], subject=subject, kind=kind, priority=priority,
                        created=now_iso(), thread=thread, reply_to=reply_to,
                        recipients=recipients if len(recipients) > 1 else None)
        delivered, ids = [], []
        for rcpt in recipients:
            header = self._deliver(rcpt, _replace(header, to=rcpt), body)  # a clash changed the id: keep the new one
            delivered.append(rcpt)
            ids.append(header.id)
        self._bump()
        result = {"status": "delivered", "id": ids[0], "from": caller, "to": recipients[0] if len(recipients) == 1 else delivered,
                  "subject": subject}
        if len(set(ids)) > 1:  # a name clash in one mailbox gave that copy another id
            result["ids"] = dict(zip(delivered, ids, strict=True))
        if header.thread:
            result["thread"] = header.thread
        return result

    def sealing(self) -> Sealer | None:
        """The Sealer new message files are sealed with, or None when they are written plain."""
        if not self.config.encrypt or self._sealer is None:
            return None
        sealer = self._sealer()
        return sealer if sealer.enabled else None

    def _deliver(self, rcpt: str, header: Header, body: str) -> Header:
        """Deliver one copy; returns its header as delivered (with another id if the first one's name was taken)."""
        box = self.box(rcpt)
        sealer = self.sealing()
        for _ in range(5):
            data = encode(header, body)
            try:
                box.deliver(header.id + SUFFIX, sealer.seal(data, PURPOSE) if sealer else data)
                return header
            except FileExistsError:  # the same id twice in one microsecond: take another random part
                header = _replace(header, id=new_id(header.sender))
            except OSError as exc:
                log.error("amq: delivery to %s failed: %s", rcpt, exc)
                raise UserError(f"delivery to {rcpt!r} failed ({exc.strerror or exc}); the message was not sent"
                                + (" to the others either" if header.recipients else "")
                                + (". Check disk space and permissions of the mail root (persmem doctor)."
                                   if self.backend is None else f"; {self.backend.describe()} did not confirm it, so "
                                   "it may still arrive: amq_timeline lists what you sent; send again only if it is not "
                                   "there (persmem doctor checks the backend).")) from None
        raise UserError("could not find a free message name after 5 tries; try again.")

    def _recipients(self, caller: str, to) -> list[str]:
        names = to if isinstance(to, list) else str(to).replace(";", ",").split(",")
        names = [normalize(n) for n in names if isinstance(n, str) and n.strip()]
        if not names:
            raise UserError(f"no recipient; set to_agent to one of: {', '.join(self.roster())} (or several, comma-separated).")
        if names in (["all"], ["*"]):
            names = [n for n in self.roster() if n != caller]
            if not names:
                raise UserError("there is nobody else to send to yet; add agents with `persmem agent add NAME`.")
        out: list[str] = []
        for name in names:
            name = self._known(name, "recipient", caller)
            if name == caller:
                raise UserError("cannot send to yourself; store a memory instead (memory_store).")
            if name not in out:
                out.append(name)
        if len(out) > self.config.max_recipients:
            raise UserError(f"{len(out)} recipients; the limit is {self.config.max_recipients} ([amq] max_recipients).")
        return out

    @staticmethod
    def _check_kind(kind: str) -> str:
        return _choice(kind, KINDS, "kind", "message")

    @staticmethod
    def _check_priority(priority: str) -> str:
        return _choice(priority, PRIORITIES, "priority", "normal")

    def _conversation(self, caller: str, reply_to: str | None, thread: str | None) -> tuple[str | None, str | None]:
        """The (reply_to, thread) a new message carries. Both must name mail the caller can see: a reply to an
        id nobody sent, or a thread nobody started, would open a conversation under a made-up name."""
        for label, value in (("reply_to", reply_to), ("thread", thread)):
            if value and (not isinstance(value, str) or not ID_RE.fullmatch(value.removesuffix(SUFFIX))):
                raise UserError(f"{label} {str(value)[:80]!r} is not a message id (ids look like "
                                "20261122T185527-123456_kite_9f1c2ab4); amq_check and amq_history list them.")
        reply_to = reply_to.removesuffix(SUFFIX) if reply_to else None
        thread = thread.removesuffix(SUFFIX) if thread else None
        if reply_to:
            original = self.visible_message(caller, reply_to)
            if original is None:
                raise UserError(f"reply_to {reply_to!r} is not a message you can see (none you sent or received has "
                                "that id). Take the id from amq_check, amq_history (received) or amq_timeline (sent too); "
                                "amq_reply answers a message in your inbox for you. Or leave reply_to empty to start a "
                                "new conversation.")
            started = original.message.header.thread or original.id
            if thread and thread != started:
                raise UserError(f"reply_to {reply_to!r} is in thread {started!r}, not in thread {thread!r}; pass only "
                                "one of them (reply_to alone continues its own thread).")
            return reply_to, started
        if thread and not self._thread_visible(caller, thread):
            raise UserError(f"thread {thread!r} is not a conversation you can see (no message you sent or received "
                            "is in it). Take a \"thread\" (or a first message's id) from amq_history or amq_timeline, "
                            "or leave thread empty to start a new conversation.")
        return None, thread

    def visible_message(self, caller: str, msg_id: str) -> Entry | None:
        """The message `msg_id` if `caller` may see it: in its inbox, sent by it, or in an inbox granted to it."""
        name = msg_id + SUFFIX
        own = self.box(caller).get(name)
        if own is not None:
            return own
        granted = self.readable(caller)
        for box in self.on_disk():
            entry = self.box(box).get(name) if box != caller else None
            if entry is not None and (granted is None or box in granted or entry.message.header.sender == caller):
                return entry
        return None

    def _thread_visible(self, caller: str, thread: str) -> bool:
        pairs, _ = self.visible_entries(caller)
        return any((e.message.header.thread or e.id) == thread for _, e in pairs)

    # -- reading ---------------------------------------------------------------------------------------
    def check(self, caller: str, agent: str = "", kind: str = "", priority: str = "", sender: str = "") -> dict:
        inbox = self.inbox_for(caller, agent, "amq_check")
        entries, bad = self.box(inbox).scan(("new",))
        entries = self._filter(entries, kind, priority, sender)
        entries.sort(key=lambda e: (PRIORITY_RANK.get(e.message.header.priority, 1), e.message.header.created))
        return with_problems({"agent": inbox, "new_count": len(entries),
                              "messages": [headers(e) for e in entries]}, bad)

    def read(self, caller: str, agent: str, msg_id: str) -> dict:
        inbox = self.inbox_for(caller, agent, "amq_read")
        name = self._name(msg_id)
        box = self.box(inbox)
        entry = box.get(name)
        if entry is None:
            raise UserError(f"message not found: {msg_id!r} in {inbox}'s inbox; amq_check lists unread ids, "
                            "amq_history read ones.")
        claimed = False
        if entry.folder == "new" and inbox == caller:
            try:
                claimed = box.claim(name)
            except OSError as exc:
                log.error("amq: marking %s read in %s failed: %s", name, inbox, exc)
                raise UserError(f"could not mark {msg_id!r} read ({exc.strerror or exc}); "
                                + ("it stays unread. Try amq_read again in a moment (persmem doctor checks the mail "
                                   "store)." if self.backend is None else "the claim was not confirmed (it may have gone "
                                   "through): amq_read it again in a moment.")) from None
            self._bump()
        out = full(entry)
        out["status"] = "read" if claimed or entry.folder == "cur" else "unread"
        out["claimed"] = claimed
        return out

    def read_header(self, caller: str, msg_id: str) -> Header:
        """The header of a message in `caller`'s own inbox (for replies); nothing is claimed."""
        entry = self.box(caller).get(self._name(msg_id))
        if entry is None:
            raise UserError(f"message not found: {msg_id!r} in your inbox; amq_check and amq_history list ids.")
        return entry.message.header

    def history(self, caller: str, agent: str = "", limit: int = 10, kind: str = "", priority: str = "",
                sender: str = "", thread: str = "") -> dict:
        inbox = self.inbox_for(caller, agent, "amq_history")
        limit = _limit(limit, 1000)
        entries, bad = self.box(inbox).scan()
        entries = self._filter(entries, kind, priority, sender, thread)
        entries.sort(key=lambda e: e.message.header.created, reverse=True)
        msgs = [headers(e) | {"status": "unread" if e.folder == "new" else "read"} for e in entries[:limit]]
        return with_problems({"agent": inbox, "total": len(msgs), "messages": msgs}, bad)

    def visible_entries(self, caller: str) -> tuple[list[tuple[str, Entry]], list[Quarantined]]:
        """(mailbox, entry) for every message `caller` may see: its inbox, mail it sent, granted inboxes."""
        granted = self.readable(caller)
        out, bad = [], []
        for name in self.on_disk():
            entries, problems = self.box(name).scan()
            bad += problems
            whole = name == caller or granted is None or name in granted
            out += [(name, e) for e in entries if whole or e.message.header.sender == caller]
        return out, bad

    def timeline(self, caller: str, limit: int = 20, kind: str = "", priority: str = "", sender: str = "") -> dict:
        limit = _limit(limit, 50)
        pairs, bad = self.visible_entries(caller)
        kept = {id(e) for e in self._filter([e for _, e in pairs], kind, priority, sender)}
        msgs = newest([p for p in pairs if id(p[1]) in kept], limit, body=False)
        return with_problems({"total": len(msgs), "messages": msgs}, bad)

    def thread(self, caller: str, thread_id: str) -> dict:
        self._name(thread_id)
        pairs, bad = self.visible_entries(caller)
        seen, msgs = set(), []
        for box, e in sorted(pairs, key=lambda p: p[1].message.header.created):
            h = e.message.header
            if (h.thread or e.id) == thread_id or e.id == thread_id:
                if (e.id, box) not in seen:
                    seen.add((e.id, box))
                    msgs.append(row(box, e))
        if not msgs:
            raise UserError(f"no messages you can see in thread {thread_id!r}.")
        return with_problems({"thread": thread_id, "total": len(msgs), "messages": msgs}, bad)

    def agents(self, caller: str) -> dict:
        out = []
        for name in self.roster():
            box = self.box(name)
            out.append({"agent": name, "unread": box.unread_count(), "you": name == caller,
                        "mailbox": box.exists()})
        return {"agents": out}

    def unread_counts(self) -> dict[str, int]:
        return {name: self.box(name).unread_count() for name in self.roster()}

    # -- helpers ---------------------------------------------------------------------------------------
    def _filter(self, entries: list[Entry], kind: str = "", priority: str = "", sender: str = "",
                thread: str = "") -> list[Entry]:
        kind = self._check_kind(kind) if kind else ""
        priority = self._check_priority(priority) if priority else ""
        sender = normalize(sender)
        return [e for e in entries
                if (not kind or e.message.header.kind == kind)
                and (not priority or e.message.header.priority == priority)
                and (not sender or e.message.header.sender == sender)
                and (not thread or (e.message.header.thread or e.id) == thread)]

    @staticmethod
    def _name(msg_id: str) -> str:
        if not isinstance(msg_id, str) or not ID_RE.fullmatch(msg_id):
            raise UserError(f"invalid msg_id {str(msg_id)[:80]!r}: pass an id from amq_check or amq_history "
                            "(letters, digits, '_', '.', '-').")
        return msg_id if msg_id.endswith(SUFFIX) else msg_id + SUFFIX

    def _bump(self) -> None:
        with self.changed:
            self._generation += 1
            self.changed.notify_all()


def _choice(value: str, choices: tuple[str, ...], label: str, default: str) -> str:
    value = normalize(value) or default
    if value not in choices:
        raise UserError(f"unknown {label} {value!r}; use one of: {', '.join(choices)}.")
    return value


def _replace(header: Header, **changes) -> Header:
    import msgspec

    return msgspec.structs.replace(header, **changes)


def _limit(limit: int, most: int) -> int:
    if not isinstance(limit, int) or limit < 1:
        raise UserError(f"limit must be a whole number from 1 to {most}.")
    return min(limit, most)
