"""The workloads every system runs, identically: a worker script defines a Store class and calls run(Store).

Run as `<venv python> worker_<system>.py JOB.json OUT.json`. JOB is {"workload": "locomo" | "speed" | "reopen",
...} ("reopen": the store a "speed" run left, opened by a fresh process and searched once: a restart);
OUT gets the raw measurements (latency lists, ranked ids), which the bench scores and summarises, so every system
is scored by the same code. Only the standard library here: this file is imported by each peer's own venv.

A Store has: open(folder) for a fresh store in an empty folder, store_batch(items) and store_one(item) with
items {"id", "content", "project"}, wait_ready() (whatever must finish before a search sees every store),
search(query, k, project=None) -> ids best first, disk_folder() -> the folder holding its files, close().
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def status_mb(field: str, pid: int | str = "self") -> float:
    """A /proc/PID/status figure in MB (VmRSS, VmHWM): of this process, or of `pid`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def du_mb(path) -> float:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total / 1e6


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def locomo(store_cls, job: dict, root: Path) -> dict:
    """One fresh store per conversation; all its memories in batches, then every question (top k ids)."""
    k, batch = job["k"], job["batch"]
    out = {"ingest_s": 0.0, "search_ms": [], "ranked": [], "open_s": []}
    store = store_cls()
    for ci, conv in enumerate(job["convs"]):
        t = time.perf_counter()
        store.open(root / f"conv{ci}")
        out["open_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        mems = conv["mems"]
        for i in range(0, len(mems), batch):
            store.store_batch([dict(m, project="locomo") for m in mems[i:i + batch]])
        store.wait_ready()
        out["ingest_s"] += time.perf_counter() - t
        ranked = []
        for q in conv["queries"]:
            t = time.perf_counter()
            ids = store.search(q, k)
            out["search_ms"].append((time.perf_counter() - t) * 1000)
            ranked.append(ids)
        out["ranked"].append(ranked)
        store.close()
        log(f"locomo conversation {ci + 1}/{len(job['convs'])}: {len(mems)} memories, {len(ranked)} questions")
    out["peak_rss_mb"] = status_mb("VmHWM")
    return out


def speed(store_cls, job: dict, root: Path) -> dict:
    """Batched load of the corpus, searches with and without a project filter, single durable stores."""
    texts, queries, batch, n_projects = job["texts"], job["queries"], job["batch"], job["n_projects"]
    store = store_cls()
    t = time.perf_counter()
    store.open(root / "speed")
    out = {"open_s": time.perf_counter() - t}
    t = time.perf_counter()
    for i in range(0, len(texts), batch):
        store.store_batch([{"id": f"m{i + j}", "content": x["content"], "project": x["project"]}
                           for j, x in enumerate(texts[i:i + batch])])
        if (i // batch) % 10 == 9:
            log(f"speed: stored {i + batch:,} / {len(texts):,}")
    store.wait_ready()
    out["ingest_s"] = time.perf_counter() - t
    for label, filtered in (("search_filtered_ms", True), ("search_ms", False)):
        times = []
        for i, q in enumerate(queries):
            t = time.perf_counter()
            ids = store.search(q, job["k"], project=f"p{i % n_projects}" if filtered else None)
            times.append((time.perf_counter() - t) * 1000)
            assert ids, f"no result for {q!r}"
        out[label] = times
    out["rss_mb"] = status_mb("VmRSS")
    times = []
    for i in range(job["n_store"]):
        item = {"id": f"new{i}", "content": f"fresh durable note {i}: {queries[i % len(queries)]}",
                "project": f"p{i % n_projects}"}
        t = time.perf_counter()
        store.store_one(item)
        times.append((time.perf_counter() - t) * 1000)
    out["store_one_ms"] = times
    store.wait_ready()
    out["disk_mb"] = du_mb(store.disk_folder())
    store.close()
    out["peak_rss_mb"] = status_mb("VmHWM")
    return out


def reopen(store_cls, job: dict, root: Path) -> dict:
    """The store the speed workload left in `root`, opened by this fresh process, and one search: the wall-clock
    time it was answered (the bench subtracts when it started this process: a restart, imports included)."""
    store = store_cls()
    store.open(root / "speed")
    ids = store.search(job["query"], job["k"])
    answered = time.time()
    assert ids, "no result after the restart"
    store.close()
    return {"answered_at": answered}


def run(store_cls) -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    root = Path(job["folder"])
    root.mkdir(parents=True, exist_ok=True)
    result = {"locomo": locomo, "speed": speed, "reopen": reopen}[job["workload"]](store_cls, job, root)
    Path(sys.argv[2]).write_text(json.dumps(result))
