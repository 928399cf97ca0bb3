"""git_op: persMEM's git tool (operation, repo_path, args, clone_url), hardened."""

from __future__ import annotations

import os
import pwd
import re
import shlex
from pathlib import Path

from persmem_core.sdk import CallContext, UserError, WORKSPACE, bubblewrap

from . import remotes
from .operations import OPS, parse
from .repo import inside, resolve_repo, vet_repository
from .runner import git_env, reader, run_git
from .service import service

NAME_RE = re.compile(r"[\w@+][\w./@{}~^:+-]*")
SUBMODULES_OFF = {"status": ["--ignore-submodules=all"], "diff": ["--ignore-submodules=all"]}


def git_op(operation: str, repo_path: str, args: str = "", clone_url: str = "", call: CallContext = None) -> dict:
    """Run one git operation on a workspace repository. operation: status, log, diff, show, blame, rev-parse,
    add, restore, commit, branch, checkout, switch, merge, tag, remote, init, clone, fetch, pull, push. args:
    its extra arguments as one string ("-n 5 --oneline", "-m 'Fix parser'", "-- src/app.py"; paths after --);
    a refused option lists the allowed ones. Commits are authored by you. clone: clone_url is the source,
    repo_path the new folder; only remotes the operator allowed. Returns stdout, stderr, returncode."""
    git = service(call.host)
    cfg = git.config
    if operation not in OPS:
        raise UserError(f"unknown operation {operation!r}; use one of: {', '.join(OPS)}.")
    if not isinstance(args, str) or "\x00" in args:
        raise UserError("args must be a string without NUL bytes.")
    try:
        tokens = shlex.split(args)
    except ValueError as exc:
        raise UserError(f"cannot split args into words ({exc}); check its quotes.") from None
    options, positionals, paths = parse(operation, tokens, cfg.allow_force_push)
    if clone_url and operation != "clone":
        raise UserError("clone_url is only for operation 'clone'.")
    with WORKSPACE.git(timeout=cfg.timeout):  # no agent command runs from the vetting to git's exit
        return _operate(git, operation, repo_path, clone_url, options, positionals, paths, call.agent)


def _operate(git, operation: str, repo_path: str, clone_url: str, options: list[str], positionals: list[str],
             paths: list[str], agent: str) -> dict:
    cfg, roots, home, hidden = git.config, git.roots, git.home, git.hidden
    op = OPS[operation]
    env = git_env(home, agent, cfg.authors, remotes.protocols(cfg.remotes))
    if operation == "clone":
        return _clone(cfg, roots, env, repo_path, clone_url, options, hidden)
    repo = resolve_repo(repo_path, roots, must_exist=operation != "init", hidden=hidden)
    if operation == "init":
        if (repo / ".git").exists():
            raise UserError(f"{repo} is already a git repository.")
        repo.mkdir(parents=True, exist_ok=True)
        return _finish(operation, repo, run_git(["init", *options], cwd=repo, env=env, safe_dir=repo,
                                                timeout=cfg.timeout, max_output=cfg.max_output_bytes,
                                                confinement=_confinement(cfg, roots, hidden)))
    gitdir, entries = vet_repository(repo, roots, reader(env, _confinement(cfg, roots, hidden), cfg.timeout))
    env |= {"GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(repo)}

    path_args = list(paths)
    for token in positionals:
        if op.positional == "paths" or (op.positional == "revs" and os.path.lexists(repo / token)):
            path_args.append(token)
        elif not NAME_RE.fullmatch(token):
            raise UserError(f"{token!r} is not a revision, branch or remote name git_op accepts; put paths after --.")
    for path in path_args:
        real = Path(os.path.realpath(repo / path))
        if not inside(real, [repo]) or "\x00" in path:
            raise UserError(f"path {path!r} is outside the repository; refused.")
    urls = []
    if op.network:
        urls = remotes.check(cfg.remotes, entries, operation, positionals, options, _branch(gitdir),
                             cfg.allow_force_push)
    confinement = _confinement(cfg, roots, hidden, op.network, push=operation == "push", urls=urls)
    env |= _ssh_env(confinement, urls)
    if operation == "commit" and not any(o.startswith(("-m", "--message")) for o in options) and "--no-edit" not in options:
        raise UserError("commit needs a message: args=\"-m 'what changed'\" (there is no editor here).")
    options = SUBMODULES_OFF.get(operation, []) + options
    if op.positional == "paths":
        argv = [operation, *options, "--", *positionals, *paths]
    else:
        argv = [operation, *options, *positionals] + (["--", *paths] if paths else [])
    return _finish(operation, repo, run_git(argv, cwd=repo, env=env, safe_dir=repo, timeout=cfg.timeout,
                                            max_output=cfg.max_output_bytes, confinement=confinement))


def _branch(gitdir: Path) -> str | None:
    """The checked-out branch (None when HEAD is detached or unreadable)."""
    try:
        head = (gitdir / "HEAD").read_text(errors="replace").strip()
    except OSError:
        return None
    return head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") else None


def _confinement(cfg, roots: list[Path], hidden: list[Path], network: bool = False, push: bool = False,
                 urls: list[str] = ()) -> bubblewrap.Confinement | None:
    """What git may reach in the sandbox: the roots; local remotes (read-only, writable for push); the server
    user's ~/.ssh read-only only when a remote it will reach is an ssh one (keys and known_hosts)."""
    if not bubblewrap.use(cfg.sandbox, "git"):
        return None
    local = [Path(os.path.realpath(r.removeprefix("file://"))) for r in cfg.remotes if r.startswith(("/", "file://"))]
    writable, read_only = list(roots), []
    if network:
        (writable if push else read_only).extend(local)
        if any(remotes.is_ssh(url) for url in urls):
            read_only.append(_ssh_folder())
    mb = 1024 * 1024
    limits = bubblewrap.Limits(memory_bytes=cfg.max_memory_mb * mb, min_free_disk_bytes=cfg.min_free_disk_mb * mb,
                               section="git")
    return bubblewrap.Confinement(writable=tuple(writable), read_only=tuple(read_only), hidden=tuple(hidden),
                                  network=network, limits=limits)


def _ssh_folder() -> Path:
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"  # where ssh looks, whatever HOME says


def _ssh_env(confinement: bubblewrap.Confinement | None, urls: list[str]) -> dict[str, str]:
    """For an ssh remote in the sandbox: ssh told where the server user's keys, known_hosts and config are (as
    root the sandbox runs as another uid, whose home is not root's), in batch mode (it never prompts)."""
    folder = _ssh_folder()
    if confinement is None or folder not in confinement.read_only or not any(remotes.is_ssh(u) for u in urls):
        return {}
    config = folder / "config"
    argv = ["ssh", "-o", "BatchMode=yes", "-F", str(config) if config.is_file() else "/dev/null",
            "-o", f"UserKnownHostsFile={folder / 'known_hosts'}"]
    for key in sorted(folder.glob("id_*")):
        if not key.name.endswith(".pub"):
            argv += ["-o", f"IdentityFile={key}"]
    return {"GIT_SSH_COMMAND": shlex.join(argv)}


def _clone(cfg, roots, env, repo_path: str, clone_url: str, options: list[str], hidden: list[Path]) -> dict:
    if not isinstance(clone_url, str) or not clone_url.strip():
        raise UserError("clone needs clone_url (the source) and repo_path (the new folder).")
    if clone_url.startswith("-") or "::" in clone_url or "\x00" in clone_url:
        raise UserError(f"clone_url {clone_url!r} is not a URL git_op accepts.")
    if not cfg.remotes or not remotes.allowed(clone_url, cfg.remotes):
        raise UserError(f"clone_url {clone_url!r} is not an allowed remote ([git] remotes: "
                        f"{', '.join(cfg.remotes) or 'none'}; URLs are compared after decoding %-escapes and "
                        "applying '..').")
    dest = resolve_repo(repo_path, roots, must_exist=False, hidden=hidden)
    if dest.exists() and any(dest.iterdir()):
        raise UserError(f"{dest} exists and is not empty; clone into a new folder.")
    root = next(r for r in roots if inside(dest, [r]))
    if dest != root:
        dest.parent.mkdir(parents=True, exist_ok=True)
    confinement = _confinement(cfg, roots, hidden, network=True, urls=[clone_url])
    env |= _ssh_env(confinement, [clone_url])
    result = run_git(["clone", *options, "--", clone_url, str(dest)], cwd=root, env=env, safe_dir=dest,
                     timeout=cfg.timeout, max_output=cfg.max_output_bytes, confinement=confinement)
    return _finish("clone", dest, result)


def _finish(operation: str, repo: Path, result: dict) -> dict:
    if result["returncode"] != 0 and not result.get("truncated"):
        message = (result["stderr"].strip() or result["stdout"].strip())[-2000:]
        raise UserError(f"git {operation} failed (exit {result['returncode']}): {message}")
    return {"operation": operation, "repo": str(repo), **result}
