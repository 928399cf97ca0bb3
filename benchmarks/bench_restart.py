"""Restart of a big collection: `Collection.open` until the first search answers, by a whole replay of the log
(before checkpoints) and from the checkpoint (checkpoint.py), each in a fresh process, with a breakdown and the
RSS after the first search.

    python benchmarks/bench_restart.py --folder /tmp/w/restart100k/memories --build 100000 --runs 3

--build stores that many memories first (LoCoMo turns, batches of 256 through Collection.store with the real
embedder: ~20 min at 100k on 2 shared cores) when the folder holds no collection; later runs reuse it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(folder: Path, n: int) -> None:
    sys.path.insert(0, str(HERE))
    from bench_memory import corpus

    from persmem_memory_hnsw.collection import Collection, NewMemory
    from persmem_memory_hnsw.config import MemoryConfig
    from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

    texts, _ = corpus(n)
    col = Collection("memories", folder, OnnxEmbedder(default_model_files()).load(), MemoryConfig()).open()
    start = time.time()
    for at in range(0, n, 256):
        col.store([NewMemory(content=t["content"], project=t["project"], type="session_note", tags=[t["tags"]])
                   for t in texts[at : at + 256]], author=f"a{(at // 256) % 3}", dedup=False)
    col.close()
    print(f"built {n} memories in {time.time() - start:.0f}s", file=sys.stderr)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def sealer_from(key_file: Path | None):
    """The Sealer of a raw 32-byte key file (encryption on), or None (plaintext)."""
    if key_file is None:
        return None
    from persmem_core.crypto.keys import key_id
    from persmem_core.crypto.sealing import Sealer

    key = key_file.read_bytes()
    return Sealer({key_id(key): key}, key_id(key), True)


def child(mode: str, folder: Path, key_file: Path | None = None) -> dict:
    """One restart in this fresh process: 'replay' (the checkpoint moved aside) or 'checkpoint'."""
    import persmem_memory_hnsw.collection as collection_module
    from persmem_memory_hnsw.collection import Collection
    from persmem_memory_hnsw.config import MemoryConfig
    from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
    from persmem_memory_hnsw.store.lexical import BM25Index
    from persmem_memory_hnsw.store.log import read_frames
    from persmem_memory_hnsw.store.query import Filters
    from persmem_memory_hnsw.store.vectors import VectorIndex

    spent: dict[str, float] = {}

    def timed(owner, name, key):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - start

        setattr(owner, name, wrapper)

    t0 = time.perf_counter()
    embedder = OnnxEmbedder(default_model_files()).load()
    embedder.embed_query("warm up")
    spent["embedder load"] = time.perf_counter() - t0
    timed(collection_module, "load_index", "index load + its tail")
    if mode == "replay":
        log_path = folder / "records.log"
        start = time.perf_counter()
        data = log_path.read_bytes()
        read = time.perf_counter() - start
        start = time.perf_counter()
        frames = sum(1 for _ in read_frames(data, sealer_from(key_file)))
        decode = time.perf_counter() - start
        del data
        timed(BM25Index, "add", "bm25 (tokenise, stem, postings)")
        timed(BM25Index, "merge", "bm25 (tokenise, stem, postings)")
        timed(VectorIndex, "remember", "int8 copy")
    timed(collection_module, "open_rows", "rows total")
    timed(collection_module, "save_checkpoint", "checkpoint save (after a whole replay; not in open)")
    col = Collection("memories", folder, embedder, MemoryConfig(), sealer_from(key_file))
    start = time.perf_counter()
    col.open()
    spent["open"] = time.perf_counter() - start - spent.get("checkpoint save (after a whole replay; not in open)", 0.0)
    start = time.perf_counter()
    col.search("What did Caroline research?", top_k=5, filters=Filters(project="p3"))
    spent["first search"] = time.perf_counter() - start
    spent["restart -> first search"] = (time.perf_counter() - t0
                                        - spent.get("checkpoint save (after a whole replay; not in open)", 0.0))
    out = {"mode": mode, "memories": len(col.memories), "rss_mb": rss_mb(), "spent": spent}
    if mode == "replay":
        spent["log read (separately)"] = read
        spent["frame decode (separately)"] = decode
        spent["rows.put etc. (rows total - read - decode - bm25 - int8)"] = (
            spent["rows total"] - read - decode - spent.get("bm25 (tokenise, stem, postings)", 0.0)
            - spent.get("int8 copy", 0.0))
        out["frames"] = frames
    else:
        out["from_checkpoint"] = col.opened.from_checkpoint
        out["tail_entries"] = col.opened.tail_entries
        for key, value in col.opened.timings.items():
            spent[f"checkpoint {key}"] = value
    col.log.close()  # no index save: every run starts from the same files
    return out


def run(mode: str, folder: Path, key_file: Path | None) -> dict:
    extra = ["--key", str(key_file)] if key_file else []
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--folder", str(folder), *extra], check=True,
                          capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--build", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child")
    parser.add_argument("--key", type=Path, help="a raw 32-byte key file: the collection is sealed with it")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.folder, args.key)))
        return
    if args.build and not (args.folder / "records.log").exists():
        build(args.folder, args.build)
    cp = args.folder / "checkpoint.bin"
    if not cp.exists():
        first = run("checkpoint", args.folder, args.key)  # a whole replay, then the checkpoint is saved
        print(f"checkpoint saved in {first['spent'].get('checkpoint save', float('nan')):.2f}s "
              f"({cp.stat().st_size / 1e6:.1f} MB)")
    results: dict[str, list[dict]] = {"replay": [], "checkpoint": []}
    for _ in range(args.runs):  # interleaved: the machine is shared and noisy
        aside = [p for p in (cp, cp.with_name(cp.name + ".meta.json"))]
        for p in aside:
            os.replace(p, p.with_name(p.name + ".aside"))
        try:
            results["replay"].append(run("replay", args.folder, args.key))
        finally:
            for p in aside:
                os.replace(p.with_name(p.name + ".aside"), p)
        results["checkpoint"].append(run("checkpoint", args.folder, args.key))
    assert all(r["from_checkpoint"] for r in results["checkpoint"])
    keys = list(dict.fromkeys(k for rs in results.values() for r in rs for k in r["spent"]))
    n = results["replay"][0]["memories"]
    print(f"\nrestart of {n} memories{' (sealed)' if args.key else ''} ({cp.stat().st_size / 1e6:.1f} MB checkpoint, "
          f"{(args.folder / 'records.log').stat().st_size / 1e6:.1f} MB log), median of {args.runs}, seconds\n")
    print("| step | whole replay | from checkpoint |\n|---|---|---|")
    for key in keys:
        cells = []
        for mode in ("replay", "checkpoint"):
            values = [r["spent"][key] for r in results[mode] if key in r["spent"]]
            cells.append(f"{statistics.median(values):.3f}" if values else "")
        print(f"| {key} | {cells[0]} | {cells[1]} |")
    print(f"| VmRSS after first search (MB) | {statistics.median(r['rss_mb'] for r in results['replay']):.0f} | "
          f"{statistics.median(r['rss_mb'] for r in results['checkpoint']):.0f} |")


if __name__ == "__main__":
    main()
