"""Memory housekeeping: growing the numpy columns, handing freed memory back to the operating system."""

from __future__ import annotations

import ctypes

import numpy as np


def release_freed_memory() -> None:
    """glibc keeps freed heap memory for reuse; after a one-off burst (loading the model, replaying a log)
    give it back, or the server's RSS stays at the burst's peak. A no-op where malloc_trim does not exist."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def grown(array: np.ndarray, need: int, fill=0) -> np.ndarray:
    """`array` with room for at least `need` rows (doubling, at least 1,024; new rows set to `fill`); the same
    array if it already has room."""
    if need <= len(array):
        return array
    shape = (max(need, 2 * len(array), 1024), *array.shape[1:])
    # np.zeros leaves the spare rows untouched (not resident until written); np.full writes them all
    bigger = np.zeros(shape, dtype=array.dtype) if fill == 0 else np.full(shape, fill, dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger
