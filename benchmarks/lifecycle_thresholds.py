"""bench_lifecycle's thresholds part: how close (old, new), (sibling, new) and (nearest unrelated, new) pairs are in
meaning and in shared subject terms, and a sweep of supersede_min_similarity x supersede_min_shared_terms replaying
the store order of the server run (detection recall and false links). In-process: the server's embedder and the
lexical analyzer."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


# -- part 1: thresholds -------------------------------------------------------------------------------------------

def subject_terms_function():
    """supersession.subject_terms when it exists (what the server uses), else the BM25 analyzer's terms (stop words
    out, stemmed)."""
    try:
        from persmem_memory_hnsw.lifecycle.supersession import subject_terms

        return subject_terms, "supersession.subject_terms"
    except ImportError:
        from persmem_memory_hnsw.store.lexical import Analyzer

        analyzer = Analyzer()
        return (lambda text: set(analyzer.terms(text))), "lexical.Analyzer.terms"


def make_embedder():
    """The embedder the server loads by default (MiniLM int8), its re-quantized model cached across runs."""
    from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

    cache = Path(tempfile.gettempdir()) / "persmem-bench-models"
    return OnnxEmbedder(default_model_files(), cache=cache).load()


def family_margin() -> float:
    try:
        from persmem_memory_hnsw.search.weighing import FAMILY_MARGIN

        return FAMILY_MARGIN
    except ImportError:
        return 0.1


def thresholds(plan: dict, dedup_threshold: float = 0.97, sims=(0.55, 0.6, 0.65, 0.7, 0.75, 0.8),
               terms=(1, 2, 3), margins=None) -> dict:
    import numpy as np

    margins = margins or (0.0, family_margin())
    subject_terms, terms_source = subject_terms_function()
    embedder = make_embedder()
    items = [{"kind": "bulk", "fact": None} | u for u in plan["bulk"]] + plan["singles"]
    vectors = embedder.embed_chunks([it["content"] for it in items])  # (windows, dim) each; best window vs best
    term_sets = [subject_terms(it["content"]) for it in items]
    n = len(items)
    sim = np.full((n, n), -1.0, dtype=np.float32)
    for i in range(n):
        for j in range(i):
            if items[i]["project"] == items[j]["project"]:
                sim[i, j] = float((vectors[i] @ vectors[j].T).max())
    shared = lambda i, j: len(term_sets[i] & term_sets[j])  # noqa: E731
    index = {(it["kind"], it["fact"]): k for k, it in enumerate(items) if it["kind"] in ("old", "new")}

    # pair statistics
    pairs = {"old": [], "sibling": [], "nearest unrelated": []}
    for f in plan["facts"]:
        new = index[("new", f["id"])]
        old = index[("old", f["id"])]
        pairs["old"].append((sim[new, old], shared(new, old)))
        for k, it in enumerate(items):
            if it["kind"] == "sibling" and it["fact"] == f["id"]:
                pairs["sibling"].append((sim[new, k], shared(new, k)))
        unrelated = [k for k in range(new) if items[k]["kind"] in ("bulk", "unrelated") and sim[new, k] > -1]
        if unrelated:
            k = max(unrelated, key=lambda k: sim[new, k])
            pairs["nearest unrelated"].append((sim[new, k], shared(new, k)))

    # the rule replayed in store order, for every setting (as supersession.find_superseded: the CANDIDATES nearest
    # older memories of the project; the most similar not yet superseded one passing both thresholds, unless
    # another one is within `margin` of its similarity: a family of look-alikes, not a restatement)
    detecting = [k for k, it in enumerate(items) if it["kind"] != "bulk"]
    nearest = {k: sorted((j for j in range(k) if -1 < sim[k, j] < dedup_threshold), key=lambda j: -sim[k, j])[:16]
               for k in detecting}
    sweep = []
    for s in sims:
        for t in terms:
            for margin in margins:
                superseded: set[int] = set()
                counts = dict.fromkeys(("correct", "new_to_wrong", "sibling", "old", "unrelated"), 0)
                for k in detecting:
                    ranked = [j for j in nearest[k] if j not in superseded and sim[k, j] >= s - margin]
                    best = None
                    for j in ranked:
                        if sim[k, j] < s:
                            break
                        if shared(k, j) >= t:
                            if not any(sim[k, o] >= sim[k, j] - margin for o in ranked if o != j) or margin == 0:
                                best = j
                            break
                    if best is None:
                        continue
                    superseded.add(best)
                    kind = items[k]["kind"]
                    if kind == "new":
                        right = items[best]["kind"] == "old" and items[best]["fact"] == items[k]["fact"]
                        counts["correct" if right else "new_to_wrong"] += 1
                    else:
                        counts[kind] += 1
                links = sum(counts.values())
                sweep.append({"min_similarity": s, "min_shared_terms": t, "margin": margin,
                              "recall": counts["correct"] / len(plan["facts"]),
                              "precision": counts["correct"] / links if links else 1.0, "links": links,
                              "correct": counts["correct"], "new_to_wrong": counts["new_to_wrong"],
                              "sibling_links": counts["sibling"], "old_links": counts["old"],
                              "unrelated_links": counts["unrelated"]})
    return {"pairs": pairs, "sweep": sweep, "terms_source": terms_source, "n_items": n,
            "misses": misses_at(plan, items, index, sim, shared)}


def misses_at(plan, items, index, sim, shared) -> list[tuple]:
    """(fact, cosine, shared terms) of each true pair, lowest cosine first: what a threshold would lose."""
    rows = []
    for f in plan["facts"]:
        new, old = index[("new", f["id"])], index[("old", f["id"])]
        rows.append((f["id"], float(sim[new, old]), shared(new, old)))
    return sorted(rows, key=lambda r: r[1])


def print_thresholds(result: dict) -> None:
    print(f"\n## Lifecycle: supersession thresholds ({result['n_items']} memories, in-process, MiniLM int8; "
          f"subject terms: {result['terms_source']})\n")
    print("| pair (with the restatement) | n | cosine min | p10 | median | p90 | max | shared terms median | "
          "shared >= 1 | shared >= 2 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind, values in result["pairs"].items():
        cos = [v[0] for v in values]
        sh = [v[1] for v in values]
        print(f"| {kind} | {len(values)} | {min(cos):.3f} | {pct(cos, 0.1):.3f} | {statistics.median(cos):.3f} | "
              f"{pct(cos, 0.9):.3f} | {max(cos):.3f} | {statistics.median(sh):.0f} | "
              f"{sum(x >= 1 for x in sh) / len(sh):.2f} | {sum(x >= 2 for x in sh) / len(sh):.2f} |")
    print("\nThe rule replayed in the server run's store order (each memory_store links to the most similar older, "
          "not yet superseded memory of its project passing both thresholds, unless another older one is within "
          "`margin` of its similarity (lifecycle.FAMILY_MARGIN; 0: no such check); near duplicates >= 0.97 "
          "excluded):\n")
    print("| min_similarity | min_shared_terms | margin | recall | precision | links | restatement to a wrong one | "
          "from siblings | from old statements | from unrelated |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in result["sweep"]:
        print(f"| {r['min_similarity']:.2f} | {r['min_shared_terms']} | {r['margin']:.2f} | {r['recall']:.3f} | "
              f"{r['precision']:.3f} | "
              f"{r['links']} | {r['new_to_wrong']} | {r['sibling_links']} | {r['old_links']} | "
              f"{r['unrelated_links']} |")


# -- part 2: through the real server ------------------------------------------------------------------------------
