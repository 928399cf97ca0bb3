"""persmem-plugin-amq-maildir: agent-to-agent mail (AMQ) on Maildir.

Modules, one job each:
- `config.py`   the [amq] section of persmem.toml
- `message.py`  the on-disk message format (persMEM's `---json` frontmatter + Markdown body), ids, kinds
- `maildir.py`  delivery, claiming, listing and quarantine on one mailbox: the Maildir guarantees
- `store.py`    the mail root: roster, who may read what, send/check/read/history/timeline/threads
- `tools.py`    the MCP tools (amq_*)
- `web.py`      the authenticated JSON + Server-Sent Events endpoint under /amq
- `commands.py` `persmem amq ...`
- `plugin.py`   the pluggy hooks that wire it all in
"""
