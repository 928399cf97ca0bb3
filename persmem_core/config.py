"""One TOML file, one validated config.

Each plugin registers a section (a msgspec Struct with defaults). The host
joins them into one Struct type, so validation errors carry the full path
(`$.amq.agents[1].name`) and `persmem config schema` is generated, not
written by hand. Environment variables override single values:
`PERSMEM_SERVER__PORT=9000` sets `server.port` (double underscore between
levels; the value is read as a TOML value, else taken as a string).
"""

from __future__ import annotations

import copy
import os
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from persmem_core.errors import ConfigError

ENV_PREFIX = "PERSMEM_"


def read_file(path: Path) -> dict[str, Any]:
    """The raw TOML table of `path`, or {} when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc}).") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}. Fix the line named, then run `persmem config check`.") from None


def _parse_env_value(value: str) -> Any:
    try:
        return tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return value


def env_overrides(environ: os._Environ[str] | dict[str, str]) -> dict[str, tuple[list[str], Any]]:
    """{"PERSMEM_SERVER__PORT": (["server", "port"], 9000)} for every override variable."""
    found = {}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and "__" in name[len(ENV_PREFIX) :]:
            keys = [k.lower() for k in name[len(ENV_PREFIX) :].split("__")]
            if all(keys):
                found[name] = (keys, _parse_env_value(value))
    return found


def apply_env_overrides(raw: dict[str, Any], environ) -> tuple[dict[str, Any], dict[str, str]]:
    """A copy of `raw` with overrides applied, and {"$.server.port": "PERSMEM_SERVER__PORT"}."""
    merged = copy.deepcopy(raw)
    sources = {}
    for var, (keys, value) in sorted(env_overrides(environ).items()):
        table = merged
        for key in keys[:-1]:
            nxt = table.setdefault(key, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"{var}: `{'.'.join(keys[:-1])}` is not a table in the config; cannot set `{keys[-1]}`.")
            table = nxt
        table[keys[-1]] = value
        sources["$." + ".".join(keys)] = var
    return merged, sources


def config_type(sections: dict[str, type]) -> type:
    """One Struct type with a field per section, each defaulting to the section's defaults."""
    fields = [(name, typ, msgspec.field(default_factory=typ)) for name, typ in sorted(sections.items())]
    return msgspec.defstruct("PersmemConfig", fields, kw_only=True, forbid_unknown_fields=True)


# Settings that moved, and where to: named in the error a config with the old spelling gets.
MOVED = {
    ("shell", "roots"): " The workspace roots are now set once for the shell and git tools: [workspace] roots.",
    ("git", "roots"): " The workspace roots are now set once for the shell and git tools: [workspace] roots.",
    ("shell", "default_timeout"): " It was never used: remove it (a shell_exec call's timeout defaults to 30 s).",
}


def validate(raw: dict[str, Any], sections: dict[str, type], *, source: str, env_sources: dict[str, str] | None = None):
    """Convert `raw` to the joined config type. Returns (config, warnings).

    Unknown top-level sections are warnings (their plugin may be uninstalled
    or disabled); anything wrong inside a known section is a ConfigError
    naming `source` and the path."""
    warnings = [
        f"{source}: section [{name}] belongs to no loaded plugin; it is ignored (see `persmem plugins`)."
        for name in raw
        if name not in sections
    ]
    known = {name: value for name, value in raw.items() if name in sections}
    try:
        config = msgspec.convert(known, config_type(sections), strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        origin = source
        for path, var in (env_sources or {}).items():
            if f"`{path}`" in message or f"`{path}." in message or f"`{path}[" in message:
                origin = f"{source} (value from environment variable {var})"
        moved = next((hint for (section, field), hint in MOVED.items()
                      if f"unknown field `{field}`" in message and f"at `$.{section}`" in message), "")
        raise ConfigError(f"{origin}: {message}.{moved} Fix it, then run `persmem config check`.") from None
    return config, warnings


def to_builtins(config) -> dict[str, Any]:
    return msgspec.to_builtins(config)


def json_schema(sections: dict[str, type]) -> dict[str, Any]:
    schema = msgspec.json.schema(config_type(sections))
    schema["title"] = "persmem configuration (persmem.toml)"
    return schema
