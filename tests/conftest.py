"""Shared test setup: sample plugins on PYTHONPATH for the servers tests start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from persmem_core.transport.server_process import persmem_command

SAMPLE_PLUGINS = Path(__file__).parent / "sample_plugins"
ARTIFACTS = Path(__file__).parent.parent / "test-artifacts"
sys.path.insert(0, str(SAMPLE_PLUGINS))  # for hosts built inside the test process


@pytest.fixture
def sample_env(persmem_env):
    """make_env(modules="sample_echo,...", **extra): env loading the sample plugins by module name."""

    def make_env(modules: str = "sample_echo", **extra: str) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(SAMPLE_PLUGINS), os.environ.get("PYTHONPATH", "")) if p)
        return persmem_env(PYTHONPATH=path, PERSMEM_PLUGIN_MODULES=modules, **extra)

    return make_env


@pytest.fixture
def run_cli():
    """run_cli(*args, env=..., input=None) -> CompletedProcess of a real `persmem` process."""

    def run(*args: str, env: dict[str, str], input: str | None = None, timeout: float = 60):
        return subprocess.run(
            persmem_command(*args), env=env, input=input, capture_output=True, text=True, timeout=timeout
        )

    return run
