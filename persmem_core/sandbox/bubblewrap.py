"""An OS sandbox for the programs tools start: Debian's bubblewrap (`bwrap`), shared by every plugin that
runs a child process (shell_exec, git_op). docs/security.md states the rules; this module keeps them.

The path checks in the plugins decide what a command may name; this decides what the child can reach,
whatever it names or reads from a file. A confined child:

- runs as an **unprivileged uid in a user namespace**: as the server's own user, or, when the server runs as
  root, as uid/gid 65534 (sandbox/launcher.py), never with root's kernel uid; no capabilities, no_new_privs
  (bwrap sets it), no further user namespaces;
- sees the system read-only: /usr (with the /bin, /lib... links), and from /etc only what programs need to run
  (users and groups, name resolution, time zone, TLS certificates, the dynamic linker cache): never
  /etc/shadow, /root, /home or any other folder;
- sees the folders it is given (`Confinement.writable`) read-write at their own paths, and `read_only` ones
  (as root: idmapped, so it writes the workspace as root would, and nothing else);
- sees nothing of the `hidden` folders (the persmem home: agents, mail, memories), even inside a writable one;
- has its own /tmp (an empty tmpfs of bounded size), /dev with only null, zero, random, tty..., a /proc of its
  own pid namespace (no /proc/<server pid>) whose kernel tunables (/proc/sys, sysrq-trigger, irq, bus...) are
  read-only or masked, and no /sys;
- has limits (`Limits`): processes, open files, file size, address space per process (prlimit, inside the
  sandbox), memory and processes of the whole command (a cgroup, where the server may make one), and a floor
  of free disk space under which the command is stopped (checked every 10 ms while it runs);
- has no network unless `network` is set, and no terminal.

`mode` is the operator's choice per plugin: "auto" confines when bwrap works here (a weaker sandbox, loudly
warned about, when the kernel refuses user namespaces; unconfined without bwrap), "required" refuses to start
the server without the full sandbox, "off" never confines.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from msgspec import Meta

from persmem_core.sandbox import cgroup as sandbox_cgroup
from persmem_core.sandbox.children import SAFE_PATH, Finished, run_capped
from persmem_core.errors import UserError

SandboxMode = Literal["auto", "required", "off"]
SandboxSetting = Annotated[
    SandboxMode,
    Meta(description="Run commands in an OS sandbox (bubblewrap): an unprivileged uid in a user namespace that "
                     "sees only the workspace, read-only system folders, a private /tmp and /proc and no persmem "
                     "data, within memory, process and disk limits. auto: when bwrap works here (else a loud "
                     "warning); required: the server does not start without the full sandbox; off: never."),
]  # the `sandbox` field of every plugin section that runs commands

# What programs need from /etc to run: users, name resolution, time, TLS roots, the linker cache, file(1)'s
# magic, ssh's client config. Each is bound (read-only, where it exists) at its own path. Never /etc/ssl/private.
ETC_ENTRIES = (
    "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "resolv.conf", "gai.conf", "services", "protocols",
    "localtime", "timezone", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl/certs",
    "ssl/openssl.cnf", "ca-certificates",
    "ca-certificates.conf", "mime.types", "magic", "magic.mime", "ssh/ssh_config", "ssh/ssh_config.d",
    "os-release", "debian_version", "locale.alias", "papersize",
)
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
BASE_FLAGS = ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
              "--unshare-cgroup-try", "--cap-drop", "ALL", "--hostname", "sandbox")
# /proc's kernel interfaces: the folders are bound read-only, the files masked with /dev/null. bwrap's own
# cover skips /proc/sys (its folder refuses W_OK even to root, while the files in it accept writes).
PROC_READ_ONLY = ("sys", "irq", "bus", "fs", "sysvipc", "acpi", "scsi", "asound", "driver", "tty")
PROC_MASKED = ("sysrq-trigger", "kcore", "kmsg", "keys", "key-users", "timer_list", "sched_debug",
               "latency_stats", "mtrr", "kpagecount", "kpageflags", "kpagecgroup", "kallsyms", "config.gz")
SANDBOX_UID = SANDBOX_GID = 65534  # nobody: who a command runs as when the server runs as root
STAGING = "/run/persmem-sandbox"  # where sandbox/launcher.py mounts the idmapped folders (its own namespace)
LAUNCHER = Path(__file__).with_name("launcher.py")
MB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one confined command may use (docs/security.md). `section` names the config section in messages."""

    processes: int = 256  # tasks of the command at once (RLIMIT_NPROC in its user namespace; cgroup pids.max)
    open_files: int = 1024  # RLIMIT_NOFILE per process
    file_bytes: int = 1024 * MB  # RLIMIT_FSIZE: the largest file a command may write
    address_space_bytes: int = 8192 * MB  # RLIMIT_AS per process (V8 and Go reserve a lot they never use)
    memory_bytes: int = 2048 * MB  # cgroup memory limit of the whole command (no swap), where cgroups exist
    min_free_disk_bytes: int = 1024 * MB  # a command is stopped when a writable folder's disk has less free
    section: str = "shell"


@dataclass(frozen=True)
class Confinement:
    """What one confined command may reach (see the module docstring)."""

    writable: tuple[Path, ...]
    read_only: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()  # folders or files
    network: bool = False
    tmp_bytes: int = 256 * MB
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class Support:
    """How well commands can be confined here: "full" (a user namespace and an unprivileged uid), "weak"
    (root only: bwrap without a user namespace, so the command keeps root's uid, without capabilities) or
    "none"; `reason` says why it is not full."""

    level: Literal["full", "weak", "none"]
    reason: str | None = None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def _system_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_LINKS:
        host_path = Path("/") / name
        if host_path.is_symlink():
            args += ["--symlink", os.readlink(host_path), str(host_path)]
        elif host_path.is_dir():
            args += ["--ro-bind", str(host_path), str(host_path)]
    for entry in ETC_ENTRIES:
        source = Path("/etc") / entry
        if os.path.lexists(source):
            real = os.path.realpath(source)  # /etc/resolv.conf may link into /run: bind what it points at
            if os.path.exists(real):
                args += ["--ro-bind", real, str(source)]
    return args


def _proc_args() -> list[str]:
    args = ["--proc", "/proc"]
    for name in PROC_READ_ONLY:
        args += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    for name in PROC_MASKED:
        if os.path.exists(f"/proc/{name}"):
            args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    return args


def _limit_args(limits: Limits) -> list[str]:
    """prlimit (util-linux) as the command's first program inside the sandbox: hard limits it cannot raise.
    RLIMIT_NPROC set inside counts only the command's own processes (those of its user namespace)."""
    def pair(flag: str, value: int) -> str:
        return f"--{flag}={value}:{value}"

    return ["prlimit", pair("nproc", limits.processes), pair("nofile", limits.open_files),
            pair("fsize", limits.file_bytes), pair("as", limits.address_space_bytes), "--core=0:0", "--"]


def command(argv: list[str], confinement: Confinement, cwd: Path, cgroup_procs: list[str] = (),
            level: str | None = None) -> list[str]:
    """The command line that runs `argv` in `cwd` under `confinement`: bwrap, behind sandbox/launcher.py when
    the server runs as root with the full sandbox. `level` defaults to what this machine supports."""
    def real_paths(paths) -> list[Path]:
        return sorted({Path(os.path.realpath(p)) for p in paths}, key=lambda p: len(p.parts))

    level = level or support().level
    launched = level == "full" and os.geteuid() == 0
    staged: list[list] = []

    def source(path: Path, read_only: bool) -> str:
        if not launched:
            return str(path)
        staged.append([str(path), read_only])
        return f"{STAGING}/{len(staged) - 1}"

    writable = [p for p in real_paths(confinement.writable) if p.exists()]  # a missing root is skipped
    read_only = [p for p in real_paths(confinement.read_only) if p.exists()]
    hidden = real_paths(confinement.hidden)
    args = [shutil.which("bwrap", path=SAFE_PATH) or "bwrap", *BASE_FLAGS]
    if level == "full":
        args += ["--unshare-user", "--disable-userns"]
    if not confinement.network:
        args.append("--unshare-net")
    args += _system_args()
    args += _proc_args()
    args += ["--dev", "/dev", "--size", str(confinement.tmp_bytes), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev", "--size", str(confinement.tmp_bytes), "--tmpfs", "/tmp"]
    for path in read_only:
        args += ["--ro-bind", source(path, True), str(path)]
    for path in writable:
        args += ["--bind", source(path, False), str(path)]
    shown = [*read_only, *writable]
    masked: list[Path] = []
    for secret in hidden:  # an empty read-only folder (or /dev/null) wherever a bound folder shows it
        if not any(_inside(secret, path) for path in shown) or any(_inside(secret, m) for m in masked):
            continue
        masked.append(secret)
        if not secret.is_dir():
            args += ["--ro-bind", "/dev/null", str(secret)]
            continue
        args += ["--tmpfs", str(secret)]
        for path in writable:  # a workspace inside the hidden folder stays reachable
            if path != secret and _inside(path, secret):
                args += ["--bind", source(path, False), str(path)]
        args += ["--remount-ro", str(secret)]  # not recursive: the workspaces bound inside stay writable
    args += ["--chdir", str(cwd), "--", *_limit_args(confinement.limits), *argv]
    if not launched:
        return args
    launcher = [sys.executable, "-I", "-S", str(LAUNCHER), str(SANDBOX_UID), str(SANDBOX_GID), STAGING]
    for path, read_only in staged:
        launcher += ["--ro" if read_only else "--rw", path]
    for procs in cgroup_procs:
        launcher += ["--cgroup", procs]
    return [*launcher, "--", *args]


def failure(stderr: bytes) -> str | None:
    """bwrap's or the launcher's own complaint when the sandbox could not be set up (the command did not run)."""
    text = stderr.decode("utf-8", "replace")
    return text.strip()[:400] if text.startswith(("bwrap: ", "persmem-sandbox: ")) else None


def _probe(level: str) -> str | None:
    """Why `level` of sandbox cannot run /bin/true here, or None when it can."""
    probe = command(["/bin/true"], Confinement(writable=()), Path("/"), level=level)
    try:
        done = subprocess.run(probe, capture_output=True, timeout=20, env={"PATH": SAFE_PATH})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not start ({exc})"
    if done.returncode != 0:
        return done.stderr.decode("utf-8", "replace").strip()[:300] or f"exit {done.returncode}"
    return None


@functools.lru_cache(maxsize=1)
def support() -> Support:
    """How well commands can be confined on this machine (checked once per process)."""
    if shutil.which("bwrap", path=SAFE_PATH) is None:
        return Support("none", "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    if shutil.which("prlimit", path=SAFE_PATH) is None:
        return Support("none", "prlimit is not installed (it sets the sandbox's limits; Debian: util-linux)")
    refused = _probe("full")
    if refused is None:
        return Support("full")
    reason = (f"the kernel refuses the sandbox a user namespace ({refused}); enable unprivileged user namespaces "
              "(sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap on Ubuntu)")
    if os.geteuid() == 0 and _probe("weak") is None:
        return Support("weak", reason + ", else commands run as root without capabilities")
    return Support("none", reason)


def problem() -> str | None:
    """Why commands cannot get the full sandbox here, or None when they can."""
    return support().reason


def use(mode: SandboxMode, section: str) -> bool:
    """Whether to confine the next command: True for the full sandbox, and in "auto" for the weak one; False
    for "off" or "auto" without bwrap. "required" without the full sandbox is an error naming the fix."""
    if mode == "off":
        return False
    found = support()
    if found.level == "full":
        return True
    if mode == "required":
        raise UserError(f"[{section}] sandbox = \"required\" but {found.reason}; nothing was run. Fix that, or set "
                        f"[{section}] sandbox = \"auto\" to run without the full OS sandbox.")
    return found.level == "weak"


def check_at_start(mode: SandboxMode, section: str) -> None:
    """At startup: "required" without the full sandbox stops the server (naming why); "auto" without it says
    so loudly in the server's first lines."""
    found = support()
    if mode == "off" or found.level == "full":
        return
    if mode == "required":
        raise UserError(f"[{section}] sandbox = \"required\" but {found.reason}. Fix that, or set [{section}] "
                        "sandbox = \"auto\" (commands then run with less protection, see persmem doctor).")
    what = ("in bubblewrap WITHOUT a user namespace, as root without capabilities" if found.level == "weak"
            else "WITHOUT the OS sandbox, guarded only by the path and option checks")
    logging.getLogger(f"persmem.{section}").warning(
        "!!! [%s] sandbox = auto: %s; commands run %s. Set sandbox = \"required\" to refuse instead "
        "(persmem doctor).", section, found.reason, what)


def doctor_line(mode: SandboxMode, section: str):
    """A `persmem doctor` check for the plugin whose [section] has `sandbox = mode`."""
    from persmem_core.checks import fail, pass_, warn

    name = f"{section} sandbox"
    if mode == "off":
        return warn(name, f"off ([{section}] sandbox = \"off\"): commands run without the OS sandbox, guarded "
                          "only by the path and option checks")
    found = support()
    if found.level == "full":
        who = f"uid {SANDBOX_UID} (the server runs as root)" if os.geteuid() == 0 else "the server's own uid"
        where = sandbox_cgroup.hierarchies()
        limits = (f"memory and processes per command by cgroup v{where.version}" if where else
                  "processes per command by rlimit, memory per process only (no cgroup the server may make)")
        return pass_(name, f"bubblewrap with a user namespace: commands run as {who}, see only the workspace, "
                           f"read-only system folders, a private /tmp and /proc, no persmem data; {limits}")
    if mode == "required":
        return fail(name, f"{found.reason}; with sandbox = \"required\" the server does not start")
    if found.level == "weak":
        return warn(name, f"WEAK: {found.reason}; with sandbox = \"auto\" commands run in bubblewrap without a "
                          "user namespace: as root without capabilities, kernel tunables read-only")
    return warn(name, f"{found.reason}; commands run WITHOUT the OS sandbox (sandbox = \"auto\"), guarded only "
                      "by the path and option checks")


def disk_guard(confinement: Confinement) -> Callable[[], str | None]:
    """A check for run_capped: why to stop the command when a writable folder's disk has less free space than
    the limit keeps (None while there is enough)."""
    floor = confinement.limits.min_free_disk_bytes
    roots = [path for path in confinement.writable if path.exists()]

    def low() -> str | None:
        for root in roots:
            with contextlib.suppress(OSError):
                stats = os.statvfs(root)
                free = stats.f_bavail * stats.f_frsize
                if free < floor:
                    return (f"the disk holding {root} has {free / MB:,.0f} MB free, below the {floor / MB:,.0f} MB "
                            f"the sandbox keeps free ([{confinement.limits.section}] min_free_disk_mb)")
        return None

    return low


@contextlib.contextmanager
def _cgroup(confinement: Confinement, launched: bool) -> Iterator[sandbox_cgroup.CommandCgroup]:
    if not launched:
        yield sandbox_cgroup.CommandCgroup()
        return
    limits = confinement.limits
    with sandbox_cgroup.command_cgroup(limits.memory_bytes, limits.processes) as group:
        yield group


def run(argv: list[str], confinement: Confinement, *, cwd: Path, env: dict[str, str], timeout: float,
        max_output: int, stderr_cap: int | None = None) -> Finished:
    """Run `argv` confined (persmem_core.sandbox.children.run_capped's caps, plus the sandbox's limits). `stopped` says
    why a limit stopped it (the disk floor, the memory limit). A sandbox that could not be set up is an error."""
    guard = disk_guard(confinement)
    low = guard()
    if low:
        raise UserError(f"{low}; nothing was run. Free some space first.")
    launched = support().level == "full" and os.geteuid() == 0
    with _cgroup(confinement, launched) as group:
        done = run_capped(command(argv, confinement, cwd, group.procs), cwd=cwd, env=env, timeout=timeout,
                          max_output=max_output, stderr_cap=stderr_cap, stop_when=guard)
        if group.out_of_memory():
            done.stopped = done.stopped or (
                f"a process went over the command's {confinement.limits.memory_bytes / MB:,.0f} MB memory limit and "
                f"was killed ([{confinement.limits.section}] max_memory_mb)")
    broken = failure(done.stderr) if done.returncode in (1, 125) else None
    if broken:
        raise UserError(f"the OS sandbox could not be set up, so nothing ran ({broken}). Check the [workspace] "
                        "roots and the sandbox's folders (`persmem doctor`).")
    if done.stopped:
        done.stopped = f"stopped: {done.stopped}"
    return done
