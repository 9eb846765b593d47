"""Our own PyTorch model definitions, one readable file per model (nanoGPT-style): each with its
config dataclass, its layers, loading a trained run, and its reference decoding loop.

    modeling/hierarchical.py   seed 003's hierarchical character-level language model
    modeling/gru_seq2seq.py    seed 001's GRU encoder-decoders (context vector, Bahdanau attention)

May import: torch, numpy and runtime/ (the bottom layer: the torch-free runtime owns the text
contracts a model shares with its exported bundle, e.g. runtime.hierarchical_text). Imported by
train/ (which trains these models) and export/ (which exports them to ONNX bundles); never by
runtime/, study/, ui/ or serve/, which stay torch-free.
"""
