import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persmem_core.sdk.testing import start_server


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory):
    """One running server for tests that only need a live store (model loading is the slow part)."""
    server = start_server(tmp_path_factory.mktemp("shared-home"), agents=("kite", "wren"))
    yield server
    server.stop()


@pytest.fixture
def killed_after():
    """`killed_after(script, folder, start, delay)`: run the helper script `script` (in this folder) on `folder`
    from `start`, wait for its "ready", SIGKILL it `delay` seconds later, and return the whole lines it printed:
    what it acknowledged (a line cut by the kill acknowledges nothing)."""

    def run(script: str, folder: Path, start: int, delay: float) -> list[str]:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / script), str(folder), str(start)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        os.set_blocking(proc.stdout.fileno(), False)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        os.set_blocking(proc.stdout.fileno(), True)
        return proc.stdout.read().split("\n")[:-1]

    return run
