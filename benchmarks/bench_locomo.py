"""LoCoMo retrieval through the real memory tools (no LLM): session and dialog R@5/R@10, per category.

Recipe (benchmarks.md, as MemPalace's harness): one fresh store per
conversation (here: one collection each, in one real server); dialog
granularity stores one memory per turn, `Speaker said, "text"`, id = dia_id;
session granularity stores one memory per session, turns joined by
newlines. Query = the question; hit score = |gold ∩ top-k| / |gold|; a
question with no evidence scores 1. Data: ../shared/data/locomo (benchmark
use only, never shipped).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import anyio

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.json"


def sessions_of(conv: dict) -> list[tuple[int, list[dict]]]:
    c = conv["conversation"]
    keys = sorted((int(m.group(1)), k) for k in c if (m := re.fullmatch(r"session_(\d+)", k)))
    return [(n, c[k]) for n, k in keys]


def memories_for(conv: dict, granularity: str) -> list[dict]:
    out = []
    for n, turns in sessions_of(conv):
        lines = [f'{t["speaker"]} said, "{t["text"]}"' for t in turns]
        if granularity == "dialog":
            out += [{"id": t["dia_id"].replace(":", "_"), "content": line} for t, line in zip(turns, lines)]
        else:
            out.append({"id": f"session_{n}", "content": "\n".join(lines)})
    return out


def gold_of(qa: dict, granularity: str) -> set[str]:
    gold = set()
    for ev in qa.get("evidence", []):
        for part in re.split(r"[;,\s]+", ev):
            m = re.fullmatch(r"D(\d+):(\d+)", part.strip())
            if m:
                gold.add(f"D{m.group(1)}_{m.group(2)}" if granularity == "dialog" else f"session_{m.group(1)}")
    return gold


async def run(server, convs, granularities, ks=(5, 10)) -> dict:
    results = {}
    async with server.client("bench") as client:
        for gran in granularities:
            per_cat: dict[int, list[list[float]]] = {}
            for ci, conv in enumerate(convs):
                collection = f"locomo-{gran}-{ci}"
                mems = memories_for(conv, gran)
                for start in range(0, len(mems), 200):
                    r = await client.call_tool("memory_bulk_store", {
                        "chunks": json.dumps(mems[start:start + 200]), "collection": collection, "dedup": False})
                    assert not r.is_error, r.content[0].text
                for qa in conv["qa"]:
                    gold = gold_of(qa, gran)
                    r = await client.call_tool("memory_search", {"query": qa["question"], "top_k": max(ks),
                                                                 "collection": collection})
                    assert not r.is_error, r.content[0].text
                    ids = [x["id"] for x in json.loads(r.content[0].text)["results"]]
                    scores = [1.0 if not gold else len(gold & set(ids[:k])) / len(gold) for k in ks]
                    per_cat.setdefault(qa.get("category", 0), []).append(scores)
            results[gran] = per_cat
    return results


def main(quick: bool = False) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from persmem_core.testing import start_server, write_config

    convs = json.loads(DATA.read_text())
    if quick:
        convs = convs[:1]
    home = Path(tempfile.mkdtemp(prefix="persmem-locomo-"))
    # Retrieval is measured, not the reply shaping: no relative score floor and no reply budget, so every one of
    # the top 10 comes back (with the defaults a reply may rightly hold fewer hits than top_k). No retrieval
    # weight: the benchmark's own earlier questions would otherwise lift what they found (the score would then
    # depend on the order of the questions).
    write_config(home, {"memory": {"search_min_relative_score": 0.0, "search_reply_chars": 1_000_000,
                                   "retrieval_weight": 0.0}})
    server = start_server(home, agents=("bench",))
    start = time.perf_counter()
    try:
        results = anyio.run(run, server, convs, ["session", "dialog"])
    finally:
        server.stop()
    n_q = sum(len(c["qa"]) for c in convs)
    print(f"\n## LoCoMo retrieval ({len(convs)} conversations, {n_q} questions, hybrid memory_search via MCP; "
          f"{time.perf_counter() - start:.0f} s)\n")
    print("| granularity | R@5 | R@10 | " + " | ".join(f"cat {c} R@10" for c in range(1, 6)) + " |")
    print("|---|---|---|" + "---|" * 5)
    summary = {}
    for gran, per_cat in results.items():
        allq = [s for scores in per_cat.values() for s in scores]
        r5 = sum(s[0] for s in allq) / len(allq)
        r10 = sum(s[1] for s in allq) / len(allq)
        cats = [per_cat.get(c) for c in range(1, 6)]
        cat_cells = [f"{sum(s[1] for s in c) / len(c):.3f} (n={len(c)})" if c else "-" for c in cats]
        print(f"| {gran} | {r5:.3f} | {r10:.3f} | " + " | ".join(cat_cells) + " |")
        summary[gran] = (r5, r10)
    print("\nTargets: session R@10 >= 0.93, dialog R@10 >= 0.70. Reference (same recipe, benchmarks.md): "
          "naive RRF 0.868 / 0.553; MemPalace raw 0.603 / 0.480.")
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    main(parser.parse_args().quick)
