"""`persmem backup DEST`: config, agents, the workspace inside the home and every plugin's data, each copied
consistently by its own plugin; with `--keep N`, a dated folder inside DEST and only the newest N kept.

A backup holds every memory, message and credential hash, so only its owner may read it: the
command runs under umask 077, so every folder is 0700 and every file 0600 (0700 if it was executable)
from the moment it is created (never chmod'ed after a window in which others could open it). Before
the folder gets its final name, anything a plugin wrote with other modes (a copy that kept its source's
mode) is made private too; nobody else can reach it meanwhile, since the folder holding it is 0700.

MANIFEST.json, written last, lists every file with its size and SHA-256: `persmem restore` (restore.py)
refuses a folder without it (an interrupted backup) or whose files do not match it (a partial copy).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path

import click

from persmem_core.errors import UserError

MANIFEST = "MANIFEST.json"
MANIFEST_FORMAT = 1
CORE = "core"  # config, agents and OAuth grants; the workspace inside the home under core/home/<its path in the home>
HOME_COPY = f"{CORE}/home"
DATED_NAME = re.compile(r"persmem-\d{4}-\d\d-\d\dT\d{6}Z")  # the folders --keep writes, and the only ones it deletes


@click.command()
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--keep", type=click.IntRange(min=1), default=None, metavar="N",
              help="Treat DEST as a folder of backups: write DEST/persmem-<UTC date and time>, then delete the "
                   "oldest such backups beyond the newest N (nothing else in DEST is touched).")
def backup(dest: Path, keep: int | None) -> None:
    """Write a backup into DEST (a new folder): config, agents, the workspace in the home and each plugin's data.

    Works while the server runs. The folder appears only when the backup is complete; a failed backup
    leaves nothing that looks finished. Only you can read it (0700 folders, 0600 files). Workspace
    roots outside the persmem home are your own project folders and are not copied: back them up with
    your usual tools. `persmem restore DEST` puts a backup back into a fresh home."""
    with private_umask():
        if keep is None:
            _backup(dest)
            return
        dest.mkdir(parents=True, exist_ok=True)
        _backup(dest / datetime.now(UTC).strftime("persmem-%Y-%m-%dT%H%M%SZ"))
        removed = prune(dest, keep)
        if removed:
            click.echo(f"removed {len(removed)} older backup(s) beyond the newest {keep}: {', '.join(removed)}")


@contextlib.contextmanager
def private_umask():
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def private_mode(mode: int) -> int:
    """0700 for folders and executables (a script in the workspace stays runnable), 0600 for other files."""
    return 0o700 if stat.S_ISDIR(mode) or mode & stat.S_IXUSR else 0o600


def make_private(folder: Path) -> None:
    """Folders 0700 and files 0600 (0700 if executable) under `folder`; symlinks are left alone (their mode
    means nothing)."""
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                os.chmod(path, private_mode(mode))
    os.chmod(folder, 0o700)


def copy_tree_private(source: Path, target: Path) -> None:
    """Copy folders, regular files (content and times) and symlinks (as links, never followed) from `source`
    into `target`, private from creation. Sockets, fifos and devices are skipped (reading a fifo would hang).
    A file removed while we copy (the tree may be in use) is skipped."""
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    for root, dirs, files in os.walk(source):
        relative = Path(root).relative_to(source)
        for name in dirs + files:
            path, copy = Path(root) / name, target / relative / name
            try:
                mode = os.lstat(path).st_mode
                if stat.S_ISLNK(mode):
                    os.symlink(os.readlink(path), copy)
                elif stat.S_ISDIR(mode):
                    copy.mkdir(mode=0o700)
                elif stat.S_ISREG(mode):
                    _copy_file_private(path, copy, private_mode(mode))
            except FileNotFoundError:
                continue


def _copy_file_private(source: Path, target: Path, mode: int) -> None:
    with open(source, "rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst)
        st = os.fstat(src.fileno())
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def list_files(folder: Path) -> dict[str, dict]:
    """Every file under `folder` (MANIFEST.json aside) as the manifest lists it: size and SHA-256 for regular
    files, the target for symlinks."""
    from persmem_core.fileio import sha256_file

    found: dict[str, dict] = {}
    for root, dirs, files in os.walk(folder):
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root) / name
            relative = path.relative_to(folder).as_posix()
            if relative == MANIFEST:
                continue
            if path.is_symlink():
                found[relative] = {"symlink": os.readlink(path)}
            elif path.is_file():
                found[relative] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    return found


def workspace_parts(host) -> tuple[list[str], list[str]]:
    """The workspace roots inside the home (backed up, as paths relative to it) and those outside (the user's
    own project folders: not ours to copy)."""
    home = Path(os.path.realpath(host.home))
    inside, outside = [], []
    roots = host.workspace_roots()
    for root in roots:
        if any(root != other and root.is_relative_to(other) for other in roots):
            continue  # copied with the root that holds it
        if root.is_relative_to(home) and root != home:
            inside.append(root.relative_to(home).as_posix())
        else:
            outside.append(str(root))
    return inside, outside


def _backup(dest: Path) -> None:
    from persmem_core import __version__
    from persmem_core.cli.commands import get_host
    from persmem_core.crypto import keys
    from persmem_core.fileio import fsync_dir

    host = get_host()
    host.config  # refuse to back up under a config that does not validate
    if dest.exists():
        raise UserError(f"{dest} already exists; choose a new folder name (backups never overwrite).")
    partial = dest.with_name(dest.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    try:
        sealed_under = keys.read_marker(host.home).key_ids  # before any data is copied: a superset of what is
        done, inside, outside = _write(host, partial, dest)
        manifest = {
            "format": MANIFEST_FORMAT,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "persmem": __version__,
            "home": str(host.home),
            "plugins": {p.name: p.version for p in host.loaded_plugins()},
            "backed_up": done,
            "core": {"config": (partial / CORE / "persmem.toml").exists(),
                     "agents": (partial / CORE / "agents.json").exists(),
                     "oauth": (partial / CORE / "oauth.json").exists()},
            "workspace": {"included": inside, "not_included": outside},
            "encryption": {"key_ids": sealed_under},  # the keys `persmem restore` needs (never the keys themselves)
        }
        make_private(partial)
        manifest["files"] = list_files(partial)
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # nothing that looks like a backup, finished or not
        raise
    partial.rename(dest)
    fsync_dir(dest.parent.resolve())
    click.echo(f"backup written to {dest} ({', '.join(done) or 'config and agents only'})")
    if inside:
        click.echo(f"workspace included: {', '.join(inside)} (inside the persmem home)")
    if sealed_under:
        click.echo(f"sealed under key {', '.join(sealed_under)}: the backup holds no key, so keep a copy of it apart "
                   "from the backup (`persmem key export`); `persmem restore` needs it.")
    if outside:
        click.echo(f"not backed up: workspace roots outside the persmem home ({', '.join(outside)}); they are your "
                   "own project folders: back them up with your usual tools.")


def _write(host, partial: Path, dest: Path) -> tuple[list[str], list[str], list[str]]:
    """Fill `partial`: core files, the workspace inside the home, each plugin's folder. Returns the plugins
    that backed up, the workspace roots copied (relative to the home) and those left out."""
    from persmem_core.plugins import PerPlugin, call_each

    core = partial / CORE
    core.mkdir()
    # Stored under fixed names, so a restore finds them whatever PERSMEM_CONFIG named the config file.
    for source, name in ((host.config_path, "persmem.toml"), (host.agents.path, "agents.json"),
                         (host.oauth.path, "oauth.json")):
        if source.exists():
            shutil.copyfile(source, core / name)  # the content, not the mode
    inside, outside = workspace_parts(host)
    for relative in inside:
        copy_tree_private(host.home / relative, partial / HOME_COPY / relative)

    def plugin_dest(plugin: str) -> Path:
        (partial / plugin).mkdir(exist_ok=True)
        return partial / plugin

    done, failed = [], []
    for plugin, _, exc in call_each(host.pm, "backup", host=host, dest=PerPlugin(plugin_dest)):
        (failed if exc else done).append((plugin, exc))
    if failed:
        detail = "; ".join(f"{p}: {type(e).__name__}: {e}" for p, e in failed)
        raise UserError(f"backup failed, nothing written to {dest}: {detail}")
    for child in partial.iterdir():  # drop folders of plugins with nothing to back up
        if child.is_dir() and child.name != CORE and not any(child.iterdir()):
            child.rmdir()
    return [p for p, _ in done], inside, outside


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a finished backup folder, or None when `folder` is not one."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("created"), str) \
            or not isinstance(manifest.get("backed_up"), list):
        return None
    return manifest


def prune(parent: Path, keep: int) -> list[str]:
    """Delete the oldest dated backups in `parent` beyond the newest `keep`: only folders named like the ones
    --keep writes that hold a backup's MANIFEST.json; anything else in `parent` is never touched."""
    ours = sorted(p.name for p in parent.iterdir()
                  if DATED_NAME.fullmatch(p.name) and p.is_dir() and not p.is_symlink() and read_manifest(p))
    removed = ours[:-keep]
    for name in removed:
        shutil.rmtree(parent / name)
    return removed
