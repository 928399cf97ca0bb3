"""A cgroup per sandboxed command, where the server may make one (as root): a memory limit and a process limit
for the command and everything it starts together, which per-process rlimits cannot give (a fork bomb of
processes each under RLIMIT_AS still fills the box's memory).

cgroup v2 (a unified hierarchy with the memory and pids controllers) is used when there is one, else the v1
memory and pids hierarchies. The command's cgroup is `persmem-sandbox/<server pid>-<n>` (v2) or
`persmem-sandbox-<server pid>-<n>` in each v1 hierarchy; the launcher joins it (sandbox/launcher.py) and it is
removed when the command ends, every process left in it killed first. Leftovers of a server that died are
removed at the next command.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "persmem-sandbox"
_numbers = itertools.count(1)


@dataclass
class CommandCgroup:
    """The cgroup folders of one command (one per hierarchy) and the cgroup.procs files the launcher joins."""

    folders: list[Path] = field(default_factory=list)

    @property
    def procs(self) -> list[str]:
        return [str(folder / "cgroup.procs") for folder in self.folders]

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of the command for going over the memory limit."""
        for folder in self.folders:
            for name in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError):
                    for line in (folder / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and value.strip() not in ("", "0"):
                            return True
        return False


@dataclass(frozen=True)
class Hierarchies:
    version: int  # 2, or 1
    memory: Path  # where the command's cgroups are made (v2: <unified>/persmem-sandbox)
    pids: Path


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, super options) of every cgroup mount."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields = right.split()
            if len(fields) >= 3 and fields[0] in ("cgroup", "cgroup2"):
                found.append((left.split()[4], fields[0], set(fields[2].split(","))))
    return found


@functools.lru_cache(maxsize=1)
def hierarchies() -> Hierarchies | None:
    """Where command cgroups can be made with memory and pids limits, or None (not root, no such controllers,
    or a read-only cgroup file system)."""
    if os.geteuid() != 0:
        return None
    mounts = _mounts()
    for point, kind, _ in mounts:
        if kind != "cgroup2":
            continue
        root = Path(point)
        try:
            if not {"memory", "pids"} <= set((root / "cgroup.controllers").read_text().split()):
                continue
            parent = root / PREFIX
            parent.mkdir(mode=0o755, exist_ok=True)
            (root / "cgroup.subtree_control").write_text("+memory +pids")
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            continue
        return Hierarchies(2, parent, parent)
    by_controller = {}
    for point, kind, options in mounts:
        for controller in ("memory", "pids"):
            if kind == "cgroup" and controller in options and os.access(point, os.W_OK):
                by_controller.setdefault(controller, Path(point))
    if len(by_controller) == 2:
        return Hierarchies(1, by_controller["memory"], by_controller["pids"])
    return None


def _write(path: Path, value: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # memory.swap.max or memsw: absent when swap accounting is off
        path.write_text(value)


def _remove(folder: Path) -> None:
    """Kill whatever is left in `folder` and remove it."""
    for _ in range(50):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            pass
        with contextlib.suppress(OSError):
            (folder / "cgroup.kill").write_text("1")  # v2, kernel 5.14+
        with contextlib.suppress(OSError):
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.02)


def _sweep(where: Hierarchies) -> None:
    """Remove the command cgroups of servers that are no longer running."""
    for parent, pattern in ((where.memory, f"{PREFIX}-*" if where.version == 1 else "*"),
                            (where.pids, f"{PREFIX}-*" if where.version == 1 else "*")):
        with contextlib.suppress(OSError):
            for folder in parent.glob(pattern):
                owner = folder.name.removeprefix(f"{PREFIX}-").split("-")[0]
                if folder.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                    _remove(folder)


@contextlib.contextmanager
def command_cgroup(memory_bytes: int, processes: int) -> Iterator[CommandCgroup]:
    """A cgroup limiting a command to `memory_bytes` of memory (no swap) and `processes` tasks, removed after;
    an empty CommandCgroup where cgroups are not available."""
    where = hierarchies()
    group = CommandCgroup()
    if where is None:
        yield group
        return
    number = next(_numbers)
    name = f"{os.getpid()}-{number}"
    if number % 50 == 1:
        _sweep(where)
    try:
        if where.version == 2:
            folder = where.memory / name
            folder.mkdir(mode=0o755)
            group.folders.append(folder)
            _write(folder / "memory.max", str(memory_bytes))
            _write(folder / "memory.swap.max", "0")
            _write(folder / "pids.max", str(processes))
        else:
            memory = where.memory / f"{PREFIX}-{name}"
            memory.mkdir(mode=0o755)
            group.folders.append(memory)
            _write(memory / "memory.limit_in_bytes", str(memory_bytes))
            _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))
            pids = where.pids / f"{PREFIX}-{name}"
            pids.mkdir(mode=0o755)
            group.folders.append(pids)
            _write(pids / "pids.max", str(processes))
    except OSError:
        for folder in group.folders:
            _remove(folder)
        group = CommandCgroup()  # a limit that cannot be set up leaves the rlimits alone in charge
    try:
        yield group
    finally:
        for folder in group.folders:
            _remove(folder)
