"""The key that seals a home at rest: where it comes from, how it is checked, and `persmem key
status|export|import|migrate|rotate` and `persmem doctor` as a user runs them (real commands as subprocesses; the
plugins' sealed files are tested with their plugins and in tests/test_encryption_at_rest.py)."""

from __future__ import annotations

import io
import os
import subprocess

import pytest

from persmem_core.crypto import keys
from persmem_core.crypto.sealing import Sealer, SealingError, is_sealed
from persmem_core.settings import EncryptionConfig
from persmem_core.testing import clean_env
from persmem_core.transport.server_process import persmem_command

NO_PLUGINS = "memory_hnsw,amq_maildir,shell,git,searxng,dashboard,sessions"
KEY = bytes(range(32))


def persmem(home, *args: str, stdin: bytes | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command(*args), env=clean_env(home, PERSMEM_DISABLE_PLUGINS=NO_PLUGINS, **env),
                          input=stdin, capture_output=True, timeout=60)


def sealer_of(home, **env) -> Sealer:
    return keys.load_sealer(home, EncryptionConfig(), env, create=True)


# -- the sealed format ----------------------------------------------------------------------------------------

def test_a_blob_opens_only_under_its_key_and_purpose_and_plaintext_passes_through(tmp_path):
    sealer = sealer_of(tmp_path)
    blob = sealer.seal(b"the deploy password is hunter2", b"memory.log")
    assert is_sealed(blob) and b"hunter2" not in blob and sealer.open(blob, b"memory.log") == \
        b"the deploy password is hunter2"
    assert sealer.open(b'{"plain": "from before"}', b"memory.log") == b'{"plain": "from before"}'
    with pytest.raises(SealingError, match="does not authenticate"):
        sealer.open(blob, b"amq.message")  # a blob is only what it was sealed as
    changed = bytearray(blob)
    changed[-1] ^= 1
    with pytest.raises(SealingError, match="changed on disk"):
        sealer.open(bytes(changed), b"memory.log")
    with pytest.raises(SealingError, match=f"sealed under key {sealer.key_id}, which is not on hand"):
        Sealer.plain().open(blob, b"memory.log")
    assert sealer.needs_reseal(b"plain") and not sealer.needs_reseal(blob)


def open_from_file(sealer, raw: bytes) -> bytes:
    out = io.BytesIO()
    sealer.open_stream(io.BytesIO(raw), out, b"memory.index")
    return out.getvalue()


def open_in_memory(sealer, raw: bytes) -> bytes:
    return bytes(sealer.open_buffer(bytearray(raw), b"memory.index"))


@pytest.mark.parametrize("opened", [open_from_file, open_in_memory])
def test_a_stream_round_trips_and_a_cut_or_reordered_one_is_refused(tmp_path, opened):
    """open_stream (a file, segment by segment) and open_buffer (a stream already in memory, decrypted into one
    buffer) open the same streams and refuse the same damage, with the same errors."""
    sealer = sealer_of(tmp_path)
    data = os.urandom(2 * (1 << 20) + 12345)
    sealed = io.BytesIO()
    sealer.seal_stream(io.BytesIO(data), sealed, b"memory.index")
    raw = sealed.getvalue()
    assert opened(sealer, raw) == data
    assert opened(sealer, data) == data  # plaintext comes back as it is
    segment = 4 + 12 + (1 << 20) + 16
    with pytest.raises(SealingError, match="segment 1 of a sealed file does not authenticate"):
        opened(sealer, raw[: 13 + 2 * segment])  # the first two whole segments: the second was not sealed as the last
    with pytest.raises(SealingError, match="before its last segment"):
        opened(sealer, raw[: 13 + 2 * segment + 5])
    with pytest.raises(SealingError, match="segment 2 of a sealed file does not authenticate"):
        opened(sealer, raw[: 13 + 2 * segment + 100])  # cut inside the last segment's body
    with pytest.raises(SealingError, match="segment 2 .* added to"):
        opened(sealer, raw + b"more")
    swapped = raw[:13] + raw[13 + segment : 13 + 2 * segment] + raw[13 : 13 + segment] + raw[13 + 2 * segment :]
    with pytest.raises(SealingError, match="segment 0"):
        opened(sealer, swapped)
    with pytest.raises(SealingError, match="not on hand"):
        opened(Sealer.plain(), raw)


# -- where the key comes from, and what is refused ---------------------------------------------------------

def test_a_new_home_gets_a_private_key_file_and_a_marker_naming_it(tmp_path):
    sealer = sealer_of(tmp_path)
    key_file = tmp_path / "persmem.key"
    assert os.stat(key_file).st_mode & 0o777 == 0o600 and len(key_file.read_bytes()) == 32
    assert keys.read_marker(tmp_path).key_ids == [sealer.key_id] == [keys.key_id(key_file.read_bytes())]
    assert sealer_of(tmp_path).key_id == sealer.key_id  # the next start loads the same key


def test_env_and_credential_keys_come_first_and_a_wrong_one_is_refused_before_anything_is_written(tmp_path):
    home = tmp_path / "home"
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "persmem.key").write_text(KEY.hex() + "\n")
    sealer = sealer_of(home, CREDENTIALS_DIRECTORY=str(credentials))
    assert sealer.key_id == keys.key_id(KEY) and not (home / "persmem.key").exists()
    keys.record_key_in_use(home, sealer)  # as Host.startup does once the plugins opened the data with it
    assert sealer_of(home, PERSMEM_KEY=KEY.hex()).key_id == sealer.key_id
    before = sorted(os.listdir(home))
    with pytest.raises(SealingError, match=f"not the key the data in .* is sealed under \\(id {sealer.key_id}\\)"):
        sealer_of(home, PERSMEM_KEY=(b"\x01" * 32).hex())
    with pytest.raises(SealingError, match=f"sealed under key {sealer.key_id}, and no key was found"):
        sealer_of(home)  # the key is gone: no new key is made over data sealed under the old one
    assert sorted(os.listdir(home)) == before


def test_a_key_file_others_may_read_or_that_is_a_link_is_refused(tmp_path):
    sealer_of(tmp_path)
    key_file = tmp_path / "persmem.key"
    os.chmod(key_file, 0o644)
    with pytest.raises(Exception, match="mode 0644: others may read the key; `chmod 600"):
        sealer_of(tmp_path)
    os.chmod(key_file, 0o600)
    os.chown(key_file, 65534, 65534)
    with pytest.raises(Exception, match="belongs to uid 65534"):
        sealer_of(tmp_path)
    os.chown(key_file, os.geteuid(), os.getegid())
    os.rename(key_file, tmp_path / "elsewhere.key")
    os.symlink(tmp_path / "elsewhere.key", key_file)
    with pytest.raises(Exception, match="is a link"):
        sealer_of(tmp_path)


def test_the_server_does_not_start_with_the_wrong_key_and_says_why(tmp_path):
    assert persmem(tmp_path, "key", "migrate").returncode == 0  # makes the home's key
    result = persmem(tmp_path, "serve", "--port", "0", PERSMEM_KEY=(b"\x02" * 32).hex())
    assert result.returncode == 1
    assert b"is not the key the data in" in result.stderr and b"nothing was opened or written" in result.stderr


# -- the commands -----------------------------------------------------------------------------------------------

def test_status_export_and_import_between_homes(tmp_path):
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    assert persmem(home_a, "key", "migrate").returncode == 0
    status = persmem(home_a, "key", "status").stdout.decode()
    key_id = keys.read_marker(home_a).key_ids[0]
    assert "encryption: on" in status and f"key: {key_id} from file {home_a / 'persmem.key'} (0600, ours)" in status
    exported = persmem(home_a, "key", "export")
    assert exported.returncode == 0 and b"whoever has it can read" in exported.stderr
    key_hex = exported.stdout.decode().strip()
    assert bytes.fromhex(key_hex) == (home_a / "persmem.key").read_bytes()
    result = persmem(home_b, "key", "import", "-", stdin=key_hex.encode() + b"\n")
    assert result.returncode == 0 and (home_b / "persmem.key").read_bytes() == bytes.fromhex(key_hex)
    other = tmp_path / "other.key"
    other.write_bytes(b"\x03" * 32)
    result = persmem(home_b, "key", "import", str(other))
    assert result.returncode == 1 and b"already holds another key" in result.stderr
    assert (home_b / "persmem.key").read_bytes() == bytes.fromhex(key_hex)  # never replaced
    result = persmem(home_a, "key", "import", str(tmp_path / "a" / "encryption.json"))
    assert result.returncode == 1 and b"does not hold a persmem key" in result.stderr


def test_rotate_moves_to_a_new_key_and_an_interrupted_rotation_is_finished_by_the_next(tmp_path):
    assert persmem(tmp_path, "key", "migrate").returncode == 0
    old_id = keys.read_marker(tmp_path).key_ids[0]
    # A rotation that stopped after writing the new key beside the old: both load, the rerun finishes it.
    keys.write_key_file(tmp_path / "persmem.key.next", KEY)
    assert sorted(sealer_of(tmp_path).known_ids) == sorted([old_id, keys.key_id(KEY)])
    assert b"did not finish" in persmem(tmp_path, "doctor").stdout
    result = persmem(tmp_path, "key", "rotate")
    assert result.returncode == 0, result.stderr
    assert b"finishing the rotation" in result.stderr and f"-> {keys.key_id(KEY)}".encode() in result.stdout
    assert (tmp_path / "persmem.key").read_bytes() == KEY and not (tmp_path / "persmem.key.next").exists()
    assert keys.read_marker(tmp_path).key_ids == [keys.key_id(KEY)]
    result = persmem(tmp_path, "key", "rotate")
    assert result.returncode == 0 and keys.read_marker(tmp_path).key_ids != [keys.key_id(KEY)]
    result = persmem(tmp_path, "key", "rotate", PERSMEM_KEY=(tmp_path / "persmem.key").read_bytes().hex())
    assert result.returncode == 1 and b"which persmem does not write" in result.stderr


def test_doctor_reports_the_state_and_a_key_file_others_can_read(tmp_path):
    assert b"the key is created at" in persmem(tmp_path, "doctor").stdout
    assert persmem(tmp_path, "key", "migrate").returncode == 0
    assert b"PASS  encryption: on (AES-256-GCM)" in persmem(tmp_path, "doctor").stdout
    os.chmod(tmp_path / "persmem.key", 0o640)
    out = persmem(tmp_path, "doctor").stdout
    assert b"FAIL  encryption" in out and b"chmod 600" in out
    os.chmod(tmp_path / "persmem.key", 0o600)
    out = persmem(tmp_path, "doctor", PERSMEM_ENCRYPTION__ENABLED="false").stdout
    assert b"WARN  encryption: off" in out


def test_migrate_removes_what_killed_atomic_writes_left_but_not_in_the_workspace(tmp_path):
    """A temp file of an atomic write killed before its rename may hold plaintext from before the home was sealed."""
    (tmp_path / "sessions" / "kite").mkdir(parents=True)
    (tmp_path / "workspace").mkdir()
    leftover = tmp_path / "sessions" / "kite" / ".persmem-0123456789ab.tmp"
    leftover.write_text('{"title": "the plaintext of a killed write"}')
    users = tmp_path / "workspace" / ".persmem-0123456789ab.tmp"
    users.write_text("the user's own file")
    result = persmem(tmp_path, "key", "migrate")
    assert result.returncode == 0 and b"removed 1 temp file(s)" in result.stderr
    assert not leftover.exists() and users.exists()
