"""Startup costs a user feels: `persmem --help`, `persmem serve` until it answers MCP tools/list, and a
stdio session (what Claude Code starts per session) until it answers, alone (it owns the home) and beside a
running server (it joins it over the local socket); one tool call's round trip over each path; and the
embedding model's preparation: a fresh home with an empty model cache until memory_search answers, a second
fresh home with the prepared cache, and how long Ctrl-C (SIGINT) takes to stop a server mid-preparation.

Targets (benchmarks.md): --help <= 0.5 s with every plugin installed;
serve answering tools/list over HTTP <= 2 s after start.
"""

from __future__ import annotations

import argparse
import os
import signal
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import anyio
import httpx2


def persmem_exe() -> list[str]:
    exe = shutil.which("persmem", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "persmem_core"]


def time_help(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([*persmem_exe(), "--help"], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def first_tools_list(url: str, deadline: float) -> int:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    while True:
        try:
            async with httpx2.AsyncClient(timeout=5) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    return len((await client.list_tools()).tools)
        except Exception:
            if time.perf_counter() > deadline:
                raise
            await anyio.sleep(0.01)


def time_serve_ready(runs: int) -> tuple[list[float], int]:
    times, n_tools = [], 0
    for _ in range(runs):
        home = tempfile.mkdtemp(prefix="persmem-bench-")
        port = free_port()
        env = {**os.environ, "PERSMEM_HOME": home}
        start = time.perf_counter()
        proc = subprocess.Popen(
            [*persmem_exe(), "serve", "--port", str(port)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            n_tools = anyio.run(first_tools_list, f"http://127.0.0.1:{port}/mcp", start + 60)
            times.append(time.perf_counter() - start)
        finally:
            proc.terminate()
            proc.wait()
            shutil.rmtree(home, ignore_errors=True)
    return times, n_tools


async def stdio_session(env: dict, calls: int) -> tuple[float, list[float]]:
    """Seconds from spawning a stdio session to its first tools/list, then `calls` persmem_whoami round trips."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    exe = persmem_exe()
    params = StdioServerParameters(command=exe[0], args=[*exe[1:], "serve", "--transport", "stdio"], env=env)
    start = time.perf_counter()
    with open(os.devnull, "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await client.list_tools()
            ready = time.perf_counter() - start
            return ready, await round_trips(client, calls)


async def round_trips(client, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await client.call_tool("persmem_whoami", {})
        times.append(time.perf_counter() - start)
    return times


async def http_round_trips(url: str, calls: int) -> list[float]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await round_trips(client, calls)


def time_stdio(runs: int, calls: int) -> dict[str, list[float]]:
    """A stdio session alone (it owns the home), and one joining a running `persmem serve`."""
    out: dict[str, list[float]] = {"alone": [], "joining": [], "call alone": [], "call joining": [], "call http": []}
    for _ in range(runs):
        home = tempfile.mkdtemp(prefix="persmem-bench-")
        env = {**os.environ, "PERSMEM_HOME": home}
        try:
            ready, trips = anyio.run(stdio_session, env, calls)
            out["alone"].append(ready)
            out["call alone"] += trips
            port = free_port()
            proc = subprocess.Popen([*persmem_exe(), "serve", "--port", str(port)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                anyio.run(first_tools_list, f"http://127.0.0.1:{port}/mcp", time.perf_counter() + 60)
                ready, trips = anyio.run(stdio_session, env, calls)
                out["joining"].append(ready)
                out["call joining"] += trips
                out["call http"] += anyio.run(http_round_trips, f"http://127.0.0.1:{port}/mcp", calls)
            finally:
                proc.terminate()
                proc.wait()
        finally:
            shutil.rmtree(home, ignore_errors=True)
    return out


async def first_memory_search(url: str, deadline: float) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    await first_tools_list(url, deadline)
    async with httpx2.AsyncClient(timeout=120) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            await client.call_tool("memory_search", {"query": "anything"})  # waits for the model


def fresh_env(home: str, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PERSMEM_CACHE_DIR"}
    return env | {"PERSMEM_HOME": home, "XDG_CACHE_HOME": cache}


def time_model_preparation() -> dict[str, float]:
    """Seconds until memory_search answers: a fresh home and empty cache, then a second fresh home with it; and
    seconds from SIGINT to exit for a server stopped during the preparation."""
    cache = tempfile.mkdtemp(prefix="persmem-bench-cache-")
    out = {}
    try:
        for case in ("no cache", "cache"):
            home, port = tempfile.mkdtemp(prefix="persmem-bench-"), free_port()
            start = time.perf_counter()
            proc = subprocess.Popen([*persmem_exe(), "serve", "--port", str(port)], env=fresh_env(home, cache),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                anyio.run(first_memory_search, f"http://127.0.0.1:{port}/mcp", start + 120)
                out[case] = time.perf_counter() - start
            finally:
                proc.terminate()
                proc.wait()
                shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        home, port = tempfile.mkdtemp(prefix="persmem-bench-"), free_port()
        proc = subprocess.Popen([*persmem_exe(), "serve", "--port", str(port)], env=fresh_env(home, cache),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        anyio.run(first_tools_list, f"http://127.0.0.1:{port}/mcp", time.perf_counter() + 60)
        time.sleep(0.5)  # the preparation (3-30 s) is under way
        start = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        proc.wait()
        out["ctrl-c"] = time.perf_counter() - start
        shutil.rmtree(home, ignore_errors=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


def installed_plugins() -> list[str]:
    from importlib.metadata import entry_points

    return sorted(ep.name for ep in entry_points(group="persmem.plugins"))


def main(quick: bool = False) -> list[tuple[str, str, str]]:
    runs = 3 if quick else 10
    help_times = time_help(runs)
    ready_times, n_tools = time_serve_ready(2 if quick else 5)
    stdio = time_stdio(2 if quick else 5, 20 if quick else 100)
    model = time_model_preparation()

    def ms(values: list[float], q: float) -> str:
        return f"{sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000:.1f} ms"

    rows = [
        ("persmem --help", f"{statistics.median(help_times):.3f} s", "<= 0.5 s"),
        (f"serve -> MCP tools/list over HTTP ({n_tools} tools)", f"{statistics.median(ready_times):.3f} s", "<= 2 s"),
        ("stdio session -> tools/list, alone (it starts the plugins)", f"{statistics.median(stdio['alone']):.3f} s", "-"),
        ("stdio session -> tools/list, beside a running server", f"{statistics.median(stdio['joining']):.3f} s", "-"),
        ("tool call round trip p50 / p95, stdio alone", f"{ms(stdio['call alone'], .5)} / {ms(stdio['call alone'], .95)}", "-"),
        ("tool call round trip p50 / p95, stdio beside a server",
         f"{ms(stdio['call joining'], .5)} / {ms(stdio['call joining'], .95)}", "-"),
        ("tool call round trip p50 / p95, HTTP", f"{ms(stdio['call http'], .5)} / {ms(stdio['call http'], .95)}", "-"),
        ("serve, fresh home, empty model cache -> memory_search answers", f"{model['no cache']:.3f} s", "-"),
        ("serve, second fresh home, prepared cache -> memory_search answers", f"{model['cache']:.3f} s", "-"),
        ("Ctrl-C (SIGINT) during the model's preparation -> exited", f"{model['ctrl-c']:.3f} s", "<= 2 s"),
    ]
    print(f"\n## Startup (plugins installed: {', '.join(installed_plugins())}; medians of {runs} / "
          f"{len(ready_times)} runs)\n")
    print("| measure | median | target |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    main(parser.parse_args().quick)
