"""The `persmem` command line a user can type to run this same persmem, for every next step the CLI prints.

After the README's install (`python3 -m venv .venv && .venv/bin/pip install ...`) the `persmem` script sits in
.venv/bin, which is not on PATH unless the venv is activated: "run `persmem connect kite`" then fails with
"command not found". So a printed next step names `persmem` only when that word runs this very script, and
the script's absolute path otherwise. Client configs (Claude Desktop, `claude mcp add ... -- COMMAND`) always
get the absolute path: the client starts it with its own PATH, not the user's shell's.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def _running_script() -> Path | None:
    """The `persmem` console script behind this process: argv[0] when it is that script, else (for
    `python -m persmem_core`) the one installed next to this interpreter, which runs the same install."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and Path(argv0).name == "persmem" and os.path.isfile(argv0):
        return Path(os.path.abspath(argv0))
    sibling = Path(sys.executable).parent / "persmem"
    return sibling if sibling.is_file() else None


def _is_on_path(script: Path) -> bool:
    found = shutil.which("persmem")
    try:
        return found is not None and os.path.samefile(found, script)
    except OSError:
        return False


def persmem_argv(*, absolute: bool = False) -> list[str]:
    """The words that start this persmem: ["persmem"] when PATH finds this same script (and not `absolute`),
    its absolute path otherwise, or `python -m persmem_core` with this interpreter when no script exists."""
    script = _running_script()
    if script is None:
        return [sys.executable, "-m", "persmem_core"]
    if not absolute and _is_on_path(script):
        return ["persmem"]
    return [str(script)]


def persmem_line(*args: str) -> str:
    """`persmem ARGS...` as a shell line safe to paste (each word quoted where it needs to be)."""
    return shlex.join([*persmem_argv(), *args])


def python_line(*args: str) -> str:
    """`PYTHON ARGS...` with the interpreter that runs persmem (its venv's), e.g. python_line("-m", "pytest")."""
    return shlex.join([sys.executable, *args])
