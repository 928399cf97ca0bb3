"""Local attack surface of the `persmem` command: whom stdio speaks for, and who can read a backup.

Grouped by attack class: an identity stdio was never given (unknown or revoked agents), and backups
readable by other users of the machine.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import anyio

from persmem_core.auth.agents import AgentStore
from persmem_core.testing import start_server
from persmem_core.transport.server_process import persmem_command
from persmem_core.transport.tool_answers import tool_result


# -- identities stdio was never given ----------------------------------------------------------------------

def stdio(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command("serve", "--transport", "stdio", *args), env=env, input="",
                          capture_output=True, text=True, timeout=60)


def test_stdio_refuses_an_agent_that_does_not_exist(persmem_env):
    env = persmem_env()
    AgentStore(Path(env["PERSMEM_HOME"])).add("kite")
    typo = stdio(env, "--agent", "kiet")
    assert typo.returncode == 1 and "no agent named 'kiet'" in typo.stderr
    assert "persmem agent add kiet" in typo.stderr and "Traceback" not in typo.stderr
    from_env = stdio(env | {"PERSMEM_AGENT": "ghost"})
    assert from_env.returncode == 1 and "persmem agent add ghost" in from_env.stderr


def test_stdio_refuses_a_revoked_agent(persmem_env):
    env = persmem_env()
    store = AgentStore(Path(env["PERSMEM_HOME"]))
    store.add("kite")
    store.revoke("kite")
    revoked = stdio(env, "--agent", "kite")
    assert revoked.returncode == 1 and "'kite' was revoked" in revoked.stderr
    assert "persmem agent add kite" in revoked.stderr


def test_stdio_serves_a_registered_agent_and_the_default_one_on_a_fresh_home(persmem_stdio, persmem_env):
    home = Path(persmem_env()["PERSMEM_HOME"])

    async def whoami(agent=None):
        async with persmem_stdio(agent=agent) as client:
            return tool_result(await client.call_tool("persmem_whoami", {}))["agent"]

    assert anyio.run(whoami) == "local" and not AgentStore(home).agents()  # nothing registered for it
    assert anyio.run(whoami, "wren") == "wren"  # the fixture registers wren first, as a user would


# -- backups readable by others ----------------------------------------------------------------------------

def modes(folder: Path) -> dict[str, str]:
    found = {".": oct(stat.S_IMODE(folder.stat().st_mode))}
    for path in folder.rglob("*"):
        found[str(path.relative_to(folder))] = oct(stat.S_IMODE(path.lstat().st_mode))
    return found


def test_a_backup_of_memories_and_mail_is_readable_by_its_owner_only(tmp_path):
    home = tmp_path / "home"
    server = start_server(home, agents=("kite", "wren"))
    try:
        server.call_tool("memory_store", {"content": "the backup holds this memory"}, agent="kite")
        server.call_tool("amq_send", {"to_agent": "wren", "body": "private mail",
                                      "subject": "backup"}, agent="kite")
    finally:
        server.stop()
    for path in [home, *home.rglob("*")]:  # a home as lax as it could be: every original readable by all
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    sample_plugins = Path(__file__).parent / "sample_plugins"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSMEM_")} | {
        "PERSMEM_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(filter(None, (str(sample_plugins), os.environ.get("PYTHONPATH")))),
        "PERSMEM_PLUGIN_MODULES": "sample_loose_backup",
    }
    dest = tmp_path / "backups" / "today"
    result = subprocess.run(persmem_command("backup", str(dest)), env=env, capture_output=True, text=True,
                            timeout=120, preexec_fn=lambda: os.umask(0o022))  # the usual umask
    assert result.returncode == 0, result.stderr

    found = modes(dest)
    assert any(name.endswith("records.log") for name in found)  # memories are in it
    assert any(name.endswith(".md") and "/inbox/new/" in name for name in found)  # and mail
    assert (dest / "core" / "agents.json").exists()
    for name, mode in found.items():
        is_dir = (dest / name).is_dir()
        assert mode == ("0o700" if is_dir else "0o600"), (name, mode)
    assert oct(stat.S_IMODE((tmp_path / "backups").stat().st_mode)) == "0o700"  # folders it created too
    # While plugins were writing, the unfinished backup folder was already private, and new files were 0600
    # from creation (the careless plugin's mode-keeping copy is fixed before the folder gets its name).
    seen = json.loads((dest / "sample_loose_backup" / "seen.json").read_text())
    assert seen == {"backup_folder_mode": "0o700", "plain_file_mode": "0o600"}
