"""The prepared model: the default export re-quantized once per installed model file, kept where every home of
the user finds it, made in a child process that shutdown never waits for.

Where (`model_cache`): `$PERSMEM_CACHE_DIR/models` when that is set (the host checks it), else the user's cache,
`$XDG_CACHE_HOME/persmem/models` (default ~/.cache/persmem/models), created 0700 and refused when it is not the
user's own or others may write in it (a file planted there would be loaded as the model); when no cache folder can
be made at all (a read-only home directory), beside the collections.

What: `<folder>/<key>/model.onnx` and its record `model.onnx.json` (the source's and the result's sha256). The key
hashes the source file's sha256 with the preparation (the script below and PREPARATION), so another model file or
another way of preparing it gets its own entry. The file is written under a temporary name and renamed, and the
record after it; a later use checks the result's sha256 against the record, so a partial or damaged entry is made
again. Servers preparing at once take turns on `<key>.lock`: the second finds the first one's result.

Shutdown: the quantization runs in a child process (its tools and garbage also stay out of the server's memory);
`Preparation.cancel()` kills it and the wait ends at once, its partial output removed.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec

from persmem_core.sdk import UserError, atomic_write_bytes, fsync_dir, sha256_file

log = logging.getLogger("persmem.memory.embedder")

PREPARATION = "dynamic-int8-per-channel-per-token-2"  # change when the preparation changes: every entry is remade
PER_TOKEN = Path(__file__).with_name("per_token.py")  # the graph rewrite the child runs; its text is in the key

_QUANTIZE = """
import importlib.util, sys
import onnx
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic
source, folded, quantized, made, rewriter = sys.argv[1:6]
options = ort.SessionOptions()  # basic optimisations fold the int8 -> float casts into float weights
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
options.optimized_model_filepath = folded
ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])
quantize_dynamic(folded, quantized, weight_type=QuantType.QInt8, per_channel=True)
spec = importlib.util.spec_from_file_location("per_token", rewriter)  # by path: no plugin import in the child
per_token = importlib.util.module_from_spec(spec)
spec.loader.exec_module(per_token)
model = onnx.load(quantized)
per_token.rewrite(model)  # one scale per token, not per batch: a text's vector is the same in any batch
onnx.save(model, made)
"""


class Prepared(msgspec.Struct):
    source_sha256: str
    sha256: str


class PreparationStopped(UserError):
    """The preparation was cancelled (the server is stopping); the next start makes it again."""

    server_stopping = True


def user_model_cache(environ=os.environ) -> Path | None:
    """`$XDG_CACHE_HOME/persmem/models` (default ~/.cache/persmem/models), made 0700; None when it cannot be made
    (no writable home directory). UserError when it is not the user's own folder closed to others."""
    base = environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path(environ.get("HOME") or Path.home()) / ".cache"
    persmem = root / "persmem"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for folder in (persmem, persmem / "models"):
            folder.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        log.warning("no model cache at %s (%s): the model is prepared in the home instead", persmem, exc)
        return None
    for folder in (persmem, persmem / "models"):
        info = folder.lstat()
        if info.st_uid != os.geteuid() or info.st_mode & 0o022 or folder.is_symlink():
            raise UserError(f"{folder} is not this user's own folder closed to others (owner uid {info.st_uid}, mode "
                            f"{info.st_mode & 0o777:o}); a file planted there would be loaded as the embedding model. "
                            "Make it yours and 0700 (chown, chmod 700), or set PERSMEM_CACHE_DIR to another folder.")
    return persmem / "models"


def cache_key(source_sha256: str) -> str:
    rewrite = PER_TOKEN.read_text(encoding="utf-8")
    return hashlib.sha256(f"{source_sha256}\n{PREPARATION}\n{_QUANTIZE}\n{rewrite}".encode()).hexdigest()[:32]


class Preparation:
    """Makes (or finds) the prepared model; `cancel()` from any thread stops a preparation under way."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    def prepared(self, source: Path, source_sha256: str, folder: Path) -> Path:
        """`source` quantized dynamically (int8, per-channel weights, per-token activations), from the cache entry
        when it is whole."""
        entry = folder / cache_key(source_sha256)
        target = entry / "model.onnx"
        if self._whole(target, source_sha256):
            log.info("using the prepared model %s", target)
            return target
        entry.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(folder / f"{entry.name}.lock", "a") as lock:
            self._take_turn(lock)
            if self._whole(target, source_sha256):  # another server made it while this one waited
                log.info("using the prepared model %s", target)
                return target
            self._make(source, source_sha256, entry, target)
        return target

    @staticmethod
    def _whole(target: Path, source_sha256: str) -> bool:
        try:
            record = msgspec.json.decode(target.with_name("model.onnx.json").read_bytes(), type=Prepared)
            return record.source_sha256 == source_sha256 and sha256_file(target) == record.sha256
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return False

    def _take_turn(self, lock) -> None:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if self._cancelled.wait(0.1):
                    raise PreparationStopped("the model preparation was stopped (the server is stopping).") from None

    def _make(self, source: Path, source_sha256: str, entry: Path, target: Path) -> None:
        folded, quantized, made = (entry / f".{os.getpid()}-{step}.onnx" for step in ("folded", "dynamic", "per-token"))
        target.with_name("model.onnx.json").unlink(missing_ok=True)  # a record names only a whole file
        started = time.monotonic()
        try:
            arguments = [str(path) for path in (source, folded, quantized, made, PER_TOKEN)]
            child = subprocess.Popen([sys.executable, "-c", _QUANTIZE, *arguments],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)  # a terminal's Ctrl-C is the server's to act on
            errors = self._wait(child)
            if child.returncode != 0:
                raise UserError(f"could not prepare the embedding model from {source}: {errors.strip()[-800:]}")
            with open(made, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(made, target)
            fsync_dir(entry)
            record = Prepared(source_sha256=source_sha256, sha256=sha256_file(target))
            atomic_write_bytes(target.with_name("model.onnx.json"), msgspec.json.encode(record))
            log.info("prepared %s (dynamic int8) with per-token activation scales from %s in %.1f s", target, source,
                     time.monotonic() - started)
        finally:
            for path in (folded, quantized, made):
                path.unlink(missing_ok=True)

    def _wait(self, child: subprocess.Popen) -> str:
        """The child's error output once it ends; killed at once when cancelled."""
        reader = threading.Thread(target=lambda: setattr(child, "_errors", child.stderr.read()), daemon=True)
        reader.start()
        while child.poll() is None:
            if self._cancelled.wait(0.05):
                child.kill()
                child.wait()
                raise PreparationStopped("the model preparation was stopped (the server is stopping).")
        reader.join(5)
        return getattr(child, "_errors", "") or ""
