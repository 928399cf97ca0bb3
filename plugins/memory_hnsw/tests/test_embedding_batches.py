"""A text gets the same vector whatever else is embedded with it (issue 35): the prepared model quantizes each
token's activations on their own (embedding/per_token.py), not the whole batch with one scale. So a text alone, in
batches of other mates and other padding lengths, and a long text's passages embed alike, and two identical imports
split into different batches make identical stores (vectors and near-duplicate decisions)."""

import os
from pathlib import Path

import numpy as np
import pytest

from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.background import BackgroundEmbedder
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.embedding.prepare import cache_key
from persmem_core.sdk import sha256_file

SHORT = ["ok", "Caroline went to the LGBTQ support group yesterday.", "Melanie paints sunrises by the lake.",
         "Which port does the staging database listen on?", "ja", "The deploy key rotates every ninety days."]
MEDIUM = [" ".join(f"sentence {n} about the {w} garden and the {w} fence that was painted twice" for n in range(6))
          for w in ("red", "green", "blue")]
LONG = " ".join(f"Chapter {n}: the keeper wrote down the tide, the wind from the {d} and what the ships carried."
                for n, d in zip(range(60), ["north", "south", "east", "west"] * 15))  # several passages
TEXTS = SHORT + MEDIUM + [LONG]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The real prepared model (re-quantized default model), from the test run's shared cache when there is one."""
    shared = os.environ.get("PERSMEM_CACHE_DIR")
    cache = Path(shared) / "models" if shared else tmp_path_factory.mktemp("models")
    return OnnxEmbedder(default_model_files(), cache=cache).load()


def test_a_text_embeds_alike_alone_and_in_any_batch(prepared):
    alone = {text: prepared.embed_chunks([text])[0] for text in TEXTS}
    assert alone[LONG].shape[0] > 2, "the long text is split into passages"
    orders = [TEXTS, TEXTS[::-1], [LONG, SHORT[1]] + MEDIUM, SHORT[:2] + [MEDIUM[0]] * 5 + SHORT[2:]]
    for texts in orders:
        for batch_size in (1, 2, 3, 32):
            for text, vectors in zip(texts, prepared.embed_chunks(texts, batch_size=batch_size), strict=True):
                difference = float(np.abs(vectors - alone[text]).max())
                assert difference <= 1e-5, (text[:40], batch_size, difference)
    for text in SHORT + MEDIUM:  # a query is its text's single window, embedded alone
        assert float(np.abs(prepared.embed_query(text) - alone[text][0]).max()) <= 1e-5


def test_the_preparation_is_deterministic(prepared, tmp_path):
    again = OnnxEmbedder(default_model_files(), cache=tmp_path / "models").load()
    source = sha256_file(default_model_files().model)
    first = prepared.cache / cache_key(source) / "model.onnx"
    second = again.cache / cache_key(source) / "model.onnx"
    assert sha256_file(first) == sha256_file(second), "the same model file prepares to the same bytes"
    assert again.model_id == prepared.model_id == "all-MiniLM-L6-v2-onnx-int8-dynamic"


def _import(folder, embedder, lines: list[str], embed_batch: int, call_size: int) -> tuple[Collection, list[str]]:
    embedding = BackgroundEmbedder(batch=embed_batch).start()
    col = Collection("memories", folder, embedder, MemoryConfig(embed_batch=embed_batch), embedding=embedding).open()
    statuses = []
    for start in range(0, len(lines), call_size):
        part = [NewMemory(content=text, project="p", type="note", tags=[], memory_id=f"m{start + n}")
                for n, text in enumerate(lines[start : start + call_size])]
        statuses += [result["status"] for result in col.store(part, author="kite", dedup=True)]
    assert col.wait_embedded(timeout=120)
    embedding.stop()
    return col, statuses


def test_two_identical_imports_make_identical_stores(prepared, tmp_path):
    chat = [f"{who}: {line}" for who, line in zip(["Caroline", "Melanie"] * 20, [
        "I went to a support group yesterday and it was so powerful.", "That sounds amazing, tell me more!",
        "Haha, see you tomorrow then.", "I painted a sunrise over the lake last week.", "Haha, see you tomorrow then.",
        "We are thinking about adopting a dog from the shelter.", "My kids love the beach in summer.",
        "Haha, see you tomorrow then!", "The counseling course starts in September.", "ok",
    ] * 4)] + [LONG]
    one, one_statuses = _import(tmp_path / "one", prepared, chat, embed_batch=3, call_size=7)
    two, two_statuses = _import(tmp_path / "two", prepared, chat, embed_batch=64, call_size=len(chat))
    assert one_statuses == two_statuses and "stored" in one_statuses
    assert sorted(one.memories) == sorted(two.memories)
    for memory_id in one.memories:
        a = np.frombuffer(one.entry_of(memory_id).vectors, dtype=np.float32)
        b = np.frombuffer(two.entry_of(memory_id).vectors, dtype=np.float32)
        assert a.shape == b.shape and a.size and float(np.abs(a - b).max()) <= 1e-5, memory_id
    one.close()
    two.close()
