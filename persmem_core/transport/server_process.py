"""A real `persmem serve --transport http` in a subprocess, and an MCP client to it: `RunningServer`, for tests and
benchmarks (the `persmem_server` fixture of persmem_core.testing starts one per call).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from persmem_core.transport.tool_answers import tool_result


def persmem_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "persmem_core", *args]


class RunningServer:
    """A `persmem serve --transport http` subprocess and ways to talk to it."""

    def __init__(self, home: Path, env: dict[str, str], port: int, tokens: dict[str, str], prefix: tuple = ()):
        self.home, self.env, self.port, self.tokens = home, env, port, tokens
        self.prefix = list(prefix)  # a program the server runs under (e.g. `unshare ...`), else nothing
        self.base_url = f"http://127.0.0.1:{port}"
        self.url = f"{self.base_url}/mcp"
        self.log_path = home / "server.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> RunningServer:
        import httpx2

        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [*self.prefix,
             *persmem_command("serve", "--transport", "http", "--host", "127.0.0.1", "--port", str(self.port))],
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"persmem serve exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx2.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx2.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"persmem serve did not answer /healthz within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if getattr(self, "_log", None):
            self._log.close()

    def kill(self) -> None:
        """SIGKILL, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def headers(self, agent: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[agent]}"} if agent else {}

    @contextlib.asynccontextmanager
    async def client(self, agent: str | None = None, url: str | None = None) -> AsyncIterator[Any]:
        """An MCP client session over Streamable HTTP, authenticated as `agent`."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=self.headers(agent), timeout=60.0) as http:
            async with Client(streamable_http_client(url or self.url, http_client=http)) as client:
                yield client

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *, agent: str | None = None) -> Any:
        """Open a session, call one tool, close; returns the tool's JSON result or raises ToolCallError."""
        import anyio

        async def call():
            async with self.client(agent) as client:
                return await client.call_tool(name, arguments or {})

        return tool_result(anyio.run(call))

    def call_tools(self, calls: list[tuple[str, dict[str, Any]]], *, agent: str | None = None) -> list[Any]:
        """Several tool calls in one session, in order; each one's JSON result (raises on the first error)."""
        import anyio

        async def run():
            async with self.client(agent) as client:
                return [tool_result(await client.call_tool(name, arguments)) for name, arguments in calls]

        return anyio.run(run)

    def list_tools(self, *, agent: str | None = None) -> list[Any]:
        import anyio

        async def call():
            async with self.client(agent) as client:
                return (await client.list_tools()).tools

        return anyio.run(call)
