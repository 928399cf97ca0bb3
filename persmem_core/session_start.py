"""What a session starts with, gathered once: every plugin's `briefing_sections` answer, checked and ordered.

The one way to build a session start: the sessions plugin's SessionStart hook (its briefing) and the memory
plugin's chorus_init tool both call `session_start_sections`, so each plugin says what a session should know in
one place and both doors hand out the same sections.
"""

from __future__ import annotations

import logging

from persmem_core.hookspecs import BriefingSection
from persmem_core.plugins import call_each

log = logging.getLogger("persmem.session_start")


def session_start_sections(host, agent: str, project: str, cwd: str, budget_chars: int, *,
                           leave_out: tuple[str, ...] = ()) -> list[BriefingSection]:
    """The `briefing_sections` answers for `agent` starting a session in `project` (its working folder `cwd`),
    most important (lowest priority) first: sections with a non-blank text only. `leave_out`: names of plugins
    not asked (a plugin that shows its own part its own way). A plugin whose answer fails is logged and left
    out; the others still count."""
    asked = {impl.plugin_name for impl in host.pm.hook.briefing_sections.get_hookimpls()} - set(leave_out)
    sections = []
    for plugin, answer, error in call_each(host.pm, "briefing_sections", only=asked, host=host, agent=agent,
                                           project=project, cwd=cwd, budget_chars=budget_chars):
        if error is not None:  # a failing section must not cost the whole session start
            log.warning("briefing_sections of %s failed (%s: %s)", plugin, type(error).__name__, str(error)[:200])
            continue
        sections += [section for section in (answer or []) if isinstance(section, dict)
                     and isinstance(section.get("text"), str) and section["text"].strip()]
    return sorted(sections, key=lambda s: s.get("priority", 100) if isinstance(s.get("priority"), int) else 100)
