"""Whose sessions `persmem sessions import` archives, and which it must leave alone.

Without --agent, a transcript is imported as the agent its client's hooks speak for (read from the hook commands
installed in Claude Code's and Codex's settings for this home: `--agent NAME`, or none for [server]
default_agent), so an import never files a session the hooks captured under another name. With no hooks for
this home, the default agent is used only when it is a real one (registered, or the home has no agents yet, when
loopback callers are served as it); else the one registered agent; else the import is refused, asking for
--agent.

A session is its client and session id, whoever captured it: one already archived for another agent (its hooks
captured it, or an earlier import as that agent) is skipped and reported, never archived a second time.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from persmem_core.sdk import UserError

from . import archive
from .installer import EVENTS, is_ours, read_json, targets

CLIENT_NAMES = {"claude": "Claude Code", "codex": "Codex"}


def hook_agents(home: Path, environ=os.environ) -> dict[str, str | None]:
    """{client: agent} for each client whose settings hold persmem hooks of this home; None for hooks installed
    without --agent (they speak for [server] default_agent). Hooks to a remote server (--url), of another home,
    or settings that cannot be read, say nothing."""
    found: dict[str, str | None] = {}
    home_arg = str(Path(home).absolute())
    for client, target in targets(environ).items():
        try:
            _, data = read_json(target.hooks_file)
        except UserError:
            continue
        hooks = data.get("hooks") if isinstance(data, dict) else None
        for event in EVENTS:
            for group in (hooks or {}).get(event, []) if isinstance(hooks, dict) else []:
                for handler in group.get("hooks", []) if isinstance(group, dict) else []:
                    option = _options(handler) if is_ours(handler) else {}
                    if option.get("--home") == home_arg and "--url" not in option:
                        found.setdefault(client, option.get("--agent"))
    return found


def _options(handler: dict) -> dict[str, str]:
    try:
        words = shlex.split(str(handler.get("command", "")))
    except ValueError:
        return {}
    return {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}


def import_agents(host, clients: set[str], environ=os.environ) -> tuple[dict[str, str], list[str]]:
    """({client: agent} for the clients to import, one line per choice saying why) when no --agent was given."""
    default = host.config.server.default_agent
    hooked = {client: agent or default for client, agent in hook_agents(host.home, environ).items()}
    active = sorted(name for name, record in host.agents.agents().items() if record.revoked is None)
    chosen, why = {}, []
    for client in sorted(clients):
        if client in hooked:
            agent, reason = hooked[client], "the agent its hooks speak for"
        elif len(set(hooked.values())) == 1:
            agent, reason = next(iter(hooked.values())), "the agent the installed hooks speak for"
        elif not hooked and (default in active or not active):
            agent, reason = default, "[server] default_agent; no hooks are installed for this home"
        elif not hooked and len(active) == 1:
            agent, reason = active[0], "the only agent; no hooks are installed for this home"
        else:
            names = ", ".join(active) or "none yet"
            raise UserError(f"whose sessions are these? No persmem hooks for {CLIENT_NAMES[client]} say which agent "
                            f"they speak for, and [server] default_agent {default!r} is not one of the agents "
                            f"({names}). Run the import again with --agent NAME.")
        chosen[client] = agent
        why.append(f"{CLIENT_NAMES[client]} sessions are imported as {agent} ({reason}).")
    return chosen, why


def archived_owners(folder: Path, sealer) -> dict[tuple[str, str], str]:
    """{(client, session_id): agent} of every session in the archive at `folder` (read only)."""
    return {(meta.client, meta.session_id): meta.agent for _, meta in archive.scan(folder, sealer)}
