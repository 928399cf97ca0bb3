"""The git operations git_op offers, and exactly which options each accepts.

Options are an allowlist per operation, matched exactly: git accepts abbreviated long options
(`--upload-pac`), so anything not spelled out here, abbreviations included, is refused. A token that
starts with `-` is always an option, so a ref or path can never be smuggled in as one; paths go after
`--`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from persmem_core.sdk import UserError


@dataclass(frozen=True)
class Op:
    flags: frozenset[str] = frozenset()
    values: frozenset[str] = frozenset()  # options that take a value: --opt=v, --opt v, -xv, -x v
    positional: str = "revs"  # none | revs (revisions or paths) | paths | remote | names
    network: bool = False
    counts: bool = False  # accepts -<n> (log -5)
    doc: str = ""
    extra: dict = field(default_factory=dict)


def _f(*names: str) -> frozenset[str]:
    return frozenset(names)


OPS: dict[str, Op] = {
    "status": Op(_f("-s", "--short", "-b", "--branch", "--porcelain", "--long", "-v", "--ignored", "--no-renames"),
                 _f("--untracked-files", "-u", "--porcelain"), "paths", doc="working tree status"),
    "log": Op(_f("--oneline", "--stat", "--shortstat", "--numstat", "--graph", "--all", "--decorate", "--no-decorate",
                 "-p", "--patch", "--name-only", "--name-status", "--reverse", "--first-parent", "--no-merges",
                 "--merges", "--abbrev-commit", "--date-order", "--topo-order", "-i", "--follow"),
              _f("-n", "--max-count", "--since", "--until", "--after", "--before", "--author", "--committer", "--grep",
                 "--format", "--pretty", "--date", "--skip", "-S", "-G"), "revs", counts=True, doc="history"),
    "diff": Op(_f("--stat", "--shortstat", "--numstat", "--cached", "--staged", "--name-only", "--name-status", "-w",
                  "--ignore-all-space", "--ignore-space-change", "-b", "--word-diff", "--minimal", "--patience",
                  "--histogram", "--no-renames", "-R", "--summary", "--check"),
               _f("-U", "--unified", "--diff-filter"), "revs", doc="changes"),
    "show": Op(_f("--stat", "--name-only", "--name-status", "--oneline", "--shortstat", "--numstat", "--no-patch",
                  "-s", "--abbrev-commit"), _f("--format", "--pretty", "-U", "--unified"), "revs", doc="a commit or object"),
    "blame": Op(_f("-w", "-s", "-e", "-l"), _f("-L"), "revs", doc="who changed each line"),
    "rev-parse": Op(_f("--abbrev-ref", "--short", "--show-toplevel", "--is-inside-work-tree", "--verify"),
                    positional="revs", doc="resolve a revision"),
    "add": Op(_f("-A", "--all", "-u", "--update", "-N", "--intent-to-add", "-v", "--verbose", "--dry-run"),
              positional="paths", doc="stage files"),
    "restore": Op(_f("--staged", "--worktree", "-S", "-W"), _f("--source", "-s"), "paths", doc="restore files"),
    "commit": Op(_f("-a", "--all", "--amend", "--allow-empty", "--no-edit", "-q", "--quiet"), _f("-m", "--message"),
                 "paths", doc="record changes (author: the calling agent)"),
    "branch": Op(_f("-a", "--all", "-r", "--remotes", "-v", "-vv", "--list", "--show-current", "-d", "--delete", "-m",
                    "--move", "--merged", "--no-merged"), positional="names", doc="list, create, rename, delete branches"),
    "checkout": Op(_f("-b", "--detach", "-q", "--quiet"), positional="revs", doc="switch branches or restore files"),
    "switch": Op(_f("-c", "--create", "-d", "--detach", "-q", "--quiet"), positional="names", doc="switch branches"),
    "merge": Op(_f("--ff-only", "--no-ff", "--ff", "--abort", "--squash", "-q", "--no-edit"), _f("-m", "--message"),
                "names", doc="merge a branch"),
    "tag": Op(_f("-l", "--list", "-n"), positional="names", doc="list or create lightweight tags"),
    "remote": Op(_f("-v", "--verbose"), positional="none", doc="list remotes"),
    "init": Op(_f("-q", "--quiet"), _f("-b", "--initial-branch"), "none", doc="create a repository at repo_path"),
    "clone": Op(_f("--single-branch", "--no-tags", "-q", "--quiet"), _f("--depth", "--branch", "-b"), "none",
                network=True, doc="clone clone_url into repo_path (an allowed remote)"),
    "fetch": Op(_f("--all", "--prune", "-p", "--tags", "-q", "--quiet", "--dry-run"), _f("--depth"), "remote",
                network=True, doc="fetch from an allowed remote"),
    "pull": Op(_f("--ff-only", "--no-ff", "--ff", "--rebase", "--no-rebase", "-q", "--quiet", "--prune"),
               positional="remote", network=True, doc="fetch and merge from an allowed remote"),
    "push": Op(_f("-u", "--set-upstream", "--tags", "-q", "--quiet", "--dry-run", "-n"), positional="remote",
               network=True, doc="push to an allowed remote", extra={"force": _f("-f", "--force", "--force-with-lease")}),
}

COUNT_RE = re.compile(r"-\d{1,6}")


def parse(operation: str, tokens: list[str], allow_force: bool) -> tuple[list[str], list[str], list[str]]:
    """Split `tokens` into (options, positionals, paths-after-`--`), refusing anything not allowed."""
    op = OPS[operation]
    flags = op.flags | (op.extra.get("force", frozenset()) if allow_force else frozenset())
    options, positionals, paths = [], [], []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "--":
            paths = tokens[i:]
            break
        if not tok.startswith("-") or tok == "-":
            if tok == "-":
                raise UserError("'-' (standard input) is not available to git_op.")
            positionals.append(tok)
            continue
        name, eq, _ = tok.partition("=")
        attached = bool(eq) if name.startswith("--") else len(tok) > 2  # --opt=v, -n5 / -mMessage
        if tok in flags:
            options.append(tok)
        elif (name in op.values and (eq or name.startswith("--"))) or (
                tok[:2] in op.values and not tok.startswith("--")):
            if attached:
                options.append(tok)
            elif i < len(tokens):  # the value is the next word, whatever it looks like
                options += [tok, tokens[i]]
                i += 1
            else:
                raise UserError(f"option {tok} of git {operation} needs a value.")
        elif op.counts and COUNT_RE.fullmatch(tok):
            options.append(tok)
        else:
            forced = tok in op.extra.get("force", ())
            raise UserError(f"option {tok!r} is not allowed for git {operation}"
                            + (" (force push is off: [git] allow_force_push)" if forced else "")
                            + f". Allowed: {', '.join(sorted(flags | op.values)) or 'none'}.")
    if op.positional == "none" and (positionals or paths):
        raise UserError(f"git {operation} takes no arguments here (got {' '.join(positionals + paths)!r}).")
    return options, positionals, paths
