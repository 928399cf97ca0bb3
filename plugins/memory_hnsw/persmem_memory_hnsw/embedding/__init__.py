"""Text to vectors, locally: the ONNX embedder, the background queue, and exporting a model.

- `embedder.py`    ONNX + tokenizers embedder, pinned model files, passages, the re-quantized model
- `background.py`  the background embedder: stores are acknowledged once logged, embedded in batches afterwards
- `tickets.py`     numbered stores waiting for the background embedder, so a search can wait for them
- `export.py`      `persmem model export`: a Hugging Face folder to an int8 ONNX export
"""
