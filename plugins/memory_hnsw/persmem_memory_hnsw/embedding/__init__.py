"""Text to vectors, locally: the ONNX embedder, the background queue, and exporting a model.

- `embedder.py`    ONNX + tokenizers embedder, pinned model files, passages, the re-quantized model
- `background.py`  the background embedder: stores are acknowledged once logged, embedded in batches afterwards
- `tickets.py`     numbered stores waiting for the background embedder, so a search can wait for them
- `prepare.py`     the default model re-quantized once into the user's cache, in a child process
- `per_token.py`   that preparation's rewrite: one activation scale per token (a text embeds alike in any batch)
- `export.py`      `persmem model export`: a Hugging Face folder to an int8 ONNX export
"""
