"""Judging a whole argument vector against the allowlist, not just the program name.

A refusal names the rule that refused, so the assistant (and the operator reading the log) knows why and
what to change.
"""

from __future__ import annotations

import os
from pathlib import Path

from persmem_core import UserError

from .config import CommandRule
from .sandbox import Sandbox


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
    return rule


def check_paths(argv: list[str], sandbox: Sandbox, cwd: Path) -> None:
    """Every argument that names a path (absolute, with '..', or existing here) must resolve inside the
    workspace; so must a path attached to an option (--file=/x, -f/x)."""
    for arg in argv[1:]:
        if arg.startswith("-"):  # a path may hide in an option's value: --file=/x, -f/x
            value = arg.split("=", 1)[1] if "=" in arg else "" if arg.startswith("--") else arg[2:]
            candidates = [value] if "/" in value or ".." in value or value.startswith("~") else []
        else:
            candidates = [arg] if (os.path.isabs(arg) or ".." in arg.split("/") or arg.startswith("~")
                                   or os.path.lexists(cwd / arg)) else []
        for candidate in candidates:
            if candidate.startswith("~"):
                raise UserError(f"{arg!r}: '~' is not expanded (there is no shell); use a path in the workspace.")
            if "\x00" in candidate or not sandbox.contains(Path(os.path.realpath(cwd / candidate))):
                raise UserError(f"argument {arg!r} points outside the workspace ({sandbox.describe()}); "
                                "refused (rule: paths must stay in the workspace, symlinks followed).")
