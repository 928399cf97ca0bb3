"""Numbered stores waiting for the background embedder, so a search can wait for those made before it."""

from __future__ import annotations

import threading


class EmbeddingTickets:
    """Stores queued for the background embedder get consecutive numbers; the embedder reports the highest one
    whose batch is done (embedded, or gone meanwhile)."""

    def __init__(self):
        self.issued = 0  # the last number given
        self.embedded = 0  # every store numbered up to here is embedded (or gone)
        self._done = threading.Condition()

    def issue(self, count: int) -> range:
        """Numbers for `count` new stores (the collection's write lock held)."""
        first = self.issued + 1
        self.issued += count
        return range(first, self.issued + 1)

    def done(self, ticket: int) -> None:
        """Every store numbered up to `ticket` is embedded (or gone)."""
        with self._done:
            self.embedded = max(self.embedded, ticket)
            self._done.notify_all()

    def wait(self, timeout: float | None, stopped) -> bool:
        """Wait until every store numbered before this call is embedded, or `stopped()` (the collection closed);
        False if `timeout` seconds passed first."""
        target = self.issued
        if self.embedded >= target:
            return True
        with self._done:
            return self._done.wait_for(lambda: self.embedded >= target or stopped(), timeout)

    def wake(self) -> None:
        """Wake the waiters (the collection closed)."""
        with self._done:
            self._done.notify_all()
