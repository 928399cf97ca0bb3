"""Issue 32, hook socket squatting: a home whose path is too long for a socket name gets its socket in
`/tmp/persmem-<uid>/`, which any local user can create first. Each attack is made for real by a second Linux user
(created here with useradd, removed at the end) against a victim user (created the same way, so the victim's
`/tmp/persmem-<uid>` is nobody else's business on this machine): the attacker pre-creates the folder, or a link,
or plants its own listening socket, and records every byte that reaches it. The victim runs the hook as the clients
do (JSON on stdin) with its prompt in it; the hook must send nothing, say in one line what to remove, and exit 0.
A control run shows the same setup does receive the prompt when the socket is the victim's own.

The server side is tried too: `persmem serve` (and the core's socket helpers) refuse a runtime folder or a socket
of another user."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from persmem_core.sdk import UserError, socket_path
from persmem_core.sdk.testing import clean_env

PLUGIN_SOURCE = Path(__file__).resolve().parents[1] / "persmem_sessions"
PERSMEM = Path(sys.executable).parent / "persmem"
VICTIM, ATTACKER = "persmem-t-victim", "persmem-t-attacker"
PROMPT = "my bank password is hunter2, remind me to change it"
NO_PLUGINS = "memory_hnsw,amq_maildir,amq_nats,shell,git,searxng,dashboard,sessions"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
    reason="needs root with useradd and setpriv: the attacks are made by a second real Linux user")

# A listener that records what reaches it: one line per connection, its byte count and the bytes (hex). Its socket
# is open to all (an attacker wants the victim to get in).
LISTENER = r'''
import os, socket, sys
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
server.listen(8)
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    conn.settimeout(5)
    data = b""
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    conn.close()
    print("CONNECTION", len(data), data.hex(), flush=True)
'''


class User:
    def __init__(self, name: str):
        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, entry.pw_uid, entry.pw_gid

    def argv(self, *argv: str) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *argv]


def _ensure_user(name: str) -> tuple[User, bool]:
    try:
        return User(name), False
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin",
                        name], check=True, capture_output=True)
        return User(name), True


@pytest.fixture(scope="module")
def users():
    made = []
    victim, new = _ensure_user(VICTIM)
    made += [VICTIM] if new else []
    attacker, new = _ensure_user(ATTACKER)
    made += [ATTACKER] if new else []
    yield victim, attacker
    for name in made:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="module")
def python_for_others(users):
    """A Python interpreter another user can run (the venv's may live under /root), with a copy of the hook's
    package in a folder everyone can read (the checkout may not be)."""
    victim, _ = users
    root = Path(tempfile.mkdtemp(prefix="persmem-hookpkg-"))
    root.chmod(0o755)
    shutil.copytree(PLUGIN_SOURCE, root / "persmem_sessions", ignore=shutil.ignore_patterns("__pycache__", "panel"))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if candidate and subprocess.run(victim.argv(candidate, "-c", "pass"), capture_output=True).returncode == 0:
            yield candidate, root
            break
    else:
        pytest.skip("no Python interpreter another user may run")
    shutil.rmtree(root)


class Machine:
    """The victim's long home (its socket falls back to /tmp/persmem-<victim uid>/) and the means to attack it."""

    def __init__(self, users, python_for_others, base: Path):
        self.victim, self.attacker = users
        self.python, self.package = python_for_others
        self.base = base
        self.home = base / ("victim-home-" + "x" * 110)
        self.home.mkdir(mode=0o700)
        os.chown(self.home, self.victim.uid, self.victim.gid)
        self.folder = Path(f"/tmp/persmem-{self.victim.uid}")
        self._remove_folder()
        asked = subprocess.run(self.victim.argv(self.python, "-c", "import sys; from persmem_sessions.hook "
                                                                   "import socket_path; "
                                                                   "print(socket_path(sys.argv[1], {}))",
                                                str(self.home)),
                               env=self.env(), capture_output=True, text=True, check=True)
        self.socket = Path(asked.stdout.strip())
        assert self.socket.parent == self.folder, self.socket
        self.listeners: list[subprocess.Popen] = []

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(self.package), "LANG": "C.UTF-8"}

    def _remove_folder(self):
        with contextlib.suppress(FileNotFoundError):
            if self.folder.is_symlink() or not self.folder.is_dir():
                self.folder.unlink()
            else:
                shutil.rmtree(self.folder)

    def own_folder(self, user: User, mode: int) -> Path:
        self.folder.mkdir(mode=mode)
        self.folder.chmod(mode)
        os.chown(self.folder, user.uid, user.gid)
        return self.folder

    def private_folder_of(self, user: User) -> Path:
        """A 0700 folder of `user` elsewhere in /tmp, for its own listener."""
        folder = Path(tempfile.mkdtemp(prefix="persmem-t-", dir="/tmp"))
        os.chown(folder, user.uid, user.gid)
        return folder

    def listen(self, user: User, path: Path) -> subprocess.Popen:
        """`user`'s process listening at `path` (bound by that user: the socket file is theirs)."""
        listener = subprocess.Popen(user.argv(self.python, "-c", LISTENER, str(path)), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
        assert listener.stdout.readline().strip() == "ready", listener.stderr.read()
        self.listeners.append(listener)
        return listener

    def received(self, listener: subprocess.Popen) -> list[bytes]:
        """What reached `listener` (one entry per connection); stops it."""
        time.sleep(0.3)  # a connection the hook closed is logged by then
        listener.terminate()
        out, _ = listener.communicate(timeout=10)
        return [bytes.fromhex(line.split()[2]) if len(line.split()) > 2 else b""
                for line in out.splitlines() if line.startswith("CONNECTION")]

    def run_hook(self, event: str = "UserPromptSubmit") -> subprocess.CompletedProcess:
        payload = {"session_id": "s-squat-1", "transcript_path": None, "cwd": "/tmp", "hook_event_name": event,
                   "prompt": PROMPT, "source": "startup"}
        started = time.monotonic()
        done = subprocess.run(self.victim.argv(self.python, "-m", "persmem_sessions.hook", "--client", "claude",
                                               "--home", str(self.home), "--agent", "kite"),
                              input=json.dumps(payload), env=self.env(), capture_output=True, text=True, timeout=10)
        assert time.monotonic() - started < 5
        return done

    def close(self):
        for listener in self.listeners:
            if listener.poll() is None:
                listener.kill()
                listener.wait()
        self._remove_folder()


@pytest.fixture
def machine(users, python_for_others):
    base = Path(tempfile.mkdtemp(prefix="persmem-t-base-", dir="/tmp"))
    base.chmod(0o755)
    made = Machine(users, python_for_others, base)
    yield made
    made.close()
    shutil.rmtree(base)


def assert_refused_in_one_line(done: subprocess.CompletedProcess, names: str, fix: str = "emove"):
    """Exit 0 (the prompt goes on), one line on stderr naming what to remove (or the fix), the same to the user on
    stdout (the client's systemMessage)."""
    assert done.returncode == 0
    assert done.stderr.count("\n") == 1 and "sent nothing" in done.stderr and names in done.stderr, done.stderr
    assert fix in done.stderr
    assert json.loads(done.stdout) == {"systemMessage": done.stderr.strip()}
    assert PROMPT not in done.stdout + done.stderr


# -- the attacks ------------------------------------------------------------------------------------------------------


def test_control_the_victims_own_socket_receives_the_prompt(machine):
    """The setup sees a sent prompt: the same hook, the victim's own folder (0700) and its own listener."""
    machine.own_folder(machine.victim, 0o700)
    listener = machine.listen(machine.victim, machine.socket)
    done = machine.run_hook()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")  # the fake answers nothing: fail open
    [request] = machine.received(listener)
    assert b"POST /sessions/recall" in request and PROMPT.encode() in request


def test_a_folder_the_attacker_made_first_gets_nothing(machine):
    machine.own_folder(machine.attacker, 0o777)
    listener = machine.listen(machine.attacker, machine.socket)
    done = machine.run_hook()
    assert machine.received(listener) == []  # not even a connection
    assert_refused_in_one_line(done, str(machine.folder))


def test_a_private_folder_the_attacker_made_first_gets_nothing(machine):
    machine.own_folder(machine.attacker, 0o700)  # the victim cannot even look inside
    listener = machine.listen(machine.attacker, machine.socket)
    done = machine.run_hook("SessionStart")
    assert machine.received(listener) == []
    assert_refused_in_one_line(done, str(machine.folder))


def test_the_victims_folder_left_open_to_all_gets_nothing(machine):
    """The folder is the victim's, but mode 0777: the attacker could put its socket in it (and did)."""
    machine.own_folder(machine.victim, 0o777)
    listener = machine.listen(machine.attacker, machine.socket)
    done = machine.run_hook()
    assert machine.received(listener) == []
    assert_refused_in_one_line(done, str(machine.folder))
    assert "mode 777" in done.stderr


def test_a_link_in_place_of_the_folder_gets_nothing(machine):
    """The attacker links /tmp/persmem-<victim uid> to a folder of its own holding its listener."""
    elsewhere = machine.private_folder_of(machine.attacker)
    elsewhere.chmod(0o755)
    listener = machine.listen(machine.attacker, elsewhere / machine.socket.name)
    machine.folder.symlink_to(elsewhere)
    os.lchown(machine.folder, machine.attacker.uid, machine.attacker.gid)
    try:
        done = machine.run_hook()
        assert machine.received(listener) == []
        assert_refused_in_one_line(done, str(machine.folder))
        assert "a link" in done.stderr
    finally:
        shutil.rmtree(elsewhere)


def test_a_link_to_a_folder_of_the_victim_is_refused_too(machine):
    """Even pointing at a private folder of the victim's: a link is not the folder the server made."""
    elsewhere = machine.private_folder_of(machine.victim)
    machine.folder.symlink_to(elsewhere)
    try:
        assert_refused_in_one_line(machine.run_hook(), str(machine.folder))
    finally:
        shutil.rmtree(elsewhere)


def test_a_socket_of_another_user_in_the_victims_folder_gets_nothing(machine):
    """The folder is right (the victim's, 0700), the socket in it is the attacker's (put there by root)."""
    elsewhere = machine.private_folder_of(machine.attacker)
    listener = machine.listen(machine.attacker, elsewhere / "s.sock")
    machine.own_folder(machine.victim, 0o700)
    os.rename(elsewhere / "s.sock", machine.socket)  # the listener stays bound to it
    try:
        assert machine.socket.lstat().st_uid == machine.attacker.uid
        done = machine.run_hook()
        assert machine.received(listener) == []
        assert_refused_in_one_line(done, str(machine.socket))
    finally:
        shutil.rmtree(elsewhere)


def test_a_socket_file_of_the_victim_with_the_attacker_listening_gets_no_byte(machine):
    """Folder and socket file both the victim's, the process on it the attacker's: the hook connects, asks who is
    there (SO_PEERCRED), and leaves before sending a byte."""
    elsewhere = machine.private_folder_of(machine.attacker)
    listener = machine.listen(machine.attacker, elsewhere / "s.sock")
    machine.own_folder(machine.victim, 0o700)
    os.rename(elsewhere / "s.sock", machine.socket)
    os.chown(machine.socket, machine.victim.uid, machine.victim.gid)
    try:
        done = machine.run_hook()
        assert machine.received(listener) == [b""]  # one connection, nothing sent on it
        assert_refused_in_one_line(done, str(machine.socket))
        assert f"runs as uid {machine.attacker.uid}" in done.stderr
    finally:
        shutil.rmtree(elsewhere)


def test_a_socket_planted_in_a_home_others_may_write_gets_nothing(machine):
    """A short home (socket in the home itself) that the victim left writable by all: the attacker's socket there."""
    home = machine.base / "shared-home"
    home.mkdir()
    home.chmod(0o777)
    os.chown(home, machine.victim.uid, machine.victim.gid)
    listener = machine.listen(machine.attacker, home / "persmem.sock")
    machine.home = home
    done = machine.run_hook()
    assert machine.received(listener) == []
    assert_refused_in_one_line(done, str(home), fix=f"chmod go-w {home}")


def test_no_folder_at_all_is_a_server_that_is_not_running(machine):
    """Nothing there is no attack: silent, as when the server is down."""
    done = machine.run_hook()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


# -- the server side --------------------------------------------------------------------------------------------------


def test_the_core_refuses_a_runtime_folder_not_its_own(users, tmp_path, monkeypatch):
    """socket_path() for a long home, with the runtime folder another user's, open to all, or a link."""
    _, attacker = users
    home = tmp_path / ("h" * 120)
    runtime = tmp_path / "run"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    for make in ("attacker's", "open to all", "link"):
        with contextlib.suppress(FileNotFoundError):
            runtime.unlink() if runtime.is_symlink() else runtime.rmdir()
        if make == "link":
            (tmp_path / "real").mkdir(mode=0o700, exist_ok=True)
            runtime.symlink_to(tmp_path / "real")
        else:
            runtime.mkdir(mode=0o700)
            if make == "attacker's":
                os.chown(runtime, attacker.uid, attacker.gid)
            else:
                runtime.chmod(0o777)
        with pytest.raises(UserError, match="not a private folder of this user"):
            socket_path(home)


def test_serve_refuses_a_socket_of_another_user_where_its_own_goes(users, tmp_path):
    """The runtime folder is right, but another user's socket waits at the socket's path: `persmem serve` does not
    remove it and listen (that user could have it back), it says in one line what to remove."""
    _, attacker = users
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    home = tmp_path / ("long-" + "x" * 120) / "home"
    env = clean_env(home, XDG_RUNTIME_DIR=str(runtime), PERSMEM_DISABLE_PLUGINS=NO_PLUGINS)
    planted = runtime / Path(subprocess.run(
        [sys.executable, "-c", "import sys; from persmem_core.sdk import socket_path; "
                               "print(socket_path(sys.argv[1]).name)", str(home)],
        env=env, capture_output=True, text=True, check=True).stdout.strip())
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(planted))
        os.chown(planted, attacker.uid, attacker.gid)
        result = subprocess.run([str(PERSMEM), "serve", "--port", "0"], env=env, capture_output=True, text=True,
                                timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "belongs to another user" in result.stderr and str(planted) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert stat.S_ISSOCK(planted.lstat().st_mode) and planted.lstat().st_uid == attacker.uid  # left alone


def test_hooks_status_reports_a_socket_that_is_not_the_users_own(users, tmp_path):
    """`persmem hooks status` checks the socket as the hooks do: another user's socket is reported, not trusted."""
    from persmem_sessions.commands import _state

    _, attacker = users
    folder = tmp_path / "runtime"
    folder.mkdir(mode=0o700)
    path = str(folder / "persmem-x.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(1)
        assert _state(str(tmp_path / "home"), path) == "a server is listening"
        os.chown(path, attacker.uid, attacker.gid)
        state = _state(str(tmp_path / "home"), path)
    assert state.startswith("NOT TRUSTED, the hooks send nothing there") and "is not your persmem server" in state
    assert _state(str(tmp_path / "home"), str(folder / "absent.sock")).startswith("no server is running")
