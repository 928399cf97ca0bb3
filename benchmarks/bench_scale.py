"""A year of sessions on a small box (issue 36): ingest, restart, search, RSS and disk at 10k / 100k / 1M memories,
measured as a client sees them: a real `persmem serve` and a real MCP Streamable HTTP client.

    python benchmarks/bench_scale.py --sizes 10000,100000,1000000

1. Ingest, real embedder: `memory_bulk_store` with its default arguments (dedup on, context_chars 300), calls of
   500 LoCoMo turns, into a fresh server: memories/s acknowledged (durable, found by keyword), then fully
   embedded (memory_stats polled until nothing waits).
2. At each size, a store filled with CACHED VECTORS: embedding 1M texts takes about two hours on 2 cores, so the
   LoCoMo turns are embedded once (cached by model under ~/.cache/persmem-bench) and memory i is two turns joined,
   its vector the length-weighted mean of theirs, normalised: every text distinct, every vector a sentence
   embedding's neighbourhood. The store is built in-process through Collection.store (dedup off, the vectors
   handed in) with the home's own key, config and index parameters, then kept (`--work`) and copied for each run,
   so runs compare the same bytes. Measured on the copy, through the real server:
   - restart -> first search: process start until the first `memory_search` reply over MCP (median of 3);
   - 200 searches (LoCoMo questions, top 5), with a project filter (10 projects: 10% selectivity) and without;
   - RSS of the server after them, and the store's size on disk;
   - then a default bulk store of `--ingest` more turns into that big store (acknowledged /s; embedded /s with
     the real embedder).
3. A backfill (`--import-sessions`, default 1,000 sessions of 100 LoCoMo turns, real embedder): Claude Code
   transcripts written to a ~/.claude/projects folder, then the real `persmem sessions import` against a running
   server: when every transcript is archived, and when the command returns, which it does once every new turn
   is indexed for search (its second progress bar); then a `session_search` must find a turn of the last session.
4. The peers at `--peers` memories (default 10,000; 0: none), in the same run: bench_peers.py's speed workload
   (each peer from PyPI in its own venv, the same corpus; restart = a fresh process to its first search) beside
   persmem in-process and over MCP, with the ratios to the best peer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("PERSMEM_DEFAULT_TOOL_SETS", "all")  # memory_stats is in `curation`

from bench_data import LOCOMO  # noqa: E402
from bench_memory import first_search, rss_mb, searches  # noqa: E402

N_PROJECTS = 10
CACHE = Path(os.environ.get("PERSMEM_BENCH_CACHE", Path.home() / ".cache" / "persmem-bench"))


def locomo() -> tuple[list[str], list[str]]:
    data = json.loads(LOCOMO.read_text())
    turns = [t["text"] for conv in data for k, v in conv["conversation"].items() if k.startswith("session_")
             and isinstance(v, list) for t in v]
    return turns, [qa["question"] for conv in data for qa in conv["qa"]][:200]


def turn_vectors(turns: list[str]) -> np.ndarray:
    """Every LoCoMo turn embedded by the default model, once: cached by model id and turn count."""
    from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

    embedder = OnnxEmbedder(default_model_files(), cache=Path.home() / ".cache" / "persmem" / "models").load()
    path = CACHE / f"locomo-turns-{embedder.model_id}-{len(turns)}.npy"
    if path.exists():
        return np.load(path)
    start = time.perf_counter()
    vectors = np.vstack([v[:1] for v in embedder.embed_chunks(turns)])
    print(f"(embedded {len(turns)} turns once in {time.perf_counter() - start:.0f}s: {path})", file=sys.stderr)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def memory(i: int, turns: list[str], vectors: np.ndarray) -> tuple[dict, np.ndarray]:
    """Memory i: turns a and b joined (a distinct pair for every i below len(turns)**2) and its cached vector."""
    t = len(turns)
    a, b = i % t, (i % t + 1 + i // t) % t
    text = f"{turns[a]} {turns[b]}"
    vec = len(turns[a]) * vectors[a] + len(turns[b]) * vectors[b]
    return {"content": text, "project": f"p{i % N_PROJECTS}", "tags": [f"t{i % 50}"]}, vec / np.linalg.norm(vec)


class HandedIn:
    """An embedder that returns the vectors the builder hands in for the next store (model id and dim of the
    real one, so the server opens the store as its own)."""

    def __init__(self, real):
        self.real, self.model_id, self.dim, self.next = real, real.model_id, real.dim, []

    def load(self):
        return self

    def embed_chunks(self, texts, batch_size=64):
        assert len(texts) == len(self.next)
        return [v[None, :].astype(np.float32) for v in self.next]

    def embed_query(self, text):
        return self.real.embed_query(text)


def build(home: Path, size: int, turns, vectors) -> None:
    from persmem_core.host import Host
    from persmem_memory_hnsw.collection import NewMemory
    from persmem_memory_hnsw.service import open_service

    service = open_service(Host(environ=dict(os.environ, PERSMEM_HOME=str(home))))
    col = service.collection("memories")
    col.embedder, col.embedding = HandedIn(col.embedder.load()), None
    start = time.perf_counter()
    for at in range(0, size, 1000):
        made = [memory(i, turns, vectors) for i in range(at, min(size, at + 1000))]
        col.embedder.next = [vec for _, vec in made]
        col.store([NewMemory(content=m["content"], project=m["project"], type="session_note", tags=m["tags"])
                   for m, _ in made], author="bench", dedup=False)
        if at % 100_000 == 0:
            print(f"  built {at + len(made)} in {time.perf_counter() - start:.0f}s", file=sys.stderr, flush=True)
    service.stop()
    print(f"(built {size} memories with cached vectors in {time.perf_counter() - start:.0f}s)", file=sys.stderr)


def disk_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


async def bulk_ingest(server, texts: list[dict]) -> dict:
    """Default memory_bulk_store calls of 500: acknowledged /s, then embedded /s (memory_stats polled)."""
    async with server.client("bench") as client:
        async def call(tool: str, args: dict) -> dict:
            r = await client.call_tool(tool, args)
            assert not r.is_error, r.content[0].text
            return json.loads(r.content[0].text)

        start = time.perf_counter()
        for i in range(0, len(texts), 500):
            part = texts[i:i + 500]
            await call("memory_bulk_store", {"chunks": json.dumps([{"content": t["content"], "tags": t["tags"]}
                                                                   for t in part]),
                                             "project": part[0]["project"]})
        ack = time.perf_counter() - start
        while (await call("memory_stats", {}))["not_embedded_yet"]:
            await anyio.sleep(0.1)
        return {"ack_per_s": len(texts) / ack, "embedded_per_s": len(texts) / (time.perf_counter() - start)}


def ingest_texts(turns: list[str], n: int, offset: int) -> list[dict]:
    """n LoCoMo turns as a session importer sends them (one project per call of 500), none stored before."""
    return [{"content": f"{turns[(offset + i) % len(turns)]} (turn {offset + i})", "tags": [f"t{i % 50}"],
             "project": f"p{(i // 500) % N_PROJECTS}"} for i in range(n)]


def built(work: Path, size: int, turns, vectors) -> Path:
    """The home holding the store of `size` memories with cached vectors, built on first use."""
    from persmem_core.auth.agents import AgentStore

    pristine = work / f"build-{size}"
    if not (pristine / "ready").exists():
        shutil.rmtree(pristine, ignore_errors=True)
        pristine.mkdir(parents=True)
        (pristine / "bench.token").write_text(AgentStore(pristine).add("bench").token)
        build(pristine, size, turns, vectors)
        (pristine / "ready").write_text("")
    return pristine


def measure(size: int, work: Path, turns, vectors, queries, ingest: int, runs: int) -> dict:
    from persmem_core.net.addresses import free_port
    from persmem_core.testing import clean_env
    from persmem_core.transport.server_process import RunningServer

    pristine, home = built(work, size, turns, vectors), work / f"run-{size}"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(pristine, home)
    tokens = {"bench": (home / "bench.token").read_text()}
    env = clean_env(home)
    out = {"disk_mb": disk_mb(home / "memory")}
    ready = []
    for n in range(runs):
        server = RunningServer(home, env, free_port(), tokens)
        start = time.perf_counter()
        server.start(timeout=900)
        anyio.run(first_search, server)
        ready.append(time.perf_counter() - start)
        if n < runs - 1:
            server.stop()
    out["ready_s"] = statistics.median(ready)
    out["searches"] = anyio.run(searches, server, queries)  # bench_memory's: 200 with a project filter, 200 without
    out["rss_mb"] = rss_mb(server.process.pid)
    if ingest:
        out["ingest"] = anyio.run(bulk_ingest, server, ingest_texts(turns, ingest, size))
        out["rss_after_ingest_mb"] = rss_mb(server.process.pid)
    server.stop()
    shutil.rmtree(home, ignore_errors=True)
    return out


def fresh_ingest(turns, n: int) -> dict:
    from persmem_core.testing import start_server

    server = start_server(Path(tempfile.mkdtemp(prefix="persmem-scale-ingest-")), agents=("bench",))
    try:
        return anyio.run(bulk_ingest, server, ingest_texts(turns, n, 0))
    finally:
        server.stop()
        shutil.rmtree(server.home, ignore_errors=True)


def backfill(turns: list[str], n_sessions: int) -> dict:
    """`persmem sessions import` of `n_sessions` Claude Code transcripts of ~100 turns into a running server:
    seconds until all are archived (GET /sessions/indexing polled beside it) and until the command returned
    (every turn indexed), turns/s for both."""
    import subprocess
    import threading

    import httpx2
    from bench_sessions import server_env, sessions_of

    from persmem_core.testing import start_server

    root = Path(tempfile.mkdtemp(prefix="persmem-scale-import-"))
    server = start_server(root / "home", ("bench",), server_env(root / "home"))
    try:
        made = sessions_of(n_sessions * 101, 80, turns)[:n_sessions]  # 80 texts + 10 tool calls and results
        total = sum(t for *_, t in made)
        projects = root / "me" / ".claude" / "projects"
        for session_id, cwd, lines, _ in made:
            folder = projects / cwd.replace("/", "-")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{session_id}.jsonl").write_text("\n".join(lines) + "\n")
        archived: list[float] = []
        done = threading.Event()

        def watch(start: float) -> None:
            with httpx2.Client(base_url=server.base_url, timeout=60,
                               headers={"Authorization": f"Bearer {server.tokens['bench']}"}) as http:
                while not done.is_set():
                    if http.get("/sessions/indexing").json()["turns"] >= total:
                        archived.append(time.perf_counter() - start)
                        return
                    time.sleep(0.1)

        start = time.perf_counter()
        watcher = threading.Thread(target=watch, args=(start,), daemon=True)
        watcher.start()
        result = subprocess.run([str(Path(sys.executable).parent / "persmem"), "sessions", "import", "--agent",
                                 "bench", "--claude", str(projects)], env=server.env, capture_output=True, text=True)
        searchable = time.perf_counter() - start
        done.set()
        watcher.join()
        assert result.returncode == 0, result.stderr[-2000:]
        while server.call_tool("memory_stats", {"collection": "sessions"}, agent="bench").get("not_embedded_yet"):
            time.sleep(0.2)
        embedded = time.perf_counter() - start
        session_id, _, lines, _ = made[-1]
        said = next(m["content"] for m in (json.loads(line)["message"] for line in reversed(lines))
                    if isinstance(m["content"], str))  # the session's last prompt
        hits = server.call_tool("session_search", {"query": said, "top_k": 5}, agent="bench")
        found = session_id in json.dumps(hits)
        return {"sessions": len(made), "turns": total, "archived_s": archived[0] if archived else float("nan"),
                "searchable_s": searchable, "embedded_s": embedded, "last_turn_found": found}
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(quick: bool = False, argv: list[str] | None = None) -> None:
    """`quick` (benchmarks/run.py --quick): 10k only, one restart, small ingests: checks the benchmark runs."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="store sizes, comma-separated (1000000 for 1M)")
    parser.add_argument("--ingest", type=int, default=5000, help="turns bulk-stored into each big store")
    parser.add_argument("--fresh-ingest", type=int, default=10000, help="turns bulk-stored into a fresh server")
    parser.add_argument("--runs", type=int, default=3, help="restarts per size (median)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "persmem-scale",
                        help="where the built stores are kept between runs")
    parser.add_argument("--import-sessions", type=int, default=1000,
                        help="sessions of ~100 turns in the `persmem sessions import` backfill (0: skip it)")
    parser.add_argument("--peers", type=int, default=10_000, help="memories for the peers' speed run (0: skip it)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--build-only", action="store_true", help="build the stores of --sizes, measure nothing")
    args = parser.parse_args([] if argv is None else argv)
    if quick:
        args.sizes, args.runs, args.ingest, args.fresh_ingest, args.import_sessions = "10000", 1, 1000, 2000, 10
        args.peers = 0  # their venvs are ~2.7 GB: a quick check does not install them
    turns, queries = locomo()
    vectors = turn_vectors(turns)
    if args.build_only:
        for size in (int(s) for s in args.sizes.split(",")):
            built(args.work, size, turns, vectors)
        return
    results = {"fresh_ingest": fresh_ingest(turns, args.fresh_ingest) if args.fresh_ingest else None}
    if args.import_sessions:
        results["backfill"] = backfill(turns, args.import_sessions)
        print(f"(backfill: {json.dumps(results['backfill'])})", file=sys.stderr, flush=True)
    for size in (int(s) for s in args.sizes.split(",") if s):
        results[size] = measure(size, args.work, turns, vectors, queries, args.ingest, args.runs)
        print(f"({size}: {json.dumps(results[size])})", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(table(results))
    if args.peers:
        import bench_peers

        bench_peers.main(sizes=[args.peers], workloads=("speed",))


def table(results: dict) -> str:
    sizes = [k for k in results if k not in ("fresh_ingest", "backfill")]
    rows = [("| | " + " | ".join(f"{s:,}" for s in sizes) + " |"), "|---|" + "---|" * len(sizes)]

    def row(label, fn):
        rows.append(f"| {label} | " + " | ".join(fn(results[s]) for s in sizes) + " |")

    fresh = results.get("fresh_ingest")
    if fresh:
        rows.insert(0, f"Fresh server, default memory_bulk_store (real embedder): {fresh['ack_per_s']:,.0f} "
                       f"memories/s acknowledged, {fresh['embedded_per_s']:,.0f}/s fully embedded.\n")
    backfill = results.get("backfill")
    if backfill:
        rows.insert(0, f"`persmem sessions import` of {backfill['sessions']:,} sessions ({backfill['turns']:,} turns, "
                       f"real embedder), into a running server: all archived in {backfill['archived_s']:.1f} s "
                       f"({backfill['turns'] / backfill['archived_s']:,.0f} turns/s); every turn searchable (by "
                       f"keyword at once, by meaning as embedded) when the command returned, "
                       f"{backfill['searchable_s']:.1f} s ({backfill['turns'] / backfill['searchable_s']:,.0f} "
                       f"turns/s); all embedded {backfill['embedded_s']:.1f} s "
                       f"({backfill['turns'] / backfill['embedded_s']:,.0f} turns/s); the last session's last "
                       f"prompt found by session_search: {'yes' if backfill['last_turn_found'] else 'NO'}.\n")
    if not sizes:
        return "\n".join(line for line in rows if not line.startswith("|"))
    row("restart -> first search answered, s (cached vectors)", lambda r: f"{r['ready_s']:.2f}")
    row("search p50 / p95 ms, project filter", lambda r: "{:.1f} / {:.1f}".format(*r["searches"]["search_filtered"]))
    row("search p50 / p95 ms, no filter", lambda r: "{:.1f} / {:.1f}".format(*r["searches"]["search"]))
    row("RSS after the searches, MB", lambda r: f"{r['rss_mb']:.0f}")
    row("disk, MB", lambda r: f"{r['disk_mb']:.0f}")
    if all("ingest" in results[s] for s in sizes):
        row("default bulk store into it: acknowledged /s", lambda r: f"{r['ingest']['ack_per_s']:,.0f}")
        row("... fully embedded /s (real embedder)", lambda r: f"{r['ingest']['embedded_per_s']:,.0f}")
        row("RSS after that, MB", lambda r: f"{r['rss_after_ingest_mb']:.0f}")
    return "\n".join(rows)


if __name__ == "__main__":
    main(argv=sys.argv[1:])
