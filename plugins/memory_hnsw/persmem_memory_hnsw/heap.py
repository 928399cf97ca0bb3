"""Handing freed memory back to the operating system."""

from __future__ import annotations

import ctypes


def release_freed_memory() -> None:
    """glibc keeps freed heap memory for reuse; after a one-off burst (loading the model, replaying a log)
    give it back, or the server's RSS stays at the burst's peak. A no-op where malloc_trim does not exist."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
