"""Benchmarks: Scriptorium against transformers, optimum-onnx and CTranslate2, same run, same
weights, same threads; each module prints a table and writes JSON under bench/results/ (`common`
holds the shared timing, tables and random-weight models).

Layer: the top one. bench/ may import runtime, export, train and serve, and the peers; the app
it measures from outside (`python app.py` in a subprocess), never by importing ui/. Nothing of
ours imports bench/ but the `scriptorium` command (docs/DESIGN.md, "Layers").
"""
