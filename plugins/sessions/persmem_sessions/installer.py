"""Put persmem's hooks into Claude Code's and Codex's settings, check them, take them out again.

- Claude Code: `$CLAUDE_CONFIG_DIR/settings.json` (default `~/.claude/settings.json`), key "hooks".
- Codex: `$CODEX_HOME/hooks.json` (default `~/.codex/hooks.json`), the same shape, plus `[features] hooks = true`
  in `$CODEX_HOME/config.toml` (on by default in current Codex; the deprecated `codex_hooks = true` an older
  persmem wrote is taken out, as Codex warns about it at every start).

Both take event -> [{"matcher": ..., "hooks": [{"type": "command", "command": ..., "timeout": seconds}]}]. Our
handlers are the ones whose command runs the client hook (hook.py: `-I -S`, by import or as a script; the old
`-m persmem_sessions.hook` is recognised too, so it is replaced or removed); everything else in the files is the
user's and is kept as it is. The merge itself lives in hook.py (one stdlib-only file, which can also install
itself on a machine without persmem): this module adds the persmem side (the home, the venv's python, errors as
UserError, atomic writes, uninstall and status). Installing is idempotent (again = nothing to change; a different
agent or venv = our old handlers replaced). Every file is backed up (`NAME.persmem-backup-<UTC time>`, mode
0600) before its first change in a run; a file that is not valid JSON / TOML is refused and left alone.
Uninstalling takes our handlers out; when nothing else changed since, the file is restored byte for byte from
the backup made before install (or removed, if install created it).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tomllib
from pathlib import Path

from persmem_core.sdk import UserError, atomic_write_bytes

from . import hook as client
from .hook import (BACKUP_MARK, CLIENTS, EVENTS, FEATURE_KEY, FEATURE_LINE, SettingsError, Target,  # noqa: F401
                   enable_hooks_text, hooks_enabled, is_ours, json_text, our_group, targets, with_ours, without_ours)


def hook_command(client_name: str, home: Path, agent: str | None) -> str:
    """The line the client runs: this venv's python (absolute: the client does not have our PATH) on hook.py
    with -I -S (no site-packages: a fast start), the home pinned (the client's environment may not name it)."""
    extra = ["--home", str(Path(home).absolute())] + (["--agent", agent] if agent else [])
    return client.hook_command(sys.executable, client.__file__, client_name, extra, __package__)


def _user_error(call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except SettingsError as exc:
        raise UserError(str(exc)) from None


def read_json(path: Path) -> tuple[bytes | None, dict]:
    return _user_error(client.read_json, path)


def contains_ours(data) -> bool:
    return bool(without_ours(data)[1]) if isinstance(data, dict) else False


def parse_toml(path: Path, text: str) -> dict:
    return _user_error(client.parse_toml, path, text)


def chosen_targets(target: str, environ=os.environ) -> list[Target]:
    return _user_error(client.chosen_targets, target, environ)


# -- files: backups, writes that keep the user's links and modes ---------------------------------------------


def backup(path: Path, raw: bytes) -> Path:
    return _user_error(client.backup, path, raw)


def backups(path: Path) -> list[Path]:
    """The backups of `path`, newest first."""
    found = [p for p in path.parent.glob(f"{path.name}{BACKUP_MARK}*") if p.is_file() and not p.is_symlink()]
    return sorted(found, key=lambda p: (p.name.split(BACKUP_MARK)[1].split("-")[0], len(p.name), p.name),
                  reverse=True)


def write(path: Path, data: bytes) -> None:
    """Replace the file's content atomically; through a link (dotfiles kept elsewhere) to its target, keeping
    the file's mode (a new file is 0600: settings may hold keys)."""
    real = Path(os.path.realpath(path))
    try:
        mode = real.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o600
    real.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_bytes(real, data, mode)


def remove(path: Path) -> None:
    Path(os.path.realpath(path)).unlink()


# -- the commands --------------------------------------------------------------------------------------------


def install(target: Target, command: str) -> list[str]:
    """Our hooks into the target's files; the lines saying what changed."""
    return _user_error(client.install_target, target, command, write)


def install_remote(url: str, agent: str, target: str, token: str) -> list[str]:
    """Hooks that reach the persmem server at `url` as `agent` (token saved 0600 under ~/.config/persmem)."""
    return _user_error(client.install_remote, url, agent, target, token, sys.executable, client.__file__, write,
                       os.environ, __package__)


def _changed(path: Path, raw: bytes | None, new: bytes) -> str:
    return _user_error(client._changed, path, raw, new, write)


def uninstall(target: Target) -> list[str]:
    raw, data = read_json(target.hooks_file)
    out = []
    new, events = without_ours(data)
    if events:
        restored = _restore_from_backup(target.hooks_file, lambda old: _json_or_none(old) == new
                                        and not contains_ours(_json_or_none(old)))
        if restored is not None:
            out.append(f"{target.hooks_file}: restored as it was before install (from {restored})")
        else:
            backup_line = _changed(target.hooks_file, raw, json_text(new)) if new or backups(target.hooks_file) \
                else _removed(target.hooks_file)
            out.append(backup_line)
            out.append(f"  removed the persmem hooks from {', '.join(events)}")
    else:
        out.append(f"{target.hooks_file}: no persmem hooks, nothing to change")
    if target.feature_file is not None and target.feature_file.exists():
        text = target.feature_file.read_text()

        def made_by_install(old: bytes) -> bool:
            try:
                old_text = old.decode()
                return not hooks_enabled(tomllib.loads(old_text)) and enable_hooks_text(old_text) == text
            except (UnicodeDecodeError, tomllib.TOMLDecodeError):
                return False

        restored = _restore_from_backup(target.feature_file, made_by_install)
        if restored is not None:
            out.append(f"{target.feature_file}: restored as it was before install (from {restored})")
        elif not backups(target.feature_file) and text == enable_hooks_text(""):
            out.append(_removed(target.feature_file))
        elif hooks_enabled(parse_toml(target.feature_file, text)):
            out.append(f"{target.feature_file}: left `{FEATURE_LINE}` (the file changed since install, or it was "
                       "there before; other hooks may need it)")
    return out


def _json_or_none(raw: bytes):
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def _restore_from_backup(path: Path, matches) -> Path | None:
    """Put back the newest backup `matches` accepts, byte for byte (the current file is backed up first)."""
    for candidate in backups(path):
        old = candidate.read_bytes()
        if matches(old):
            current = path.read_bytes()
            if current != old:
                backup(path, current)
                write(path, old)
            return candidate
    return None


def _removed(path: Path) -> str:
    remove(path)
    return f"{path}: removed (persmem's install had created it)"


def status(target: Target, home: Path) -> list[str]:
    """One line per fact: the file, each event's hook (installed, for which agent / not / run by another venv or
    for another home), Codex's switch."""
    if not target.folder.is_dir():
        return [f"{target.client}: {target.folder} does not exist (client not installed, or not used yet); no hooks"]
    try:
        _, data = read_json(target.hooks_file)
    except UserError as exc:
        return [f"{target.client}: {exc}"]
    out = [f"{target.client}: {target.hooks_file}"]
    hooks = data.get("hooks", {})
    for event in EVENTS:
        found = [h.get("command") for group in hooks.get(event, []) if isinstance(group, dict)
                 for h in (group.get("hooks") if isinstance(group.get("hooks"), list) else []) if is_ours(h)]
        out.append(f"  {event}: {_describe(found, home)}")
    if target.feature_file is not None:
        try:
            text = target.feature_file.read_text() if target.feature_file.exists() else ""
            on = hooks_enabled(parse_toml(target.feature_file, text))
        except UserError as exc:
            out.append(f"  {exc}")
        else:
            state = "on" if on else "not set (on by default in current Codex)"
            out.append(f"  {target.feature_file}: [features] {FEATURE_KEY} {state}")
    return out


def _describe(commands: list[str], home: Path) -> str:
    if not commands:
        return "not installed"
    try:
        words = shlex.split(commands[0])
    except ValueError:
        words = []
    option = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}
    agent = option.get("--agent", "the server's default agent")
    if "--url" in option:
        return f"installed, to {option['--url']} (the token in {option.get('--token-file', '$PERSMEM_TOKEN')})"
    if not words or words[0] != sys.executable or option.get("--home") != str(Path(home).absolute()):
        return (f"installed for another persmem ({commands[0]}); `persmem hooks install` from this one replaces it")
    extra = f" ({len(commands)} copies)" if len(commands) > 1 else ""
    return f"installed, as {agent}{extra}"
