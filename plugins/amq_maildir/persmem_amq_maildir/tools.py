"""The AMQ tools: persMEM's names, argument names and defaults, plus threads, replies, broadcast and filters.

Who sends and whose inbox is read come from the authenticated caller: amq_send has no sender argument (the
sender is the caller's agent), and `agent` (whose inbox) may be left empty; another agent's inbox is read only
when the operator granted it. `from_agent` in amq_check, amq_history and amq_timeline filters by sender.
"""

from __future__ import annotations

from persmem_core.sdk import CallContext

from .service import service
from .store import MailStore


def _store(call: CallContext) -> MailStore:
    return service(call.host)


def amq_send(to_agent: str, body: str, subject: str = "", kind: str = "message", priority: str = "normal",
             reply_to: str = "", thread: str = "", call: CallContext = None) -> dict:
    """Send a message from you (durable once "delivered"). to_agent: a name, "kite,wren" or "all". body:
    Markdown. kind: message, question, answer, review_request, review_response, observation, decision or
    status. priority: urgent, normal or low. reply_to: the message id this answers; thread: one to continue."""
    return _store(call).send(call.agent, to_agent, body, subject, kind, priority, reply_to or None, thread or None)


def amq_check(agent: str = "", kind: str = "", priority: str = "", from_agent: str = "",
              call: CallContext = None) -> dict:
    """Headers of your unread messages, urgent first; marks nothing read. Filters: kind, priority, from_agent
    (sender). agent: "" (yours)."""
    return _store(call).check(call.agent, agent, kind, priority, from_agent)


def amq_read(msg_id: str, agent: str = "", call: CallContext = None) -> dict:
    """Read a message whole (Markdown body) and mark it read. msg_id: from amq_check."""
    return _store(call).read(call.agent, agent, msg_id)


def amq_history(agent: str = "", limit: int = 10, kind: str = "", priority: str = "", from_agent: str = "",
                thread: str = "", call: CallContext = None) -> dict:
    """Your recent messages, read and unread, newest first (headers). limit: max 1000."""
    return _store(call).history(call.agent, agent, limit, kind, priority, from_agent, thread)


def amq_timeline(limit: int = 20, kind: str = "", priority: str = "", from_agent: str = "",
                 call: CallContext = None) -> dict:
    """Recent messages to or from you (and inboxes you were granted), newest first. limit: max 50."""
    return _store(call).timeline(call.agent, limit, kind, priority, from_agent)


def amq_reply(msg_id: str, body: str, subject: str = "", kind: str = "answer", priority: str = "normal",
              call: CallContext = None) -> dict:
    """Answer a message: to its sender, same thread, "Re:" subject unless given."""
    store = _store(call)
    original = store.read_header(call.agent, msg_id)
    subject = subject or (original.subject if original.subject.lower().startswith("re:") else
                          f"Re: {original.subject}" if original.subject else "")
    return store.send(call.agent, original.sender, body, subject, kind, priority, reply_to=msg_id.removesuffix(".md"),
                      thread=original.thread or msg_id.removesuffix(".md"))


def amq_thread(thread_id: str, call: CallContext = None) -> dict:
    """A thread's messages, oldest first, with bodies. thread_id: a message's thread or id."""
    return _store(call).thread(call.agent, thread_id)


def amq_agents(call: CallContext = None) -> dict:
    """Who can receive mail, and each one's unread count ("you" marks yours)."""
    return _store(call).agents(call.agent)


ALL_TOOLS = [amq_send, amq_check, amq_read, amq_history, amq_timeline, amq_reply, amq_thread, amq_agents]
