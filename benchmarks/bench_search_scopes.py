"""In-process memory_search speed of this checkout against an earlier commit, in a shared collection and in a private
one (`sessions`, several authors, each search one author's own rows: per-author BM25 statistics, issue 32), in
alternating rounds on copies of one store.

    python benchmarks/bench_search_scopes.py --base <commit> [--size 30000] [--rounds 5] [--authors 4]

The store is built once by the earlier code (bench_search_ab's way: a temporary git worktree on PYTHONPATH):
`size` LoCoMo memories in `memories` (one author, 10 projects) and the same texts as session turns in `sessions`,
shared out among `authors`; all embedded. Each round runs bench_memory's 200 questions (top_k 5) through
Collection.search in a process of each side's code: in `memories` with a project filter and without (hybrid), in
`sessions` as one author (hybrid, and lexical alone: the part that changed). Printed: the median over rounds of
each round's p50 / p95, and the p95 ratio after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_memory import N_PROJECTS, corpus, pct
from bench_search_ab import base_worktree, pythonpath, run_side

MEASURES = ("shared, project filter", "shared, no filter", "private, one author (hybrid)",
            "private, one author (lexical)")


def build(home: Path, size: int, authors: int) -> None:
    """(In the base's process.) The memories and the session turns, stored and embedded in `home`."""
    from persmem_memory_hnsw.collection import NewMemory
    from persmem_memory_hnsw.service import open_service

    from persmem_core.host import Host

    service = open_service(Host(environ=dict(os.environ, PERSMEM_HOME=str(home))))
    try:
        texts, _ = corpus(size)
        shared = service.collection("memories", create=True)
        for i in range(0, size, 1000):
            shared.store([NewMemory(content=t["content"], project=t["project"], type="session_note", tags=[t["tags"]])
                          for t in texts[i:i + 1000]], author="bench")
        private = service.collection("sessions", create=True)
        for a in range(authors):
            mine = texts[a::authors]
            for i in range(0, len(mine), 1000):
                private.store([NewMemory(content=t["content"], project=t["project"], type="user", tags=[t["tags"]])
                               for t in mine[i:i + 1000]], author=f"a{a}", dedup=False)
        shared.wait_embedded()
        private.wait_embedded()
    finally:
        service.stop()


def in_process(home: Path, authors: int) -> dict:
    """(In one side's process.) {measure: (p50, p95)} in ms."""
    from persmem_memory_hnsw.service import open_service

    from persmem_core.host import Host

    try:
        from persmem_memory_hnsw.store.query import Filters
    except ImportError:  # a base from before the memory plugin's rooms (issue 33)
        from persmem_memory_hnsw.query import Filters

    _, queries = corpus(10)
    service = open_service(Host(environ=dict(os.environ, PERSMEM_HOME=str(home))))
    out = {}
    try:
        shared, private = service.collection("memories"), service.collection("sessions")
        for measure in MEASURES:
            times = []
            for i, query in enumerate(queries):
                if measure.startswith("private"):
                    col, filters = private, Filters(author=f"a{i % authors}")
                else:
                    col, filters = shared, Filters(project=f"p{i % N_PROJECTS}") if "project" in measure else Filters()
                start = time.perf_counter()
                col.search(query, top_k=5, filters=filters, mode="lexical" if "lexical" in measure else "hybrid")
                times.append((time.perf_counter() - start) * 1000)
            out[measure] = (statistics.median(times), pct(times, 0.95))
    finally:
        service.stop()
    return out


def main(base: str, size: int, rounds: int, authors: int) -> None:
    with base_worktree(base, "persmem-scopes-") as (work, checkout):
        sides = {"before": pythonpath(checkout), "after": None}
        store = work / "store"
        print(f"building {size:,} memories and {size:,} session turns with {base} ...", file=sys.stderr)
        run_side("--build", store, sides["before"], str(size), str(authors), script=__file__)
        homes = {}
        for side in sides:
            homes[side] = work / side
            shutil.copytree(store, homes[side])
        results = {side: {m: [] for m in MEASURES} for side in sides}
        for n in range(rounds):
            for side, path in sides.items():
                answer = run_side("--in-process", homes[side], path, str(authors), script=__file__)
                local = json.loads(answer.strip().splitlines()[-1])
                for m in MEASURES:
                    results[side][m].append(local[m])
                print(f"round {n + 1}/{rounds} {side}: " + ", ".join(
                    f"{m} {v[0]:.2f}/{v[1]:.2f}" for m, v in local.items()), file=sys.stderr)
        print(f"\n## in-process memory_search before ({base}) and after: {size:,} memories and {size:,} session turns "
              f"of {authors} authors, {rounds} alternating rounds\n\n| p50 / p95 (ms), median of rounds | before | "
              "after | p95 after/before |\n|---|---|---|---|")
        for m in MEASURES:
            b = [statistics.median(x[i] for x in results["before"][m]) for i in (0, 1)]
            a = [statistics.median(x[i] for x in results["after"][m]) for i in (0, 1)]
            print(f"| {m} | {b[0]:.2f} / {b[1]:.2f} | {a[0]:.2f} / {a[1]:.2f} | {a[1] / b[1]:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--build":
        build(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 2 and sys.argv[1] == "--in-process":
        print(json.dumps(in_process(Path(sys.argv[2]), int(sys.argv[3]))))
    else:
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--base", required=True, help="the earlier commit (anything git rev-parse takes)")
        parser.add_argument("--size", type=int, default=30_000, help="memories, and session turns (default 30,000)")
        parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
        parser.add_argument("--authors", type=int, default=4, help="authors of the session turns (default 4)")
        args = parser.parse_args()
        main(args.base, args.size, args.rounds, args.authors)
