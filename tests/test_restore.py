"""`persmem restore` and `persmem backup --keep`, through real servers and the real command.

Grouped by what could go wrong: data lost or changed on the way through a backup (the round trip), a
restore that would overwrite or mix with a store, a backup that is not whole, rotation that deletes what
is not its own or keeps the wrong number.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import httpx2
import pytest

from persmem_core.cli.commands.backup import list_files
from persmem_core.testing import MCP_HEADERS, MCP_INITIALIZE, clean_env, start_server, write_config
from persmem_core.transport.server_process import persmem_command


def persmem(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command(*args), env=env, capture_output=True, text=True, timeout=180)


def everything_in(server) -> dict:
    """What a user keeps in a persmem home, as the tools show it."""
    memories = {memory_id: server.call_tool("memory_get", {"memory_id": memory_id, "include_history": True},
                                            agent="kite")
                for memory_id in ("deploy-notes", "kite-pref")}
    mail = {agent: server.call_tool("amq_history", {"limit": 50}, agent=agent) for agent in ("kite", "wren")}
    return {"memories": memories, "mail": mail, "agents": server.call_tool("amq_agents", {}, agent="kite")}


@pytest.fixture(scope="module", autouse=True)
def home_key(tmp_path_factory):
    """Every home of this module gets one key, as a systemd credential: backups are sealed, and a restore needs the
    key of the backup (tests below take it away)."""
    credentials = tmp_path_factory.mktemp("credentials")
    (credentials / "persmem.key").write_bytes(bytes(range(32)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CREDENTIALS_DIRECTORY", str(credentials))
        yield credentials / "persmem.key"


@pytest.fixture(scope="module")
def original_backup(tmp_path_factory):
    """Home A with memories (one updated twice), mail both ways (one read), three agents and a workspace file;
    backed up while its server runs. Returns (backup folder, what home A held, home A's tokens)."""
    tmp_path = tmp_path_factory.mktemp("original")
    home_a = tmp_path / "a"
    write_config(home_a, {"server": {"max_body_bytes": 2_000_000}})
    server = start_server(home_a, agents=("kite", "wren", "owl"))
    try:
        server.call_tool("memory_store", {"content": "deploy with make release", "memory_id": "deploy-notes",
                                          "project": "infra", "tags": "deploy"}, agent="kite")
        server.call_tool("memory_update", {"memory_id": "deploy-notes", "content": "deploy with make ship"},
                         agent="kite")
        server.call_tool("memory_update", {"memory_id": "deploy-notes", "tags": "deploy,ship"}, agent="kite")
        server.call_tool("memory_store", {"content": "kite likes short answers", "memory_id": "kite-pref",
                                          "memory_type": "preference"}, agent="kite")
        sent = server.call_tool("amq_send", {"to_agent": "wren", "subject": "hello",
                                             "body": "**first** message"}, agent="kite")
        server.call_tool("amq_read", {"agent": "wren", "msg_id": sent["id"]}, agent="wren")
        server.call_tool("amq_reply", {"msg_id": sent["id"], "body": "got it"}, agent="wren")
        (home_a / "workspace").mkdir(exist_ok=True)
        (home_a / "workspace" / "notes.txt").write_text("a file the AI wrote in the workspace")
        (home_a / "workspace" / "run.sh").write_text("#!/bin/sh\necho hi\n")
        os.chmod(home_a / "workspace" / "run.sh", 0o755)
        held = everything_in(server)
        dest = tmp_path / "backups" / "b1"
        result = persmem(server.env, "backup", str(dest))  # live: the server is running
        assert result.returncode == 0, result.stderr
        assert "workspace included: workspace" in result.stdout
    finally:
        server.stop()
    return dest, held, server.tokens


@pytest.fixture
def backed_up(original_backup, tmp_path):
    """A copy of the original backup of home A, for this test to restore (or damage)."""
    dest, held, tokens = original_backup
    copy = tmp_path / "backups" / dest.name
    shutil.copytree(dest, copy, symlinks=True)
    shutil.copyfile(dest.parent.parent / "a" / "persmem.toml", tmp_path / "a-persmem.toml")
    return copy, held, tokens


# -- data lost or changed on the way through a backup --------------------------------------------------------

def test_a_restored_home_serves_the_same_memories_versions_mail_agents_and_tokens(tmp_path, backed_up):
    dest, held, tokens = backed_up
    home_b = tmp_path / "b"
    env_b = clean_env(home_b)
    result = persmem(env_b, "restore", str(dest))
    assert result.returncode == 0, result.stderr
    assert "3 agent(s)" in result.stdout and "memory_hnsw" in result.stdout and "amq_maildir" in result.stdout

    server_b = start_server(home_b, env=env_b)  # no new agents: the restored ones
    server_b.tokens = tokens  # the tokens issued on home A
    try:
        restored = everything_in(server_b)
        assert restored == held
        assert restored["memories"]["deploy-notes"]["version"] == 3
        assert [v["content"] for v in restored["memories"]["deploy-notes"]["history"]][:2] == [
            "deploy with make release", "deploy with make ship"]
        found = server_b.call_tool("memory_search", {"query": "how do we deploy"}, agent="owl")
        assert "deploy-notes" in json.dumps(found)  # the index was rebuilt from the log
        wrong = httpx2.post(server_b.url, json=MCP_INITIALIZE, headers=MCP_HEADERS | {"Authorization": "Bearer pm_x"})
        assert wrong.status_code == 401  # the restored registry still refuses what it never issued
    finally:
        server_b.stop()
    assert (home_b / "persmem.toml").read_text() == (tmp_path / "a-persmem.toml").read_text()
    assert (home_b / "workspace" / "notes.txt").read_text() == "a file the AI wrote in the workspace"
    assert os.access(home_b / "workspace" / "run.sh", os.X_OK)


def test_a_sealed_backup_needs_its_key_and_the_key_can_be_imported_first(tmp_path, backed_up, home_key,
                                                                        monkeypatch):
    """The backup holds no key: without it the restore is refused, naming the key and how to bring it, and writes
    nothing; `persmem key import` of the exported key into the fresh home, then the restore works."""
    dest, held, _ = backed_up
    assert json.loads((dest / "MANIFEST.json").read_text())["encryption"]["key_ids"]
    assert not any(bytes(range(32)).hex().encode() in p.read_bytes() or bytes(range(32)) in p.read_bytes()
                   for p in dest.rglob("*") if p.is_file())
    monkeypatch.delenv("CREDENTIALS_DIRECTORY")
    home_b = tmp_path / "b"
    result = persmem(clean_env(home_b), "restore", str(dest))
    assert result.returncode == 1 and "this backup is sealed under key" in result.stderr
    assert "persmem key import" in result.stderr and not home_b.exists()
    key_hex = tmp_path / "exported.key"
    key_hex.write_text(bytes(range(32)).hex() + "\n")
    assert persmem(clean_env(home_b), "key", "import", str(key_hex)).returncode == 0
    assert os.stat(home_b / "persmem.key").st_mode & 0o777 == 0o600
    result = persmem(clean_env(home_b), "restore", str(dest))
    assert result.returncode == 0, result.stderr
    server = start_server(home_b)
    server.tokens = backed_up[2]
    try:
        assert server.call_tool("memory_get", {"memory_id": "kite-pref"}, agent="kite")["content"] == \
            "kite likes short answers"
    finally:
        server.stop()


def test_restored_files_are_private(tmp_path, backed_up):
    dest, _, _ = backed_up
    home_b = tmp_path / "b"
    result = subprocess.run(persmem_command("restore", str(dest)), env=clean_env(home_b), capture_output=True,
                            text=True, timeout=180, preexec_fn=lambda: os.umask(0o022))  # the usual umask
    assert result.returncode == 0, result.stderr
    for path in [home_b, *home_b.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))


# -- a restore that would overwrite or mix with a store ------------------------------------------------------

def test_restore_refuses_a_home_that_holds_data(tmp_path, backed_up):
    dest, _, _ = backed_up
    home_b = tmp_path / "b"
    home_b.mkdir()
    (home_b / "agents.json").write_text("{}")
    result = persmem(clean_env(home_b), "restore", str(dest))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "already holds data (agents.json)" in result.stderr and "set PERSMEM_HOME to a new folder" in result.stderr
    assert os.listdir(home_b) == ["agents.json"] and (home_b / "agents.json").read_text() == "{}"


def test_restore_refuses_a_home_a_server_is_serving(tmp_path, backed_up):
    dest, _, _ = backed_up
    home_b = tmp_path / "b"
    home_b.mkdir()
    server = start_server(home_b)  # a fresh home, served
    (home_b / "server.log").unlink()  # the test's log, not the server's: what is left is what serving made
    try:
        result = persmem(server.env, "restore", str(dest))
        assert result.returncode == 1 and "already holds data (" in result.stderr and "memory" in result.stderr
        assert "stop it first" in result.stderr
        assert server.call_tool("persmem_whoami", {})["agent"] == "local"  # untouched, still serving
    finally:
        server.stop()


def test_a_plugin_that_finds_its_store_in_use_undoes_the_whole_restore(tmp_path, backed_up):
    """A mail root configured outside the home that already holds mail: the amq plugin refuses, and what the
    restore wrote before (config, agents, memories) is removed again."""
    dest, _, _ = backed_up
    mail = tmp_path / "mail"
    (mail / "someone").mkdir(parents=True)
    config = (dest / "core" / "persmem.toml").read_text() + f'\n[amq]\nroot = "{mail}"\n'
    copy = tmp_path / "b-with-mail-root"
    shutil.copytree(dest, copy)
    (copy / "core" / "persmem.toml").write_text(config)
    manifest = json.loads((copy / "MANIFEST.json").read_text())
    manifest["files"] = list_files(copy)
    (copy / "MANIFEST.json").write_text(json.dumps(manifest))
    home_b = tmp_path / "b"
    result = persmem(clean_env(home_b), "restore", str(copy))
    assert result.returncode == 1 and f"the mail root {mail} already holds mail" in result.stderr
    assert not home_b.exists() and os.listdir(mail) == ["someone"]


# -- a backup that is not whole -------------------------------------------------------------------------------

def test_restore_refuses_a_backup_missing_a_file(tmp_path, backed_up):
    dest, _, _ = backed_up
    log = next(dest.glob("memory_hnsw/*/records.log"))
    log.unlink()
    home_b = tmp_path / "b"
    result = persmem(clean_env(home_b), "restore", str(dest))
    assert result.returncode == 1 and "is partial or damaged" in result.stderr
    assert str(log.relative_to(dest)) in result.stderr and not home_b.exists()


def test_restore_refuses_a_truncated_file(tmp_path, backed_up):
    dest, _, _ = backed_up
    message = next(dest.glob("amq_maildir/*/inbox/*/*.md"))
    message.write_bytes(message.read_bytes()[:10])
    result = persmem(clean_env(tmp_path / "b"), "restore", str(dest))
    assert result.returncode == 1 and str(message.relative_to(dest)) in result.stderr


def test_restore_refuses_an_unfinished_backup_and_a_folder_that_is_not_one(tmp_path, backed_up):
    dest, _, _ = backed_up
    unfinished = dest.with_name(dest.name + ".partial")
    shutil.copytree(dest, unfinished)
    (unfinished / "MANIFEST.json").unlink()  # the backup writes it last
    env = clean_env(tmp_path / "b")
    result = persmem(env, "restore", str(unfinished))
    assert result.returncode == 1 and "is an unfinished backup" in result.stderr
    other = tmp_path / "photos"
    other.mkdir()
    result = persmem(env, "restore", str(other))
    assert result.returncode == 1 and "is not a persmem backup" in result.stderr
    result = persmem(env, "restore", str(tmp_path / "nowhere"))
    assert result.returncode == 1 and "is not a folder" in result.stderr
    assert not (tmp_path / "b").exists()


def test_restore_refuses_a_backup_of_plugins_not_installed_here(tmp_path, backed_up):
    dest, _, _ = backed_up
    result = persmem(clean_env(tmp_path / "b", PERSMEM_DISABLE_PLUGINS="amq_maildir"), "restore", str(dest))
    assert result.returncode == 1
    assert "plugins that are not installed (or are disabled) here: amq_maildir" in result.stderr
    assert not (tmp_path / "b").exists()


# -- a backup with links to what is not in it ---------------------------------------------------------------------
# A backup only ever holds real folders (and the workspace's own links, copied as links). An edited one whose
# folder is a link would copy what the link names (another user's inbox, another store, ~/.ssh) into the new
# home, where agents read it; the manifest lists links as links, so resealing it is all an attacker needs.

def reseal(dest) -> None:
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    (dest / "MANIFEST.json").unlink()
    manifest["files"] = list_files(dest)
    (dest / "MANIFEST.json").write_text(json.dumps(manifest))


def swap_for_link(path, elsewhere) -> None:
    """Move `path` out of the backup to `elsewhere` and leave a link to it in its place."""
    elsewhere.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(path, elsewhere)
    path.symlink_to(elsewhere)


@pytest.mark.parametrize("linked", ["amq_maildir", "amq_maildir/*", "amq_maildir/*/inbox", "amq_maildir/*/inbox/new",
                                    "amq_maildir/*/inbox/cur"])
def test_restore_does_not_copy_the_mail_folder_a_backup_link_names(tmp_path, backed_up, linked):
    dest, _, _ = backed_up
    folder = next(p for p in sorted(dest.glob(linked)) if p.is_dir() and any(p.rglob("*.md")))
    elsewhere = tmp_path / "someone-else" / "mail"
    swap_for_link(folder, elsewhere)
    reseal(dest)
    home_b = tmp_path / "b"
    result = persmem(clean_env(home_b), "restore", str(dest))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{folder} in the backup is a link (to {elsewhere})" in result.stderr
    assert not home_b.exists()


@pytest.mark.parametrize("linked", ["memory_hnsw", "memory_hnsw/*", "memory_hnsw/*/records.log"])
def test_restore_does_not_copy_the_memory_folder_or_log_a_backup_link_names(tmp_path, backed_up, linked):
    dest, _, _ = backed_up
    path = sorted(dest.glob(linked))[0]
    elsewhere = tmp_path / "someone-else" / path.name
    swap_for_link(path, elsewhere)
    reseal(dest)
    home_b = tmp_path / "b"
    result = persmem(clean_env(home_b), "restore", str(dest))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{path} in the backup is a link (to {elsewhere})" in result.stderr
    assert not home_b.exists()


def test_restore_does_not_copy_the_workspace_a_linked_home_copy_names(tmp_path, backed_up):
    dest, _, _ = backed_up
    swap_for_link(dest / "core" / "home", tmp_path / "someone-else" / "home")
    reseal(dest)
    home_b = tmp_path / "b"
    result = persmem(clean_env(home_b), "restore", str(dest))
    assert result.returncode == 1 and f"{dest / 'core' / 'home'} in the backup is a link" in result.stderr
    assert not home_b.exists()


@pytest.mark.parametrize("included, refused", [
    (["workspace", "workspace"], "lists the workspace 'workspace' inside another one"),
    (["workspace", "agents.json"], "would be restored over"),  # the registry the restore has just written
])
def test_restore_refuses_a_workspace_listed_twice_or_named_like_a_persmem_file(tmp_path, backed_up, included,
                                                                                refused):
    dest, _, _ = backed_up
    (dest / "core" / "home" / "agents.json").mkdir()
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    manifest["workspace"]["included"] = included
    (dest / "MANIFEST.json").write_text(json.dumps(manifest))
    reseal(dest)
    home_b = tmp_path / "b"
    result = persmem(clean_env(home_b), "restore", str(dest))
    assert result.returncode == 1 and refused in result.stderr and "Traceback" not in result.stderr
    assert not home_b.exists()


# -- rotation ---------------------------------------------------------------------------------------------------

def test_backup_keep_writes_dated_folders_and_keeps_exactly_n_of_its_own(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home)
    assert persmem(env, "agent", "add", "kite").returncode == 0
    backups = tmp_path / "backups"
    backups.mkdir()
    # Not ours, whatever they look like: a folder named like ours without a manifest, a file named like ours,
    # a user's folder, and a link named like ours to a real backup.
    (backups / "persmem-2000-01-01T000000Z").mkdir()
    (backups / "persmem-2000-01-02T000000Z").write_text("not a folder")
    (backups / "my-notes").mkdir()
    old = [f"persmem-2001-01-0{day}T031500Z" for day in (1, 2, 3)]
    for name in old:  # older backups of ours, as an earlier run of the timer left them
        assert persmem(env, "backup", str(backups / name)).returncode == 0
    os.symlink(backups / old[0], backups / "persmem-2000-01-03T000000Z")

    result = persmem(env, "backup", "--keep", "2", str(backups))
    assert result.returncode == 0, result.stderr
    assert f"removed 2 older backup(s) beyond the newest 2: {old[0]}, {old[1]}" in result.stdout
    ours = sorted(p.name for p in backups.iterdir() if p.name.startswith("persmem-20") and p.name >= "persmem-2001")
    assert len(ours) == 2 and ours[0] == old[2]
    assert (backups / ours[1] / "MANIFEST.json").exists() and (backups / ours[1] / "core" / "agents.json").exists()
    for kept in ("persmem-2000-01-01T000000Z", "persmem-2000-01-02T000000Z", "my-notes"):
        assert (backups / kept).exists()
    assert os.path.islink(backups / "persmem-2000-01-03T000000Z")
    assert persmem(env, "backup", "--keep", "0", str(backups)).returncode == 2  # at least one is kept
