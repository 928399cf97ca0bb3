"""`persmem hooks install / status / uninstall`, run as a user runs them (the installed `persmem` script, the
client config folders in tmp_path through HOME, CLAUDE_CONFIG_DIR and CODEX_HOME). Grouped by what each test
refuses: a second entry or a lost user hook, an uninstall that leaves the file different, a broken file
rewritten, hooks for an agent that does not exist, a Codex config rewritten, a connect line that runs something
else."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from persmem_core.sdk import AgentStore
from persmem_core.sdk.testing import clean_env
from sessions_testkit import plugin_env

PERSMEM = Path(sys.executable).parent / "persmem"
MODULE = "persmem_sessions.hook"
EVENTS = ["SessionStart", "UserPromptSubmit", "Stop", "PreCompact", "SessionEnd"]

USER_SETTINGS = """{
    "model": "opus",
    "env": {"FOO": "bar"},
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "cat ~/notes.md"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh", "timeout": 9}]}]
    }
}
"""
USER_CODEX_CONFIG = """# my Codex settings
model = "gpt-5"   # the model

[mcp_servers.persmem]
url = "http://127.0.0.1:8765/mcp"

[features]
# switched on by hand
web_search_request = true

[profiles.fast]
model = "gpt-5-mini"
"""



@pytest.fixture
def user(tmp_path):
    """A user's machine in tmp_path: its home folder, Claude Code's and Codex's config folders, a persmem home."""
    home = tmp_path / "me"
    claude, codex = home / ".claude", home / ".codex"
    for folder in (claude, codex):
        folder.mkdir(parents=True)
    env = clean_env(tmp_path / "persmem-home", HOME=str(home), CLAUDE_CONFIG_DIR=str(claude),
                    CODEX_HOME=str(codex), **plugin_env())
    return type("User", (), {"home": home, "claude": claude, "codex": codex, "env": env,
                             "persmem_home": tmp_path / "persmem-home"})


def persmem(user, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(PERSMEM), *args], env=user.env, capture_output=True, text=True, timeout=60)
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def our_handlers(settings: dict, event: str) -> list[dict]:
    return [h for group in settings.get("hooks", {}).get(event, []) for h in group["hooks"]
            if MODULE in h["command"]]


def user_handlers(settings: dict) -> dict[str, list[dict]]:
    return {event: [h for group in groups for h in group["hooks"] if MODULE not in h["command"]]
            for event, groups in settings.get("hooks", {}).items()}


def backups_of(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.persmem-backup-*"))


# -- a second entry, or a lost user hook --------------------------------------------------------------------------


def test_install_twice_leaves_one_entry_per_event_and_every_user_hook(user):
    settings_file = user.claude / "settings.json"
    settings_file.write_text(USER_SETTINGS)
    before = json.loads(USER_SETTINGS)

    first = persmem(user, "hooks", "install", "--target", "claude")
    assert "added the SessionStart hook" in first.stdout and "backup:" in first.stdout
    second = persmem(user, "hooks", "install", "--target", "claude")
    assert "nothing to change" in second.stdout

    after = json.loads(settings_file.read_text())
    for event in EVENTS:
        [ours] = our_handlers(after, event)
        words = shlex.split(ours["command"])
        # no site-packages (-S), isolated (-I): the hook module imported from its folder, nothing else
        assert words[:4] == [sys.executable, "-I", "-S", "-c"] and f"import {MODULE} as h" in words[4]
        assert words[5:] == ["--client", "claude", "--home", str(user.persmem_home)]
        assert ours["type"] == "command" and 1 <= ours["timeout"] <= 5
    [start_group] = [g for g in after["hooks"]["SessionStart"] if MODULE in g["hooks"][0]["command"]]
    assert start_group["matcher"] == "startup|resume|clear|compact"
    assert user_handlers(after) == user_handlers(before) | {e: [] for e in EVENTS if e not in before["hooks"]}
    assert {k: v for k, v in after.items() if k != "hooks"} == {"model": "opus", "env": {"FOO": "bar"}}
    [saved] = backups_of(settings_file)  # one backup: the second run changed nothing
    assert saved.read_text() == USER_SETTINGS and saved.stat().st_mode & 0o777 == 0o600


def test_install_for_another_agent_replaces_ours_and_status_names_it(user):
    AgentStore(user.persmem_home).add("kite")
    AgentStore(user.persmem_home).add("wren")
    persmem(user, "hooks", "install", "--target", "codex", "--agent", "kite")
    changed = persmem(user, "hooks", "install", "--target", "codex", "--agent", "wren")
    assert "replaced the Stop hook" in changed.stdout
    hooks = json.loads((user.codex / "hooks.json").read_text())
    for event in EVENTS:
        [ours] = our_handlers(hooks, event)
        assert shlex.split(ours["command"])[-2:] == ["--agent", "wren"]
    [end] = our_handlers(hooks, "SessionEnd")
    assert end["timeout"] <= 3  # Codex caps SessionEnd at 3 s
    status = persmem(user, "hooks", "status").stdout
    assert "SessionStart: installed, as wren" in status and "[features] hooks on" in status
    assert "claude:" in status and "not installed" in status


# -- an uninstall that leaves the file different ------------------------------------------------------------------


def test_uninstall_restores_settings_hooks_json_and_config_toml_byte_for_byte(user):
    settings_file, codex_config = user.claude / "settings.json", user.codex / "config.toml"
    settings_file.write_text(USER_SETTINGS)
    codex_config.write_text(USER_CODEX_CONFIG)
    persmem(user, "hooks", "install", "--target", "all")
    persmem(user, "hooks", "install", "--target", "all")
    assert (user.codex / "hooks.json").exists()

    done = persmem(user, "hooks", "uninstall")
    assert settings_file.read_bytes() == USER_SETTINGS.encode()
    assert codex_config.read_bytes() == USER_CODEX_CONFIG.encode()
    assert not (user.codex / "hooks.json").exists()  # install created it: uninstall removes it
    assert "restored as it was before install" in done.stdout
    assert "nothing to change" in persmem(user, "hooks", "uninstall").stdout


def test_uninstall_after_the_user_changed_the_file_removes_only_ours(user):
    settings_file = user.claude / "settings.json"
    settings_file.write_text(USER_SETTINGS)
    persmem(user, "hooks", "install", "--target", "claude")
    edited = json.loads(settings_file.read_text())
    edited["hooks"]["Notification"] = [{"hooks": [{"type": "command", "command": "beep"}]}]
    settings_file.write_text(json.dumps(edited))

    done = persmem(user, "hooks", "uninstall", "--target", "claude")
    assert "removed the persmem hooks" in done.stdout
    after = json.loads(settings_file.read_text())
    assert all(not our_handlers(after, event) for event in EVENTS)
    assert after == json.loads(USER_SETTINGS) | {"hooks": json.loads(USER_SETTINGS)["hooks"] | {
        "Notification": [{"hooks": [{"type": "command", "command": "beep"}]}]}}


# -- a broken file rewritten --------------------------------------------------------------------------------------


@pytest.mark.parametrize("broken", ['{"hooks": {"Stop": [', '["not", "an", "object"]', '{"hooks": {"Stop": {}}}'])
def test_malformed_settings_json_is_refused_by_name_and_left_untouched(user, broken):
    settings_file = user.claude / "settings.json"
    settings_file.write_text(broken)
    done = persmem(user, "hooks", "install", "--target", "claude", ok=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert str(settings_file) in done.stderr and "left it untouched" in done.stderr
    assert settings_file.read_text() == broken and not backups_of(settings_file)
    assert persmem(user, "hooks", "uninstall", "--target", "claude", ok=False).returncode == 1
    assert settings_file.read_text() == broken


def test_malformed_codex_config_toml_is_refused_and_nothing_is_written(user):
    codex_config = user.codex / "config.toml"
    codex_config.write_text('model = "gpt-5\n[features\n')
    done = persmem(user, "hooks", "install", "--target", "codex", ok=False)
    assert str(codex_config) in done.stderr and "not valid TOML" in done.stderr
    assert codex_config.read_text() == 'model = "gpt-5\n[features\n'
    assert not (user.codex / "hooks.json").exists()  # both files are checked before either is written


# -- a Codex config rewritten -------------------------------------------------------------------------------------


@pytest.mark.parametrize("config, expected", [
    (USER_CODEX_CONFIG, USER_CODEX_CONFIG.replace("[features]\n", "[features]\nhooks = true\n")),
    ('[features]\nhooks = false  # off for now\nx = 1\n', '[features]\nhooks = true\nx = 1\n'),
    ('model = "o3"\nfeatures.hooks = false\n', 'model = "o3"\nfeatures.hooks = true\n'),
    ('model = "o3"', 'model = "o3"\n\n[features]\nhooks = true\n'),
    ('[[profiles]]\nname = "a"\n', '[[profiles]]\nname = "a"\n\n[features]\nhooks = true\n'),
    # the deprecated key an older install wrote (Codex warns about it at every start) goes
    ('[features]\ncodex_hooks = true\nx = 1\n', '[features]\nhooks = true\nx = 1\n'),
    ('model = "o3"\nfeatures.codex_hooks = true\n', 'model = "o3"\n\n[features]\nhooks = true\n'),
])
def test_codex_hooks_switch_is_one_line_and_every_other_line_and_comment_stays(user, config, expected):
    codex_config = user.codex / "config.toml"
    codex_config.write_text(config)
    persmem(user, "hooks", "install", "--target", "codex")
    assert codex_config.read_text() == expected
    assert tomllib.loads(expected)["features"]["hooks"] is True
    assert "codex_hooks" not in codex_config.read_text()


def test_all_skips_a_client_that_is_not_set_up_here(user):
    user.codex.rmdir()
    persmem(user, "hooks", "install", "--target", "all")
    assert not user.codex.exists()
    assert len(our_handlers(json.loads((user.claude / "settings.json").read_text()), "Stop")) == 1


def test_all_with_no_client_here_fails_naming_both_folders_and_what_to_do(user):
    user.codex.rmdir()
    user.claude.rmdir()
    done = persmem(user, "hooks", "install", "--target", "all", ok=False)
    assert done.returncode != 0 and done.stdout == ""
    assert str(user.claude) in done.stderr and str(user.codex) in done.stderr and "--target claude" in done.stderr
    assert not user.claude.exists() and not user.codex.exists()


def test_an_old_module_command_is_recognised_replaced_and_uninstalled(user):
    """Hooks installed by an older persmem (`python -m persmem_sessions.hook`) are ours: replaced, not doubled."""
    old = f"{sys.executable} -m persmem_sessions.hook --client claude --home {user.persmem_home}"
    settings = json.loads(USER_SETTINGS)
    settings["hooks"]["UserPromptSubmit"] = [{"hooks": [{"type": "command", "command": old, "timeout": 3}]}]
    (user.claude / "settings.json").write_text(json.dumps(settings))
    done = persmem(user, "hooks", "install", "--target", "claude")
    assert "replaced the UserPromptSubmit hook" in done.stdout
    after = json.loads((user.claude / "settings.json").read_text())
    [ours] = our_handlers(after, "UserPromptSubmit")
    assert "-I -S" in ours["command"] and " -m " not in ours["command"]
    persmem(user, "hooks", "uninstall", "--target", "claude")
    assert "persmem_sessions" not in (user.claude / "settings.json").read_text()


def test_settings_json_behind_a_link_is_edited_at_its_target(user, tmp_path):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "settings.json").write_text(USER_SETTINGS)
    (user.claude / "settings.json").symlink_to(dotfiles / "settings.json")
    persmem(user, "hooks", "install", "--target", "claude")
    assert (user.claude / "settings.json").is_symlink()
    assert len(our_handlers(json.loads((dotfiles / "settings.json").read_text()), "Stop")) == 1
    persmem(user, "hooks", "uninstall", "--target", "claude")
    assert (dotfiles / "settings.json").read_text() == USER_SETTINGS


# -- hooks for an agent that does not exist -----------------------------------------------------------------------


def test_install_for_an_unknown_agent_is_refused_like_serve_and_writes_nothing(user):
    done = persmem(user, "hooks", "install", "--target", "all", "--agent", "ghost", ok=False)
    assert done.returncode == 1 and "no agent named 'ghost'" in done.stderr and "agent add ghost" in done.stderr
    assert not list(user.claude.iterdir()) and not list(user.codex.iterdir())


# -- a connect line that runs something else ----------------------------------------------------------------------


def test_connect_prints_a_paste_safe_hooks_install_for_its_home(user, tmp_path):
    hostile = tmp_path / "my home $(touch PWNED) `touch PWNED2` 'q'"
    user.env["PERSMEM_HOME"] = str(hostile)
    persmem(user, "agent", "add", "kite")
    printed = persmem(user, "connect", "kite").stdout
    block = printed.split("## Ambient memory (shell)\n", 1)[1].split("\n\n")[0].splitlines()
    [line] = [text for text in block if not text.startswith("#")]
    assert "hooks install --target all --agent kite" in line

    shell_env = {k: v for k, v in user.env.items() if k != "PERSMEM_HOME"}  # the user's shell names no home
    pasted = subprocess.run(["bash", "--norc", "--noprofile", "-c", line], cwd=tmp_path, env=shell_env,
                            capture_output=True, text=True, timeout=60)
    assert pasted.returncode == 0, pasted.stderr
    assert not list(tmp_path.glob("PWNED*"))
    [ours] = our_handlers(json.loads((user.claude / "settings.json").read_text()), "SessionStart")
    assert shlex.split(ours["command"])[-4:] == ["--home", str(hostile), "--agent", "kite"]
