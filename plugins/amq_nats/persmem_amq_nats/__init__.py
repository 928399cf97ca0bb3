"""persmem-plugin-amq-nats: agent mail (AMQ) kept in a NATS JetStream cluster, so several persmem nodes share it.

The amq_* tools, their rules, the message format and sealing stay persmem-plugin-amq-maildir's; this plugin
answers its `amq_backend` hook with a place to keep the mail when `[cluster] servers` is set (else the Maildir
stays). Modules, one job each:
- `plugin.py`    the hooks (only hooks): `amq_backend`, doctor
- `jetstream.py` the mail backend: delivering to stream PERSMEM_AMQ, claiming in KV bucket persmem_amq_claims,
                 reading back, and the background consumer and watch that keep this node's view current
- `storage.py`   the stream and the bucket themselves: their names, subjects and keys, making them when missing,
                 what doctor says of them
- `view.py`      this node's view of the mail: which messages each mailbox holds, read or not (no NATS in it)
"""
