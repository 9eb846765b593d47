"""`scriptorium bench NAME|all [ARGS…]`: run one benchmark (names below) or all of them."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "decode": "bench.decode",
    "seq2seq": "bench.seq2seq",
    "sampling": "bench.sampling",
    "startup": "bench.startup",
    "quality": "bench.quality",
    "breakdown": "bench.breakdown",
    "attention": "bench.attention",
    "serve": "bench.serve",
    "serve-peers": "bench.serve_peers",
    "paraphrase": "bench.paraphrase",
    "batch": "bench.batch",
    "llm": "bench.llm",
    "llm-kernels": "bench.llm_kernels",
    "chat-defaults": "bench.chat_defaults",
    "prefix-cache": "bench.prefix_cache",
    "fidelity": "bench.fidelity",
    "grammar-libs": "bench.grammar_libs",
    "row-invariance": "bench.row_invariance",
    "gguf-memory": "bench.gguf_memory",
    "peer-batch": "bench.peer_batch",
    "adapter-penalties": "bench.adapter_penalties",
    "lean-probe": "bench.lean_probe",
    # last, so that `all` rewrites the app's summary (ui/benchmarks.json) from what the others wrote
    "summary": "bench.app_summary",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*BENCHMARKS, "all"):
        print(f"usage: scriptorium bench {{{'|'.join(BENCHMARKS)}|all}} [ARGS…]", file=sys.stderr)
        return 2
    names = list(BENCHMARKS) if argv[0] == "all" else [argv[0]]
    for name in names:
        status = importlib.import_module(BENCHMARKS[name]).main(argv[1:])
        if status:
            return status
    return 0
