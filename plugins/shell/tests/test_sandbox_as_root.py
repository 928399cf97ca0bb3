"""The OS sandbox holds when the server runs as root (issue 32): the allowlist opened wide (`sh`, `python3 -c`),
one agent prompt-injected, and only the sandbox between its commands and the box. Real bubblewrap, a real
server, as root; each test fails on the sandbox before the fix (commands kept root's uid, /proc/sys was
writable, there were no memory, process or disk limits).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from persmem_core.sdk import bubblewrap

from persmem_core.sdk.testing import ToolCallError, cgroups, clean_env, start_server, write_config

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="these attacks are about a server running as root"),
    pytest.mark.skipif(bubblewrap.support().level != "full", reason=f"no full OS sandbox: {bubblewrap.problem()}"),
]
ONLY_SHELL = "memory_hnsw,amq_maildir,git,searxng,dashboard,sessions"
WIDE_OPEN = {name: {} for name in ("sh", "python3", "cat", "ls", "echo", "kill", "dd")}
MB = 1024 * 1024


def start(tmp_path_factory, name: str, roots: list[str], **shell) -> object:
    home = tmp_path_factory.mktemp(name)
    write_config(home, {"workspace": {"roots": roots}, "shell": {"allow": WIDE_OPEN, **shell}})
    return start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS=ONLY_SHELL))


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("rootws")
    (root / "owned-by-root.txt").write_text("root wrote this\n")
    os.chmod(root / "owned-by-root.txt", 0o644)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory, ws):
    running = start(tmp_path_factory, "roothome", [str(ws)], max_processes=64, max_memory_mb=160, max_file_mb=4)
    yield running
    running.stop()


def sh(server, script: str, timeout: float = 20) -> dict:
    return server.call_tool("shell_exec", {"command": f"sh -c '{script}'", "timeout": timeout}, agent="kite")


def py(server, code: str, timeout: float = 20) -> dict:
    return server.call_tool("shell_exec", {"command": f"python3 -c \"{code}\"", "timeout": timeout}, agent="kite")


# -- who a command is ---------------------------------------------------------------------------------------

def test_a_command_runs_as_nobody_without_capabilities_or_new_privileges(server):
    out = py(server, "import os; s = open('/proc/self/status').read(); print(os.getuid(), os.getgid(), "
                     "os.getgroups()); print([l for l in s.splitlines() if l.startswith(('Cap', 'NoNewPrivs'))])")
    assert out["sandboxed"], out
    ids, caps = out["stdout"].splitlines()
    assert ids == "65534 65534 [65534]" or ids == "65534 65534 []", ids
    assert "NoNewPrivs:\\t1" in caps and all(f"{name}:\\t0000000000000000" in caps for name in
                                              ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")), caps
    nested = py(server, "import ctypes; print(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))")
    assert nested["stdout"].strip() == "-1", nested  # no further user namespace to gain capabilities in


def test_the_workspace_stays_writable_and_keeps_its_owner(server, ws):
    out = sh(server, "echo appended >> owned-by-root.txt && echo new > made-in-sandbox.txt && mkdir -p sub/dir "
                     "&& echo deep > sub/dir/f && ls -ln owned-by-root.txt")
    assert out["returncode"] == 0, out
    assert (ws / "owned-by-root.txt").read_text() == "root wrote this\nappended\n"
    for made in (ws / "made-in-sandbox.txt", ws / "sub" / "dir" / "f", ws / "sub"):
        assert made.stat().st_uid == 0 and made.stat().st_gid == 0  # written as root would, seen as nobody's
    assert " 65534 65534 " in out["stdout"]


# -- kernel tunables: the core_pattern escape and its siblings -----------------------------------------------

def test_the_core_pattern_escape_is_refused(server, ws):
    before = Path("/proc/sys/kernel/core_pattern").read_text()
    out = sh(server, f"echo \"|{ws}/pwn.sh\" > /proc/sys/kernel/core_pattern; cat /proc/sys/kernel/core_pattern")
    assert "Permission denied" in out["stderr"] or "Read-only" in out["stderr"], out
    assert Path("/proc/sys/kernel/core_pattern").read_text() == before


WRITE_EVERY_TUNABLE = r"""
import os
writable = []
for top in ('/proc/sys', '/sys', '/proc/sysrq-trigger', '/proc/irq', '/proc/bus', '/proc/fs', '/proc/kcore',
            '/proc/sysvipc', '/proc/acpi', '/proc/driver'):
    paths = [top] if not os.path.isdir(top) else [os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs]
    for path in paths:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            writable.append(path)
        except OSError:
            pass
print(len(writable), writable[:5])
"""


def test_no_kernel_tunable_under_proc_or_sys_opens_for_writing(server, ws):
    (ws / "tunables.py").write_text(WRITE_EVERY_TUNABLE)
    out = server.call_tool("shell_exec", {"command": "python3 tunables.py", "timeout": 60}, agent="kite")
    assert out["returncode"] == 0 and out["stdout"].startswith("0 []"), out


# -- the server process ---------------------------------------------------------------------------------------

def test_a_command_cannot_signal_trace_or_see_the_server(server, ws):
    pid = server.process.pid
    (ws / "attack.py").write_text(f"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
for name, attempt in (('kill', lambda: os.kill({pid}, signal.SIGKILL)), ('killpg', lambda: os.killpg({pid}, 9)),
                      ('kill -1', lambda: os.kill(-1, signal.SIGKILL) if os.fork() else os._exit(0))):
    try:
        attempt(); print(name, 'sent')
    except OSError as exc:
        print(name, exc.strerror)
print('ptrace', libc.ptrace(16, {pid}, 0, 0), ctypes.get_errno() == 3)  # PTRACE_ATTACH; 3 = ESRCH
print('proc', os.path.exists('/proc/{pid}/environ'))
""")
    out = server.call_tool("shell_exec", {"command": "python3 attack.py"}, agent="kite")
    assert "kill No such process" in out["stdout"] and "killpg No such process" in out["stdout"], out
    assert "ptrace -1 True" in out["stdout"] and "proc False" in out["stdout"], out
    assert server.process.poll() is None
    assert server.call_tool("shell_exec", {"command": "echo alive"}, agent="kite")["stdout"] == "alive\n"


# -- limits: processes, memory, file size, disk -----------------------------------------------------------

FORK_BOMB = r"""
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
except OSError as exc:
    print('stopped after', n, exc.strerror)
"""


def test_a_fork_bomb_stops_at_the_process_limit(server, ws):
    (ws / "bomb.py").write_text(FORK_BOMB)
    started = time.monotonic()
    out = server.call_tool("shell_exec", {"command": "python3 bomb.py", "timeout": 30}, agent="kite")
    assert out["stdout"].startswith("stopped after") and time.monotonic() - started < 25, out
    assert int(out["stdout"].split()[2]) < 64, out
    assert server.call_tool("shell_exec", {"command": "echo alive"}, agent="kite")["stdout"] == "alive\n"


@pytest.mark.skipif(cgroups.hierarchies() is None, reason="no cgroup with memory and pids controllers here")
def test_a_memory_bomb_is_killed_at_the_memory_limit_of_the_whole_command(server, ws):
    (ws / "hog.py").write_text("import os\nos.fork(); os.fork()\nheld = [bytearray(8 * 2**20) for _ in range(40)]\n"
                               "print('kept 320 MB')\n")
    out = server.call_tool("shell_exec", {"command": "python3 hog.py", "timeout": 30}, agent="kite")
    assert out.get("limit_reached") and "160 MB memory limit" in out["note"], out
    assert "kept 320 MB" not in out["stdout"]


def test_a_file_cannot_grow_past_the_file_size_limit(server, ws):
    out = py(server, "f = open('big.bin', 'wb'); f.write(bytes(8 * 2**20))")
    assert out["returncode"] != 0 and "File too large" in out["stderr"], out
    assert (ws / "big.bin").stat().st_size <= 4 * MB


@pytest.fixture
def small_disk(tmp_path):
    """A 512 MB file system of its own (tmpfs, as root) for a workspace."""
    root = tmp_path / "small-disk"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m,mode=0755", "tmpfs", str(root)], check=True)
    yield root
    subprocess.run(["umount", "-l", str(root)], check=False)


def test_a_command_cannot_fill_the_disk_past_the_documented_floor(tmp_path_factory, small_disk):
    server = start(tmp_path_factory, "diskhome", [str(small_disk)], min_free_disk_mb=384, max_file_mb=16)
    try:
        (small_disk / "fill.py").write_text("n = 0\nwhile True:\n    open(f'f{n}', 'wb').write(bytes(8 * 2**20))\n"
                                            "    n += 1\n")
        out = server.call_tool("shell_exec", {"command": "python3 fill.py", "timeout": 60}, agent="kite")
        free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        assert out.get("limit_reached") and "below the 384 MB the sandbox keeps free" in out["note"], out
        # stopped near the floor, far from full: the check runs every 10 ms (at 50 ms a fast box let 160 MB past
        # the floor into this RAM disk), and a late check on a busy box lets more through, so the margin is a
        # quarter of the 512 MB disk, not one check
        assert free > 256 * MB, free / MB
        (small_disk / "ballast").write_bytes(bytes(100 * MB))
        with pytest.raises(ToolCallError, match="nothing was run"):  # below the floor: nothing starts
            server.call_tool("shell_exec", {"command": "echo hello"}, agent="kite")
    finally:
        server.stop()


# -- when the kernel refuses user namespaces ------------------------------------------------------------------

# The kernel refusing user namespaces: the server runs in a user namespace of its own (root mapped to root)
# whose user.max_user_namespaces is 0, so neither bwrap nor the launcher gets one (the host keeps its setting).
NO_USER_NAMESPACES = ("unshare", "--user", "--map-root-user", "--", "sh", "-c",
                      'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "no-userns")


def test_without_user_namespaces_required_refuses_to_start_and_auto_says_so_loudly(tmp_path_factory, ws):
    home = tmp_path_factory.mktemp("requiredhome")
    write_config(home, {"workspace": {"roots": [str(ws)]}, "shell": {"allow": WIDE_OPEN, "sandbox": "required"}})
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS=ONLY_SHELL)
    refused = r"sandbox = \"required\" but the kernel refuses the sandbox a user namespace"
    with pytest.raises(RuntimeError, match=refused):
        start_server(home, ("kite",), env, prefix=NO_USER_NAMESPACES)

    home = tmp_path_factory.mktemp("autohome")
    write_config(home, {"workspace": {"roots": [str(ws)]}, "shell": {"allow": WIDE_OPEN}})
    server = start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS=ONLY_SHELL),
                          prefix=NO_USER_NAMESPACES)
    try:
        first_lines = server.log().splitlines()[:15]
        assert any("!!! [shell] sandbox = auto: the kernel refuses the sandbox a user namespace" in line
                   for line in first_lines), first_lines
        doctor = subprocess.run([*NO_USER_NAMESPACES, sys.executable, "-m", "persmem_core", "doctor"],
                                env=server.env, capture_output=True, text=True, timeout=120).stdout
        assert "WARN  shell sandbox: WEAK: the kernel refuses the sandbox a user namespace" in doctor, doctor
        before = Path("/proc/sys/kernel/core_pattern").read_text()  # the weak sandbox still covers /proc/sys
        out = sh(server, "echo \"|/tmp/x\" > /proc/sys/kernel/core_pattern")
        assert out["sandboxed"] and "Read-only file system" in out["stderr"], out
        assert Path("/proc/sys/kernel/core_pattern").read_text() == before
    finally:
        server.stop()


# -- the git config race (git_op vets, then git reads: no command may run in between) -------------------------

def test_git_reads_the_config_it_vetted_while_a_shell_loop_swaps_it(tmp_path_factory):
    base = tmp_path_factory.mktemp("gitrace")
    ws, remote = base / "ws", base / "remotes" / "upstream.git"
    ws.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True, env=env)
    subprocess.run(["git", "init", "-q", str(ws / "repo")], check=True, env=env)
    subprocess.run(["git", "-C", str(ws / "repo"), "remote", "add", "origin", str(remote)], check=True, env=env)
    config = ws / "repo" / ".git" / "config"
    (ws / "good").write_text(config.read_text())
    marker = ws / "PWNED"
    (ws / "evil").write_text(config.read_text() + f"[remote \"origin\"]\n\tuploadpack = sh -c 'touch {marker}; "
                                                  "exec git-upload-pack \"$@\"' --\n")
    home = tmp_path_factory.mktemp("gitracehome")
    write_config(home, {"workspace": {"roots": [str(ws)]}, "shell": {"allow": WIDE_OPEN},
                        "git": {"remotes": [str(base / "remotes") + "/"]}})
    server = start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,amq_maildir,searxng,"
                                                                                     "dashboard,sessions"))
    swapping = threading.Event()
    outcomes = []

    (ws / "swap.sh").write_text("cd repo/.g?t\nfor i in $(seq 1 1200); do cp ../../evil config; "
                                "cp ../../good config; done\n")  # names no git folder in its arguments

    def swap_loop():
        swapping.set()
        done = server.call_tool("shell_exec", {"command": "sh swap.sh", "timeout": 20}, agent="kite")
        outcomes.append(f"loop exit {done['returncode']}")

    try:
        loop = threading.Thread(target=swap_loop)
        loop.start()
        swapping.wait()
        for _ in range(8):
            try:
                server.call_tool("git_op", {"operation": "fetch", "repo_path": "repo"}, agent="kite")
                outcomes.append("fetched")
            except ToolCallError as exc:
                outcomes.append("refused" if "uploadpack" in str(exc) else str(exc)[:200])
        loop.join()
        assert not marker.exists(), outcomes  # git never read the hostile config
        assert set(outcomes) <= {"fetched", "refused", "loop exit 0"} and "loop exit 0" in outcomes, outcomes
    finally:
        server.stop()


def test_a_finished_command_leaves_nothing_running_to_race_git_with(server, ws):
    """The lock is enough only because a sandboxed command cannot leave a process behind."""
    out = sh(server, "(setsid sh -c \"sleep 30; echo late > late.txt\" &) ; echo started")
    assert out["stdout"] == "started\n"
    time.sleep(1)
    leftovers = subprocess.run(["pgrep", "-u", "65534", "-f", "sleep 30"], capture_output=True, text=True).stdout
    assert leftovers == "", leftovers
    assert not (ws / "late.txt").exists()


def test_a_server_running_as_an_ordinary_user_confines_commands_with_that_users_uid(tmp_path_factory):
    """Without root, bwrap makes the user namespace itself: the command keeps the server's (unprivileged) uid,
    with the same covers and limits."""
    work = Path(tempfile.mkdtemp(prefix="persmem-nonroot-"))  # /tmp/pytest-of-root is closed to other users
    work.chmod(0o777)
    script = (
        "from pathlib import Path\n"
        "from persmem_core.sdk import SAFE_PATH, bubblewrap\n"
        f"confinement = bubblewrap.Confinement(writable=(Path({str(work)!r}),),\n"
        "                                      limits=bubblewrap.Limits(processes=32))\n"
        "done = bubblewrap.run(['sh', '-c', 'id -u; echo 1 > /proc/sys/vm/swappiness; "
        "echo made > f; grep NoNewPrivs /proc/self/status; cat /proc/self/limits | grep processes'], "
        "confinement, cwd=Path(" + repr(str(work)) + "), env={'PATH': SAFE_PATH}, timeout=20, max_output=10000)\n"
        "print(bubblewrap.support().level)\nprint(done.stdout.decode())\nprint(done.stderr.decode())\n")
    try:
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                              script], capture_output=True, text=True, timeout=60, cwd="/")
        assert out.returncode == 0, out.stderr
        level, uid, *rest = out.stdout.split("\n", 2)
        assert level == "full" and uid == "65534", out.stdout
        assert "NoNewPrivs:\t1" in out.stdout and "Max processes             32                   32" in out.stdout
        assert "Read-only file system" in out.stdout or "Permission denied" in out.stdout, out.stdout
        assert (work / "f").read_text() == "made\n" and (work / "f").stat().st_uid == 65534  # the kernel's uid
    finally:
        shutil.rmtree(work, ignore_errors=True)
