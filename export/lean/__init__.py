"""Lean decoder graphs built node by node, where optimum's export is slower than it need be:
GPT-2 (`gpt2`) and BART / mBART (`bart`), from the PyTorch weights, on the shared `builder`
(onnx helper calls with names, shapes and onnxruntime's contrib ops), which the Llama family's
graph (convert/graph.py) uses too."""
