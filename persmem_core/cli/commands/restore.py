"""`persmem restore SRC`: a `persmem backup` put back into a fresh persmem home.

Checked before anything is written: SRC is a finished backup (MANIFEST.json, written last, is there) whose
files are all present and unchanged (size and SHA-256 as the manifest lists them); every plugin with data in
it is installed here and can restore; the key its sealed data needs is on hand (the manifest names the key
ids; the key itself is never in a backup); the home is empty but for that key (restore never merges into, or
overwrites, a store: a server serving the home has made files there, so it is refused too); nothing it would copy is a link (the
manifest has no signature: an edited backup must not reach outside itself or the home). Then the config, the
agent registry (credential hashes: the old tokens keep working) and the OAuth registry (grants, clients, the
operator passphrase: hashes too) are written, the workspace that was inside the home is copied back, and each
plugin puts its own data back through its `restore` hook, which refuses, in turn, a data folder that holds
anything or is in use. Everything is written private (folders 0700, files 0600) and synced to disk before the
command says it is done. If anything fails, what was written is removed
again and the home is as empty as it was.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from persmem_core.cli.commands.backup import (
    CORE, HOME_COPY, MANIFEST, copy_tree_private, list_files, private_umask, read_manifest,
)
from persmem_core.crypto import keys
from persmem_core.errors import UserError

FRESH_HOME_FIX = "move it aside, or set PERSMEM_HOME to a new folder"
KEY_FILES = (keys.KEY_NAME, keys.KEY_NAME + keys.NEXT_SUFFIX)  # a fresh home may hold its key, imported for the restore


@click.command()
@click.argument("src", type=click.Path(path_type=Path))
def restore(src: Path) -> None:
    """Put the backup SRC (a folder `persmem backup` wrote) back into a fresh persmem home.

    The home ($PERSMEM_HOME) must be empty or not exist yet, and no server may be using it. Restores the
    config, the agents (their tokens keep working), the workspace that was inside the home and each plugin's
    data. The memory index is rebuilt when the server first opens the store."""
    from persmem_core.cli.commands import get_host

    with private_umask():
        _restore(get_host(), src)


def check_backup(src: Path) -> dict:
    """The manifest of `src`, once it is known to be a whole, finished backup; UserError naming what is wrong."""
    if not src.is_dir():
        raise UserError(f"{src} is not a folder; name a folder `persmem backup` wrote.")
    manifest = read_manifest(src)
    if manifest is None:
        if src.name.endswith(".partial") or (src / CORE).is_dir():
            raise UserError(f"{src} is an unfinished backup (it has no {MANIFEST}, which a backup writes last): "
                            "the backup that wrote it stopped. Restore from a finished one.")
        raise UserError(f"{src} is not a persmem backup (no readable {MANIFEST}); name a folder `persmem backup` "
                        "wrote.")
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise UserError(f"{src}/{MANIFEST} lists no files (it is damaged, or from an older persmem); restore from "
                        "a backup this version wrote.")
    found = list_files(src)
    wrong = sorted(name for name, entry in listed.items() if found.get(name) != entry)
    if wrong:
        shown = ", ".join(wrong[:5]) + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else "")
        raise UserError(f"{src} is partial or damaged: {len(wrong)} file(s) its {MANIFEST} lists are missing or "
                        f"changed ({shown}). Restore from another backup, or copy this one again in full.")
    return manifest


def workspace_folders(src: Path, manifest: dict) -> list[str]:
    """The workspace folders the backup took from inside the home, as paths relative to it. Only what a backup
    writes is accepted: a folder strictly inside the home (never the home itself, never outside it), none
    inside another (backup copies a nested root with the one holding it), and real folders all the way down
    in the backup (a link there would copy whatever it names, e.g. ~/.ssh, into the workspace)."""
    included = (manifest.get("workspace") or {}).get("included") or []
    for relative in included:
        if not isinstance(relative, str) or Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise UserError(f"{src}/{MANIFEST} names a workspace outside the home ({relative!r}): it is damaged.")
        if not Path(relative).parts:
            raise UserError(f"{src}/{MANIFEST} names the home itself as a workspace ({relative!r}); a backup only "
                            "lists folders inside the home: it is damaged or was edited. Restore from another one.")
    roots = [Path(relative) for relative in included]
    for index, root in enumerate(roots):
        holder = next((other for other_index, other in enumerate(roots)
                       if other_index != index and root.is_relative_to(other)), None)
        if holder is not None:
            raise UserError(f"{src}/{MANIFEST} lists the workspace {root.as_posix()!r} inside another one "
                            f"({holder.as_posix()!r}); a backup never does (it copies a root with the one holding "
                            "it): it is damaged or was edited. Restore from another one.")
    found = []
    for root in roots:
        folder = src
        for part in (*Path(HOME_COPY).parts, *root.parts):
            folder = folder / part
            if os.path.islink(folder):
                raise UserError(f"{folder} in the backup is a link (to {os.readlink(folder)}), where a backup holds "
                                "the workspace's real folders; restore refuses to copy what a link names. Restore "
                                "from a backup `persmem backup` wrote.")
        if os.path.isdir(folder):
            found.append(root.as_posix())
    return found


def copy_workspace_folder(source: Path, home: Path, relative: str) -> None:
    """Copy one workspace folder of the backup to home/relative, never through a link: the folders on the way are
    made here (the home was empty, and no other restored folder holds this one), the folder itself is new
    (an existing one, or a link, stops the copy), and it is checked to be inside the home once made."""
    target = home / relative
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        target.mkdir(mode=0o700)
    except FileExistsError:
        raise UserError(f"the workspace {relative!r} of the backup would be restored over {target}, which the "
                        "restore has just written; the backup is damaged or was edited. Restore from another "
                        "one.") from None
    real_home, real_target = Path(os.path.realpath(home)), Path(os.path.realpath(target))
    if real_target == real_home or not real_target.is_relative_to(real_home):
        raise UserError(f"the workspace {relative!r} would be restored to {real_target}, outside the home "
                        f"{real_home}; restore from a backup `persmem backup` wrote.")
    copy_tree_private(source, target)


def plugin_folders(src: Path, manifest: dict) -> list[str]:
    """The plugins that put data in this backup (a folder each; plugins with nothing to keep have none)."""
    named = [name for name in manifest["backed_up"] if isinstance(name, str) and os.path.lexists(src / name)]
    for name in named:
        if (src / name).is_symlink():
            raise UserError(f"{src / name} in the backup is a link (to {os.readlink(src / name)}), where a backup "
                            "holds the plugin's real folder; restore refuses to copy what a link names. Restore "
                            "from a backup `persmem backup` wrote.")
    return sorted(name for name in named if (src / name).is_dir())


def check_fresh(home: Path, config_path: Path, src: Path) -> None:
    """The home holds nothing (a server serving it has made files there), and a config file outside it, if
    one is set (PERSMEM_CONFIG), is absent or already the backup's."""
    dangling = next((p for p in (home, *home.parents) if p.is_symlink() and not p.exists()), None)
    if dangling is not None:
        where = "the persmem home" if dangling == home else f"on the way to the persmem home {home},"
        raise UserError(f"{dangling} ({where}) is a link to {os.readlink(dangling)}, which does not exist; create "
                        f"that folder, or {FRESH_HOME_FIX}.")
    if home.exists():
        if not home.is_dir():
            raise UserError(f"{home} (the persmem home) is not a folder; {FRESH_HOME_FIX}.")
        held = sorted(name for name in os.listdir(home) if name not in KEY_FILES)
        if held:
            shown = ", ".join(held[:8]) + (f" and {len(held) - 8} more" if len(held) > 8 else "")
            raise UserError(f"{home} already holds data ({shown}); persmem restores only into an empty home, never "
                            f"over a store (if a persmem server is using it, stop it first): {FRESH_HOME_FIX}.")
    backup_config = src / CORE / "persmem.toml"
    if config_path.exists() and not config_path.is_relative_to(home):
        if not backup_config.exists() or config_path.read_bytes() != backup_config.read_bytes():
            raise UserError(f"the config file {config_path} (PERSMEM_CONFIG) exists and is not the backup's; move "
                            "it aside (or unset PERSMEM_CONFIG) so the backup's config can be restored.")


def check_keys(restored_host, manifest: dict) -> list[str]:
    """The keys the backup's data is sealed under, once each is known to be on hand here."""
    needed = (manifest.get("encryption") or {}).get("key_ids") or []
    if not isinstance(needed, list) or not all(isinstance(k, str) and len(k) == 16 for k in needed):
        raise UserError(f"the backup's {MANIFEST} names its keys wrongly: it is damaged or was edited.")
    if not needed:
        return []
    home, config, environ = restored_host.home, restored_host.section("encryption"), restored_host.environ
    loaded = keys.find_key(home, config, environ)
    upcoming = keys.read_next_key(home, config) if loaded is not None and loaded.source == "file" else None
    on_hand = {loaded.key_id} if loaded else set()
    if upcoming is not None:
        on_hand.add(keys.key_id(upcoming))
    missing = [k for k in needed if k not in on_hand]
    if missing:
        found = f"the key loaded ({loaded.key_id}, from {loaded.where}) is another one" if loaded else \
            f"no key was found ({keys.sources_tried(home, config, environ)})"
        raise UserError(f"this backup is sealed under key {', '.join(missing)} and {found}. Put that key in place "
                        "first (`persmem key import FILE`, with the key `persmem key export` printed, or "
                        "PERSMEM_KEY), then run persmem restore again; nothing was written.")
    return needed


def check_plugins(restored_host, src: Path, manifest: dict) -> list[str]:
    """Every plugin with data in the backup is loaded here and implements `restore`; returns them."""
    needed = plugin_folders(src, manifest)
    loaded = {p.name for p in restored_host.loaded_plugins()}
    restorers = {impl.plugin_name for impl in restored_host.pm.hook.restore.get_hookimpls()}
    missing = [p for p in needed if p not in loaded]
    if missing:
        versions = manifest.get("plugins") or {}
        named = ", ".join(f"{p} {versions.get(p) or ''}".strip() for p in missing)
        raise UserError(f"this backup holds data of plugins that are not installed (or are disabled) here: {named}. "
                        "Install them (`persmem plugins` lists what is loaded), then run persmem restore again.")
    unable = [p for p in needed if p not in restorers]
    if unable:
        raise UserError(f"the installed plugin(s) {', '.join(unable)} cannot restore data (no `restore` hook); "
                        "upgrade them, then run persmem restore again.")
    return needed


def _restore(host, src: Path) -> None:
    from persmem_core.fileio import atomic_write_bytes
    from persmem_core.host import Host
    from persmem_core.plugins import PerPlugin, call_each

    manifest = check_backup(src)
    home, config_path = Path(host.home), Path(host.config_path)
    check_fresh(home, config_path, src)
    # The backup's config decides where plugins keep their data ([amq] root...) and which plugins load: a host
    # built on it, before anything is written, is the one the restore hooks get.
    backup_config = src / CORE / "persmem.toml"
    restored_host = Host(environ=host.environ, config_file=backup_config)
    try:
        restored_host.config
    except UserError as exc:
        raise UserError(f"the backup's config does not validate with the plugins installed here: {exc}") from None
    plugins = check_plugins(restored_host, src, manifest)
    workspace = workspace_folders(src, manifest)
    sealed_under = check_keys(restored_host, manifest)

    home_existed = home.exists()
    wrote_config = False
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        if sealed_under:  # first: from here on this home's data needs those keys (persmem_core/crypto/keys.py)
            keys.write_marker(home, sealed_under)
        if backup_config.exists():
            wrote_config = not config_path.exists()
            if wrote_config:
                config_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                atomic_write_bytes(config_path, backup_config.read_bytes())
        if (src / CORE / "agents.json").exists():
            atomic_write_bytes(restored_host.agents.path, (src / CORE / "agents.json").read_bytes())
        if (src / CORE / "oauth.json").exists():  # OAuth grants and the operator passphrase (hashes only)
            atomic_write_bytes(restored_host.oauth.path, (src / CORE / "oauth.json").read_bytes())
        for relative in workspace:
            copy_workspace_folder(src / HOME_COPY / relative, home, relative)
        failed = [(plugin, exc) for plugin, _, exc in
                  call_each(restored_host.pm, "restore", only=set(plugins), host=restored_host,
                            src=PerPlugin(lambda plugin: src / plugin)) if exc is not None]
        if failed:
            detail = "; ".join(f"{p}: {exc}" if isinstance(exc, UserError) else f"{p}: {type(exc).__name__}: {exc}"
                               for p, exc in failed)
            raise UserError(f"restore failed, nothing restored: {detail}")
        agents = restored_host.agents.agents()  # the restored registry reads back (a backup may hold anything)
        grants = restored_host.oauth.grants()  # so does the OAuth registry
        os.sync()  # everything written above, durable before we say it is done
    except OSError as exc:  # disk full, no permission, a name the backup uses twice: one line, all undone
        _undo(home, home_existed, config_path if wrote_config else None)
        raise UserError(f"restore failed, nothing restored: {exc}") from None
    except BaseException:
        _undo(home, home_existed, config_path if wrote_config else None)
        raise
    click.echo(f"restored {src} (backup of {manifest['created']}) into {home}: "
               f"{'config, ' if backup_config.exists() else ''}{len(agents)} agent(s)"
               f"{f', {len(grants)} OAuth grant(s)' if grants else ''}"
               f"{', workspace ' + ', '.join(workspace) if workspace else ''}"
               f"{', ' + ', '.join(plugins) if plugins else ''}.")
    not_included = manifest.get("workspace", {}).get("not_included") or []
    if not_included:
        click.echo(f"not in the backup: workspace roots outside the home ({', '.join(not_included)}); restore them "
                   "from your own backups of those folders.")
    click.echo("Start the server as before (persmem serve); the memory index is rebuilt on the first start.")


def _undo(home: Path, home_existed: bool, written_config: Path | None) -> None:
    """Back to an empty home (it was empty when the restore began: everything in it is ours)."""
    if home.is_dir():
        for child in home.iterdir():
            if child.name in KEY_FILES:
                continue  # the key was put there before the restore (`persmem key import`), for it
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        if not home_existed and not any(home.iterdir()):
            home.rmdir()
    if written_config is not None:
        written_config.unlink(missing_ok=True)
