"""The Chorus extension as each browser loads it: `built_extension("chromium")` or `built_extension("firefox")`.

extension/build.mjs runs once per test session, into a directory of the session's own (not extension/dist/, which a
developer's `npm run build` or another test session may be rewriting while a browser has it loaded)."""

import atexit
import shutil
import subprocess
import tempfile
from pathlib import Path

EXTENSION = Path(__file__).parent.parent / "extension"
BROWSERS = ("chromium", "firefox")

_session_build: Path | None = None


def built_extension(browser: str) -> Path:
    """The folder with the built extension for `browser` (its manifest.json at the top), built on first use."""
    if browser not in BROWSERS:
        raise ValueError(f"no Chorus build for {browser!r}; extension/build.mjs builds {', '.join(BROWSERS)}")
    global _session_build
    if _session_build is None:
        _session_build = _build_all()
    return _session_build / browser


def _build_all() -> Path:
    node = shutil.which("node")
    if not node:
        raise RuntimeError("building the Chorus extension needs node: apt-get install nodejs (tests/run.sh does)")
    out = Path(tempfile.mkdtemp(prefix="chorus-build-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    result = subprocess.run([node, str(EXTENSION / "build.mjs"), "--out", str(out), *BROWSERS],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"node extension/build.mjs failed (exit {result.returncode}):\n{result.stderr}{result.stdout}")
    for browser in BROWSERS:
        if not (out / browser / "manifest.json").is_file():
            raise RuntimeError(f"node extension/build.mjs exited 0 but wrote no {out / browser / 'manifest.json'}")
    return out
