"""The AMQ tools: persMEM's names, argument names and defaults, plus threads, replies, broadcast and filters.

Who sends and whose inbox is read come from the authenticated caller. The `from_agent` and `agent`
arguments are kept so existing prompts work; they may be left empty, and naming another agent is refused.
"""

from __future__ import annotations

from persmem_core.sdk import CallContext, UserError

from .service import service
from .store import MailStore, normalize


def _store(call: CallContext) -> MailStore:
    return service(call.host)


def _as_caller(claimed: str, call: CallContext, tool: str) -> str:
    claimed = normalize(claimed)
    if claimed and claimed != call.agent:
        raise UserError(f"you are authenticated as {call.agent!r}; {tool} cannot send as {claimed!r}. "
                        f"Leave from_agent empty or pass {call.agent!r}.")
    return call.agent


def amq_send(from_agent: str, to_agent: str, body: str, subject: str = "", kind: str = "message",
             priority: str = "normal", reply_to: str = "", thread: str = "", call: CallContext = None) -> dict:
    """Send a message to another agent (atomic, durable Maildir delivery: once this returns "delivered"
    the message survives a crash).

    - from_agent: your own agent name, or "" (the sender is always you, the authenticated caller).
    - to_agent: the recipient; several comma-separated ("kite,wren") or "all" to broadcast. amq_agents lists names.
    - body: the message in Markdown. subject: a short summary line.
    - kind: message, question, answer, review_request, review_response, observation, decision or status.
    - priority: urgent, normal or low.
    - reply_to: id of a message you sent or received that this one answers (amq_reply does this for you);
      the new message joins that message's thread. thread: the "thread" of a conversation you are in, to
      continue it. Leave both empty to start a new conversation; ids come from amq_check and amq_history.
    Returns {"status": "delivered", "id", "from", "to", "subject"} and "thread" when it continues one."""
    sender = _as_caller(from_agent, call, "amq_send")
    return _store(call).send(sender, to_agent, body, subject, kind, priority, reply_to or None, thread or None)


def amq_check(agent: str = "", kind: str = "", priority: str = "", from_agent: str = "",
              call: CallContext = None) -> dict:
    """Peek at your unread messages (headers only; nothing is marked read). Call it at the start of a turn.
    Urgent first, then oldest first. Optional filters: kind, priority, from_agent (the sender).
    `agent` is your own name or "" (another inbox only if the operator granted it).
    Returns {"agent", "new_count", "messages": [{"id", "from", "subject", "kind", "priority", "created"}]}."""
    return _store(call).check(call.agent, agent, kind, priority, from_agent)


def amq_read(agent: str, msg_id: str, call: CallContext = None) -> dict:
    """Read one message in full and mark it read (it moves from unread to read; if several readers race,
    exactly one gets "claimed": true). `agent` is your own name or ""; `msg_id` comes from amq_check.
    Returns the headers, "body" (Markdown), "status" and "claimed"."""
    return _store(call).read(call.agent, agent, msg_id)


def amq_history(agent: str = "", limit: int = 10, kind: str = "", priority: str = "", from_agent: str = "",
                thread: str = "", call: CallContext = None) -> dict:
    """Your recent messages, read and unread, newest first (headers only; amq_read for a body).
    Filters: kind, priority, from_agent (the sender), thread. `limit` up to 1000."""
    return _store(call).history(call.agent, agent, limit, kind, priority, from_agent, thread)


def amq_timeline(limit: int = 20, kind: str = "", priority: str = "", from_agent: str = "",
                 call: CallContext = None) -> dict:
    """Recent messages across inboxes, newest first (max 50): everything sent to you or by you, plus
    inboxes the operator lets you read. Headers with "to" and read/unread status."""
    return _store(call).timeline(call.agent, limit, kind, priority, from_agent)


def amq_reply(msg_id: str, body: str, subject: str = "", kind: str = "answer", priority: str = "normal",
              call: CallContext = None) -> dict:
    """Answer a message in your inbox: it goes to the message's sender, in the same thread, with
    "Re: <subject>" unless you give a subject. Does not mark the original read (amq_read does)."""
    store = _store(call)
    original = store.read_header(call.agent, msg_id)
    subject = subject or (original.subject if original.subject.lower().startswith("re:") else
                          f"Re: {original.subject}" if original.subject else "")
    return store.send(call.agent, original.sender, body, subject, kind, priority, reply_to=msg_id.removesuffix(".md"),
                      thread=original.thread or msg_id.removesuffix(".md"))


def amq_thread(thread_id: str, call: CallContext = None) -> dict:
    """Every message of a conversation thread you can see (sent to you or by you), oldest first, with bodies.
    `thread_id` is the "thread" of any message in it, or the id of its first message."""
    return _store(call).thread(call.agent, thread_id)


def amq_agents(call: CallContext = None) -> dict:
    """Who can receive mail, and how many unread messages each has. "you" marks your own entry."""
    return _store(call).agents(call.agent)


ALL_TOOLS = [amq_send, amq_check, amq_read, amq_history, amq_timeline, amq_reply, amq_thread, amq_agents]
