"""Benchmarks: Scriptorium against transformers and optimum-onnx, same run, same weights."""
