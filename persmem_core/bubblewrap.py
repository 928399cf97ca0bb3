"""An OS sandbox for the programs tools start: Debian's bubblewrap (`bwrap`), shared by every plugin that
runs a child process (shell_exec, git_op).

The path checks in the plugins decide what a command may name; this decides what the child can reach,
whatever it names or reads from a file. A confined child sees:

- the system read-only: /usr (with the /bin, /lib... links), and from /etc only what programs need to run
  (users and groups, name resolution, time zone, TLS certificates, the dynamic linker cache): never
  /etc/shadow, /root, /home or any other folder;
- the folders it is given (`Confinement.writable`) read-write at their own paths, and `read_only` ones;
- nothing of the `hidden` folders (the persmem home: agents, mail, memories), even where they lie inside a
  writable folder;
- its own /tmp (an empty tmpfs of bounded size, gone when the command ends, kill included), /dev with only
  null, zero, random, tty..., and a /proc of its own pid namespace (no /proc/<server pid>/environ);
- no network unless `network` is set; no capabilities (even when the server runs as root); no terminal.

`mode` is the operator's choice per plugin: "auto" confines when bwrap works here and runs unconfined
otherwise (with a `persmem doctor` WARN), "required" refuses to run anything without it, "off" never
confines.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from msgspec import Meta

from persmem_core.children import SAFE_PATH
from persmem_core.errors import UserError

SandboxMode = Literal["auto", "required", "off"]
SandboxSetting = Annotated[
    SandboxMode,
    Meta(description="Run commands in an OS sandbox (bubblewrap): they see only the workspace, read-only system "
                     "folders, a private /tmp and /proc and no persmem data. auto: when bwrap works here (else a "
                     "`persmem doctor` WARN); required: refuse to run without it; off: never."),
]  # the `sandbox` field of every plugin section that runs commands

# What programs need from /etc to run: users, name resolution, time, TLS roots, the linker cache, file(1)'s
# magic, ssh's client config. Each is bound (read-only, where it exists) at its own path. Never /etc/ssl/private
# (the child runs as the server's user: as root, it could read TLS keys kept there).
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


@dataclass(frozen=True)
class Confinement:
    """What one confined command may reach (see the module docstring)."""

    writable: tuple[Path, ...]
    read_only: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()  # folders or files
    network: bool = False
    tmp_bytes: int = 256 * 1024 * 1024


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


def command(argv: list[str], confinement: Confinement, cwd: Path) -> list[str]:
    """The bwrap command line that runs `argv` in `cwd` under `confinement`."""
    def real_paths(paths) -> list[Path]:
        return sorted({Path(os.path.realpath(p)) for p in paths}, key=lambda p: len(p.parts))

    writable, read_only, hidden = (real_paths(confinement.writable), real_paths(confinement.read_only),
                                   real_paths(confinement.hidden))
    args = ["bwrap", *BASE_FLAGS]
    if not confinement.network:
        args.append("--unshare-net")
    args += _system_args()
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(confinement.tmp_bytes), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev", "--size", str(confinement.tmp_bytes), "--tmpfs", "/tmp"]
    for path in read_only:
        args += ["--ro-bind-try", str(path), str(path)]
    for path in writable:  # a root that does not exist (yet) is skipped, not an error
        args += ["--bind-try", str(path), str(path)]
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
                args += ["--bind-try", str(path), str(path)]
        args += ["--remount-ro", str(secret)]  # not recursive: the workspaces bound inside stay writable
    args += ["--chdir", str(cwd), "--", *argv]
    return args


def failure(stderr: bytes) -> str | None:
    """bwrap's own complaint when it could not set the sandbox up (it then exits 1 like a failed command)."""
    text = stderr.decode("utf-8", "replace")
    return text.strip()[:300] if text.startswith("bwrap: ") else None


@functools.lru_cache(maxsize=1)
def problem() -> str | None:
    """Why bwrap cannot confine commands on this machine, or None when it can (checked once per process)."""
    exe = shutil.which("bwrap", path=SAFE_PATH)
    if exe is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = command(["/bin/true"], Confinement(writable=()), Path("/"))
    try:
        done = subprocess.run(probe, capture_output=True, timeout=20, env={"PATH": SAFE_PATH})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not start ({exc})"
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()[:300]
        return f"bwrap cannot create a sandbox here ({detail or f'exit {done.returncode}'})"
    return None


def use(mode: SandboxMode, section: str) -> bool:
    """Whether to confine the next command: True when bwrap works, False for "off" or "auto" without it;
    "required" without a working bwrap is an error naming the fix."""
    if mode == "off":
        return False
    reason = problem()
    if reason is None:
        return True
    if mode == "required":
        raise UserError(f"[{section}] sandbox = \"required\" but {reason}; nothing was run. Install bubblewrap, "
                        f"or set [{section}] sandbox = \"auto\" to run without the OS sandbox.")
    return False


def warn_if_unconfined(mode: SandboxMode, section: str) -> None:
    """At startup: say once, in the server log, when [section]'s commands will run without the sandbox."""
    if mode == "auto" and problem() is not None:
        logging.getLogger(f"persmem.{section}").warning(
            "[%s] sandbox = auto: %s; commands run without the OS sandbox (persmem doctor)", section, problem())


def doctor_line(mode: SandboxMode, section: str):
    """A `persmem doctor` check for the plugin whose [section] has `sandbox = mode`."""
    from persmem_core.doctor import fail, pass_, warn

    name = f"{section} sandbox"
    if mode == "off":
        return warn(name, f"off ([{section}] sandbox = \"off\"): commands run without the OS sandbox, guarded "
                          "only by the path and option checks")
    reason = problem()
    if reason is None:
        return pass_(name, "bubblewrap: commands see only the workspace, read-only system folders, a private "
                           "/tmp and /proc, no persmem data")
    if mode == "required":
        return fail(name, f"{reason}; with sandbox = \"required\" every command is refused")
    return warn(name, f"{reason}; commands run without the OS sandbox (sandbox = \"auto\"), guarded only by "
                      "the path and option checks")
