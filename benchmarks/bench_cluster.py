"""Scale-out on NATS JetStream against one box, in the same run: `python benchmarks/bench_cluster.py [--quick]`.

Every number comes from a real MCP client over Streamable HTTP:
- one box: a persmem server with its Maildir mail and its local memory;
- cluster: a three-node NATS JetStream cluster on loopback (replicas 3), two persmem nodes on it, and a real
  round-robin haproxy in front of them (each request goes to the next node).

Measured for each: amq_send and amq_read (claim) p50/p95 and throughput with 4 clients at once; memory_store and
memory_search p50/p95 and store throughput with 4 clients; on the cluster, how long a memory stored on one node
takes to be found (by keyword, then by meaning) on the other, and a message sent on one node to be listed on
the other. Then catch-up: node 2 is stopped, N memories are stored through node 1 and embedded, node 2 is
started again (it replays its own log, then applies the stream after its last sequence), and a new node 3
joins from the newest snapshot plus the stream after it. All on the same 2-core machine: the cluster's three
NATS servers and two persmem nodes share the cores the one box has alone.
"""

from __future__ import annotations

import argparse
import os
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from bench_memory import corpus, pct  # noqa: E402 - the same texts and queries as the memory benchmark
os.environ.setdefault("PERSMEM_DEFAULT_TOOL_SETS", "all")  # memory_stats is in the `curation` tool set

AGENTS = ("kite", "wren")


async def timed(client, tool: str, args_of, n: int) -> list[float]:
    """Milliseconds of `n` calls of `tool`, one at a time."""
    times = []
    for i in range(n):
        t = time.perf_counter()
        result = await client.call_tool(tool, args_of(i))
        assert not result.is_error, result.content[0].text
        times.append((time.perf_counter() - t) * 1000)
    return times


async def concurrent_rate(server, agent: str, tool: str, args_of, n: int, clients: int = 4) -> float:
    """Calls per second of `n` calls spread over `clients` sessions at once."""
    async def worker(k: int) -> None:
        async with server.client(agent) as client:
            for i in range(k, n, clients):
                result = await client.call_tool(tool, args_of(i))
                assert not result.is_error, result.content[0].text

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for k in range(clients):
            group.start_soon(worker, k)
    return n / (time.perf_counter() - start)


def summary(times: list[float]) -> tuple[float, float]:
    return statistics.median(times), pct(times, 0.95)


async def workload(server, texts: list[dict], queries: list[str], n: int) -> dict:
    """Mail and memory through `server` (a node, or the proxy in front of the nodes)."""
    out = {}
    async with server.client("kite") as kite, server.client("wren") as wren:
        out["send"] = summary(await timed(kite, "amq_send", lambda i: {
            "to_agent": "wren", "subject": f"bench {i}", "body": texts[i % len(texts)]["content"]},
            n))
        unread = json.loads((await wren.call_tool("amq_check", {})).content[0].text)["messages"]
        ids = [m["id"] for m in unread]
        out["read"] = summary(await timed(wren, "amq_read", lambda i: {"agent": "", "msg_id": ids[i]}, len(ids)))
        out["store"] = summary(await timed(kite, "memory_store", lambda i: {
            "content": f"{texts[i]['content']} (single {i})", "project": texts[i]["project"]}, n))
        for _ in range(600):  # searches with every memory embedded
            stats = json.loads((await kite.call_tool("memory_stats", {})).content[0].text)
            if not stats.get("not_embedded_yet"):
                break
            await anyio.sleep(0.1)
        out["search"] = summary(await timed(kite, "memory_search", lambda i: {
            "query": queries[i % len(queries)], "top_k": 5}, n))
    out["send_rate"] = await concurrent_rate(server, "kite", "amq_send", lambda i: {
        "to_agent": "wren", "body": f"concurrent {i}: {texts[i % len(texts)]['content']}"}, 2 * n)
    out["store_rate"] = await concurrent_rate(server, "kite", "memory_store", lambda i: {
        "content": f"{texts[(i + n) % len(texts)]['content']} (concurrent {i})", "project": "rate"}, 2 * n)
    await embedded(server)  # the next measurement starts on idle nodes
    return out


async def embedded(server) -> None:
    """Return once `server` has embedded every memory (its background embedder is idle)."""
    async with server.client("kite") as client:
        for _ in range(3000):
            stats = json.loads((await client.call_tool("memory_stats", {})).content[0].text)
            if not stats.get("not_embedded_yet"):
                return
            await anyio.sleep(0.1)


async def visibility(a, b, texts: list[dict], samples: int) -> dict:
    """How long a write on node a takes to show on node b: a memory by keyword, by meaning; a message listed."""
    out = {"keyword": [], "meaning": [], "mail": []}
    async with a.client("kite") as on_a, b.client("kite") as on_b, b.client("wren") as wren_b:
        async def call(client, tool, args):
            result = await client.call_tool(tool, args)
            assert not result.is_error, result.content[0].text
            return json.loads(result.content[0].text)

        for i in range(samples):
            word = f"zq{i}x{int(time.time() * 1000) % 100000}"
            stored = await call(on_a, "memory_store", {"content": f"{texts[i]['content']} marker {word}",
                                                       "project": "lag"})
            start = time.perf_counter()
            while stored["id"] not in [h["id"] for h in (await call(on_b, "memory_search", {
                    "query": word, "mode": "lexical", "project": "lag"}))["results"]]:
                await anyio.sleep(0.002)
            out["keyword"].append((time.perf_counter() - start) * 1000)
            sent = await call(on_a, "amq_send", {"to_agent": "wren", "body": f"lag {i}"})
            start = time.perf_counter()
            while sent["id"] not in [m["id"] for m in (await call(wren_b, "amq_check", {}))["messages"]]:
                await anyio.sleep(0.002)
            out["mail"].append((time.perf_counter() - start) * 1000)
            await call(wren_b, "amq_read", {"agent": "", "msg_id": sent["id"]})
        for i in range(samples):  # by meaning: the node that stored it embeds it, the others get the vectors
            stored = await call(on_a, "memory_store", {"content": f"{texts[-1 - i]['content']} (meaning {i})",
                                                       "project": "lag"})
            start = time.perf_counter()
            while True:
                hits = (await call(on_b, "memory_search", {"query": texts[-1 - i]["content"], "mode": "dense",
                                                           "project": "lag", "top_k": 3}))["results"]
                if stored["id"] in [h["id"] for h in hits]:
                    break
                await anyio.sleep(0.005)
            out["meaning"].append((time.perf_counter() - start) * 1000)
    return {key: summary(values) for key, values in out.items()}


async def wait_count(server, want: int, timeout: float = 3600) -> float:
    """Seconds until `server` answers memory_stats with `want` memories, all embedded."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        try:
            async with server.client("kite") as client:
                stats = json.loads((await client.call_tool("memory_stats", {})).content[0].text)
                if stats.get("count") == want and not stats.get("not_embedded_yet"):
                    return time.perf_counter() - start
        except Exception:  # noqa: BLE001 - still starting
            pass
        await anyio.sleep(0.1)
    raise TimeoutError(f"{server.base_url} did not reach {want} memories")


async def bulk(server, texts: list[dict]) -> None:
    async with server.client("kite") as client:
        for i in range(0, len(texts), 500):
            result = await client.call_tool("memory_bulk_store", {"chunks": json.dumps(texts[i:i + 500]),
                                                                  "dedup": False, "context_chars": 0})
            assert not result.is_error, result.content[0].text


def run(quick: bool) -> dict:
    from persmem_core.cluster.local_cluster import NatsCluster
    from persmem_core.cluster.round_robin import RoundRobinProxy
    from persmem_core.testing import ClusterNodes, start_server

    n = 60 if quick else 300
    behind = 2_000 if quick else 100_000
    samples = 10 if quick else 40
    texts, queries = corpus(max(4 * n + 2 * samples, behind))
    results = {"n": n, "behind": behind}
    with tempfile.TemporaryDirectory(prefix="persmem-bench-cluster-") as tmp:
        root = Path(tmp)
        one = start_server(root / "one", AGENTS)
        try:
            results["one"] = anyio.run(workload, one, texts, queries, n)
        finally:
            one.stop()
        cluster = NatsCluster(root / "nats", size=3).start()
        nodes = ClusterNodes(root / "nodes", cluster, AGENTS, config={"memory": {"snapshot_every": 20_000}})
        try:
            a, b = nodes.start(), nodes.start()
            with RoundRobinProxy([("127.0.0.1", a.port), ("127.0.0.1", b.port)], root / "proxy").start() as proxy:
                front = copy.copy(a)  # a client of the proxy, with the nodes' agents
                front.base_url, front.url = proxy.url, f"{proxy.url}/mcp"
                results["cluster"] = anyio.run(workload, front, texts, queries, n)
            anyio.run(embedded, b)
            results["node"] = anyio.run(workload, a, texts[2 * n:], queries, n // 2)
            anyio.run(embedded, b)
            results["visibility"] = anyio.run(visibility, a, b, texts, samples)
            # catch-up: node 2 is stopped while `behind` memories are stored through node 1
            b.stop()
            start = time.perf_counter()
            anyio.run(bulk, a, [dict(t, project="catchup") for t in texts[:behind]])
            results["ingest_s"] = time.perf_counter() - start
            total = json.loads(anyio.run(_stats, a))["count"]
            anyio.run(wait_count, a, total)
            results["ingest_embedded_s"] = time.perf_counter() - start
            start = time.perf_counter()
            b.start(timeout=3600)
            anyio.run(wait_count, b, total)
            results["catchup_s"] = time.perf_counter() - start
            start = time.perf_counter()
            c = nodes.start(timeout=3600)
            anyio.run(wait_count, c, total)
            results["join_s"] = time.perf_counter() - start
            results["join_from_snapshot"] = "started from the cluster's snapshot" in c.log()
        finally:
            nodes.stop()
            cluster.stop()
    return results


async def _stats(server) -> str:
    async with server.client("kite") as client:
        return (await client.call_tool("memory_stats", {})).content[0].text


def table(r: dict) -> list[str]:
    def shown(value) -> str:
        return f"{value[0]:.2f} / {value[1]:.2f}" if isinstance(value, (list, tuple)) else f"{value:.0f}"

    measures = [("amq_send p50 / p95 (ms)", "send"), ("amq_read (claim) p50 / p95 (ms)", "read"),
                ("amq_send, 4 clients (messages/s)", "send_rate"), ("memory_store p50 / p95 (ms)", "store"),
                ("memory_store, 4 clients (memories/s)", "store_rate"), ("memory_search p50 / p95 (ms)", "search")]
    rows = ["| measure | one box | cluster, through the proxy | cluster, one node directly |", "|---|---|---|---|"]
    rows += [f"| {label} | {shown(r['one'][key])} | {shown(r['cluster'][key])} | {shown(r['node'][key])} |"
             for label, key in measures]
    seen = r["visibility"]
    rows += ["", "| on the cluster | p50 / p95 (ms) |", "|---|---|",
             f"| a memory stored on node 1 found on node 2 by keyword | {shown(seen['keyword'])} |",
             f"| ... found on node 2 by meaning (embedded on node 1) | {shown(seen['meaning'])} |",
             f"| a message sent on node 1 listed on node 2 | {shown(seen['mail'])} |"]
    joined = "from a snapshot + the stream" if r["join_from_snapshot"] else "from the stream alone"
    rows += ["", f"| catch-up ({r['behind']:,} memories stored while node 2 was down) | seconds |", "|---|---|",
             f"| store them through node 1 (acknowledged) | {r['ingest_s']:.1f} |",
             f"| ... and embedded on node 1 | {r['ingest_embedded_s']:.1f} |",
             f"| node 2 restarted until it has them all | {r['catchup_s']:.1f} |",
             f"| a new node 3 until it has them all ({joined}) | {r['join_s']:.1f} |"]
    return rows


def main(quick: bool = False) -> dict:
    results = run(quick)
    print("\n## bench_cluster: NATS JetStream cluster (3 NATS servers, 2 persmem nodes, haproxy) vs one box")
    print("\n".join(table(results)))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (2,000 memories behind)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    out = main(args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
