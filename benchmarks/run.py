"""Run every benchmark and print its table: `python benchmarks/run.py [--quick]`."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

BENCHMARKS = ["bench_startup", "bench_memory", "bench_locomo", "bench_amq", "bench_sessions", "bench_lifecycle",
              "bench_encryption", "bench_peers", "bench_cluster", "bench_scale"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the benchmarks still run")
    parser.add_argument("--only", action="append", help="run only these (e.g. bench_startup)")
    args = parser.parse_args()
    for name in args.only or BENCHMARKS:
        importlib.import_module(name).main(quick=args.quick)


if __name__ == "__main__":
    main()
