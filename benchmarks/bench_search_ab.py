"""memory_search speed of this checkout against an earlier commit, in alternating rounds on copies of one store:
the before and after of a change to the search path, measured the same way, on the same data, in one run.

    python benchmarks/bench_search_ab.py --base <commit> [--size 100000] [--rounds 5]

The earlier commit is checked out as a temporary git worktree; its code runs from there through PYTHONPATH with
this checkout's installed dependencies (plugin entry points resolve to its modules). The store is built once by the
earlier code, in-process (LoCoMo turns in 10 projects: bench_memory.corpus), embedded in full, then copied for each
side; the newer code upgrades its copy on first open, as a user's server would. Each round restarts each side's
real `persmem serve` and runs bench_memory's searches through a real MCP HTTP client (200 LoCoMo questions,
top_k 5, with a project filter and without), then the same searches in-process (Collection.search) in a process
of that side's code. Printed: the median over rounds of each round's p50 / p95, and after / before ratios. The
sides alternate so a machine that slows down for a while slows both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from bench_memory import N_PROJECTS, corpus, first_search, pct, searches

ROOT = Path(__file__).resolve().parents[1]
MEASURES = ("search_filtered", "search")
LABELS = {"search_filtered": "project filter", "search": "no filter"}


def pythonpath(checkout: Path) -> str:
    """PYTHONPATH that runs `checkout`'s core and plugins instead of this checkout's."""
    plugins = sorted(str(p) for p in (checkout / "plugins").iterdir() if p.is_dir())
    return os.pathsep.join([str(checkout), *plugins])


def build(home: Path, size: int) -> None:
    """(In the base's process.) `size` memories stored and embedded in `home`, through the Python API."""
    from persmem_memory_hnsw.collection import NewMemory
    from persmem_memory_hnsw.service import open_service

    from persmem_core.host import Host

    service = open_service(Host(environ=dict(os.environ, PERSMEM_HOME=str(home))))
    try:
        col = service.collection("memories", create=True)
        texts, _ = corpus(size)
        for i in range(0, size, 1000):
            col.store([NewMemory(content=t["content"], project=t["project"], type="session_note", tags=[t["tags"]])
                       for t in texts[i:i + 1000]], author="bench")
        col.wait_embedded()
    finally:
        service.stop()


def in_process(home: Path) -> dict:
    """(In one side's process.) bench_memory's searches through Collection.search: {measure: (p50, p95)}."""
    import time

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
        col = service.collection("memories")
        for measure in MEASURES:
            times = []
            for i, query in enumerate(queries):
                filters = Filters(project=f"p{i % N_PROJECTS}") if measure == "search_filtered" else Filters()
                start = time.perf_counter()
                col.search(query, top_k=5, filters=filters)
                times.append((time.perf_counter() - start) * 1000)
            out[measure] = (statistics.median(times), pct(times, 0.95))
    finally:
        service.stop()
    return out


@contextlib.contextmanager
def base_worktree(base: str, prefix: str) -> Iterator[tuple[Path, Path]]:
    """(a work folder, a git worktree of `base` in it), removed afterwards. The process works in that folder: each
    side's server runs `python -m persmem_core`, which puts the working folder first on sys.path, so started from
    this checkout's root the "before" side would import this checkout's core instead of the base's."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    os.chdir(work)
    checkout = work / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(checkout), base], check=True,
                   capture_output=True)
    try:
        yield work, checkout
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(checkout)], capture_output=True,
                       check=False)
        shutil.rmtree(work, ignore_errors=True)


def run_side(mode: str, home: Path, path: str | None, *args: str, script: str = __file__) -> str:
    """`script` (this one by default) in `mode` in a process of one side's code (`path`: its PYTHONPATH, None for
    this checkout)."""
    from persmem_core.testing import clean_env

    env = clean_env(home) | ({"PYTHONPATH": path} if path else {})
    done = subprocess.run([sys.executable, script, mode, str(home), *args], env=env, capture_output=True,
                          text=True, timeout=7200, check=False)
    if done.returncode:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def serve_round(home: Path, path: str | None, token: str) -> dict:
    from persmem_core.net.addresses import free_port
    from persmem_core.testing import clean_env
    from persmem_core.transport.server_process import RunningServer

    env = clean_env(home) | ({"PYTHONPATH": path} if path else {})
    server = RunningServer(home, env, free_port(), {"bench": token}).start(600)
    try:
        anyio.run(first_search, server)
        _, queries = corpus(10)
        return anyio.run(searches, server, queries)
    finally:
        server.stop()


def main(base: str, size: int, rounds: int) -> None:
    from persmem_core.auth.agents import AgentStore

    with base_worktree(base, "persmem-ab-") as (work, checkout):
        sides = {"before": pythonpath(checkout), "after": None}
        store = work / "store"
        print(f"building {size:,} memories with {base} ...", file=sys.stderr)
        run_side("--build", store, sides["before"], str(size))
        token = AgentStore(store).add("bench").token
        homes = {}
        for side in sides:
            homes[side] = work / side
            shutil.copytree(store, homes[side])
        results = {side: {f"{where} {m}": [] for where in ("MCP", "in-process") for m in MEASURES} for side in sides}
        for n in range(rounds):
            for side, path in sides.items():
                served = serve_round(homes[side], path, token)
                local = json.loads(run_side("--in-process", homes[side], path).strip().splitlines()[-1])
                for m in MEASURES:
                    results[side][f"MCP {m}"].append(served[m])
                    results[side][f"in-process {m}"].append(local[m])
                print(f"round {n + 1}/{rounds} {side}: " + ", ".join(
                    f"{k} {v[-1][0]:.2f}/{v[-1][1]:.2f}" for k, v in results[side].items()), file=sys.stderr)
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=False).stdout.strip()
        print(f"\n## memory_search before ({base}) and after ({head}): {size:,} memories, {rounds} alternating rounds"
              "\n\n| search p50 / p95 (ms), median of rounds | before | after | p50 after/before | p95 after/before |"
              "\n|---|---|---|---|---|")
        for key in results["before"]:
            where, m = key.split(" ", 1)
            b = [statistics.median(x[i] for x in results["before"][key]) for i in (0, 1)]
            a = [statistics.median(x[i] for x in results["after"][key]) for i in (0, 1)]
            print(f"| {where}, {LABELS[m]} | {b[0]:.2f} / {b[1]:.2f} | {a[0]:.2f} / {a[1]:.2f} | "
                  f"{a[0] / b[0]:.2f} | {a[1] / b[1]:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--build":
        build(Path(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) > 2 and sys.argv[1] == "--in-process":
        print(json.dumps(in_process(Path(sys.argv[2]))))
    else:
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--base", required=True, help="the earlier commit (anything git rev-parse takes)")
        parser.add_argument("--size", type=int, default=100_000, help="memories in the store (default 100,000)")
        parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
        args = parser.parse_args()
        main(args.base, args.size, args.rounds)
