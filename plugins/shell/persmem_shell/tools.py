"""The workspace tools: persMEM's names, argument names and defaults.

Everything happens inside the [workspace] roots (`persmem doctor` prints them, with the command
allowlist). Paths may be relative (to the first root) or absolute inside a root.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from persmem_core.sdk import CallContext, UserError, WORKSPACE, bubblewrap

from . import files
from .allowlist import check_paths, check_size, judge, with_forced_options
from .runner import run
from .sandbox import refuse_git_folder
from .service import service


def shell_exec(command: str, workdir: str = "", timeout: float = 30, call: CallContext = None) -> dict:
    """Run one allowlisted command in the workspace, without a shell: `command` is split into words like a shell
    would, but pipes, `;`, `$(...)`, redirections and globs are passed as plain text. Refused options name the
    rule. workdir: a folder in the workspace ("" = its root). timeout: seconds. Where possible it runs sandboxed
    (workspace only, no network, limits; `note` says which was hit). Returns stdout, stderr, returncode."""
    shell = service(call.host)
    config, sandbox = shell.config, shell.sandbox
    if not isinstance(command, str) or not command.strip():
        raise UserError("command is empty; for example: ls -la")
    if "\x00" in command:
        raise UserError("command contains a NUL byte.")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UserError(f"cannot split the command into words ({exc}); check its quotes.") from None
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise UserError("timeout must be a positive number of seconds.")
    if timeout > config.max_timeout:
        raise UserError(f"timeout {timeout:g} s is over the limit of {config.max_timeout:g} s ([shell] max_timeout).")
    cwd = sandbox.resolve(workdir) if workdir else sandbox.home
    if not cwd.is_dir():
        raise UserError(f"workdir {workdir!r} is not a folder.")
    refuse_git_folder(cwd, sandbox, workdir or str(cwd))
    judge(argv, config.effective_allow())
    check_size(argv)
    check_paths(argv, sandbox, cwd)
    confinement = None
    if bubblewrap.use(config.sandbox, "shell"):
        confinement = bubblewrap.Confinement(
            writable=tuple(sandbox.roots), hidden=tuple(sandbox.hidden),
            read_only=tuple(Path(p) for p in config.sandbox_read_only), tmp_bytes=config.tmp_max_bytes,
            limits=config.limits())
    elif sandbox.exposed():
        raise UserError(f"the workspace {', '.join(map(str, sandbox.exposed()))} contains persmem's own data "
                        "folder, and without the OS sandbox a command that walks folders (grep -r, find) would "
                        "read it; nothing was run. Install bubblewrap ([shell] sandbox), or use a workspace "
                        "beside the data folder.")
    with WORKSPACE.command(timeout=float(timeout)):  # git_op vets and runs git while no command runs
        result = run(with_forced_options(argv), cwd, sandbox.home, float(timeout), config.max_output_bytes,
                     confinement, tmp_folder=shell.tmp_folder)
    return result | {"workdir": str(cwd), "sandboxed": confinement is not None}


def file_read(path: str, start_line: int = 0, end_line: int = 0, call: CallContext = None) -> dict:
    """Read a text file in the workspace, whole or lines start_line..end_line (1-based, inclusive; 0 = open end).
    Returns content and total_lines. Large files: ask for a line range."""
    shell = service(call.host)
    return files.read(shell.sandbox, path, start_line, end_line, shell.config.max_read_bytes)


def file_write(path: str, content: str, mkdir: bool = True, call: CallContext = None) -> dict:
    """Create or overwrite a file in the workspace with `content` (atomic: readers see the old or the new file,
    never half; durable on return). A symbolic link at `path` is replaced, never followed. `mkdir` creates
    missing folders."""
    shell = service(call.host)
    return files.write(shell.sandbox, path, content, mkdir, shell.config.max_write_bytes)


def file_patch(path: str, old_text: str, new_text: str = "", call: CallContext = None) -> dict:
    """Replace `old_text` with `new_text` in a file, only if `old_text` appears exactly once (else nothing
    changes and the error says whether it was missing or ambiguous). Returns the diff of the change."""
    shell = service(call.host)
    return files.patch(shell.sandbox, path, old_text, new_text, shell.config.max_read_bytes)


def diff_generate(path_a: str = "", path_b: str = "", content_a: str = "", content_b: str = "",
                  context_lines: int = 3, call: CallContext = None) -> dict:
    """Unified diff of two files, a file against new content (path_a + content_b), or two strings."""
    shell = service(call.host)
    return files.diff(shell.sandbox, path_a, path_b, content_a, content_b, context_lines, shell.config.max_read_bytes)


ALL_TOOLS = [shell_exec, file_read, file_write, file_patch, diff_generate]
