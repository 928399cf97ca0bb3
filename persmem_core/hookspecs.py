"""The whole contract between the persmem host and its plugins.

A plugin is a module (or object) with functions named like the specs below,
decorated with `@hookimpl`, and published under the entry-point group
`persmem.plugins`. Every argument is optional to accept: an implementation
lists only the arguments it uses. `register` callbacks let the host know
which plugin contributed what, so conflicts are reported by name.
See docs/plugins.md for a walkthrough.
"""

from __future__ import annotations

from typing import TypedDict

import pluggy

PROJECT = "persmem"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_config(register):
    """Declare config sections: `register("amq", AmqConfig)`, a msgspec Struct with a default for every field."""


@hookspec
def add_hookspecs(add):
    """Add hooks other plugins may answer: `add(module_with_hookspecs)`."""


@hookspec
def register_tools(register, host):
    """Contribute MCP tools: `register(fn, name=None, description=None, max_concurrent_per_agent=None,
    tool_set=None)`; schema from type hints, description from the docstring. `tool_set` names the set an agent is
    given the tool with (a lowercase word: memory, mail, workspace, ...; the plugin's name when not given); a
    connection lists only its agent's sets (persmem_core/tool_sets.py)."""


@hookspec
def register_routes(register, host):
    """Mount ASGI apps on the HTTP server: `register("/amq", app, auth="agent"|"none", title="")`. A `title` marks
    a page for people (the dashboard): the startup line names its URL, and `/` leads to the first one."""


@hookspec
def register_commands(cli):
    """Add subcommands to the `persmem` click group, e.g. `persmem memory reindex`."""


@hookspec
def startup(host):
    """Open your service and `host.state.put(NAME, service)` before the server accepts requests; raising stops
    the server, naming the plugin."""


@hookspec
def shutdown(host):
    """`host.state.pop(NAME)`, flush and close what `startup` opened; called once, also after errors."""


@hookspec
def doctor(host):
    """Return health checks for `persmem doctor`: a list of `persmem_core.checks.Check` (`pass_`, `warn`, `fail` in the SDK)."""


@hookspec
def backup(host, dest):
    """Write a consistent copy of this plugin's data under `dest` (a pathlib.Path, one folder per plugin)."""


@hookspec
def restore(host, src):
    """Put back what your `backup` wrote into `src` (a pathlib.Path) in a fresh home; raise UserError, writing
    nothing, when your data folder already holds data or is in use."""


@hookspec
def reseal(host, sealer, progress, dry_run):
    """Bring your data files to the state new writes have (`sealer.needs_reseal`: sealed under the current key, or
    plaintext when encryption is off), each file ATOMICALLY (new file, fsync, rename; or your log's own atomic
    rewrite), so a kill -9 at any moment leaves every file readable with the keys on hand. Call
    `progress(what, done, total)` as you go. With `dry_run`, write nothing and count. Return a
    `persmem_core.crypto.sealing.ResealReport`. `persmem key migrate|rotate` call this with no server running."""


class BriefingSection(TypedDict):
    """One `briefing_sections` answer item."""

    title: str
    text: str
    priority: int
    memory_ids: list[str]


@hookspec
def briefing_sections(host, agent, project, cwd, budget_chars) -> list[BriefingSection]:
    """What a session starts with, from each plugin that has something to say (memory: the agent's identity,
    the latest handoff, relevant memories; mail: unread mail): a list of {"title": str, "text": str, "priority":
    int (smaller comes first and is cut last), "memory_ids": [str]}. `budget_chars` is the whole briefing's size,
    so keep each section well under it. Text an agent stored goes in as one line per item made by
    persmem_core.sdk.prompt_line, its author in it: the briefing is read by another agent's session. Other
    lines are made inert (no heading, no control character, no tag) and a section cut for space loses whole
    lines from its end. Gather the answers with `persmem_core.sdk.session_start_sections`: the sessions plugin's
    SessionStart hook and the memory plugin's chorus_init both do."""
