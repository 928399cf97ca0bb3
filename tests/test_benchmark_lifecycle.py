"""bench_lifecycle keeps working, and its data is what the benchmark claims (figures come from full runs)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_lifecycle", ROOT / "benchmarks" / "bench_lifecycle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lifecycle_facts_are_restatements_with_siblings_among_enough_unrelated_memories():
    bench = load_bench()
    data = bench.load()
    facts = data["facts"]
    assert len(facts) >= 60 and len({f["id"] for f in facts}) == len(facts)
    for f in facts:
        # the question's answer is the new value: the restatement says it, the old statement does not
        assert f["answer"].casefold() in f["new"].casefold(), f["id"]
        assert f["answer"].casefold() not in f["old"].casefold(), f["id"]
        assert f["old"] != f["new"] and 1 <= len(f["siblings"]) <= 2 and f["question"].endswith("?"), f["id"]
        assert len(f["sibling_questions"]) == len(f["siblings"]), f["id"]  # each still-true sibling is asked about
    unrelated = bench.unrelated_memories(data, bench.N_UNRELATED + bench.N_UNRELATED_LATER)
    assert len({u["content"] for u in unrelated}) == len(unrelated) >= 400
    assert {f["project"] for f in facts} <= {u["project"] for u in unrelated}  # neighbours in the same projects
    assert bench.unrelated_memories(data, 50) == bench.unrelated_memories(data, 50)  # deterministic
    plan = bench.store_plan(data, quick=False)
    kinds = [s["kind"] for s in plan["singles"]]
    # every old statement is stored before any restatement ("later in time")
    assert max(i for i, k in enumerate(kinds) if k == "old") < min(i for i, k in enumerate(kinds) if k == "new")


def test_lifecycle_benchmark_quick_run_prints_its_tables():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_lifecycle.py"), "--quick"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "| min_similarity | min_shared_terms | margin | recall |" in out
    assert "| baseline |" in out and "| lifecycle |" in out and "| sibling first |" in out
    assert "consolidation time" in out
