"""The GGUF importer's peak memory is bounded by the file, not by the whole model held at once:
a 51 MB Q8_0 file written tensor by tensor (bench/gguf_memory.py: 2 layers of width 1024, a
16,000-token table) is imported in a child process whose peak resident memory, less that of a
child that only imports the same modules, stays under 3 times the file (measured: 1.5-2.4 times,
the mapped file's pages included; 4.6 times before weights were streamed to the data file).
docs/GGUF.md, "Converter memory", has the figures for 0.5B and 1.7B models.
"""

from __future__ import annotations

import json

from bench.gguf_memory import CHILD, measure, write_synthetic_gguf

SHAPE = ("llama", 2, 1024, 4096, 16, 16, 64, 16000, 2048, 10000.0, 1e-5, False)
IMPORTS = "import json, convert.gguf, onnxruntime, gguf, tokenizers; print(json.dumps({}))"


def test_import_peak_memory_is_bounded_by_the_file(tmp_path):
    # 256 byte tokens: the weights' memory, not the vocabulary's metadata
    gguf_path = write_synthetic_gguf(tmp_path / "model.gguf", SHAPE, "Q8_0", tokens=256)
    size = gguf_path.stat().st_size
    baseline = measure(IMPORTS)
    run = measure(CHILD, str(gguf_path), str(tmp_path / "bundle"), "0")
    assert run["returncode"] == 0, run.get("error")
    grown = run["peak_rss_bytes"] - baseline["peak_rss_bytes"]
    print(json.dumps({"file": size, "grown": grown, "ratio": grown / size}))
    assert grown < 3 * size
    assert (tmp_path / "bundle" / "model.onnx.data").stat().st_size >= 0.9 * size
