"""The home's encryption key: where it comes from, how it is checked and created, and which keys the data needs.

Sources, first found wins:
1. `PERSMEM_KEY`: 64 hex characters (for containers and secret managers);
2. the systemd credential `persmem.key` (`LoadCredential=persmem.key:/path` puts it in `$CREDENTIALS_DIRECTORY`);
3. the key file, `[encryption] key_file` (default `<home>/persmem.key`): 32 raw bytes, or 64 hex characters.
   It must be a regular file (not a link) owned by the user running persmem, readable by nobody else (0600).
   A new home gets one on first start: 32 random bytes, written to a temporary name, fsynced and linked into
   place without replacing anything, so two processes starting at once end up sharing one key.

`<home>/encryption.json` lists the ids of the keys the home's data is sealed under. Before anything is opened the
loaded keys are checked against it: a missing or wrong key stops with a message naming both ids and where persmem
looked, and nothing is written. A key id is the first 8 bytes of SHA-256 over the key (with a fixed prefix): it
names a key without revealing it.

A rotation (`persmem key rotate`) writes the new key beside the old as `<key file>.next` first; while that file
exists both keys are loaded, so a rotation interrupted at any moment leaves every file readable, and running it
again finishes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from pathlib import Path

import msgspec

from persmem_core.errors import UserError
from persmem_core.fileio import atomic_write_bytes, fsync_dir
from persmem_core.crypto.sealing import Sealer, SealingError

KEY_BYTES = 32
KEY_NAME = "persmem.key"
NEXT_SUFFIX = ".next"
MARKER_NAME = "encryption.json"
CREDENTIAL_NAME = "persmem.key"
ENV_NAME = "PERSMEM_KEY"


class Marker(msgspec.Struct, kw_only=True):
    """`<home>/encryption.json`: the keys the home's data may be sealed under."""

    format: int = 1
    key_ids: list[str] = []


class LoadedKey(msgspec.Struct, kw_only=True):
    key: bytes
    key_id: str
    source: str  # "env", "credential" or "file"
    where: str  # PERSMEM_KEY, the credential's path or the key file's path


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"persmem key id\0" + key).digest()[:8].hex()


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def parse_key(raw: bytes, where: str) -> bytes:
    """32 raw bytes, or 64 hex characters (surrounding whitespace ignored)."""
    if len(raw) == KEY_BYTES:
        return raw
    text = raw.strip()
    if len(text) == 2 * KEY_BYTES:
        with contextlib.suppress(ValueError):
            return bytes.fromhex(text.decode("ascii"))
    raise UserError(f"{where} does not hold a persmem key: it must be 32 bytes, or 64 hex characters "
                    f"(found {len(raw)} bytes). `persmem key export` prints a key in the form to use.")


def key_file_path(home: Path, config) -> Path:
    return Path(config.key_file).expanduser() if config.key_file else Path(home) / KEY_NAME


def check_key_file(path: Path) -> str | None:
    """What is wrong with the key file's ownership or mode (None when it is private to us)."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a link; the key file must be a regular file (a link can be pointed elsewhere)"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_uid != os.geteuid():
        return (f"{path} belongs to uid {info.st_uid}, not to the user running persmem (uid {os.geteuid()}): "
                f"`chown {os.geteuid()} {path}`")
    if info.st_mode & 0o077:
        return f"{path} has mode {stat.S_IMODE(info.st_mode):04o}: others may read the key; `chmod 600 {path}`"
    return None


def read_key_file(path: Path) -> bytes:
    problem = check_key_file(path)
    if problem:
        raise UserError(f"the encryption key file is not private, so persmem will not use it: {problem}.")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return parse_key(f.read(4 * KEY_BYTES), str(path))


def write_key_file(path: Path, key: bytes, *, replace: bool = False) -> bool:
    """Write `key` to `path` (0600), durably. Without `replace`, never overwrite: returns False if the file
    exists (someone else made it first), True when this call wrote it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if replace:
        atomic_write_bytes(path, key, mode=0o600)
        return True
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(path.parent)
    return True


def find_key(home: Path, config, environ) -> LoadedKey | None:
    """The key from the first source that has one; None when none does."""
    if environ.get(ENV_NAME):
        key = parse_key(environ[ENV_NAME].encode(), ENV_NAME)
        return LoadedKey(key=key, key_id=key_id(key), source="env", where=ENV_NAME)
    credentials = environ.get("CREDENTIALS_DIRECTORY")
    if credentials and (Path(credentials) / CREDENTIAL_NAME).is_file():
        path = Path(credentials) / CREDENTIAL_NAME
        key = parse_key(path.read_bytes(), str(path))
        return LoadedKey(key=key, key_id=key_id(key), source="credential", where=str(path))
    path = key_file_path(home, config)
    try:
        key = read_key_file(path)
    except FileNotFoundError:
        return None
    return LoadedKey(key=key, key_id=key_id(key), source="file", where=str(path))


def next_key_path(home: Path, config) -> Path:
    path = key_file_path(home, config)
    return path.with_name(path.name + NEXT_SUFFIX)


def read_next_key(home: Path, config) -> bytes | None:
    """The key a rotation in progress moves to (None when no rotation is under way)."""
    try:
        return read_key_file(next_key_path(home, config))
    except FileNotFoundError:
        return None


def read_marker(home: Path) -> Marker:
    path = Path(home) / MARKER_NAME
    try:
        return msgspec.json.decode(path.read_bytes(), type=Marker)
    except FileNotFoundError:
        return Marker()
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UserError(f"{path} is damaged ({exc}); it lists the key ids the home's data is sealed under. "
                        "Restore it from a backup, or delete it if you are sure the right key is loaded.") from None


def write_marker(home: Path, key_ids: list[str]) -> None:
    atomic_write_bytes(Path(home) / MARKER_NAME, msgspec.json.encode(Marker(key_ids=sorted(set(key_ids)))) + b"\n")


def sources_tried(home: Path, config, environ) -> str:
    credentials = environ.get("CREDENTIALS_DIRECTORY")
    places = [f"{ENV_NAME} (not set)"]
    places.append(f"{Path(credentials) / CREDENTIAL_NAME} (absent)" if credentials
                  else "the systemd credential persmem.key (no $CREDENTIALS_DIRECTORY)")
    places.append(f"{key_file_path(home, config)} (absent)")
    return "; ".join(places)


def load_sealer(home: Path, config, environ, *, create: bool) -> Sealer:
    """The home's Sealer, after checking that every key its data needs is on hand.

    With `create`, a home with encryption enabled and no key anywhere gets a new key file, recorded in
    encryption.json (only when it names no key: data sealed under a lost key is never followed by a fresh key). Raises
    SealingError (a UserError) naming the missing or wrong key, having written nothing."""
    home = Path(home)
    marker = read_marker(home)
    loaded = find_key(home, config, environ)
    if loaded is None:
        if marker.key_ids:
            raise SealingError(
                f"the data in {home} is sealed under key {', '.join(marker.key_ids)}, and no key was found "
                f"(looked at: {sources_tried(home, config, environ)}). Put the key back (`persmem key import FILE` "
                "writes an exported key to the key file) or set PERSMEM_KEY; persmem starts nothing without it.")
        if not (config.enabled and create):
            return Sealer.plain()
        home.mkdir(parents=True, exist_ok=True)
        path = key_file_path(home, config)
        write_key_file(path, new_key())  # False: another process made one first; read that one
        loaded = find_key(home, config, environ)
        assert loaded is not None
        write_marker(home, [*marker.key_ids, loaded.key_id])
    keys = {loaded.key_id: loaded.key}
    upcoming = read_next_key(home, config) if loaded.source == "file" else None
    if upcoming is not None:
        keys[key_id(upcoming)] = upcoming
    missing = [kid for kid in marker.key_ids if kid not in keys]
    if missing:
        raise SealingError(
            f"the key loaded from {loaded.where} (id {loaded.key_id}) is not the key the data in {home} is sealed "
            f"under (id {', '.join(missing)}). Load the right key (the key file, PERSMEM_KEY or the credential "
            "persmem.key); nothing was opened or written.")
    return Sealer(keys, loaded.key_id, config.enabled)


def sealer_to_count_with(sealer: Sealer, config) -> Sealer:
    """The Sealer whose `needs_reseal` tells which files a migrate would rewrite, given the home's (loaded without
    making a key): before the first start of a home switched to encryption, a throwaway key stands in for the one
    that start will make (only ever used to count, never to write)."""
    if config.enabled and not sealer.enabled:
        stand_in = new_key()
        return Sealer({key_id(stand_in): stand_in}, key_id(stand_in), True)
    return sealer


def record_key_in_use(home: Path, sealer: Sealer) -> None:
    """Add the key new writes are sealed under to encryption.json, once the plugins opened the data with it
    (Host.startup): a key from PERSMEM_KEY or a credential on a new home, or encryption switched back on. Not
    before: data from a home without encryption.json may be sealed under another key, which the plugins refuse,
    and the right key must still be accepted afterwards."""
    recorded = read_marker(home).key_ids
    if sealer.enabled and sealer.key_id not in recorded:
        write_marker(home, [*recorded, sealer.key_id])

