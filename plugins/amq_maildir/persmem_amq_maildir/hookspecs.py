"""Hooks the AMQ plugin asks other plugins, without importing them: where the mail is kept.

One set of amq_* tools and rules (this plugin: the roster, who may read what, message encoding and sealing,
validation), and a choice of places to keep the mail: the Maildir root (maildir.py, the default) or a mail
backend another plugin returns from `amq_backend` (persmem-plugin-amq-nats keeps it in NATS JetStream).
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from persmem_core.sdk import hookspec


@runtime_checkable
class MailBackend(Protocol):
    """What `amq_backend` returns: the contract its docstring spells out, as types. An answering plugin does not
    import this (plugins never import each other); it matches it member for member, and
    tests/test_hook_contracts.py checks that the in-repo backends do."""

    @property
    def generation(self) -> int: ...
    def mailboxes(self) -> list[str]: ...
    def names(self, box: str, folder: Literal["new", "cur"]) -> list[str]: ...
    def folder_of(self, box: str, name: str) -> Literal["new", "cur"] | None: ...
    def fetch(self, box: str, names: list[str]) -> dict[str, bytes]: ...
    def deliver(self, box: str, name: str, data: bytes) -> None: ...
    def claim(self, box: str, name: str) -> bool: ...
    def unread_count(self, box: str) -> int: ...
    def describe(self) -> str: ...
    def close(self) -> None: ...


@hookspec(firstresult=True)
def amq_backend(host) -> MailBackend | None:
    """Return a mail backend (a `MailBackend`) to keep the mail in instead of the Maildir root, or None (then the Maildir root).
    Asked once for each store opened (the server's at startup, each `persmem amq` command and doctor its own);
    the store calls `close()` when it is done with it.

    A backend keeps OPAQUE message bytes: a message file's content exactly as the Maildir would hold it (persMEM's
    format, or sealed). The AMQ plugin encodes, seals, opens, decodes and validates; a backend never looks inside.
    Mailboxes are agent names (`[a-z][a-z0-9_-]{0,31}`), message names `<id>.md` (id: `\\w[\\w.-]{0,199}`, ASCII).
    Every method may be called from several threads at once. Its members:

    - `mailboxes() -> list[str]`: the mailboxes that hold any mail, sorted.
    - `names(box, folder) -> list[str]`: the message names in `folder` of `box`, sorted; folder "new" (unread) or
      "cur" (read, claimed). A message is in exactly one of them.
    - `folder_of(box, name) -> "new" | "cur" | None`: where the message is, None when `box` holds no such message.
    - `fetch(box, names) -> dict[str, bytes]`: the bytes of these messages (names not held are left out).
      Message bytes never change once delivered.
    - `deliver(box, name, data) -> None`: keep `data` as an unread message; durable when it returns (the backend's
      own acknowledgement), and visible at once to this process's `names`/`folder_of`. FileExistsError when `name`
      is already taken in `box` (the caller picks another name); OSError (TimeoutError included) when it failed,
      in which case the send is not acknowledged.
    - `claim(box, name) -> bool`: mark the message read. True for exactly one caller among every process sharing
      the backend; False when it was claimed already (or is not held). OSError when the backend did not answer.
    - `unread_count(box) -> int`: how many messages of `box` are in "new".
    - `generation` (an int attribute or property): changes whenever anything changes, including changes made by
      other processes or nodes; the live feed and the dashboard wake on it.
    - `describe() -> str`: one line for people, naming where the mail is (`persmem amq status`, doctor).
    - `close() -> None`: stop background work; the backend is not used afterwards.
    """
