"""persmem's column "persmem (MCP HTTP)" of bench_peers.py: the same workloads as the in-process workers
(worker_common.py), against a real `persmem serve` through a real MCP Streamable HTTP client; a restart is a new
server process on the same home, to its first `memory_search` reply. Runs in persmem's own venv."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from worker_common import du_mb, status_mb


def run_persmem_mcp(workload: str, job: dict) -> dict:
    import anyio

    from persmem_core.testing import start_server, write_config

    home = Path(tempfile.mkdtemp(prefix="bench-peers-persmem-mcp-"))
    write_config(home, job.get("persmem_config"))
    server = start_server(home, agents=("bench",))

    async def call(client, name, args):
        r = await client.call_tool(name, args)
        assert not r.is_error, r.content[0].text
        return r

    async def settle(client, where):
        """Wait until the background embedder has embedded everything stored (memory_stats counts what is still
        waiting): the ingest time includes the embedding, and the searches measured next do not wait for it."""
        while True:
            stats = json.loads((await call(client, "memory_stats", where)).content[0].text)
            if not stats.get("not_embedded_yet"):
                return
            await anyio.sleep(0.05)

    async def locomo():
        out = {"ingest_s": 0.0, "search_ms": [], "ranked": []}
        async with server.client("bench") as client:
            for ci, conv in enumerate(job["convs"]):
                collection = f"conv{ci}"
                t = time.perf_counter()
                mems = conv["mems"]
                for i in range(0, len(mems), job["batch"]):
                    await call(client, "memory_bulk_store", {"chunks": json.dumps(mems[i:i + job["batch"]]),
                                                             "collection": collection, "dedup": False})
                await settle(client, {"collection": collection})
                out["ingest_s"] += time.perf_counter() - t
                ranked = []
                for q in conv["queries"]:
                    t = time.perf_counter()
                    r = await call(client, "memory_search", {"query": q, "top_k": job["k"], "collection": collection})
                    out["search_ms"].append((time.perf_counter() - t) * 1000)
                    ranked.append([x["id"] for x in json.loads(r.content[0].text)["results"]])
                out["ranked"].append(ranked)
        return out

    async def speed():
        texts, queries, n_projects = job["texts"], job["queries"], job["n_projects"]
        out = {}
        async with server.client("bench") as client:
            t = time.perf_counter()
            for i in range(0, len(texts), job["batch"]):
                chunk = [{"content": x["content"], "project": x["project"]} for x in texts[i:i + job["batch"]]]
                await call(client, "memory_bulk_store", {"chunks": json.dumps(chunk), "dedup": False})
            await settle(client, {})
            out["ingest_s"] = time.perf_counter() - t
            for label, filtered in (("search_filtered_ms", True), ("search_ms", False)):
                times = []
                for i, q in enumerate(queries):
                    args = {"query": q, "top_k": job["k"]} | ({"project": f"p{i % n_projects}"} if filtered else {})
                    t = time.perf_counter()
                    await call(client, "memory_search", args)
                    times.append((time.perf_counter() - t) * 1000)
                out[label] = times
            out["rss_mb"] = status_mb("VmRSS", server.process.pid)
            times = []
            for i in range(job["n_store"]):
                t = time.perf_counter()
                await call(client, "memory_store", {"content": f"fresh durable note {i}: {queries[i % len(queries)]}",
                                                    "project": f"p{i % n_projects}"})
                times.append((time.perf_counter() - t) * 1000)
            out["store_one_ms"] = times
        return out

    try:
        result = anyio.run(locomo if workload == "locomo" else speed)
        result["peak_rss_mb"] = status_mb("VmHWM", server.process.pid)
        if workload == "speed" and job.get("restarts"):  # a new server process on the same home, to its first reply
            from bench_memory import first_search

            from persmem_core.net.addresses import free_port
            from persmem_core.transport.server_process import RunningServer

            result["restart_s"] = []
            for _ in range(job["restarts"]):
                server.stop()
                server = RunningServer(home, server.env, free_port(), server.tokens)
                started = time.perf_counter()
                server.start(timeout=300)
                anyio.run(first_search, server)
                result["restart_s"].append(time.perf_counter() - started)
    finally:
        server.stop()
    folders = [p for p in home.rglob("memories") if p.is_dir()]
    result["disk_mb"] = du_mb(folders[0]) if folders else float("nan")
    shutil.rmtree(home, ignore_errors=True)
    return result
