"""The benchmarks keep working (figures come from full runs, not from here). Those built on LoCoMo (an optional
data set beside the repository, ../shared/data) skip with a one-line reason on a clone without it."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_data import missing  # noqa: E402

needs_locomo = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def test_startup_benchmark_quick_run_prints_its_table():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--only", "bench_startup"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "| persmem --help |" in result.stdout and "tools/list" in result.stdout


@needs_locomo
def test_memory_benchmark_quick_run_prints_its_table():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_memory.py"), "--quick", "--no-peer"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "search p95 ms, project filter, MCP HTTP" in result.stdout and "RSS after restart" in result.stdout
    assert "search p95 ms, project filter, in-process" in result.stdout
    assert "durable single store p50 ms, MCP HTTP" in result.stdout and "no-op tool round trip" in result.stdout
    assert "bulk ingest, fully embedded" in result.stdout and "restart to first search" in result.stdout


@needs_locomo
def test_locomo_benchmark_quick_run_prints_its_table():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_locomo.py"), "--quick"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| session |" in result.stdout and "| dialog |" in result.stdout


def test_amq_benchmark_quick_run_prints_its_table():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_amq.py"), "--quick"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| send, in-process |" in result.stdout and "| amq_read through MCP HTTP |" in result.stdout


@needs_locomo
def test_encryption_benchmark_quick_run_prints_its_table():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_encryption.py"), "--quick"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| measure | off | on | on/off |" in result.stdout
    assert "| open: server restart to first search (s) |" in result.stdout and "| backup: " in result.stdout


@needs_locomo
def test_cluster_benchmark_quick_run_prints_its_tables():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_cluster.py"), "--quick"],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| memory_store p50 / p95 (ms) |" in result.stdout and "| amq_send, 4 clients (messages/s) |" in result.stdout
    assert "found on node 2 by meaning" in result.stdout and "node 2 restarted until it has them all" in result.stdout


@needs_locomo
def test_search_ab_benchmark_runs_two_checkouts_and_prints_its_table():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_search_ab.py"), "--base", "HEAD", "--size", "300",
         "--rounds", "1"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| MCP, project filter |" in result.stdout and "| in-process, no filter |" in result.stdout
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True)
    assert "persmem-ab-" not in worktrees.stdout  # the temporary checkout is removed
