"""Grammar libraries for structured outputs, measured where we use them: the flagship's tokenizer
(SmolLM2, V = 49,152) and bench/schemas.py's 24 JSON Schemas.

`python -m bench.grammar_libs` compares llguidance, xgrammar and outlines-core: licence,
install weight (the package and the dependencies it requires, as installed here, and whether
torch is among them), the time to prepare the tokenizer and to compile each schema, and the
token-mask time per step (median over every step of 24 JSON documents: the flagship's own
greedy replies, decoded with llguidance, fed to each library token by token; a library that
refuses a token is counted). Writes bench/results/grammar_libs.json.

`python -m bench.grammar_libs --overhead` measures what the library we picked (llguidance,
runtime/structured.py) costs the flagship's decoding per token: each constrained reply against
the same prompt decoded free for exactly as many tokens (`min_new_tokens`), alone (greedy and
sampled) and as 16 concurrent streams in the engine's batch, interleaved medians; and the time
the masks themselves take (`JsonRows.allowed` and `advance`, timed in place). Writes
bench/results/grammar_libs-overhead.json.

Not covered: the llama-server comparison on the same schema set (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import re
import statistics
import threading
import time
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import numpy as np

import runtime
from bench.common import RESULTS, environment, interleaved_medians, markdown_table, write_results
from bench.schemas import SCHEMAS
from runtime import structured

LIBRARIES = ("llguidance", "xgrammar", "outlines-core")
SEPARATORS = (", ", ": ")  # as runtime/structured.py writes documents
STREAMS = 16


# ---- install weight and licence ----------------------------------------------------------------


def _requirements(dist: metadata.Distribution) -> list[str]:
    """The names of what `dist` requires on this platform (extras left out)."""
    from packaging.requirements import Requirement

    names = []
    for line in dist.requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(requirement.name)
    return names


def _installed_bytes(dist: metadata.Distribution) -> int:
    return sum(
        path.stat().st_size
        for path in (dist.locate_file(file) for file in dist.files or [])
        if path.is_file()
    )


def install_weight(name: str) -> dict:
    """The licence, and the installed size of `name` and of everything it requires."""
    dist = metadata.distribution(name)
    closure, missing, todo = {}, [], [name]
    while todo:
        current = todo.pop()
        key = re.sub(r"[-_.]+", "-", current).lower()
        if key in closure or key in missing:
            continue
        try:
            found = metadata.distribution(current)
        except metadata.PackageNotFoundError:
            missing.append(key)
            continue
        closure[key] = _installed_bytes(found)
        todo += _requirements(found)
    own = closure[re.sub(r"[-_.]+", "-", name).lower()]
    licence = dist.metadata.get("License-Expression") or dist.metadata.get("License")
    return {
        "version": dist.version,
        "licence": licence,
        "installed_mb": round(own / 2**20, 1),
        "with_dependencies_mb": round(sum(closure.values()) / 2**20, 1),
        "requires": sorted(set(closure) - {re.sub(r"[-_.]+", "-", name).lower()}),
        "requires_not_installed_here": sorted(missing),
        "pulls_torch": "torch" in closure or "torch" in missing,
    }


# ---- the three libraries behind one interface ---------------------------------------------------


class Llguidance:
    """llguidance: a lazy lexer and Earley parser over a token trie (Rust, MIT)."""

    def __init__(self, tokenizer, vocab: int):
        import llguidance

        self.table = llguidance.LLTokenizer(tokenizer.to_str())  # built afresh, to be timed
        self.bitmask = np.zeros((1, (vocab + 31) // 32), dtype=np.int32)

    def compile(self, schema: str):
        import llguidance

        return llguidance.LLMatcher(self.table, structured.grammar_of(schema), log_level=0)

    def mask(self, matcher) -> None:
        import llguidance.numpy

        llguidance.numpy.fill_next_token_bitmask(matcher, self.bitmask)

    def advance(self, matcher, token: int) -> bool:
        return matcher.consume_token(token)


class Xgrammar:
    """xgrammar: a pushdown automaton with precomputed per-state token masks (C++, Apache-2.0)."""

    def __init__(self, tokenizer_file: Path, vocab: int):
        import xgrammar
        from transformers import PreTrainedTokenizerFast

        hf = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
        self.compiler = xgrammar.GrammarCompiler(
            xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=vocab)
        )
        self.bitmask = xgrammar.allocate_token_bitmask(1, vocab)  # a torch tensor (1, V/32)

    def compile(self, schema: str):
        import xgrammar

        grammar = self.compiler.compile_json_schema(
            schema, any_whitespace=False, separators=SEPARATORS
        )
        return xgrammar.GrammarMatcher(grammar)

    def mask(self, matcher) -> None:
        matcher.fill_next_token_bitmask(self.bitmask)

    def advance(self, matcher, token: int) -> bool:
        return matcher.accept_token(token)


class OutlinesCore:
    """outlines-core: the schema as a regex, the regex as a token-level DFA (Rust, Apache-2.0)."""

    def __init__(self, tokenizer, vocab: int):
        import outlines_core

        from serve.chat import token_bytes

        specials = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
        tokens: dict[bytes, list[int]] = {}
        for token_id in range(tokenizer.get_vocab_size()):
            if token_id not in specials:
                tokens.setdefault(bytes(token_bytes(tokenizer, token_id)), []).append(token_id)
        eos = tokenizer.token_to_id("<|im_end|>")
        self.vocabulary = outlines_core.Vocabulary(eos, tokens)
        self.bitmask = np.zeros((vocab + 31) // 32, dtype=np.int32)

    def compile(self, schema: str):
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        regex = build_regex_from_schema(schema, whitespace_pattern="[ ]?")
        return outlines_core.Guide(outlines_core.Index(regex, self.vocabulary))

    def mask(self, guide) -> None:
        guide.write_mask_into(self.bitmask.ctypes.data, self.bitmask.size, 4)

    def advance(self, guide, token: int) -> bool:
        try:
            guide.advance(token, return_tokens=False)
        except ValueError:
            return False
        return True


def _library(name: str, tokenizer, tokenizer_file: Path, vocab: int):
    if name == "llguidance":
        return Llguidance(tokenizer, vocab)
    if name == "xgrammar":
        return Xgrammar(tokenizer_file, vocab)
    return OutlinesCore(tokenizer, vocab)


def documents(gen) -> list[list[int]]:
    """The flagship's greedy reply to each schema's prompt (its tokens, the end of turn left
    out): the documents every library is fed."""
    out = []
    for case in SCHEMAS:
        config = gen.config(max_new_tokens=192, json_schema=case.text)
        reply = gen.chat([{"role": "user", "content": case.prompt}], config)[0]
        out.append([t for t in reply.token_ids if t not in gen.end_of_turn_token_ids])
    return out


def measure_library(library, docs: list[list[int]]) -> dict:
    """Compile times per schema, and the mask and advance times of every step of `docs`."""
    compile_ms, mask_us, advance_us, refused = [], [], [], []
    for case, tokens in zip(SCHEMAS, docs):
        start = time.perf_counter()
        matcher = library.compile(case.text)
        compile_ms.append((time.perf_counter() - start) * 1e3)
        for token in tokens:
            start = time.perf_counter()
            library.mask(matcher)
            mask_us.append((time.perf_counter() - start) * 1e6)
            start = time.perf_counter()
            accepted = library.advance(matcher, token)
            advance_us.append((time.perf_counter() - start) * 1e6)
            if not accepted:
                refused.append(case.name)
                break
    return {
        "compile_ms_median": round(statistics.median(compile_ms), 2),
        "compile_ms_max": round(max(compile_ms), 1),
        "mask_us_median": round(statistics.median(mask_us), 1),
        "mask_us_mean": round(statistics.fmean(mask_us), 1),
        "mask_us_p90": round(float(np.percentile(mask_us, 90)), 1),
        "mask_us_max": round(max(mask_us), 1),
        "advance_us_median": round(statistics.median(advance_us), 1),
        "steps": len(mask_us),
        "documents_refused": refused,
    }


def compare_libraries(bundle: Path, threads: int) -> dict:
    gen = runtime.load(bundle, threads=threads)
    vocab = gen.manifest.vocab_size
    docs = documents(gen)
    rows = {}
    for name in LIBRARIES:
        start = time.perf_counter()
        library = _library(name, gen.tokenizer, bundle / "tokenizer.json", vocab)
        setup = time.perf_counter() - start
        rows[name] = {
            **install_weight(name),
            "tokenizer_setup_s": round(setup, 2),
            **measure_library(library, docs),
        }
        print(name, rows[name])
    return {
        "what": "grammar libraries on the flagship's tokenizer and bench/schemas.py's schemas",
        "vocab_size": vocab,
        "schemas": len(SCHEMAS),
        "document_tokens": sum(len(d) for d in docs),
        "documents": "the flagship's greedy reply to each schema's prompt, with llguidance",
        "libraries": rows,
        "environment": environment(threads),
    }


# ---- llguidance's overhead on the flagship's decoding -------------------------------------------


@contextmanager
def timed_masks(totals: dict):
    """Accumulate the seconds spent in `JsonRows.allowed` and `advance` into totals["seconds"]."""
    originals = {name: getattr(structured.JsonRows, name) for name in ("allowed", "advance")}
    lock = threading.Lock()

    def timing(method):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                with lock:
                    totals["seconds"] += time.perf_counter() - start

        return wrapper

    for name, method in originals.items():
        setattr(structured.JsonRows, name, timing(method))
    try:
        yield totals
    finally:
        for name, method in originals.items():
            setattr(structured.JsonRows, name, method)


def _chat_all(gen, jobs) -> list[runtime.GenerationOutput]:
    """Every (messages, config) job's reply, all submitted at once from their own threads."""
    results: list = [None] * len(jobs)

    def run(index: int) -> None:
        results[index] = gen.chat(*jobs[index])[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _overhead_case(gen, cases, settings: dict, repeats: int) -> dict:
    """Constrained replies to `cases` (all at once) against free replies of the same lengths."""
    messages = [[{"role": "user", "content": case.prompt}] for case in cases]
    constrained = [
        (m, gen.config(max_new_tokens=192, json_schema=case.text, **settings))
        for m, case in zip(messages, cases)
    ]
    replies = _chat_all(gen, constrained)
    lengths = [len(reply.token_ids) for reply in replies]
    free = [
        (m, gen.config(max_new_tokens=n, min_new_tokens=n, **settings))
        for m, n in zip(messages, lengths)
    ]
    totals = {"seconds": 0.0}
    with timed_masks(totals):
        runs = {"constrained": constrained, "free": free}
        medians = interleaved_medians(
            {key: (lambda jobs=jobs: _chat_all(gen, jobs)) for key, jobs in runs.items()},
            repeats=repeats,
        )
    tokens = sum(lengths)
    runs = repeats + 1  # the warm-up run is timed in place too
    return {
        "streams": len(cases),
        "tokens": tokens,
        "free_ms_per_token": round(medians["free"] / tokens * 1e3, 3),
        "constrained_ms_per_token": round(medians["constrained"] / tokens * 1e3, 3),
        "overhead_percent": round((medians["constrained"] / medians["free"] - 1) * 100, 1),
        "mask_us_per_token": round(totals["seconds"] / (runs * tokens) * 1e6, 1),
    }


def measure_overhead(bundle: Path, threads: int, repeats: int) -> dict:
    gen = runtime.load(bundle, threads=threads)
    sampled = {"do_sample": True, "temperature": 0.8, "top_p": 0.95, "seed": 1}
    results = {}
    for label, settings in (("greedy", {}), ("sampled", sampled)):
        alone = [_overhead_case(gen, [case], settings, repeats) for case in SCHEMAS[:8]]
        tokens = sum(r["tokens"] for r in alone)
        free = sum(r["free_ms_per_token"] * r["tokens"] for r in alone)
        constrained = sum(r["constrained_ms_per_token"] * r["tokens"] for r in alone)
        results[f"batch 1, {label}"] = {
            "requests": len(alone),
            "tokens": tokens,
            "free_ms_per_token": round(free / tokens, 3),
            "constrained_ms_per_token": round(constrained / tokens, 3),
            "overhead_percent": round((constrained / free - 1) * 100, 1),
            "mask_us_per_token": round(
                sum(r["mask_us_per_token"] * r["tokens"] for r in alone) / tokens, 1
            ),
        }
        print(label, "alone", results[f"batch 1, {label}"])
        results[f"{STREAMS} streams, {label}"] = _overhead_case(
            gen, SCHEMAS[:STREAMS], settings, repeats
        )
        print(label, STREAMS, results[f"{STREAMS} streams, {label}"])
    return {
        "what": "llguidance's cost per token on the flagship: constrained replies against free "
        "replies of the same prompts and lengths",
        "bundle": str(bundle),
        "repeats": repeats,
        "results": results,
        "environment": environment(threads),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overhead", action="store_true", help="llguidance's cost per token")
    parser.add_argument("--bundle", type=Path, help="default: the flagship's converted bundle")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.bundle is None:
        from convert.flagship import flagship_bundle

        args.bundle = flagship_bundle()
    if args.overhead:
        payload = measure_overhead(args.bundle, args.threads, args.repeats)
        write_results(RESULTS / "grammar_libs-overhead.json", payload)
        rows = [[key, *value.values()] for key, value in payload["results"].items()]
        header = ["case", *next(iter(payload["results"].values()))]
    else:
        payload = compare_libraries(args.bundle, args.threads)
        write_results(RESULTS / "grammar_libs.json", payload)
        keys = ("licence", "with_dependencies_mb", "pulls_torch", "compile_ms_median")
        keys += ("mask_us_median", "mask_us_mean", "documents_refused")
        rows = [[name, *(row[k] for k in keys)] for name, row in payload["libraries"].items()]
        header = ["library", *keys]
    print(markdown_table(header, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
