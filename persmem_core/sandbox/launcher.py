"""The first step of a sandboxed command when the server runs as root: run as a script, standard library only,
one process, then it execs bwrap:

    python -I -S launcher.py UID GID BASE [--rw FOLDER | --ro FOLDER | --cgroup PROCS_FILE]... -- bwrap ...


bubblewrap run by root gives the command root's own kernel uid (a user namespace maps its uid onto the
caller's): it passes every permission check on root's files and /proc/sys, is exempt from RLIMIT_NPROC and
shares root's per-user kernel quotas. So the command must run as an unprivileged uid instead (65534), while
the workspace stays writable as root would write it. This script, still root, in order:

1. enters a mount namespace of its own (private: nothing it mounts is seen by the host, nothing is left
   behind if it dies);
2. mounts a small tmpfs on BASE (a folder any uid may enter) and under it, at BASE/0, BASE/1..., an
   **idmapped** copy of each --rw / --ro folder, in order: files root owns appear owned by the sandbox uid,
   and what the sandbox uid writes is written as root (read-only where asked). bwrap, now unprivileged,
   binds these copies at the folders' own paths; it could not reach the originals (/root is 0700);
3. puts itself in the command's cgroups (each --cgroup: memory and process limits for the whole command);
4. drops every group and capability: uid and gid become UID / GID;
5. execs the rest of its arguments (bwrap, which makes the user namespace and the rest of the sandbox).

A failure exits 125 with one line on stderr starting "persmem-sandbox: ", naming what failed.
"""

import ctypes
import os
import sys

FAILED = 125
PREFIX = "persmem-sandbox: "

# x86_64 and aarch64 share these numbers (the newer syscalls are numbered alike on every architecture).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV = 0x4000, 1 << 18, 2, 4
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, AT_EMPTY_PATH, AT_FDCWD = 1, 0o2000000, 0x8000, 0x1000, -100
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 0x1, 0x2, 0x4, 0x100000

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def fail(message: str) -> None:
    sys.stderr.write(PREFIX + message + "\n")
    sys.stderr.flush()
    os._exit(FAILED)


def checked(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        fail(f"{what}: {os.strerror(err)}")
    return result


def idmap_namespace(uid: int, gid: int) -> int:
    """A user namespace whose maps say "0 is `uid`" (and "0 is `gid`"), as a descriptor: the idmapping the
    workspace copies are mounted with. A forked child makes it; this process, root, writes its maps."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a fresh user namespace, then wait until the parent has opened it
        os.close(ready_r)
        os.close(done_w)
        ok = libc.unshare(CLONE_NEWUSER) == 0
        os.write(ready_w, b"1" if ok else b"0")
        os.read(done_r, 1)
        os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            fail("the kernel refused a user namespace for the idmapped workspace")
        for name, text in (("uid_map", f"0 {uid} 1\n"), ("setgroups", "deny"), ("gid_map", f"0 {gid} 1\n")):
            with open(f"/proc/{pid}/{name}", "w") as handle:
                handle.write(text)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(done_w)
        os.waitpid(pid, 0)
        os.close(ready_r)


def mount_copies(base: str, binds: list, uid: int, gid: int) -> None:
    """The idmapped copies of the folders in `binds` ([path, read_only]) at base/0, base/1..."""
    os.makedirs(base, mode=0o755, exist_ok=True)
    checked(libc.mount(b"tmpfs", base.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=64k"),
            f"mounting a tmpfs on {base}")
    if not binds:
        return
    userns = idmap_namespace(uid, gid)
    for number, (path, read_only) in enumerate(binds):
        tree = libc.syscall(SYS_OPEN_TREE, AT_FDCWD, path.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)
        checked(tree, f"copying the mount of {path}")
        flags = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if read_only else 0)
        attr = MountAttr(flags, 0, 0, userns)
        if libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE, ctypes.byref(attr),
                        ctypes.sizeof(attr)) < 0:
            err = ctypes.get_errno()
            fail(f"{path} cannot be mounted idmapped ({os.strerror(err)}): its file system does not support "
                 "idmapped mounts (ext4, xfs, btrfs and tmpfs do; NFS and most FUSE file systems do not)")
        target = f"{base}/{number}"
        os.mkdir(target, 0o755)
        checked(libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
                f"attaching the copy of {path}")
        os.close(tree)
    os.close(userns)


def parse(argv: list[str]) -> tuple[int, int, str, list, list[str], list[str]]:
    """(uid, gid, base, [[folder, read_only]...], [cgroup.procs files], command) from the command line."""
    if "--" not in argv or len(argv) < 4:
        fail("usage: sandbox/launcher.py UID GID BASE [--rw F | --ro F | --cgroup P]... -- COMMAND...")
    end = argv.index("--")
    options, command = argv[3:end], argv[end + 1:]
    binds, cgroups = [], []
    for flag, value in zip(options[0::2], options[1::2], strict=True):
        if flag == "--cgroup":
            cgroups.append(value)
        elif flag in ("--rw", "--ro"):
            binds.append([value, flag == "--ro"])
        else:
            fail(f"unknown option {flag}")
    return int(argv[0]), int(argv[1]), argv[2], binds, cgroups, command


def main(argv: list[str]) -> None:
    uid, gid, base, binds, cgroups, command = parse(argv)
    if uid == 0 or gid == 0 or not command:
        fail("the sandbox uid and gid must not be 0, and a command must follow --")
    checked(libc.unshare(CLONE_NEWNS), "a private mount namespace")
    checked(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the mounts private")
    mount_copies(base, binds, uid, gid)
    for procs in cgroups:
        try:
            with open(procs, "w") as handle:
                handle.write("0")
        except OSError as exc:
            fail(f"joining the command's cgroup {procs}: {exc.strerror}")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:  # pragma: no cover - setresuid raises rather than lies
        fail("could not drop root")
    try:
        os.execv(command[0], command)
    except OSError as exc:
        fail(f"{command[0]} could not be started: {exc.strerror}")


if __name__ == "__main__":
    main(sys.argv[1:])
