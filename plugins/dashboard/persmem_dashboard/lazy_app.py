"""An ASGI app built on its first request, in a worker thread (the event loop keeps serving meanwhile); every
request after it goes straight to the built app. For the dashboard: its libraries are not on the way to a
restarted server's first search."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio


class LazyApp:
    def __init__(self, build: Callable[[], Callable]):
        self._build, self._app, self._lock = build, None, threading.Lock()

    def built(self) -> Callable:
        """The app, built once (requests that arrive while it is being built wait for that one build)."""
        with self._lock:
            if self._app is None:
                self._app = self._build()
            return self._app

    async def __call__(self, scope, receive, send) -> None:
        app = self._app or await anyio.to_thread.run_sync(self.built)
        await app(scope, receive, send)
