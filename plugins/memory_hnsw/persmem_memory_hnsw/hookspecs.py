"""Hooks the memory plugin asks other plugins, without importing them, and the types of their answers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from persmem_core.sdk import hookspec


@runtime_checkable
class Embedder(Protocol):
    """What a `register_embedders` factory returns (embedder.OnnxEmbedder is the in-repo one). Thread-safe: the
    background embedder and searches call it at once."""

    model_id: str  # names the model (and its preparation): a store never mixes vectors of two ids
    dim: int  # the vectors' length; valid once `load()` returned

    def load(self) -> Embedder: ...  # load the model (once; later calls return at once), return self
    def chunk_counts(self, texts: list[str]) -> list[int]: ...  # vectors embed_chunks gives each text
    def embed_chunks(self, texts: list[str], batch_size: int = 64) -> list[Any]: ...  # (n, dim) float32 each
    def embed_query(self, text: str) -> Any: ...  # one L2-normalised (dim,) float32 vector


EmbedderFactory = Callable[[Path], Embedder]  # factory(cache folder) -> Embedder


@hookspec
def register_embedders(register):
    """Offer an embedding model: `register(name, factory)`; factory(cache) returns an `Embedder` (like
    embedder.OnnxEmbedder). `cache` is a folder (not created yet) where it may keep files it derives, such as a
    re-quantized model."""
