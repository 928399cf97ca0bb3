"""Errors a user (or the AI calling a tool) can fix: the message carries the fix."""


class UserError(Exception):
    """A problem with the input, the config or the environment, described so
    that whoever reads it knows what to change. Tools raise it for bad
    arguments; the server turns it into an MCP error result with this text,
    and the CLI prints it without a traceback and exits non-zero."""


class ConfigError(UserError):
    """The config file or an environment override is invalid."""


class PluginConflictError(UserError):
    """Two plugins claim the same tool name, config section or route."""
