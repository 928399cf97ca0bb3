"""Failed authentications, wherever a credential is checked (the HTTP auth middleware, the dashboard's
login): one stable log line per failure for fail2ban (`persmem auth failure from ADDRESS`, docs/deploy.md),
and a delay per client address that grows with its failures. One instance per host (`host.auth_failures`),
so a guesser is slowed down whichever door it knocks on."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import quote

log = logging.getLogger("persmem.http")


class AuthFailures:
    """Failed authentications per client address: each failure after the first waits longer before its
    401 (FIRST_DELAY, doubling up to MAX_DELAY). An address is forgotten FORGET_AFTER seconds after its
    last failure, and at most MAX_ADDRESSES are remembered (the least recent go first), so memory stays
    bounded whatever an attacker sends. The delay holds only the failing request, never the event loop
    or another address."""

    FIRST_DELAY = 0.25
    MAX_DELAY = 5.0
    FORGET_AFTER = 900.0
    MAX_ADDRESSES = 10_000

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # address -> (count, last failure)

    def delay(self, address: str) -> float:
        """The seconds the next failure from `address` would wait: a check that is costly or worth guessing
        (the OAuth operator secret) waits this long BEFORE it runs, so guesses sent without waiting for the
        answers are held back like ones that wait."""
        count = self._failures.get(address, (0, 0.0))[0] + 1
        return 0.0 if count == 1 else min(self.MAX_DELAY, self.FIRST_DELAY * 2 ** (count - 2))

    def failed(self, address: str) -> float:
        """Count a failure from `address` and log it in the stable line fail2ban matches; returns the seconds
        to wait before answering it."""
        log.warning("persmem auth failure from %s", quote(address, safe=":.[]"))
        now = self._clock()
        while self._failures:  # drop addresses idle for too long (the oldest are first)
            oldest, (_, last) = next(iter(self._failures.items()))
            if now - last < self.FORGET_AFTER:
                break
            del self._failures[oldest]
        count = self._failures.pop(address, (0, now))[0] + 1
        self._failures[address] = (count, now)
        while len(self._failures) > self.MAX_ADDRESSES:
            self._failures.popitem(last=False)
        return 0.0 if count == 1 else min(self.MAX_DELAY, self.FIRST_DELAY * 2 ** (count - 2))
