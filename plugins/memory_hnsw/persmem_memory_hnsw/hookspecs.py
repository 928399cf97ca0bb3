"""Hooks the memory plugin asks other plugins, without importing them."""

from persmem_core.sdk import hookspec


@hookspec
def register_embedders(register):
    """Offer an embedding model: `register(name, factory)`; factory(cache) returns an embedder like
    embedder.OnnxEmbedder. `cache` is a folder (not created yet) where it may keep files it derives, such as a
    re-quantized model."""


@hookspec
def inbox_summary(host, agent):
    """For chorus_init: {"available": True, "unread": n, "messages": [...]} for `agent`, from whichever
    plugin holds mail (nothing is marked read); None if this plugin has nothing to say."""
