"""Encryption at rest (issue 19): what sealing costs, with `[encryption] enabled` off and on, same run, same data.

Two homes get the same N memories (LoCoMo turns, bench_memory.corpus), one with `[encryption] enabled = false`,
one with the default (on: every record-log frame, the index snapshot and the retrieval counts sealed with
AES-256-GCM). Each measure alternates the two homes in rounds, so both see the same machine load:

- store: durable memory_store, one call at a time, through a real MCP HTTP client (/s); and in-process through
  the collection's Python API (`Collection.store`, same embedding, same fsync);
- search: memory_search p50/p95 through MCP (with a project filter, and without);
- open: server restart until the first memory_search answers (model load included); and in-process, the
  collection of N memories opened (record-log replay + sealed index snapshot opened into memory) with the model
  already loaded;
- backup: `persmem backup DEST` wall time (no server running; it copies the sealed bytes as stored).

Prints one markdown table: off, on, and on/off (for times: > 1 is slower with encryption; for rates: < 1).
Targets (the issue): search unaffected, store and open within 10%.

    python benchmarks/bench_encryption.py [--quick] [-n 5000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from bench_memory import N_PROJECTS, corpus, first_search, pct  # noqa: E402

MODES = ("off", "on")
CONFIG = {"off": {"encryption": {"enabled": False}}, "on": {}}


def alternating(rounds: int):
    """(round, mode) pairs, the first mode of each round alternating so neither always goes first."""
    for r in range(rounds):
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):
            yield r, mode


async def bulk_load(server, texts) -> float:
    start = time.perf_counter()
    async with server.client("bench") as client:
        for i in range(0, len(texts), 500):
            r = await client.call_tool("memory_bulk_store", {"chunks": texts[i:i + 500], "dedup": False,
                                                             "context_chars": 0})
            assert not r.is_error, r.content[0].text
    return time.perf_counter() - start


async def searches(server, queries, with_filter: bool) -> list[float]:
    times = []
    async with server.client("bench") as client:
        await client.call_tool("memory_search", {"query": "warm up", "top_k": 5})
        for i, q in enumerate(queries):
            args = {"query": q, "top_k": 5} | ({"project": f"p{i % N_PROJECTS}"} if with_filter else {})
            t = time.perf_counter()
            r = await client.call_tool("memory_search", args)
            times.append((time.perf_counter() - t) * 1000)
            assert not r.is_error, r.content[0].text
    return times


async def stores(server, queries, first: int, count: int) -> tuple[int, float]:
    async with server.client("bench") as client:
        start = time.perf_counter()
        for i in range(first, first + count):
            r = await client.call_tool("memory_store", {"content": f"fresh durable note {i}: {queries[i % len(queries)]}",
                                                        "project": f"p{i % N_PROJECTS}", "dedup": False})
            assert not r.is_error, r.content[0].text
        return count, time.perf_counter() - start


def time_restart(home: Path, env: dict, tokens: dict) -> float:
    """Restart the stopped server until its first memory_search answers (s)."""
    from persmem_core.net.addresses import free_port
    from persmem_core.transport.server_process import RunningServer

    server = RunningServer(home, env, free_port(), tokens)
    start = time.perf_counter()
    server.start(timeout=600)
    try:
        anyio.run(first_search, server)
        return time.perf_counter() - start
    finally:
        server.stop()


class InProcess:
    """One home's memory collection through the Python API, the model loaded once (not timed)."""

    def __init__(self, home: Path, env: dict):
        from persmem_core.host import Host
        from persmem_memory_hnsw.service import make_embedder

        self.host = Host(environ=env)
        self.sealer = self.host.sealer
        self.config = self.host.section("memory")
        self.embedder = make_embedder(self.host)
        self.embedder.load()
        self.folder = home / "memory" / "memories"

    def open(self):
        from persmem_memory_hnsw.collection import Collection

        return Collection("memories", self.folder, self.embedder, self.config, self.sealer).open()

    def time_open(self) -> float:
        start = time.perf_counter()
        col = self.open()
        took = time.perf_counter() - start
        col.close()
        return took

    def time_stores(self, queries, first: int, count: int) -> tuple[int, float]:
        from persmem_memory_hnsw.collection import NewMemory

        col = self.open()
        try:
            start = time.perf_counter()
            for i in range(first, first + count):
                col.store([NewMemory(content=f"in-process durable note {i}: {queries[i % len(queries)]}",
                                     project=f"p{i % N_PROJECTS}", type="session_note", tags=[])],
                          author="bench", dedup=False)
            return count, time.perf_counter() - start
        finally:
            col.close()


def time_backup(env: dict) -> float:
    from persmem_core.transport.server_process import persmem_command

    dest = Path(tempfile.mkdtemp(prefix="persmem-bench-backup-")) / "b"
    start = time.perf_counter()
    done = subprocess.run(persmem_command("backup", str(dest)), env=env, capture_output=True, text=True, timeout=3600)
    took = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    shutil.rmtree(dest.parent, ignore_errors=True)
    return took


def run(n: int, n_store: int, n_queries: int, rounds: int) -> dict:
    from persmem_core.testing import clean_env, start_server, write_config

    texts, queries = corpus(n)
    queries = queries[:n_queries]
    root = Path(tempfile.mkdtemp(prefix="persmem-bench-enc-"))
    homes = {mode: root / mode for mode in MODES}
    results = {mode: {"search_filtered": [], "search": [], "store": [0, 0.0], "ip_store": [0, 0.0], "open": [],
                      "ip_open": [], "backup": []} for mode in MODES}
    servers = {}
    try:
        for mode in MODES:
            write_config(homes[mode], CONFIG[mode])
            servers[mode] = start_server(homes[mode], agents=("bench",), env=clean_env(homes[mode]))
            results[mode]["load_s"] = anyio.run(bulk_load, servers[mode], texts)
        for _, mode in alternating(rounds):
            for label, with_filter in (("search_filtered", True), ("search", False)):
                results[mode][label] += anyio.run(searches, servers[mode], queries, with_filter)
        per_round = max(1, n_store // rounds)
        for r, mode in alternating(rounds):
            count, took = anyio.run(stores, servers[mode], queries, r * per_round, per_round)
            results[mode]["store"][0] += count
            results[mode]["store"][1] += took
    finally:
        for server in servers.values():
            server.stop()
    envs = {mode: servers[mode].env for mode in MODES}
    for _, mode in alternating(rounds):
        results[mode]["open"].append(time_restart(homes[mode], envs[mode], servers[mode].tokens))
    in_process = {mode: InProcess(homes[mode], envs[mode]) for mode in MODES}
    for _, mode in alternating(3 * rounds):  # a fraction of a second each: more rounds, steadier medians
        results[mode]["ip_open"].append(in_process[mode].time_open())
    for r, mode in alternating(rounds):
        count, took = in_process[mode].time_stores(queries, r * per_round, per_round)
        results[mode]["ip_store"][0] += count
        results[mode]["ip_store"][1] += took
    for _, mode in alternating(2 * rounds):
        results[mode]["backup"].append(time_backup(envs[mode]))
    sealed = (homes["on"] / "memory" / "memories" / "vectors.hnsw").read_bytes()[:4]
    assert sealed == b"\xc1PMS", "the 'on' home's index snapshot is not sealed: the benchmark measured nothing"
    shutil.rmtree(root, ignore_errors=True)
    return results


def main(quick: bool = False, n: int | None = None) -> list:
    n = n or (300 if quick else 5000)
    n_store, n_queries, rounds = (20, 30, 2) if quick else (200, 200, 4)
    results = run(n, n_store, n_queries, rounds)

    rows = []

    def time_row(label: str, key: str, fn, fmt: str):
        off, on = fn(results["off"][key]), fn(results["on"][key])
        rows.append((label, fmt.format(off), fmt.format(on), f"{on / off:.2f}"))

    def rate_row(label: str, key: str):
        off, on = (results[m][key][0] / results[m][key][1] for m in MODES)
        rows.append((label, f"{off:.0f}", f"{on:.0f}", f"{on / off:.2f}"))

    rate_row("store, durable memory_store via MCP HTTP (/s)", "store")
    rate_row("store, in-process Collection.store (/s)", "ip_store")
    time_row("search p50 ms, project filter (MCP)", "search_filtered", statistics.median, "{:.2f}")
    time_row("search p95 ms, project filter (MCP)", "search_filtered", lambda v: pct(v, 0.95), "{:.2f}")
    time_row("search p50 ms, no filter (MCP)", "search", statistics.median, "{:.2f}")
    time_row("search p95 ms, no filter (MCP)", "search", lambda v: pct(v, 0.95), "{:.2f}")
    time_row("open: server restart to first search (s)", "open", statistics.median, "{:.2f}")
    time_row(f"open: in-process collection of {n:,} memories (ms)", "ip_open",
             lambda v: statistics.median(v) * 1000, "{:.0f}")
    time_row("backup: `persmem backup` wall time (s)", "backup", statistics.median, "{:.2f}")
    time_row(f"bulk load of {n:,} memories via MCP (s)", "load_s", lambda v: v, "{:.1f}")
    print(f"\n## Encryption at rest: off vs on ({n:,} memories, same run, rounds alternate the two homes)\n")
    print("| measure | off | on | on/off |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("\non/off: for rates (/s) below 1 is slower with encryption, for times above 1 is. Targets: search "
          "unaffected, store and open within 10% (0.90-1.10).")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the benchmark still runs")
    parser.add_argument("-n", type=int, help="memories per home (default 5000; --quick 300)")
    args = parser.parse_args()
    main(args.quick, args.n)
