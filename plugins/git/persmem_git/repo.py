"""Finding and vetting the repository a call names, and every repository git could enter from it.

- the path must resolve inside a configured root (symlinks followed, components compared);
- `.git` must be a folder inside the roots, or a `gitdir:` file pointing inside the roots;
- everything else git reads to find the repository's data must be inside the roots too: the `commondir`
  of a linked worktree (where its config, refs and objects live) and every `objects/info/alternates` entry
  (other object stores), followed as git follows them;
- no config file git will read for the repository may set a key that runs a program or redirects git
  (core.fsmonitor, core.sshCommand, filter drivers, aliases, includes, url rewrites...): such a repository
  is refused with the key and the file named, rather than trusted to be overridden. Which files git reads
  is asked of git itself (`git config --list --show-origin`, run as the operation will run), so a config
  source this module does not know about (a worktree config, an include) is vetted all the same;
- a repository nested inside it (a submodule or an embedded repository, i.e. a gitlink in the index)
  is vetted the same way before any operation, because status, diff and add can run git inside it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from persmem_core.sdk import UserError

DANGEROUS_KEY = re.compile(
    r"^(core\.(fsmonitor|sshcommand|hookspath|pager|editor|askpass|gitproxy|alternaterefscommand|worktree)"
    r"|filter\..+\.(clean|smudge|process)|diff\..+\.(textconv|command)|merge\..+\.driver"
    r"|credential(\..+)?\.helper|include\.path|includeif\..+\.path|alias\..+|sequence\.editor"
    r"|gpg(\..+)?\.program|uploadpack\..+|receive\..+|remote\..+\.(uploadpack|receivepack|proxy|vcs)"
    r"|http(\..+)?\.proxy|ssh\.variant|protocol\..+|url\..+\.(insteadof|pushinsteadof)"
    r"|pager\..+|difftool\..+|mergetool\..+|diff\.external|diff\.tool|merge\.tool|web\.browser|browser\..+\.(cmd|path)"
    r"|submodule\..+\.update|core\.attributesfile|gpg\..+command|trace2\..+)$")
# Keys whose value is a file git reads (or writes): allowed only when the file is inside the roots.
PATH_KEY = re.compile(
    r"^(core\.excludesfile|blame\.ignorerevsfile|commit\.template|mailmap\.file"
    r"|gpg\.ssh\.(allowedsignersfile|revocationfile)|http(\..+)?\.(sslcert|sslkey|sslcainfo|sslcapath|cookiefile))$")
# Keys that choose where fetch/pull/push go: each must name a configured remote, not a URL or path.
REMOTE_CHOICE_KEY = re.compile(r"^(branch\..+\.(remote|pushremote)|remote\.pushdefault)$")
# git run for reading, as the operation will run it (hardened, in the sandbox): (args, work tree, git dir) ->
# (exit code, stdout, stderr). Reading the index can start core.fsmonitor, so never plain git.
GitReader = Callable[[list[str], Path, Path], tuple[int, bytes, str]]
MAX_ALTERNATES_DEPTH = 5  # git's own limit for chained alternates
MAX_NESTING = 3  # repositories inside repositories inside repositories


def inside(real: Path, roots: list[Path]) -> bool:
    return any(real == r or real.is_relative_to(r) for r in roots)


def _shown(roots: list[Path]) -> str:
    return ", ".join(map(str, roots))


def resolve_repo(repo_path: str, roots: list[Path], must_exist: bool = True, hidden: list[Path] = ()) -> Path:
    """The real folder `repo_path` names, inside the roots. `hidden` (persmem's own data and config) is never
    a repository's folder nor inside one's work tree, even under a root: git would read it into commits."""
    if not isinstance(repo_path, str) or not repo_path.strip():
        raise UserError(f"repo_path is empty; pass a repository folder under {_shown(roots)}.")
    if "\x00" in repo_path:
        raise UserError("repo_path contains a NUL byte.")
    if len(repo_path.encode("utf-8", "surrogateescape")) > 4095 or any(
            len(part.encode("utf-8", "surrogateescape")) > 255 for part in repo_path.split("/")):
        raise UserError("repo_path is too long (at most 255 bytes per name and 4,095 in all); use a shorter path.")
    joined = Path(repo_path) if os.path.isabs(repo_path) else roots[0] / repo_path
    real = Path(os.path.realpath(joined))
    if not inside(real, roots):
        raise UserError(f"{repo_path!r} is outside the git roots ({_shown(roots)}); refused.")
    for secret in map(Path, map(os.path.realpath, hidden)):
        holding_root = [r for r in roots if inside(real, [r])]
        if (inside(real, [secret]) and not any(inside(r, [secret]) and r != secret for r in holding_root)) or \
                secret.is_relative_to(real):
            raise UserError(f"{real} holds or is inside persmem's own data ({secret}); git_op will not work there. "
                            "Keep repositories in a workspace beside the data folder.")
    if must_exist and not real.is_dir():
        raise UserError(f"{repo_path!r} is not a folder (looked for {real}).")
    return real


def git_dir(repo: Path, roots: list[Path]) -> Path:
    dot = repo / ".git"
    if dot.is_file():
        text = dot.read_text(errors="replace").strip()
        if not text.startswith("gitdir:"):
            raise UserError(f"{dot} is a file but not a 'gitdir:' pointer; refused.")
        target = Path(os.path.realpath(repo / text[len("gitdir:"):].strip()))
    elif dot.is_dir():
        target = Path(os.path.realpath(dot))
    else:
        raise UserError(f"{repo} is not a git repository (no .git); use operation 'init' or 'clone' to make one.")
    if not inside(target, roots):
        raise UserError(f"{repo}/.git points to {target}, outside the git roots; refused.")
    return target


def common_dir(gitdir: Path, roots: list[Path]) -> Path:
    """Where the repository's config, refs and objects live: `gitdir`, or what its `commondir` file names
    (a linked worktree), which must be inside the roots."""
    pointer = gitdir / "commondir"
    if not os.path.lexists(pointer):
        return gitdir
    text = pointer.read_text(errors="replace").strip()
    target = Path(os.path.realpath(gitdir / text))
    if not inside(target, roots):
        raise UserError(f"{pointer} points to {target}, outside the git roots; persmem will not operate on this "
                        "repository (its config, branches and objects would be another repository's).")
    return target


def check_alternates(objects: Path, roots: list[Path], depth: int = 0) -> None:
    """Every object store the repository borrows from (objects/info/alternates, chained) is inside the roots."""
    listing = objects / "info" / "alternates"
    if not os.path.lexists(listing):
        return
    if depth >= MAX_ALTERNATES_DEPTH:
        raise UserError(f"{listing}: alternates chained more than {MAX_ALTERNATES_DEPTH} deep; refused.")
    for line in listing.read_text(errors="replace").splitlines():
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        if entry.startswith('"'):
            raise UserError(f"{listing} has a quoted entry ({entry[:80]!r}); persmem does not accept those.")
        target = Path(os.path.realpath(objects / entry))
        if not inside(target, roots):
            raise UserError(f"{listing} points to {target}, outside the git roots; persmem will not operate on "
                            "this repository (it would read another repository's objects).")
        check_alternates(target, roots, depth + 1)


def config_entries(repo: Path, gitdir: Path, git: GitReader) -> list[tuple[str, str, str]]:
    """(origin, key, value) of every config entry git reads for this repository, asked of git run as the
    operation will run (system and global config off), includes and worktree config followed."""
    code, out, err = git(["config", "--list", "--show-origin", "--null"], repo, gitdir)
    if code != 0:
        raise UserError(f"git cannot read this repository's config ({err.strip()[:500]}); refused.")
    fields = out.decode(errors="replace").split("\0")
    entries = []
    for origin, item in zip(fields[0::2], fields[1::2], strict=False):
        key, _, value = item.partition("\n")
        entries.append((origin, key, value))
    return entries


def vet_config(entries: list[tuple[str, str, str]], roots: list[Path], repo: Path) -> None:
    for origin, key, value in entries:
        if origin.startswith("command line:"):
            continue  # persmem's own -c overrides
        where = origin.removeprefix("file:")
        if not origin.startswith("file:") or not inside(Path(os.path.realpath(where)), roots):
            raise UserError(f"git would read config from {where}, outside the git roots; persmem will not "
                            "operate on this repository.")
        if key.lower() == "core.worktree" and Path(os.path.realpath(Path(where).parent / value)) == repo:
            continue  # a checked-out submodule's config names its own work tree (git_op sets the same one)
        if DANGEROUS_KEY.match(key.lower()):
            raise UserError(f"this repository's git config ({where}) sets {key}, which can run a program or "
                            f"redirect git; persmem will not operate on it. If you trust it, remove the key "
                            f"(git config --unset {key}) yourself.")
        if PATH_KEY.match(key.lower()):
            bases = [repo, Path(where).parent]  # git reads a relative name from the work tree or the git dir
            if value.startswith("~") or not all(inside(Path(os.path.realpath(b / value)), roots) for b in bases):
                raise UserError(f"this repository's git config ({where}) sets {key} = {value[:200]!r}, a file "
                                "outside the git roots; persmem will not operate on it. Remove the key "
                                f"(git config --unset {key}) or point it inside the repository.")
        if key.lower().startswith("http") and key.lower().endswith(".sslverify") and value.lower() in (
                "false", "no", "off", "0", ""):
            raise UserError(f"this repository's git config ({where}) turns TLS verification off ({key}); persmem "
                            "will not operate on it.")


def nested_repositories(repo: Path, gitdir: Path, git: GitReader) -> list[Path]:
    """Folders of the gitlinks in the index (submodules and embedded repositories) that hold a `.git`."""
    code, out, _ = git(["ls-files", "--stage", "-z"], repo, gitdir)
    if code != 0:
        return []  # no index yet, or one git cannot read: the operation itself will say so
    nested = []
    for record in out.split(b"\0"):
        if record.startswith(b"160000 "):
            path = repo / os.fsdecode(record.split(b"\t", 1)[1])
            if os.path.lexists(path / ".git"):
                nested.append(path)
    return nested


def vet_repository(repo: Path, roots: list[Path], git: GitReader, depth: int = 0) -> tuple[Path, list]:
    """Vet `repo` and every repository nested in it; return its git dir and its config entries."""
    gitdir = git_dir(repo, roots)
    common = common_dir(gitdir, roots)
    check_alternates(common / "objects", roots)
    entries = config_entries(repo, gitdir, git)
    vet_config(entries, roots, repo)
    for nested in nested_repositories(repo, gitdir, git):
        if depth + 1 > MAX_NESTING:
            raise UserError(f"{nested} is a repository nested more than {MAX_NESTING} deep; refused.")
        try:
            vet_repository(Path(os.path.realpath(nested)), roots, git, depth + 1)
        except UserError as exc:
            raise UserError(f"nested repository {nested.relative_to(repo)} (a submodule git may enter): {exc}") from None
    return gitdir, entries


def remote_urls(entries: list[tuple[str, str, str]], name: str | None = None) -> list[str]:
    urls = []
    for _, key, value in entries:
        parts = key.split(".")
        if parts[0].lower() == "remote" and parts[-1].lower() in ("url", "pushurl") and (
                name is None or ".".join(parts[1:-1]) == name):
            urls.append(value)
    return urls
