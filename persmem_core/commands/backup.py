"""`persmem backup DEST`: every plugin's data, each copied consistently by its own plugin."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import click

from persmem_core.errors import UserError


@click.command()
@click.argument("dest", type=click.Path(path_type=Path))
def backup(dest: Path) -> None:
    """Write a backup into DEST (a new folder): config, agents and each plugin's data.

    The folder appears only when the backup is complete; a failed backup
    leaves nothing that looks finished."""
    from persmem_core.cli import get_host
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
            shutil.copy2(source, core / source.name)
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
    partial.rename(dest)
    fsync_dir(dest.parent.resolve())
    click.echo(f"backup written to {dest} ({', '.join(p for p, _ in done) or 'config and agents only'})")

