"""`persmem key status|export|import|rotate|migrate`: the key that seals the home's data at rest (persmem_core/crypto/keys.py).

`migrate` and `rotate` rewrite every plugin's files through the plugins' `reseal` hooks, each file atomically, with
no server running (they take the home's owner lock). A rotation writes the new key as `<key file>.next` before it
rewrites anything and removes the old key only after every file is rewritten, so killing it at any moment leaves
every file readable (both keys are loaded while `.next` exists) and running it again finishes it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import click

from persmem_core.crypto import keys
from persmem_core.errors import UserError


@click.group()
def key() -> None:
    """The key that seals memories, session archives (and mail, with [amq] encrypt) at rest.

    Keep a copy of the key apart from the home and its backups (`persmem key export`): without it, sealed
    data and backups can not be read by anyone, you included."""


def _config(host):
    return host.section("encryption")


@contextlib.contextmanager
def _no_server(host, doing: str):
    """The home's owner lock, held while `doing` runs: no server writes meanwhile."""
    from persmem_core.transport.ownership import OwnerLock, owner_pid

    host.home.mkdir(parents=True, exist_ok=True)
    lock = OwnerLock(host.home)
    if not lock.acquire():
        pid = owner_pid(host.home)
        raise UserError(f"a persmem server{f' (pid {pid})' if pid else ''} is using {host.home}; stop it, then "
                        f"{doing} again (it rewrites files the server has open).")
    try:
        yield
    finally:
        lock.release()


class _Progress:
    """One line per plugin part as it advances, at most twice a second, and when it finishes."""

    def __init__(self):
        self._last = 0.0

    def __call__(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if total and done >= total or now - self._last >= 0.5:
            self._last = now
            click.echo(f"  {what}: {done}/{total}", err=True)


def _reseal(host, sealer, *, dry_run: bool) -> list:
    """Every plugin's `reseal` (persmem_core.plugins.call_each); the first that fails stops the command (its files
    stay readable: each is replaced atomically), naming it."""
    from persmem_core.plugins import call_each

    reports = []
    for plugin, report, exc in call_each(host.pm, "reseal", host=host, sealer=sealer, progress=_Progress(),
                                         dry_run=dry_run):
        if isinstance(exc, UserError):
            raise exc
        if exc is not None:
            raise UserError(f"plugin {plugin!r} could not rewrite its files ({type(exc).__name__}: {exc}); every file "
                            "is still readable, the old and the new key are both kept: fix what it names and run the "
                            "command again.") from exc
        if report is not None:
            reports.append(report)
    return reports


def _remove_leftover_temps(host) -> None:
    """Temp files of atomic writes killed before their rename (persmem_core.fileio) may hold what was written in
    plaintext before; none is needed once every plugin resealed its files. The workspace is the user's: left alone."""
    from persmem_core.fileio import remove_leftover_temps

    removed = remove_leftover_temps(host.home, host.workspace_roots())
    if removed:
        click.echo(f"  removed {removed} temp file(s) that interrupted writes left behind", err=True)


def dry_run_reports(host, sealer) -> list | None:
    """The plugins' `reseal` dry runs: what a migrate would rewrite. None while a server runs (counting then would
    race its writes), [] for a home that does not exist yet."""
    from persmem_core.transport.ownership import OwnerLock

    if not host.home.exists():
        return []
    lock = OwnerLock(host.home)
    if not lock.acquire():
        return None
    try:
        return _reseal(host, sealer, dry_run=True)
    finally:
        lock.release()


def count_unsealed(host, sealer) -> int:
    """Files not as new writes make them (plaintext while encryption is on); 0 while a server runs."""
    return sum(report.rewritten for report in dry_run_reports(host, sealer) or [])


def _summary(reports: list, verb: str) -> str:
    if not reports:
        return "no plugin holds files to seal"
    return "; ".join(f"{r.what}: {r.rewritten} of {r.checked} file(s) {verb}" for r in reports)


@key.command("status")
def status() -> None:
    """Whether new writes are sealed, which key is loaded and from where (and whether its file is private),
    which keys the data needs, and, with no server running, how many files still hold plaintext."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    config = _config(host)
    click.echo(f"encryption: {'on (new writes are sealed)' if config.enabled else 'off (new writes are plaintext)'}")
    marker = keys.read_marker(host.home)
    try:
        loaded = keys.find_key(host.home, config, host.environ)
    except UserError as exc:
        click.echo(f"key: unusable: {exc}")
        loaded = None
    else:
        if loaded is None:
            click.echo(f"key: none yet ({keys.sources_tried(host.home, config, host.environ)})"
                       + ("; one is created on the first start" if config.enabled and not marker.key_ids else ""))
        else:
            private = " (0600, ours)" if loaded.source == "file" else ""
            click.echo(f"key: {loaded.key_id} from {loaded.source} {loaded.where}{private}")
    upcoming = keys.next_key_path(host.home, config)
    if upcoming.exists():
        click.echo(f"rotation: unfinished (the new key is in {upcoming}); run `persmem key rotate` to finish it")
    click.echo(f"data sealed under: {', '.join(marker.key_ids) or 'no key (nothing sealed yet)'}")
    sealer = keys.sealer_to_count_with(keys.load_sealer(host.home, config, host.environ, create=False), config)
    reports = dry_run_reports(host, sealer)
    if not reports:
        click.echo("files: not counted while a server is running (stop it to count them)" if reports is None
                   else "files: none")
        return
    for report in reports:
        line = f"files: {report.what}: {report.checked} checked"
        if report.rewritten:
            line += f", {report.rewritten} not as new writes are ({report.plain} with plaintext): `persmem key migrate`"
        click.echo(line)


@key.command("export")
def export() -> None:
    """Print the loaded key (64 hex characters) on stdout, to keep apart from the home and its backups (a password
    manager, a sealed envelope). `persmem key import FILE` or PERSMEM_KEY take it back."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    loaded = keys.find_key(host.home, _config(host), host.environ)
    if loaded is None:
        raise UserError(f"no key to export: {keys.sources_tried(host.home, _config(host), host.environ)}.")
    click.echo(f"key {loaded.key_id} (from {loaded.where}); whoever has it can read this home's sealed data and "
               "backups", err=True)
    click.echo(loaded.key.hex())


@key.command("import")
@click.argument("source", type=click.Path(path_type=Path, allow_dash=True))
def import_(source: Path) -> None:
    """Write the key in SOURCE (a file or - for stdin: 64 hex characters or 32 bytes, as `persmem key export`
    printed it) to the key file, 0600. Use it before `persmem restore` of a sealed backup on a new machine. An
    existing key file is never replaced."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    config = _config(host)
    raw = sys.stdin.buffer.read(4 * keys.KEY_BYTES) if str(source) == "-" else source.read_bytes()
    new = keys.parse_key(raw, "stdin" if str(source) == "-" else str(source))
    new_id = keys.key_id(new)
    marker = keys.read_marker(host.home)
    if marker.key_ids and new_id not in marker.key_ids:
        raise UserError(f"this key ({new_id}) is not one the data in {host.home} is sealed under "
                        f"({', '.join(marker.key_ids)}); nothing was written.")
    path = keys.key_file_path(host.home, config)
    if os.path.lexists(path):
        try:
            same = keys.read_key_file(path) == new
        except UserError:
            same = False
        if same:
            click.echo(f"key {new_id} is already in {path}")
            return
        raise UserError(f"{path} already holds another key; persmem never replaces a key file (that would lose the "
                        "data sealed under it). Move it aside first if you are sure.")
    keys.write_key_file(path, new)
    click.echo(f"key {new_id} written to {path} (0600)")


@key.command("migrate")
def migrate() -> None:
    """Rewrite every file in the home as [encryption] says: seal plaintext written before encryption was on (or,
    with enabled = false, open everything back to plaintext). Each file is replaced atomically: stop it at any
    moment and run it again. Needs the server stopped."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    with _no_server(host, "run `persmem key migrate`"):
        sealer = host.sealer  # checks the key against the data, and makes one for a home that has none yet
        if sealer.enabled:
            click.echo(f"sealing every file under key {sealer.key_id}", err=True)
        else:
            click.echo("[encryption] enabled = false: opening every sealed file back to plaintext", err=True)
        reports = _reseal(host, sealer, dry_run=False)
        _remove_leftover_temps(host)
        keys.write_marker(host.home, [sealer.key_id] if sealer.enabled else [])
    click.echo(f"migrated: {_summary(reports, 'rewritten')}.")


@key.command("rotate")
def rotate() -> None:
    """Replace the key: a new key, every file sealed again under it, then the old key removed. Crash-safe: the new
    key is written beside the old (`<key file>.next`) before anything is rewritten and both are loaded until the
    end, so an interrupted rotation leaves everything readable and running this again finishes it. Backups made
    before need the OLD key: `persmem key export` it first if you keep them. Needs the server stopped and a key
    file (a key from PERSMEM_KEY or a credential is rotated where it is kept)."""
    from persmem_core.cli.commands import get_host
    from persmem_core.fileio import fsync_dir
    from persmem_core.crypto.sealing import Sealer

    host = get_host()
    config = _config(host)
    if not config.enabled:
        raise UserError("[encryption] enabled = false: there is no key in use to rotate. Turn it on and run "
                        "`persmem key migrate` first.")
    loaded = keys.find_key(host.home, config, host.environ)
    if loaded is not None and loaded.source != "file":
        raise UserError(f"the key comes from {loaded.where}, which persmem does not write. Rotate it there: export "
                        "the data's key to a key file (`persmem key export`), unset it, rotate, then load the new key "
                        "where you keep it.")
    with _no_server(host, "run `persmem key rotate`"):
        host.sealer  # checks the key (and the new one, if a rotation was interrupted) against the data
        loaded = keys.find_key(host.home, config, host.environ)
        upcoming_path = keys.next_key_path(host.home, config)
        upcoming = keys.read_next_key(host.home, config)
        if upcoming is None:
            keys.write_key_file(upcoming_path, keys.new_key())
            upcoming = keys.read_next_key(host.home, config)
        else:
            click.echo(f"finishing the rotation to key {keys.key_id(upcoming)} begun before", err=True)
        new_id = keys.key_id(upcoming)
        keys.write_marker(host.home, [*keys.read_marker(host.home).key_ids, loaded.key_id, new_id])
        click.echo(f"sealing every file under the new key {new_id} (old key {loaded.key_id})", err=True)
        sealer = Sealer({loaded.key_id: loaded.key, new_id: upcoming}, new_id, True)
        reports = _reseal(host, sealer, dry_run=False)
        _remove_leftover_temps(host)
        keys.write_key_file(keys.key_file_path(host.home, config), upcoming, replace=True)
        upcoming_path.unlink()
        fsync_dir(upcoming_path.parent)
        keys.write_marker(host.home, [new_id])
    click.echo(f"rotated: key {loaded.key_id} -> {new_id}; {_summary(reports, 'rewritten')}. Backups made before "
               "need the old key.")
