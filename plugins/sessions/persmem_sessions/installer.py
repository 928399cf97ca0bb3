"""Put persmem's hooks into Claude Code's and Codex's settings, check them, take them out again.

- Claude Code: `$CLAUDE_CONFIG_DIR/settings.json` (default `~/.claude/settings.json`), key "hooks".
- Codex: `$CODEX_HOME/hooks.json` (default `~/.codex/hooks.json`), the same shape, plus `[features]
  codex_hooks = true` in `$CODEX_HOME/config.toml`, which Codex needs to run hooks at all.

Both take event -> [{"matcher": ..., "hooks": [{"type": "command", "command": ..., "timeout": seconds}]}]. Our
handlers are the ones whose command runs the module `persmem_sessions.hook`; everything else in the files is the
user's and is kept as it is. Installing is idempotent (again = nothing to change; a different agent or venv =
our old handlers replaced). Every file is backed up (`NAME.persmem-backup-<UTC time>`,
mode 0600) before its first change in a run; a file that is not valid JSON / TOML is refused and left alone.
Uninstalling takes our handlers out; when nothing else changed since, the file is restored byte for byte from
the backup made before install (or removed, if install created it).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from persmem_core.sdk import UserError, atomic_write_bytes

MODULE = "persmem_sessions.hook"
CLIENTS = ("claude", "codex")
BACKUP_MARK = ".persmem-backup-"
# event -> (matcher, the client's timeout in seconds). The hook keeps its own deadline well under each
# (hook.DEADLINES: 3 s, 1.5 s, 2.5 s, SessionEnd 2 s); Codex caps SessionEnd at 3 s.
EVENTS: dict[str, tuple[str | None, int]] = {
    "SessionStart": ("startup|resume|clear|compact", 5),
    "UserPromptSubmit": (None, 3),
    "Stop": (None, 5),
    "PreCompact": (None, 5),
    "SessionEnd": (None, 3),
}
FEATURE_LINE = "codex_hooks = true"


@dataclass(frozen=True)
class Target:
    client: str
    folder: Path  # the client's config folder
    hooks_file: Path
    feature_file: Path | None  # Codex's config.toml, where hooks are switched on


def targets(environ=os.environ) -> dict[str, Target]:
    claude = Path(environ.get("CLAUDE_CONFIG_DIR") or "~/.claude").expanduser()
    codex = Path(environ.get("CODEX_HOME") or "~/.codex").expanduser()
    return {"claude": Target("claude", claude, claude / "settings.json", None),
            "codex": Target("codex", codex, codex / "hooks.json", codex / "config.toml")}


def hook_command(client: str, home: Path, agent: str | None) -> str:
    """The line the client runs: this venv's python (absolute: the client does not have our PATH), the home
    pinned (the client's environment may not name it), each word quoted for the shell the client uses."""
    words = [sys.executable, "-m", MODULE, "--client", client, "--home", str(Path(home).absolute())]
    return shlex.join(words + (["--agent", agent] if agent else []))


def is_ours(handler) -> bool:
    return isinstance(handler, dict) and MODULE in str(handler.get("command", ""))


def our_group(event: str, command: str) -> dict:
    matcher, timeout = EVENTS[event]
    group = {"matcher": matcher} if matcher else {}
    return group | {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}


# -- the hooks file (JSON) -----------------------------------------------------------------------------------


def read_json(path: Path) -> tuple[bytes | None, dict]:
    """The file's bytes (None when it does not exist) and its object; refuses anything we could not edit
    without losing the user's settings."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, {}
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}. Nothing was changed.") from None
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); persmem left it untouched. Fix the file (or move it "
                        "away) and run the command again.") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object; persmem left it untouched. Fix the file (or move it "
                        "away) and run the command again.")
    hooks = data.get("hooks", {})
    bad = "its \"hooks\" is not an object" if not isinstance(hooks, dict) else next(
        (f'its "hooks"."{event}" is not a list' for event in EVENTS if not isinstance(hooks.get(event, []), list)),
        None)
    if bad:
        raise UserError(f"{path}: {bad}; persmem left it untouched. Fix the file and run the command again.")
    return raw, data


def without_ours(data: dict) -> tuple[dict, list[str]]:
    """`data` with our handlers taken out (a matcher group or event left empty by that goes too) and the events
    they were in."""
    data = copy.deepcopy(data)
    hooks = data.get("hooks")
    touched: list[str] = []
    if not isinstance(hooks, dict):
        return data, touched
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(handlers, list) and any(is_ours(h) for h in handlers):
                touched.append(event)
                handlers = [h for h in handlers if not is_ours(h)]
                if not handlers:
                    continue
                group = group | {"hooks": handlers}
            kept.append(group)
        if event in touched and not kept:
            del hooks[event]
        else:
            hooks[event] = kept
    if touched and not hooks:
        del data["hooks"]
    return data, list(dict.fromkeys(touched))


def with_ours(data: dict, command: str) -> tuple[dict, list[str]]:
    """`data` with exactly one handler of ours per event, running `command`; what changed, one line each."""
    changes = []
    data = copy.deepcopy(data)
    hooks = data.setdefault("hooks", {})
    for event in EVENTS:
        groups = hooks.get(event, [])
        wanted = our_group(event, command)
        ours = [group for group in groups if isinstance(group, dict) and isinstance(group.get("hooks"), list)
                and any(is_ours(h) for h in group["hooks"])]
        if ours == [wanted]:
            continue
        kept = [group for group in without_ours({"hooks": {event: groups}})[0].get("hooks", {}).get(event, [])]
        hooks[event] = kept + [wanted]
        changes.append(f"{'replaced' if ours else 'added'} the {event} hook (timeout {EVENTS[event][1]} s)")
    return data, changes


def contains_ours(data) -> bool:
    return bool(without_ours(data)[1]) if isinstance(data, dict) else False


def json_text(data: dict) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


# -- Codex's feature switch (TOML, edited as text so every other line and comment stays) ---------------------

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]\[]+?)\s*\]\]?\s*(#.*)?$")  # [table] or [[array of tables]]
_FEATURE = re.compile(r"^\s*codex_hooks\s*=")
_DOTTED_FEATURE = re.compile(r"^\s*features\s*\.\s*codex_hooks\s*=")


def parse_toml(path: Path, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path} is not valid TOML ({exc}); persmem left it untouched. Fix the file and run the "
                        "command again.") from None


def hooks_enabled(config: dict) -> bool:
    features = config.get("features")
    return isinstance(features, dict) and features.get("codex_hooks") is True


def enable_hooks_text(text: str) -> str:
    """`text` with `codex_hooks = true` under [features]: the line set in place if the key is there, else added
    right under the [features] header, else a [features] table appended. Only that one line differs."""
    lines = text.splitlines(keepends=True)
    table = None
    for number, line in enumerate(lines):
        header = _HEADER.match(line)
        if header:
            table = header.group(1).strip()
            if table == "features" and not any(_FEATURE.match(later) for later in _section(lines, number)):
                return "".join(lines[:number + 1] + [FEATURE_LINE + "\n"] + lines[number + 1:])
        elif (table == "features" and _FEATURE.match(line)) or (table is None and _DOTTED_FEATURE.match(line)):
            key = "codex_hooks" if table == "features" else "features.codex_hooks"
            ending = "\n" if line.endswith("\n") else ""
            return "".join(lines[:number] + [f"{key} = true{ending}"] + lines[number + 1:])
    gap = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
    return f"{text}{gap}[features]\n{FEATURE_LINE}\n"


def _section(lines: list[str], header: int) -> list[str]:
    rest = lines[header + 1:]
    end = next((i for i, line in enumerate(rest) if _HEADER.match(line)), len(rest))
    return rest[:end]


# -- files: backups, writes that keep the user's links and modes ---------------------------------------------


def _now() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def backup(path: Path, raw: bytes) -> Path:
    """A private copy of `raw` beside `path`, named by the UTC time (never overwriting an earlier one)."""
    stem = f"{path.name}{BACKUP_MARK}{_now()}"
    for n in range(1, 1000):
        candidate = path.with_name(stem if n == 1 else f"{stem}-{n}")
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        return candidate
    raise UserError(f"too many backups of {path} in {path.parent}; remove old {path.name}{BACKUP_MARK}* files.")


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
    raw, data = read_json(target.hooks_file)
    feature_raw = feature_text = None
    if target.feature_file is not None:  # read and check both files before changing either
        try:
            feature_raw = target.feature_file.read_bytes()
        except FileNotFoundError:
            feature_raw = None
        feature_text = (feature_raw or b"").decode("utf-8", errors="strict")
        parse_toml(target.feature_file, feature_text)
    out = []
    new, changes = with_ours(data, command)
    if changes:
        out.append(_changed(target.hooks_file, raw, json_text(new)))
        out += [f"  {change}" for change in changes]
        out.append(f"  command: {command}")
    if target.feature_file is not None and not hooks_enabled(parse_toml(target.feature_file, feature_text)):
        enabled = enable_hooks_text(feature_text)
        try:
            switched_on = hooks_enabled(tomllib.loads(enabled))
        except tomllib.TOMLDecodeError:  # e.g. features = {...} inline: a [features] table cannot be added
            switched_on = False
        if not switched_on:
            raise UserError(f"could not switch Codex hooks on in {target.feature_file} without rewriting it; "
                            f"put `{FEATURE_LINE}` under its [features] table by hand.")
        out.append(_changed(target.feature_file, feature_raw, enabled.encode()))
        out.append(f"  set {FEATURE_LINE} under [features] (Codex runs hooks only with it)")
    return out or [f"{target.hooks_file}: nothing to change, the persmem hooks are installed"]


def _changed(path: Path, raw: bytes | None, new: bytes) -> str:
    saved = f" (backup: {backup(path, raw)})" if raw is not None else " (created)"
    write(path, new)
    return f"{path}{saved}:"


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
            out.append(f"  {target.feature_file}: codex_hooks {'on' if on else 'off (Codex runs no hooks)'}")
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
    if not words or words[0] != sys.executable or option.get("--home") != str(Path(home).absolute()):
        return (f"installed for another persmem ({commands[0]}); `persmem hooks install` from this one replaces it")
    extra = f" ({len(commands)} copies)" if len(commands) > 1 else ""
    return f"installed, as {agent}{extra}"
