"""`persmem sessions import`'s second progress bar: the imported turns being indexed for search, followed to the
end through the server's GET /sessions/indexing (web.py), so the command returns when a search finds them.

The bar counts turns (the server's `indexed_turns` of `turns`, over the import's agents' sessions). Stopping it
(Ctrl-C, or indexing that has not moved for STALL_SECONDS) loses nothing: the archive keeps how far each session
is indexed, and the server (this one, or the next `persmem serve` when the import held the home) goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click

STALL_SECONDS = 60.0  # stop following indexing that does not move (the server log says why)
POLL_SECONDS = 0.25


def follow_indexing(read: Callable[[], tuple[int, int, bool]], holding: bool) -> None:
    """Show the turns left to index shrinking until none is left. `read()` -> (turns, indexed turns, whether
    anything indexes); `holding`: this process is the server, which stops with the command."""
    stderr = click.get_text_stream("stderr")
    goes_on = ("the next `persmem serve` goes on from where it stopped" if holding else
               "the server goes on indexing them")
    turns, indexed, indexes = read()
    if not indexes:
        click.echo("The turns are archived; no plugin here indexes them for search (install persmem-plugin-"
                   "memory-hnsw): they are indexed once one is.", err=True)
        return
    left = turns - indexed
    stalled_since = time.monotonic()
    try:
        with click.progressbar(length=max(left, 0), label="Indexing the new turns for search", file=stderr,
                               show_pos=True) as bar:
            while left > 0:
                time.sleep(POLL_SECONDS)
                turns, indexed, _ = read()
                now = turns - indexed
                if now < left:
                    bar.update(left - now)
                    stalled_since = time.monotonic()
                elif time.monotonic() - stalled_since > STALL_SECONDS:
                    click.echo(f"\nIndexing made no progress for {STALL_SECONDS:.0f} s ({now:,} turn(s) left; the "
                               f"server log says why): {goes_on}.", err=True)
                    return
                left = now
    except KeyboardInterrupt:
        click.echo(f"\nStopped following the indexing ({left:,} turn(s) left): nothing is lost, {goes_on}.", err=True)
