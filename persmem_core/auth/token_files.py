"""The agents' bearer tokens in files only the user can read, so setup lines work as pasted.

The registry (agents.py) keeps only hashes. A token is shown once when issued; a setup line holding a placeholder
registers a fake token when pasted as printed. So each token issued on this machine is also written to
`<home>/tokens/<agent>` (0600, in a 0700 folder), and `persmem connect` prints shell lines that read it
(`Bearer $(cat <file>)`); `persmem connect --show-token` prints the token itself for config files a shell does
not expand. A new token replaces the file; revoking the agent removes it.
"""

from __future__ import annotations

import os
from pathlib import Path

from persmem_core.fileio import atomic_write_bytes

FOLDER = "tokens"


def token_file(home: Path, agent: str) -> Path:
    return Path(home) / FOLDER / agent


def keep_token(home: Path, agent: str, token: str) -> Path:
    """Write `token` to the agent's token file (0600, its folder 0700); returns the file."""
    folder = Path(home) / FOLDER
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = token_file(home, agent)
    atomic_write_bytes(path, token.encode() + b"\n", mode=0o600)
    return path


def read_token(home: Path, agent: str) -> str | None:
    """The agent's kept token, or None when there is no file (issued before files were kept, or elsewhere)."""
    try:
        return token_file(home, agent).read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def forget_token(home: Path, agent: str) -> None:
    try:
        token_file(home, agent).unlink()
    except FileNotFoundError:
        pass
