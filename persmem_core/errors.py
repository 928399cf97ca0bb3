"""Errors a user (or the AI calling a tool) can fix: the message carries the fix."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the input, the config or the environment, described so
    that whoever reads it knows what to change. Tools raise it for bad
    arguments; the server turns it into an MCP error result with this text,
    and the CLI prints it without a traceback and exits non-zero."""


class ConfigError(UserError):
    """The config file or an environment override is invalid."""


class PluginConflictError(UserError):
    """Two plugins claim the same tool name, config section, route or dashboard panel."""

    @classmethod
    def between(cls, what: str, first: str, second: str) -> PluginConflictError:
        """The one wording of every conflict: what is claimed, by whom, and how to disable one."""
        return cls(f"{what} is registered by both plugin {first!r} and plugin {second!r}. Disable one of them "
                   f"([plugins] disabled = [\"{second}\"] or PERSMEM_DISABLE_PLUGINS={second}).")
