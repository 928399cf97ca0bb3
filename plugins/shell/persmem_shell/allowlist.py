"""Judging a whole argument vector against the allowlist, not just the program name.

A refusal names the rule that refused, so the assistant (and the operator reading the log) knows why and
what to change.

Besides the operator's rules, some knowledge of programs always applies, whatever the allowlist says:
options that make a program open files whose names it reads from another file (`sort --files0-from=LIST`,
`file -f LIST`, `sha256sum -c SUMS`) are refused, because no check of the command line can see those names;
and `diff` never follows symbolic links (`--no-dereference` is added), so a link that came in with a clone
cannot take `diff -r` outside the workspace.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from persmem_core.sdk import UserError

from .config import CommandRule
from .sandbox import Sandbox, check_length, real_path, refuse_git_folder


# Options that read the names of further files to open from a file (or stdin), per program.
NAMES_FROM_FILE: dict[str, tuple[str, ...]] = {
    "sort": ("--files0-from",), "wc": ("--files0-from",), "du": ("--files0-from",),
    "find": ("-files0-from",), "file": ("-f", "--files-from"),
    "sha1sum": ("-c", "--check"), "sha224sum": ("-c", "--check"), "sha256sum": ("-c", "--check"),
    "sha384sum": ("-c", "--check"), "sha512sum": ("-c", "--check"), "md5sum": ("-c", "--check"),
    "b2sum": ("-c", "--check"), "cksum": ("-c", "--check"),
    "tar": ("-T", "--files-from"), "cpio": ("-E", "--pattern-file"), "rsync": ("--files-from",),
    "xargs": ("-a", "--arg-file"), "zip": ("-@", "--names-stdin"), "ctags": ("-L",), "tree": ("--fromfile",),
}
# Options added to every call of a program so it cannot leave the workspace through a link.
FORCED_OPTIONS: dict[str, tuple[str, ...]] = {"diff": ("--no-dereference",)}
MAX_ARG_BYTES = 131_072  # Linux refuses one argument longer than this (MAX_ARG_STRLEN): E2BIG
MAX_ARGV_BYTES = 1_000_000  # well under the kernel's total for arguments and environment


def _denied(arg: str, denied: str) -> bool:
    if arg == denied:
        return True
    if denied.startswith("--"):  # GNU long options may be abbreviated: --compress-prog, --comp ...
        name = arg.split("=", 1)[0]
        return name.startswith("--") and len(name) > 2 and denied.startswith(name)
    if len(denied) == 2 and arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
        cluster = arg[1:]  # -ofile (value attached) or -uo (several flags in one argument)
        return cluster[0] == denied[1] or (cluster.isalpha() and denied[1] in cluster)
    return False  # words like find's -exec match exactly


def judge(argv: list[str], rules: dict[str, CommandRule]) -> CommandRule:
    """Return the rule that allows `argv`, or raise UserError naming the rule that refuses it."""
    program = argv[0]
    allowed = ", ".join(sorted(rules))
    if "/" in program or program in (".", ".."):
        raise UserError(f"give the program by name, not a path ({program!r}); allowed programs: {allowed}.")
    rule = rules.get(program)
    if rule is None:
        raise UserError(f"{program!r} is not in the shell allowlist (rule: only listed programs run). Allowed: "
                        f"{allowed}. An operator can add it with [shell.extra_allow] in persmem.toml.")
    if rule.deny_any:
        raise UserError(f"{program!r} is listed but refused by its rule (deny_any).")
    args = argv[1:]
    if len(args) > rule.max_args:
        raise UserError(f"{program} with {len(args)} arguments: its rule allows at most {rule.max_args}.")
    if rule.subcommands is not None:
        sub = next((a for a in args if not a.startswith("-")), None)
        if sub not in rule.subcommands:
            raise UserError(f"{program} {sub or '(no subcommand)'}: the rule for {program} allows only the "
                            f"subcommands {', '.join(rule.subcommands)}.")
    for arg in args:
        for denied in rule.deny:
            if _denied(arg, denied):
                raise UserError(f"{program} {arg!r} is refused: the rule for {program} denies {denied} "
                                "(it can run other programs, write files or leave the workspace).")
        for denied in NAMES_FROM_FILE.get(program, ()):
            if _denied(arg, denied):
                raise UserError(f"{program} {arg!r} is refused: {denied} makes {program} open files named inside "
                                "another file, which the workspace check cannot see. Name the files as arguments "
                                "instead.")
    return rule


def with_forced_options(argv: list[str]) -> list[str]:
    """`argv` with the options every call of its program gets (diff --no-dereference)."""
    forced = [opt for opt in FORCED_OPTIONS.get(argv[0], ()) if opt not in argv]
    return [argv[0], *forced, *argv[1:]] if forced else argv


def check_size(argv: list[str]) -> None:
    """Refuse what the kernel would refuse with E2BIG, with the limit and the way around it."""
    for i, arg in enumerate(argv):
        size = len(arg.encode("utf-8", "surrogateescape"))
        if size > MAX_ARG_BYTES:
            raise UserError(f"argument {i} is {size:,} bytes; Linux accepts at most {MAX_ARG_BYTES:,} bytes per "
                            "argument. Write long text to a file (file_write) and pass the file's name.")
    total = sum(len(arg.encode("utf-8", "surrogateescape")) + 1 for arg in argv)
    if total > MAX_ARGV_BYTES:
        raise UserError(f"the command is {total:,} bytes long; at most {MAX_ARGV_BYTES:,}. Write long input to a "
                        "file (file_write) and pass the file's name.")


def check_paths(argv: list[str], sandbox: Sandbox, cwd: Path) -> None:
    """Every argument that may name a path (with a '/', '..', or existing here) must resolve inside the
    workspace, symlinks followed, also through a folder that does not exist yet (`sub/new` where `sub` links
    outside); so must a path attached to an option (--file=/x, -f/x). A path to a device, FIFO or socket is
    refused: reading one never ends (/dev/zero) or waits forever."""
    for arg in argv[1:]:
        if arg.startswith("-"):  # a path may hide in an option's value: --file=/x, -f/x, --file=link
            value = arg.split("=", 1)[1] if "=" in arg else "" if arg.startswith("--") else arg[2:]
            candidates = [value] if ("/" in value or ".." in value or value.startswith("~")
                                     or (value and os.path.lexists(cwd / value))) else []
        else:
            candidates = [arg] if ("/" in arg or arg == ".." or arg.startswith("~")
                                   or os.path.lexists(cwd / arg)) else []
        for candidate in candidates:
            if candidate.startswith("~"):
                raise UserError(f"{arg!r}: '~' is not expanded (there is no shell); use a path in the workspace.")
            check_length(candidate)
            real = real_path(cwd / candidate)
            if "\x00" in candidate or not sandbox.contains(real):
                raise UserError(f"argument {arg!r} points outside the workspace ({sandbox.describe()}); "
                                "refused (rule: paths must stay in the workspace, symlinks followed).")
            refuse_git_folder(real, sandbox, arg)
            try:
                mode = os.stat(real).st_mode
            except OSError:
                continue  # does not exist (yet): nothing to read
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise UserError(f"argument {arg!r} is a device, FIFO or socket, not a file or folder; refused "
                                "(reading one may never end).")
