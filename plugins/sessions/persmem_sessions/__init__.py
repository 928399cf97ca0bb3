"""persmem-plugin-sessions: ambient memory for Claude Code and Codex.

Hooks installed into the clients (`persmem hooks install`) capture every session's transcript and recall
what matters at session start and on each prompt, through the running server; archives are kept per agent,
project and session, redacted, and searchable. Nothing here needs an LLM.

Kept empty of imports: the hook (hook.py, run with -I -S on every prompt) must start fast.

Modules, one job each:
- `plugin.py`     the pluggy hooks (only hooks): config, hookspecs, tools, routes, panel, CLI, lifecycle, backup
- `hookspecs.py`  what this plugin asks other plugins (index and search turns, briefing sections, recall)
- `config.py`     the [sessions] section of persmem.toml
- `service.py`    the sessions of this host, opened at startup and kept in `host.state`
- `briefing.py`   what a session is told: its briefing and the memories recalled for a prompt, framed and made inert
- `hook.py`       the client hooks run: ONE stdlib-only file (served at GET /hooks/client.py, installs itself),
                  fail open, the user's own socket (checked before a byte) or --url with a token file
- `web.py`        /sessions: what the client hooks call on the server (capture, briefing, recall), and indexing progress
- `tools.py`      the MCP tools: list, read and search the caller's own archived sessions
- `panels.py`     the dashboard's Sessions panel (with the indexing progress, live)
- `panel/`        its template and script
- `commands.py`   `persmem hooks ...` and `persmem sessions ...`
- `installer.py`  putting the hooks into Claude Code's and Codex's settings, checking them, taking them out
- `codex_trust.py` trusting persmem's Codex hooks through `codex app-server` (hooks/list, config/value/write), and which are untrusted
- `importer.py`   `persmem sessions import`: the transcripts the clients already wrote on this machine
- `indexing_progress.py` the import's second progress bar: the new turns indexed for search, followed to the end
- `import_owner.py` whose sessions an import files them under (the agent the installed hooks speak for), and which are archived already
- `transcripts.py` turns out of the clients' transcript lines
- `projects.py`   the project a session belongs to, from its working folder
- `redact.py`     secrets out of transcripts, before anything is archived, indexed or logged: the rules applied
- `secret_rules.py` the ruleset: secrets known by their shape or what stands before them (detect-secrets' and ours)
- `named_secrets.py` secrets known by their name (name=value, headers, flags, JSON keys) and cookie values
- `archive.py`    the session archive on disk: one archive and one metadata file per captured session
- `backup.py`     backups of the archive, as stored (sealed stays sealed)
- `reseal.py`     `persmem key migrate|rotate` for the archive
"""
