"""Where persmem keeps its config and data.

`$PERSMEM_HOME` if set, else `$XDG_DATA_HOME/persmem`, else
`~/.local/share/persmem`. The config file is `$PERSMEM_CONFIG` if set, else
`persmem.toml` inside the home. Each plugin owns one folder in the home.
"""

from __future__ import annotations

import os
from pathlib import Path


def home_dir(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("PERSMEM_HOME"):
        return Path(env["PERSMEM_HOME"]).expanduser()
    xdg = env.get("XDG_DATA_HOME") or str(Path("~/.local/share").expanduser())
    return Path(xdg).expanduser() / "persmem"


def config_path(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("PERSMEM_CONFIG"):
        return Path(env["PERSMEM_CONFIG"]).expanduser()
    return home_dir(env) / "persmem.toml"
