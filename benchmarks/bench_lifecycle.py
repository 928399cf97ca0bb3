"""Memory that stays true: facts restated later in other words, among many unrelated memories, through the real tools.

Data: benchmarks/data/lifecycle_facts.json, written for this benchmark (not
from LoCoMo or any benchmark set): 68 facts that change over time, each an
old statement, a later restatement in other words with the new value, a
question whose answer is the new value, and siblings (statements about the
same subject that stay true); plus templates from which the unrelated
memories are generated deterministically (some in the same projects).

Three parts:
- thresholds (lifecycle_thresholds.py; in-process, the server's embedder and the lexical analyzer):
  cosine and shared subject terms of (old, new), (sibling, new) and
  (nearest unrelated, new) pairs, and a sweep of supersede_min_similarity x
  supersede_min_shared_terms replaying the store order of the server run
  (best older candidate of the same project, near duplicates excluded):
  detection recall and false links.
- server: a real `persmem serve` and a real MCP HTTP client. Unrelated
  memories through memory_bulk_store; then each old statement and its
  siblings through memory_store; then, later, each restatement through a
  plain memory_store (no supersedes=, as assistants do), with more unrelated
  memories stored the same way between them; then each question through
  memory_search top_k=10 (no project filter). Run twice: `baseline`
  (supersede_detect = false, superseded_weight = 1, feedback and retrieval
  weights 0: the ranking before the lifecycle) and `lifecycle` (defaults).
- consolidation: seconds for a consolidation pass over 10k and 100k memories
  (in-process on a store loaded through the Python API), when
  lifecycle/consolidation.py is there.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
from collections import Counter
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from lifecycle_thresholds import pct, print_thresholds, thresholds  # noqa: E402 - beside this file

DATA = Path(__file__).resolve().parent / "data" / "lifecycle_facts.json"
# Written apart and never used to choose a threshold or a rule: the honest figures (--data heldout).
HELDOUT = Path(__file__).resolve().parent / "data" / "lifecycle_heldout.json"
N_UNRELATED = 450  # bulk-stored before the facts
N_UNRELATED_LATER = 80  # stored one by one through memory_store among the restatements
SEED = 17


def load(path: Path = DATA) -> dict:
    return json.loads(path.read_text())


def unrelated_memories(data: dict, n: int, seed: int = SEED) -> list[dict]:
    """n distinct memories from the templates, round-robin over them, slots filled by a seeded generator."""
    templates, vocab = data["unrelated"]["templates"], data["unrelated"]["vocab"]
    rng = random.Random(seed)
    seen, out, i = set(), [], 0
    while len(out) < n:
        template = templates[i % len(templates)]
        i += 1
        slots = {name for _, name, _, _ in string.Formatter().parse(template["text"]) if name}
        text = template["text"].format(**{s: rng.choice(vocab[s]) for s in slots})
        text = text[0].upper() + text[1:]
        if text not in seen:
            seen.add(text)
            out.append({"content": text, "project": template["project"]})
        if i > 100 * n:
            raise RuntimeError("the templates cannot make that many distinct memories")
    return out


def store_plan(data: dict, quick: bool) -> dict:
    """What the server run stores, in order, with a kind per item: the thresholds study replays the same order.

    bulk: unrelated memories through memory_bulk_store (no detection); then, one memory_store each: every old
    statement followed by its siblings (facts in a shuffled order); then every restatement (another order) with
    an unrelated memory after every few."""
    rng = random.Random(SEED)
    facts = data["facts"][:24] if quick else list(data["facts"])
    n_bulk, n_later = (150, 20) if quick else (N_UNRELATED, N_UNRELATED_LATER)
    unrelated = unrelated_memories(data, n_bulk + n_later)
    bulk, later = unrelated[:n_bulk], unrelated[n_bulk:]
    olds = facts[:]
    rng.shuffle(olds)
    singles = []
    for f in olds:
        singles.append({"kind": "old", "fact": f["id"], "content": f["old"], "project": f["project"]})
        singles += [{"kind": "sibling", "fact": f["id"], "sibling": i, "content": s, "project": f["project"]}
                    for i, s in enumerate(f["siblings"])]
    news = facts[:]
    rng.shuffle(news)
    every = max(1, len(news) // max(1, len(later)))
    later_iter = iter(later)
    for i, f in enumerate(news):
        singles.append({"kind": "new", "fact": f["id"], "content": f["new"], "project": f["project"]})
        if i % every == every - 1:
            u = next(later_iter, None)
            if u is not None:
                singles.append({"kind": "unrelated", "fact": None} | u)
    singles += [{"kind": "unrelated", "fact": None} | u for u in later_iter]
    return {"facts": facts, "bulk": bulk, "singles": singles}


BASELINE = {"supersede_detect": False, "superseded_weight": 1.0, "feedback_weight": 0.0, "retrieval_weight": 0.0,
            "restated_min_similarity": 1.0}


def links_of(memory: dict) -> list[str]:
    """The ids a stored memory supersedes, as memory_get shows them (a restatement is detected when the memory is
    embedded, after its store was acknowledged; memory_get waits for that)."""
    return [link["id"] if isinstance(link, dict) else link for link in memory.get("supersedes", []) or []]


MARKS = ("superseded_by", "restated_by")  # how a search result says a later memory replaces it


async def server_workload(server, plan: dict) -> dict:
    from persmem_core.transport.tool_answers import tool_result

    ids: dict[tuple, str] = {}
    links: list[tuple[dict, str]] = []  # (the item stored, the id it was linked to as superseding)
    kind_of: dict[str, tuple] = {}
    marks: list[tuple[str, str, str]] = []  # (marked result id, mark, the id it names) over every search
    search_ms: list[float] = []
    async with server.client("bench") as client:
        async def search(query: str) -> list[dict]:
            t = time.perf_counter()
            reply = tool_result(await client.call_tool("memory_search", {"query": query, "top_k": 10}))
            search_ms.append((time.perf_counter() - t) * 1000)
            marks.extend((r["id"], m, r[m]) for r in reply["results"] for m in MARKS if r.get(m))
            return reply["results"]

        for start in range(0, len(plan["bulk"]), 500):
            reply = tool_result(await client.call_tool("memory_bulk_store", {
                "chunks": json.dumps(plan["bulk"][start:start + 500]), "context_chars": 0, "dedup": False}))
            kind_of.update((r["id"], ("unrelated", None)) for r in reply["results"])
        store_ms = []
        hints: list[tuple[dict, list[str]]] = []  # (the item stored, the ids its reply said it may replace)
        stored: list[tuple[dict, str]] = []  # (the item, its id), for its links once it is embedded
        for item in plan["singles"]:
            t = time.perf_counter()
            reply = tool_result(await client.call_tool("memory_store", {"content": item["content"],
                                                                        "project": item["project"]}))
            store_ms.append((time.perf_counter() - t) * 1000)
            if reply["status"] == "duplicate" and item["kind"] == "unrelated":
                continue  # a template twin the store took for a near duplicate: nothing stored, nothing linked
            assert reply["status"] == "stored", (item, reply)
            # what the reply names as replaced: may_replace, or the link a sure restatement made at once
            hints.append((item, [m["id"] for m in reply.get("may_replace", [])]
                          + [m["id"] for m in reply.get("supersedes", [])]))
            kind_of[reply["id"]] = (item["kind"], item["fact"]) + ((item["sibling"],) if "sibling" in item else ())
            if item["kind"] in ("old", "new"):
                ids[(item["kind"], item["fact"])] = reply["id"]
            if item["kind"] == "sibling":
                ids[("sibling", item["fact"], item["sibling"])] = reply["id"]
            stored.append((item, reply["id"]))
        for item, memory_id in stored:
            memory = tool_result(await client.call_tool("memory_get", {"memory_id": memory_id}))
            links += [(item, target) for target in links_of(memory)]
        per_fact, per_sibling = [], []
        for f in plan["facts"]:
            results = await search(f["question"])
            order = [r["id"] for r in results]
            new_id, old_id = ids[("new", f["id"])], ids[("old", f["id"])]
            old_hit = next((r for r in results if r["id"] == old_id), None)
            per_fact.append({"fact": f["id"], "new_rank": order.index(new_id) if new_id in order else None,
                             "old_rank": order.index(old_id) if old_id in order else None,
                             "old_marked": bool(old_hit and any(old_hit.get(m) == new_id for m in MARKS))})
        for f in plan["facts"]:
            for i, question in enumerate(f.get("sibling_questions", [])):
                order = [r["id"] for r in await search(question)]
                sibling_id = ids[("sibling", f["id"], i)]
                per_sibling.append({"fact": f["id"], "rank": order.index(sibling_id) if sibling_id in order else None,
                                    "new_rank": order.index(ids[("new", f["id"])])
                                    if ids[("new", f["id"])] in order else None})
    correct = [(item, target) for item, target in links
               if item["kind"] == "new" and kind_of.get(target) == ("old", item["fact"])]
    return {"per_fact": per_fact, "per_sibling": per_sibling, "search_ms": search_ms, "store_ms": store_ms,
            "hints": hints,
            "links": links, "correct_links": len(correct), "kind_of": kind_of, "marks": marks, "ids": ids}


def summarize(run: dict, n_facts: int) -> dict:
    per_fact, per_sibling, kind_of = run["per_fact"], run["per_sibling"], run["kind_of"]
    above = sum(1 for p in per_fact if p["new_rank"] is not None
                and (p["old_rank"] is None or p["new_rank"] < p["old_rank"]))
    top5 = sum(1 for p in per_fact if p["new_rank"] is not None and p["new_rank"] < 5)
    top10 = sum(1 for p in per_fact if p["new_rank"] is not None)
    old_shown = [p for p in per_fact if p["old_rank"] is not None]
    links = run["links"]
    sibling_links = sum(1 for item, target in links
                        if item["kind"] == "sibling" or kind_of.get(target, ("",))[0] == "sibling")
    # a mark is right when an old statement names its own restatement; anything else marks a still-true memory
    right = {(run["ids"][("old", fid)], run["ids"][("new", fid)]) for (kind, fid, *_) in kind_of.values()
             if kind == "old"}
    marked = {(marked_id, named) for marked_id, _, named in run["marks"]}
    wrong_marks = sorted(m for m in marked if m not in right)
    n_sib = len(per_sibling) or 1
    hinted = {kind: [names for item, names in run["hints"] if item["kind"] == kind]
              for kind in ("new", "old", "sibling", "unrelated")}
    right_hints = sum(run["ids"][("old", item["fact"])] in names for item, names in run["hints"]
                      if item["kind"] == "new")
    return {
        "hint_recall": right_hints / n_facts,
        "hint_rate": {kind: (sum(bool(n) for n in lists) / len(lists) if lists else 0.0, len(lists))
                      for kind, lists in hinted.items()},
        "above": above / n_facts, "top5": top5 / n_facts, "top10": top10 / n_facts,
        "old_shown": len(old_shown), "old_marked": sum(p["old_marked"] for p in old_shown),
        "links": len(links), "correct": run["correct_links"], "sibling_links": sibling_links,
        "precision": run["correct_links"] / len(links) if links else None,
        "recall": run["correct_links"] / n_facts,
        "search_p50": statistics.median(run["search_ms"]), "search_p95": pct(run["search_ms"], 0.95),
        "store_p50": statistics.median(run["store_ms"]),
        "not_top5": [p["fact"] for p in per_fact if p["new_rank"] is None or p["new_rank"] >= 5],
        "sibling_top1": sum(p["rank"] == 0 for p in per_sibling) / n_sib,
        "sibling_top5": sum(p["rank"] is not None and p["rank"] < 5 for p in per_sibling) / n_sib,
        "sibling_below_new": sum(p["rank"] is not None and p["new_rank"] is not None and p["new_rank"] < p["rank"]
                                 for p in per_sibling),
        "n_siblings": len(per_sibling), "right_marks": len(marked) - len(wrong_marks),
        "wrong_marks": len(wrong_marks),
        "wrong_marked_kinds": dict(Counter(f"{kind_of.get(m, ('?',))[0]} by {kind_of.get(by, ('?',))[0]}"
                                           for m, by in wrong_marks).most_common()),
    }


def run_server(plan: dict, memory_config: dict, busy: bool = False) -> dict:
    """One server run; `busy`: with a process per core spinning meanwhile (a box doing other work: the
    background embedder falls behind the stores)."""
    import multiprocessing
    import os

    from persmem_core.testing import start_server, write_config

    home = Path(tempfile.mkdtemp(prefix="persmem-lifecycle-"))
    write_config(home, {"memory": memory_config} if memory_config else None)
    server = start_server(home, agents=("bench",), timeout=120)
    burners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)] if busy else []
    for burner in burners:
        burner.start()
    try:
        return anyio.run(server_workload, server, plan)
    finally:
        for burner in burners:
            burner.terminate()
        server.stop()


def _spin() -> None:
    while True:
        pass


def print_server(rows: list[tuple[str, dict]], plan: dict) -> None:
    n = len(plan["facts"])
    print(f"\n## Lifecycle: restated facts through the real tools ({n} facts, "
          f"{sum(len(f['siblings']) for f in plan['facts'])} siblings, {len(plan['bulk'])} + "
          f"{sum(1 for s in plan['singles'] if s['kind'] == 'unrelated')} unrelated; memory_store one by one, "
          f"memory_search top_k=10 over MCP HTTP, no project filter)\n")
    print("| run | current ranked above superseded | current in top 5 | current in top 10 | "
          "superseded shown / marked | links detected (correct) | precision | recall | sibling false links | "
          "search p50 / p95 ms | store p50 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, s in rows:
        precision = "-" if s["precision"] is None else f"{s['precision']:.3f}"
        print(f"| {label} | {s['above']:.3f} | {s['top5']:.3f} | {s['top10']:.3f} | {s['old_shown']} / "
              f"{s['old_marked']} | {s['links']} ({s['correct']}) | {precision} | {s['recall']:.3f} | "
              f"{s['sibling_links']} | {s['search_p50']:.1f} / {s['search_p95']:.1f} | {s['store_p50']:.1f} |")
    print("\nStill-true memories: each sibling asked about by its own question (`sibling_questions`); marks "
          "(superseded_by / restated_by) over every search, right when an old statement names its own "
          "restatement:\n")
    print("| run | sibling first | sibling in top 5 | sibling below its fact's restatement | right marks | "
          "wrong marks (which marked by which) |")
    print("|---|---|---|---|---|---|")
    for label, s in rows:
        kinds = ", ".join(f"{n} {kind}" for kind, n in s["wrong_marked_kinds"].items()) or "-"
        print(f"| {label} | {s['sibling_top1']:.3f} | {s['sibling_top5']:.3f} | {s['sibling_below_new']} of "
              f"{s['n_siblings']} | {s['right_marks']} | {s['wrong_marks']} ({kinds}) |")
    print("\nStore replies (memory_store's may_replace, or the link it made at once): the earlier statement named in "
          "its restatement's reply, and how often a reply names anything, by what was stored (a first statement of a fact: nothing to "
          "replace; a sibling: same subject, still true; an unrelated note from the templates, whose twins often "
          "differ by one value):\n")
    print("| run | restatement names its earlier statement | first statements with a hint | siblings with a hint | "
          "unrelated notes with a hint |")
    print("|---|---|---|---|---|")
    for label, s in rows:
        rate = s["hint_rate"]
        print(f"| {label} | {s['hint_recall']:.3f} | {rate['old'][0]:.3f} of {rate['old'][1]} | "
              f"{rate['sibling'][0]:.3f} of {rate['sibling'][1]} | {rate['unrelated'][0]:.3f} of "
              f"{rate['unrelated'][1]} |")
    for label, s in rows:
        if s["not_top5"]:
            print(f"\n{label}: current not in the top 5 for {', '.join(s['not_top5'])}")
    print("\nTargets: current ranked above the superseded one >= 0.95, current in the top 5 = 1.0. `baseline`: "
          f"{json.dumps(BASELINE)} (the ranking before the lifecycle); `lifecycle`: the defaults.")


# -- part 3: consolidation time ----------------------------------------------------------------------------------

def consolidation(sizes: list[int]) -> list[dict]:
    """Seconds for consolidation passes over `sizes` memories (unrelated memories from the templates: recurring
    shapes, so there are clusters), stored in-process a month ago: a dry run, the first run (writes), a second
    run (nothing new: writes nothing)."""
    import os

    from persmem_core.host import Host
    from persmem_memory_hnsw.collection import NewMemory
    from persmem_memory_hnsw.service import open_service

    try:
        from persmem_memory_hnsw.lifecycle.consolidation import consolidate
    except ImportError:
        print("(lifecycle/consolidation.py is not there yet: no consolidation timing)")
        return []
    data, out = load(), []
    for n in sizes:
        home = Path(tempfile.mkdtemp(prefix="persmem-consolidate-"))
        service = open_service(Host(environ=dict(os.environ, PERSMEM_HOME=str(home))))
        try:
            col = service.collection("memories", create=True)
            texts = unrelated_memories(data, n, seed=SEED + n)
            created = time.time() - 30 * 86400.0
            start = time.perf_counter()
            for i in range(0, n, 1000):
                col.store([NewMemory(content=t["content"], project=t["project"], type="session_note", tags=[],
                                     created=created + i + j) for j, t in enumerate(texts[i:i + 1000])],
                          author="bench", dedup=False)
            row = {"memories": n, "load_s": time.perf_counter() - start}
            for label, dry in (("dry_run", True), ("first", False), ("second", False)):
                t = time.perf_counter()
                report = consolidate(col, service.config, dry_run=dry)
                row[label] = time.perf_counter() - t
                row[label + "_report"] = (report.created, report.grown, report.candidates)
            out.append(row)
            print(f"(consolidation, {n:,} memories: {row})", flush=True)
        finally:
            service.stop()
    return out


def print_consolidation(rows: list[dict]) -> None:
    if not rows:
        return
    print("\n## Lifecycle: consolidation time (in-process, all authors and projects of one collection)\n")
    print("| memories | dry run s | first run s (created, candidates) | second run s (created, grown) | "
          "store load s |")
    print("|---|---|---|---|---|")
    for r in rows:
        created, _, candidates = r["first_report"]
        again_created, again_grown, _ = r["second_report"]
        print(f"| {r['memories']:,} | {r['dry_run']:.2f} | {r['first']:.2f} ({created}, {candidates:,}) | "
              f"{r['second']:.2f} ({again_created}, {again_grown}) | {r['load_s']:.0f} |")


def parse_variant(text: str) -> dict:
    """'supersede_min_similarity=0.65,superseded_weight=0.4' -> {[memory] setting: value} (JSON values)."""
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


# -- main ---------------------------------------------------------------------------------------------------------

def main(quick: bool = False, parts: tuple[str, ...] = ("thresholds", "server", "consolidation"),
         consolidation_sizes: list[int] | None = None, variants: list[dict] | None = None, data: str = "facts",
         busy: bool = False) -> dict:
    plan = store_plan(load(HELDOUT if data == "heldout" else DATA), quick)
    print(f"(facts: {'held out, ' + HELDOUT.name if data == 'heldout' else DATA.name}"
          f"{'; busy box: a spinning process per core' if busy else ''})")
    out: dict = {}
    if "thresholds" in parts:
        out["thresholds"] = thresholds(plan)
        print_thresholds(out["thresholds"])
    if "server" in parts:
        rows = []
        runs = [("baseline", BASELINE), ("lifecycle", {})]
        runs += [("lifecycle " + ", ".join(f"{k}={v}" for k, v in v.items()), v) for v in variants or []]
        if busy:
            runs.append(("lifecycle, busy box", {}))
        for label, config in runs:
            rows.append((label, summarize(run_server(plan, config, busy=label.endswith("busy box")),
                                          len(plan["facts"]))))
        out["server"] = rows
        print_server(rows, plan)
    if "consolidation" in parts:
        out["consolidation"] = consolidation(consolidation_sizes or ([200] if quick else [10_000, 100_000]))
        print_consolidation(out["consolidation"])
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="24 facts, 170 unrelated memories: checks it still runs")
    parser.add_argument("--part", action="append", choices=["thresholds", "server", "consolidation"],
                        help="run only these parts (default: all)")
    parser.add_argument("--consolidation-sizes", type=lambda s: [int(x) for x in s.split(",")],
                        help="memories per consolidation timing (default 10000,100000; --quick: 200)")
    parser.add_argument("--variant", action="append", type=parse_variant, metavar="KEY=VALUE[,KEY=VALUE]",
                        help="one more server run with these [memory] settings, e.g. supersede_min_similarity=0.65")
    parser.add_argument("--data", choices=["facts", "heldout"], default="facts",
                        help="facts: lifecycle_facts.json (the rules were chosen on it); heldout: "
                             "lifecycle_heldout.json (written apart, never used to choose anything)")
    parser.add_argument("--busy", action="store_true",
                        help="one more lifecycle run with a spinning process per core (a busy box)")
    args = parser.parse_args()
    main(args.quick, tuple(args.part or ("thresholds", "server", "consolidation")), args.consolidation_sizes,
         args.variant, args.data, args.busy)
