"""Where the benchmarks' optional data sets live: outside the repository, beside it in ../shared/data (never
downloaded at run time). PERSMEM_LOCOMO points elsewhere. Tests that need a data set skip with `missing(...)`'s
one-line reason when it is absent (a clone without ../shared)."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOCOMO = Path(os.environ.get("PERSMEM_LOCOMO") or SHARED_DATA / "locomo" / "locomo10.json")


def missing(path: Path = LOCOMO) -> str | None:
    """None when the data set is there; else why a test or benchmark needing it cannot run, and how to fix it."""
    if path.is_file():
        return None
    return f"optional data set {path} is absent (put LoCoMo's locomo10.json there, or point PERSMEM_LOCOMO at it)"
