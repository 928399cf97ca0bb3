"""The default model is re-quantized once into the store's cache, checked on every load, and remade if damaged;
the result embeds like the shipped file (the same nearest documents)."""

import numpy as np

from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from test_model_export import DOCS, QUERIES


def test_requantized_once_checked_and_remade_when_damaged(tmp_path):
    cache = tmp_path / "models"
    first = OnnxEmbedder(default_model_files(), cache=cache).load()
    [model] = cache.glob("*/model.onnx")
    made = sorted(p.name for p in model.parent.iterdir())
    assert made == ["model.onnx", "model.onnx.json"], made
    stamp = model.stat().st_mtime_ns
    OnnxEmbedder(default_model_files(), cache=cache).load()
    assert model.stat().st_mtime_ns == stamp, "a good prepared model is reused, not made again"

    data = bytearray(model.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    model.write_bytes(bytes(data))
    again = OnnxEmbedder(default_model_files(), cache=cache).load()
    assert sorted(p.name for p in model.parent.iterdir()) == made, "no temporary files left behind"
    probe = first.embed_query(DOCS[0])
    assert float(again.embed_query(DOCS[0]) @ probe) > 0.9999, "the damaged file was remade, not used"
    assert first.model_id == "all-MiniLM-L6-v2-onnx-int8-dynamic"


def test_requantized_model_finds_what_the_shipped_file_finds(tmp_path):
    shipped = OnnxEmbedder(default_model_files()).load()
    ours = OnnxEmbedder(default_model_files(), cache=tmp_path / "models").load()
    assert ours.model_id != shipped.model_id, "a store never mixes the two models' vectors"
    a = np.vstack(shipped.embed_chunks(DOCS))
    b = np.vstack(ours.embed_chunks(DOCS))
    assert ((a * b).sum(axis=1) > 0.97).all()
    for query, expected in QUERIES.items():
        assert int(np.argmax(b @ ours.embed_query(query))) == expected == int(np.argmax(a @ shipped.embed_query(query)))


def test_special_tokens_are_the_ones_the_tokenizer_frames_a_text_with(tmp_path):
    """A model_dir export of an MPNet or RoBERTa model (all-mpnet-base-v2) frames a text as <s> ... </s>; its
    vocabulary may also hold [CLS] and [SEP] as ordinary tokens, which must not be taken for them."""
    import pytest
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from persmem_core.sdk import UserError
    from persmem_memory_hnsw.embedding.embedder import _special_tokens

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "[CLS]": 3, "[SEP]": 4, "[PAD]": 5, "a": 6, "[UNK]": 7}
    mpnet = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    mpnet.pre_tokenizer = pre_tokenizers.Whitespace()
    mpnet.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    assert _special_tokens(mpnet, tmp_path) == (0, 2, 1)
    bert = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    bert.pre_tokenizer = pre_tokenizers.Whitespace()
    bert.post_processor = processors.BertProcessing(("[SEP]", 4), ("[CLS]", 3))
    assert _special_tokens(bert, tmp_path) == (3, 4, 5)
    bare = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))  # no post-processor: by the tokens' names
    bare.pre_tokenizer = pre_tokenizers.Whitespace()
    assert _special_tokens(bare, tmp_path) == (3, 4, 5)
    other = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(UserError, match="neither"):
        _special_tokens(other, tmp_path)
