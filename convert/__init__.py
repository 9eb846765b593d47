"""Torch-free conversion into ONNX bundles, and the bundle writing every exporter shares.

- GGUF files (`gguf`, read by `gguf_read` after `gguf_check` has bounded them, the tokenizer by
  `gguf_tokenizer`) and Hugging Face Llama / Qwen2 checkpoints (`hf_checkpoint`) become one lean
  decoder graph (`graph`, on the node-by-node `builder`) in one bundle layout (`bundle`).
- `fetch` and `flagship` find the flagship GGUF (SmolLM2-135M-Instruct) and convert it once into
  the per-user cache.
- `manifest` (`seal`: a bundle's checksums and manifest.json, the model card), `quantize`
  (weight quantization of one graph) and `optimize` (onnxruntime's transformer optimizer): what
  export/'s torch exporters and train/ use as well.

Nothing here imports torch, transformers or optimum at module level, so the app, serve and a Space
import this package (the flagship) without them; the torch exporters above it are export/.

May import: runtime/ only (tests/test_layers.py checks).
"""
