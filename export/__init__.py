"""Scriptorium's exporter: a local Hugging Face checkpoint -> an ONNX model bundle.

    >>> from export import PRECISIONS
    >>> PRECISIONS
    ('fp32', 'int8', 'int4')

`export_bundle(model_dir, out_dir, precision="fp32", optimize=True, name=None, …)` writes the
bundle that docs/bundle.md describes and returns its manifest; `scriptorium export` (export/cli.py)
is the command line. `export.fill_mask.export_fill_mask_bundle` exports BERT-style masked LMs to
"fill-mask" bundles (the masked-LM recipes call it). The steps live in exporter.py (pipeline),
parity.py and convert/ (manifest.py, whose `seal` writes a bundle's checksums; optimize.py;
quantize.py); hierarchical.py exports seed 003's hierarchical model, adapter.py a PEFT LoRA as an
adapter bundle on a converted GGUF base, ngram_index.py adds the memorisation index, corpus.py
reads the verse table both it and train/ use. Uses torch, transformers, optimum-onnx, onnx and
onnxruntime; the runtime it produces bundles for needs none but onnxruntime. The torch-free
conversions (GGUF files, Hugging Face Llama checkpoints, the flagship) are convert/, below this
package. The names below are loaded on first use, so that the command line (cli.py) and
`python -m export.adapter` start without torch.

May import: runtime/ (the bundle contract it writes for, e.g. checksums and graph kinds),
convert/ (the bundle writing, quantization, the Llama graphs) and modeling/ (the torch models it
exports). Never train/, which is above it (it calls export), nor study/, ui/, serve/ or bench/
(tests/test_layers.py checks).
"""

__all__ = ["PRECISIONS", "ParityError", "export_bundle", "supported_architectures"]


def __getattr__(name: str):
    """The exporter's names, imported on first use, so that importing export/'s command line
    loads no torch."""
    if name in __all__:
        from . import exporter

        return getattr(exporter, name)
    raise AttributeError(f"module 'export' has no attribute {name!r}")
