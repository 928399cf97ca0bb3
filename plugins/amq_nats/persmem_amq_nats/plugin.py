"""The amq_nats plugin's hooks: the answer to amq_maildir's `amq_backend` (mail kept in NATS JetStream when
[cluster] servers is set; else None, and the Maildir stays), and doctor. No tools of its own: the amq_* tools are
amq_maildir's, whichever backend keeps the mail."""

from __future__ import annotations

from persmem_core.sdk import hookimpl


@hookimpl(optionalhook=True)
def amq_backend(host):
    """The JetStream mail backend on the host's cluster link, or None without [cluster] servers."""
    if not host.section("cluster").servers:
        return None
    from .jetstream import JetStreamMail

    return JetStreamMail.open(host.cluster, host.section("cluster").replicas, host.sealer)


@hookimpl
def doctor(host):
    from persmem_core.sdk import fail, pass_, warn

    if not host.section("cluster").servers:
        return [pass_("amq backend", "Maildir ([cluster] servers is empty, so amq_nats keeps no mail)")]
    from .storage import check_stream

    try:
        problems, summary = check_stream(host.cluster, host.section("cluster").replicas)
    except Exception as exc:  # noqa: BLE001 - doctor reports whatever went wrong
        return [fail("amq backend", f"NATS JetStream: {type(exc).__name__}: {exc}")]
    if problems:
        return [warn("amq backend", f"NATS JetStream: {summary}; " + "; ".join(problems))]
    return [pass_("amq backend", f"NATS JetStream: {summary}")]
