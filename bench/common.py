"""Shared pieces of the benchmarks: timing, thread settings, random-weight models, tables.

Every benchmark measures Scriptorium and its peers in one run, on the same weights, with the same
thread count, and reports medians of at least five runs plus the ratio to each peer. Speed does
not depend on weight values, so engine benchmarks use random-weight models with a fixed seed.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import time
from pathlib import Path

DEFAULT_WORK = Path(os.environ.get("SCRIPTORIUM_BENCH_WORK", "~/.cache/scriptorium/bench"))
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def interleaved_medians(runs: dict, repeats: int = 5, warmup: int = 1) -> dict:
    """Median wall-clock seconds of each `runs[key]()`, over `repeats` rounds, after `warmup`.

    Every round runs each engine once, in turn, so a slow spell on a shared machine (other
    tenants' memory traffic moves every engine's speed by a fifth here) falls on all engines
    alike instead of on whichever ran then, and ratios measured in one run stay comparable.
    """
    for run in runs.values():
        for _ in range(warmup):
            run()
    times: dict = {key: [] for key in runs}
    for _ in range(repeats):
        for key, run in runs.items():
            start = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(seconds) for key, seconds in times.items()}


def cache_name(engine: str, precision: str) -> str:
    """Directory name of a cached export. int8 and int4 names carry convert/'s weight format,
    and Scriptorium's bundles a digest of export/'s and convert/'s source, so a change to either
    builds fresh graphs instead of timing stale ones.

    >>> cache_name("optimum", "fp32")
    'optimum-fp32'
    """
    name = f"{engine}-{precision}"
    if precision in ("int8", "int4"):
        from convert.quantize import INT4_FORMAT, INT8_FORMAT

        weight_format = INT8_FORMAT if precision == "int8" else INT4_FORMAT
        name += "-" + "-".join(weight_format.replace(",", "").split())
    if engine == "scriptorium":
        name += "-" + _export_source_digest()
    return name


def _export_source_digest() -> str:
    """8 hex digits that change whenever a file of export/ or convert/ (the bundle writing and
    quantization export/ uses) changes."""
    import hashlib

    digest = hashlib.sha256()
    for package in ("export", "convert"):
        for path in sorted((REPO / package).glob("*.py")):
            digest.update(f"{package}/{path.name}".encode() + path.read_bytes())
    return digest.hexdigest()[:8]


def quantize_int8_like_export(source: Path, target: Path) -> None:
    """A peer's int8 graph in export/'s int8 weight format (same weights, same kernels)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from convert.quantize import INT8_PER_CHANNEL, INT8_WEIGHT_TYPE

    quantize_dynamic(
        source,
        target,
        weight_type=QuantType[INT8_WEIGHT_TYPE],
        per_channel=INT8_PER_CHANNEL,
    )


def set_torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


# Every benchmark measures what users get: `runtime.load(..., spinning=RUNTIME_SPINNING)` with
# None is the runtime's own choice (an engine loop's session spins while the process has its
# cores and sleeps while it does not, runtime/spinning.py; other sessions never spin). Benchmarks
# of bare sessions (bench/ceiling.py, bench/attention.py) take None as not spinning. Runs before
# 2026-11-27 in docs/BENCHMARKS.md had spinning off for every engine loop.
RUNTIME_SPINNING = None


def word_tokenizer(vocab_size: int, specials: list[str]):
    """A word-level tokenizer with exactly `vocab_size` entries ("t0", "t1", …), for random models.

    Token i is the word f"t{i}" (specials take the first ids), so a prompt of n known ids is the
    text " ".join(f"t{i}" for i in ids) and encodes back to exactly those ids.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(specials)}
    vocab.update({f"t{i}": i for i in range(len(specials), vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=specials[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(specials)
    return tokenizer


def save_tokenizer(tokenizer, directory: Path, **special) -> None:
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, model_input_names=["input_ids", "attention_mask"], **special
    ).save_pretrained(directory)


def environment(threads: int) -> dict:
    import onnxruntime

    info = {
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
    }
    try:
        import torch
        import transformers

        info.update(torch=torch.__version__, transformers=transformers.__version__)
    except ImportError:
        pass
    return info


def markdown_table(header: list[str], rows: list[list]) -> str:
    def cell(value):
        if isinstance(value, float):
            return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def portable(value):
    """`value` (a results payload: dicts, lists, strings, numbers) with this machine's absolute
    paths made portable, wherever they stand in a string: inside the repository relative to it
    (the repository itself "."), inside Scriptorium's cache (`$SCRIPTORIUM_CACHE`, by default
    ~/.cache/scriptorium) as `<cache>/…`, inside the home folder as `~/…`. Other text is kept.

    >>> portable({"bundle": str(REPO / "models" / "bible-lm"), "n": [1, str(Path.home() / "x")]})
    {'bundle': 'models/bible-lm', 'n': [1, '~/x']}
    """
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    if not isinstance(value, str):
        return value
    from runtime.bundle import cache_root

    # (root, what a path inside it starts with, what the root alone becomes); the most specific
    # root first, since the repository or the cache may lie in the home folder
    roots = [
        (REPO, "", "."),
        (cache_root().parent, "<cache>/", "<cache>"),
        (Path.home(), "~/", "~"),
    ]
    for root, inside, alone in sorted(roots, key=lambda root: -len(str(root[0]))):
        start = rf"(?<![\w./~-]){re.escape(str(root))}"  # not the tail of a longer path
        value = re.sub(start + "/", inside, value)
        value = re.sub(start + r"(?![\w.-])", alone, value)
    return value


def write_results(path: Path, payload: dict) -> None:
    """Write `payload` as JSON to `path`, its paths made portable (`portable`), so a results file
    reads the same whichever machine or checkout wrote it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(portable(payload), indent=2))
    print(f"wrote {path}")
