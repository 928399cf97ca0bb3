"""The idle-time consolidation: the server consolidates every shared collection on its own, on a schedule, once
no memory has been written for a while (`[memory] consolidate_every_hours`, `consolidate_idle_minutes`).
The run itself is consolidation.consolidate, without the turns of imported conversations (candidates.py): only an
explicit consolidation (memory_consolidate, `persmem memory consolidate`) gathers those.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..permissions import is_private
from .consolidation import ConsolidationReport, consolidate

log = logging.getLogger("persmem.memory.consolidate")


class ConsolidationJob:
    """The server's scheduled consolidation, started by MemoryService once the store is loaded: every
    `consolidate_every_hours` (0: never), once no memory has been written for `consolidate_idle_minutes`, over
    every shared collection, all authors. A write is noticed as a change in the collections' log sizes (no
    hook on the write path). The first run comes once the server has been idle that long; `stop()` ends a
    run between clusters."""

    def __init__(self, service, config, clock: Callable[[], float] = time.monotonic):
        self.service, self.config, self.clock = service, config, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0

    def start(self) -> ConsolidationJob:
        if self.config.consolidate_every_hours > 0:
            self._thread = threading.Thread(target=self._loop, name="memory-consolidation", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        every = self.config.consolidate_every_hours * 3600.0
        idle = self.config.consolidate_idle_minutes * 60.0
        poll = max(0.1, min(30.0, every / 4, idle / 4 if idle else 30.0))
        sizes, last_write, last_run = self._log_sizes(), self.clock(), None
        while not self._stop.wait(poll):
            current = self._log_sizes()
            if current != sizes:
                sizes, last_write = current, self.clock()
                continue
            now = self.clock()
            if now - last_write < idle or (last_run is not None and now - last_run < every):
                continue
            self.run_once()
            last_run, sizes = self.clock(), self._log_sizes()  # its own writes are not the agents' activity

    def _log_sizes(self) -> dict[str, int]:
        return {name: col.log.size for name, col in self.service.collections().items()}

    def run_once(self) -> list[ConsolidationReport]:
        """Consolidate every shared collection now; one log line per collection. A failure is logged and the
        job goes on (the next run tries again)."""
        reports = []
        for name, col in sorted(self.service.collections().items()):
            if self._stop.is_set():
                break
            if is_private(self.config, name):
                continue
            try:
                # unasked, it leaves conversations' turns alone (imported ones look mature the day they arrive)
                report = consolidate(col, self.config, dry_run=False, stop=self._stop, conversations=False)
            except Exception:  # noqa: BLE001 - an upkeep job: logged, retried at the next run
                log.exception("consolidation of collection %s failed; the next run tries again", name)
                continue
            log.info("consolidation: %s", report.summary())
            reports.append(report)
        self.runs += 1
        return reports
