"""The peer benchmark's pure parts: recall scoring and the table (no peer is installed here)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_peers  # noqa: E402


def test_recall_is_the_share_of_gold_in_the_top_k_and_one_without_evidence():
    assert bench_peers.recall(["a", "b", "c"], {"a", "z"}, 10) == 0.5
    assert bench_peers.recall(["x", "a"], {"a"}, 1) == 0.0
    assert bench_peers.recall([], set(), 10) == 1.0


def test_any_hit_counts_a_question_once_one_gold_is_in_the_top_k():
    assert bench_peers.any_hit(["a", "b"], {"b", "z"}, 10) == 1.0
    assert bench_peers.any_hit(["a", "b"], {"b"}, 1) == 0.0
    assert bench_peers.any_hit([], set(), 10) == 1.0


def test_score_locomo_averages_over_every_question_of_every_conversation():
    ranked = [[["a"] + [f"x{i}" for i in range(9)] + ["b"]], [["c"], ["d"]]]
    gold = [[{"a", "b"}], [{"c"}, set()]]
    scores = bench_peers.score_locomo(ranked, gold)
    assert scores["questions"] == 3
    assert scores["r10"] == (0.5 + 1 + 1) / 3  # "b" is 11th
    assert scores["any10"] == 1.0
    assert scores["r5"] == (0.5 + 1 + 1) / 3


def test_table_has_a_column_per_system_and_the_ratio_to_the_best_comparable_peer():
    summaries = {
        "persmem": {"dialog_r10": 0.8, "n": 1000, "search_p50": 2.0},
        "persmem-mcp": {"dialog_r10": 0.8, "n": 1000, "search_p50": 4.0},
        "mempalace": {"dialog_r10": 0.5, "n": 1000, "search_p50": 10.0},
        "mcp-memory-service": {"dialog_r10": 0.4, "n": 500, "n_note": "capped", "search_p50": 1.0},
    }
    lines = bench_peers.table(summaries).splitlines()
    assert lines[0].count("|") == len(summaries) + 3
    recall_row = next(line for line in lines if line.startswith("| LoCoMo dialog R@10 (fractional)"))
    assert recall_row.endswith("| 1.60 |")  # 0.8 / the best peer's 0.5
    search_row = next(line for line in lines if line.startswith("| speed: search p50, no filter"))
    assert search_row.endswith("| 0.20 |")  # the peer at a smaller N is not compared
    assert "500 (capped)" in next(line for line in lines if line.startswith("| speed: memories loaded"))
    assert not any(line.startswith("| install") for line in lines)  # rows nobody measured are left out
