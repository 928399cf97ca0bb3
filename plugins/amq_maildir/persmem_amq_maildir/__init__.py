"""persmem-plugin-amq-maildir: agent-to-agent mail (AMQ) on Maildir.

Modules, one job each:
- `plugin.py`   the pluggy hooks (only hooks): config, tools, routes, panel, CLI, startup/shutdown, doctor,
                backup, and the Mail section of what a session starts with (`briefing_sections`)
- `config.py`   the [amq] section of persmem.toml
- `service.py`  the mail store of this host, opened at startup and kept in `host.state`; the mail root
- `tools.py`    the MCP tools (amq_*)
- `web.py`      the authenticated JSON + Server-Sent Events endpoint under /amq
- `panels.py`   the dashboard's Mail panel
- `panel/`      its template and script
- `commands.py` `persmem amq ...` (opens its own store: no server needed)
- `store.py`    the mail root: roster, who may read what, send/check/read/history/timeline/threads
- `composing.py` what a sender may write: a body within the limit, a subject of one visible line
- `rows.py`     a message as tools, feed, web and panel show it: headers, body, listing rows, quarantine notes
- `feed.py`     the live feed: unread counts and newly delivered messages as event-stream items
- `hookspecs.py` `amq_backend`: another plugin may keep the mail instead of the Maildir root (the backend contract)
- `remote.py`   one mailbox in such a backend, with the methods of a Maildir mailbox
- `maildir.py`  delivery, claiming, listing and quarantine on one mailbox: the Maildir guarantees
- `message.py`  the on-disk message format (persMEM's `---json` frontmatter + Markdown body), ids, kinds
- `backup.py`   copying every delivered message for `persmem backup`
- `migrate.py`  `persmem amq migrate`: the Maildir root copied into the backend in use
- `reseal.py`   `persmem key migrate|rotate` for mail: every delivered message as `[amq] encrypt` asks
"""
