"""persmem-plugin-sessions: ambient memory for Claude Code and Codex.

Hooks installed into the clients (`persmem hooks install`) capture every session's transcript and recall
what matters at session start and on each prompt, through the running server; archives are kept per agent,
project and session, redacted, and searchable. Nothing here needs an LLM.

Kept empty of imports: `python -m persmem_sessions.hook` runs on every prompt and must start fast.

Modules, one job each:
- `plugin.py`     the pluggy hooks (only hooks): config, hookspecs, tools, routes, panel, CLI, lifecycle, backup
- `hookspecs.py`  what this plugin asks other plugins (index and search turns, briefing sections, recall)
- `config.py`     the [sessions] section of persmem.toml
- `service.py`    the sessions of this host, opened at startup and kept in `host.state`
- `hook.py`       the client hooks run: stdlib only, fail open, talks to the running server
"""
