"""`persmem backup DEST`: every plugin's data, each copied consistently by its own plugin.

A backup holds every memory, message and credential hash, so only its owner may read it: the
command runs under umask 077, so every folder is 0700 and every file 0600 from the moment it
is created (never chmod'ed after a window in which others could open it). Before the folder gets
its final name, anything a plugin wrote with other modes (a copy that kept its source's mode) is
made private too; nobody else can reach it meanwhile, since the folder holding it is 0700.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path

import click

from persmem_core.errors import UserError


@click.command()
@click.argument("dest", type=click.Path(path_type=Path))
def backup(dest: Path) -> None:
    """Write a backup into DEST (a new folder): config, agents and each plugin's data.

    The folder appears only when the backup is complete; a failed backup
    leaves nothing that looks finished. Only you can read it (0700 folders, 0600 files)."""
    with private_umask():
        _backup(dest)


@contextlib.contextmanager
def private_umask():
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def make_private(folder: Path) -> None:
    """Folders 0700 and files 0600 under `folder` (symlinks are left alone: their mode means nothing)."""
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                os.chmod(path, 0o700)
            elif stat.S_ISREG(mode):
                os.chmod(path, 0o600)
    os.chmod(folder, 0o700)


def _backup(dest: Path) -> None:
    from persmem_core.commands import get_host
    from persmem_core.fileio import fsync_dir
    from persmem_core.plugins import PerPlugin, call_each

    host = get_host()
    host.config  # refuse to back up under a config that does not validate
    if dest.exists():
        raise UserError(f"{dest} already exists; choose a new folder name (backups never overwrite).")
    partial = dest.with_name(dest.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    core = partial / "core"
    core.mkdir()
    for source in (host.config_path, host.agents.path):
        if source.exists():
            shutil.copyfile(source, core / source.name)  # the content, not the mode
    def plugin_dest(plugin: str) -> Path:
        (partial / plugin).mkdir(exist_ok=True)
        return partial / plugin

    done, failed = [], []
    for plugin, _, exc in call_each(host.pm, "backup", host=host, dest=PerPlugin(plugin_dest)):
        (failed if exc else done).append((plugin, exc))
    if failed:
        shutil.rmtree(partial)
        detail = "; ".join(f"{p}: {type(e).__name__}: {e}" for p, e in failed)
        raise UserError(f"backup failed, nothing written to {dest}: {detail}")
    for child in partial.iterdir():  # drop folders of plugins with nothing to back up
        if child.is_dir() and not any(child.iterdir()):
            child.rmdir()
    manifest = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "plugins": {p.name: p.version for p in host.loaded_plugins()},
        "backed_up": [p for p, _ in done],
    }
    (partial / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    make_private(partial)
    partial.rename(dest)
    fsync_dir(dest.parent.resolve())
    click.echo(f"backup written to {dest} ({', '.join(p for p, _ in done) or 'config and agents only'})")

