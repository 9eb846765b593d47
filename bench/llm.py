"""Decode speed of a GGUF LLM (default: SmolLM2-135M-Instruct, Q4_1): Scriptorium vs llama.cpp,
transformers, optimum-onnx, CTranslate2, onnxruntime-genai and OpenVINO, on the same weights, with
a memory-bandwidth roofline.

    python -m bench.llm [--gguf FILE] [--bundle DIR] [--threads 2] [--repeats 5]
                        [--new-tokens 128] [--prompt-tokens 16 256] [--engines NAME …]
                        [--contended | --loads quiet busy mixed]

Every engine starts from the one GGUF file: llama.cpp (llama-cpp-python) runs that very file;
transformers dequantizes it (`from_pretrained(dir, gguf_file=…)`, saved once as an fp32
checkpoint) and runs PyTorch eager; optimum-onnx runs its own `text-generation-with-past` export
of that checkpoint; CTranslate2 converts the checkpoint (int8, and float32); onnxruntime-genai
(its model builder's int4), OpenVINO (optimum-intel's int4 export, run by `OVModelForCausalLM`) and
OpenVINO GenAI (`LLMPipeline` on that export) quantize the checkpoint again and run in child
processes of their own virtual environment (`VENV_PEERS`, bench/venv_peers.py); Scriptorium runs
`--bundle`, by default the GGUF converted by convert/flagship.py (carried-over Q4_1 weights).
Every engine runs with its own defaults, as its users get it: ours is `runtime.load(bundle,
threads=…)` with nothing else set (the runtime chooses spinning and batching), and a second row,
"no spinning", shows our speed with spinning off, the floor that adaptive spinning must keep.
`--contended` repeats every measurement under each load of bench/load.py (quiet, a busy loop, a
mixed load of bursts and sleeps) competing for the same cores, for every engine alike.
Batch 1, greedy, exactly `--new-tokens` new tokens (EOS never stops a run), prompts of each
`--prompt-tokens` length: the same token ids for every engine, cut from the World English Bible
fixture (tests/fixtures/verses.tsv) at a word boundary.

For each prompt, an engine is timed generating 1 token (prefill and one step: the time to first
token, TTFT) and generating all N; decode speed is (N − 1) / (T_N − T_1), so it is not diluted
by prefill. Times are medians of `--repeats` interleaved rounds (bench/common.py), every engine
with `--threads` threads. A peer that is not installed, or that dies in a 2-token probe in a
child process (llama-cpp-python 0.3.36 segfaults in `decode` on some CPUs), is skipped with a
line saying why.

Roofline: decoding one token at batch 1 reads every weight once (an embedding table only used by
a Gather: one row) plus the KV cache so far. Bytes are counted from the decoder graph's
initializers and the manifest's cache shape; bandwidth is measured here with `--threads` threads
each taking the maximum of its own slice of a 512 MB float32 buffer (a read-only stream, far
larger than any cache), median of 7. Roofline tok/s = bandwidth / bytes per token; the same for
llama.cpp from the GGUF's tensor sizes.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from runtime.bundle import sha256_of
from runtime.sessions import session_options

from . import common, ct2_peer, openvino_genai_peer, openvino_peer, ort_genai_peer, venv_peers
from .load import LOADS, competing

REPO = Path(__file__).resolve().parent.parent
VERSES = REPO / "tests" / "fixtures" / "verses.tsv"
# peers in their own virtual environment, run in a child process (bench/venv_peers.py)
VENV_PEERS = {
    "onnxruntime-genai": ort_genai_peer,
    "openvino": openvino_peer,
    "openvino-genai": openvino_genai_peer,
}
ENGINES = ("scriptorium", "llama.cpp", "transformers", "optimum-onnx", "ctranslate2", *VENV_PEERS)
CT2_PRECISIONS = ("int8", "fp32")
BANDWIDTH_BYTES = 512 << 20


# ---- the peers' models, built once from the GGUF ----------------------------------------------


def work_dir(work: Path, gguf: Path) -> Path:
    """Where the peers' models for `gguf` are cached under `--work`."""
    return work.expanduser() / f"gguf-{sha256_of(gguf)[:16]}"


def prepare(gguf: Path, work: Path, engines, venv: Path | None = None) -> dict[str, Path]:
    """The dequantized checkpoint, optimum's export of it, CTranslate2's conversions and the
    `VENV_PEERS`' models (built by the peers' virtual environment `venv`), built once and cached
    in `work` (only those the chosen `engines` need)."""
    paths = {"checkpoint": work / "checkpoint"}
    needs_checkpoint = {"transformers", "optimum-onnx", "ctranslate2", *VENV_PEERS} & set(engines)
    if needs_checkpoint and not (paths["checkpoint"] / "config.json").exists():
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs = dict(gguf_file=gguf.name)
        AutoTokenizer.from_pretrained(gguf.parent, **kwargs).save_pretrained(paths["checkpoint"])
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
        model.save_pretrained(paths["checkpoint"])
    if "optimum-onnx" in engines:
        paths["optimum"] = work / "optimum-fp32"
        if not (paths["optimum"] / "model.onnx").exists():
            from optimum.exporters.onnx import main_export

            main_export(
                str(paths["checkpoint"]),
                output=paths["optimum"],
                task="text-generation-with-past",
                do_validation=False,
            )
    if "ctranslate2" in engines:
        for precision in CT2_PRECISIONS:
            paths[f"ctranslate2-{precision}"] = ct2_peer.convert(
                paths["checkpoint"], work, precision
            )
    for engine in set(VENV_PEERS) & set(engines):
        peer = VENV_PEERS[engine]
        target = work / f"{engine}-{peer.PRECISION}"
        paths[engine] = peer.build(paths["checkpoint"], target, venv)
    return paths


def missing_peer(engine: str) -> str | None:
    """Why `engine` cannot run here (its package is not installed), or None."""
    package = {
        "llama.cpp": ("llama_cpp", "llama-cpp-python (pip install -e '.[peers]')"),
        "transformers": ("transformers", "transformers (pip install -e '.[export]')"),
        "optimum-onnx": ("optimum.onnxruntime", "optimum-onnx (pip install -e '.[export]')"),
        "ctranslate2": ("ctranslate2", "ctranslate2 (pip install ctranslate2)"),
    }.get(engine)
    if package is None:
        return None
    import importlib.util

    try:
        found = importlib.util.find_spec(package[0]) is not None
    except ModuleNotFoundError:
        found = False
    return None if found else f"{package[1]} is not installed"


def unavailable_peer(engine: str, gguf: Path, threads: int, venv: Path | None = None) -> str | None:
    """Why `engine` cannot run `gguf` here: it is not installed (a `VENV_PEERS` one: not in the
    peers' virtual environment `venv`, by default under `common.DEFAULT_WORK`), or (llama.cpp)
    it dies in a probe; None when it can."""
    if engine in VENV_PEERS:
        venv = venv or venv_peers.venv_dir(common.DEFAULT_WORK)
        return venv_peers.missing(venv, VENV_PEERS[engine].PACKAGE, engine)
    reason = missing_peer(engine)
    if reason is None and engine == "llama.cpp":
        reason = llama_cpp_crash(gguf, threads)
    return reason


def llama_cpp_crash(gguf: Path, threads: int) -> str | None:
    """Why llama.cpp cannot run `gguf` here, if a child process that loads it and decodes two
    tokens dies (llama-cpp-python 0.3.36 segfaults in `decode` on some CPUs), or None."""
    probe = (
        "import sys\n"
        "from llama_cpp import Llama\n"
        "model = Llama(sys.argv[1], n_ctx=16, n_threads=int(sys.argv[2]), verbose=False)\n"
        "model.eval([1, 2])\n"
    )
    return child_crash([probe, str(gguf), str(threads)], "llama-cpp-python")


def child_crash(code_and_args: list[str], what: str, timeout: float = 120) -> str | None:
    """Why `python -c code args…` failed, naming `what`, or None when it exits cleanly."""
    import subprocess
    import sys

    try:
        done = subprocess.run(
            [sys.executable, "-c", *code_and_args], capture_output=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"{what} did not finish a 2-token probe in {timeout:g} s"
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        return f"{what} crashed in a 2-token probe (signal {-done.returncode}) on this machine"
    last = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
    return f"{what} failed a 2-token probe (exit code {done.returncode}: {last[0][:200]})"


# ---- prompts ---------------------------------------------------------------------------------


def make_prompt(gen, length: int) -> tuple[str, list[int]]:
    """(text, ids): a run of World English Bible words that the bundle's tokenizer encodes into
    exactly `length` ids (the first such run, starting from successive verses)."""
    with open(VERSES, newline="") as file:
        verses = [row["web"] for row in csv.DictReader(file, delimiter="\t")]
    for start in range(len(verses)):
        words = " ".join(verses[start:]).split()
        low, high = 1, min(len(words), length)  # every word is at least one token
        while low < high:  # fewest words giving at least `length` tokens
            middle = (low + high) // 2
            if len(gen.encode_prompt(" ".join(words[:middle]))) < length:
                low = middle + 1
            else:
                high = middle
        text = " ".join(words[:low])
        ids = gen.encode_prompt(text)
        if len(ids) == length:
            return text, ids
    raise ValueError(f"no run of fixture verses encodes into exactly {length} tokens")


# ---- engines: each a function (prompt index, new tokens) -> None ------------------------------


def scriptorium_runner(bundle: Path, threads: int, texts: list[str], spinning=None):
    """Our runtime as users get it (`spinning=None`: the runtime's own choice) or not spinning."""
    import runtime
    from runtime.prefix_cache import PrefixCache

    gen = runtime.load(bundle, threads=threads, spinning=spinning)

    def run(prompt: int, new_tokens: int) -> list[int]:
        if gen.engine is not None and gen.engine.prefix_cache is not None:
            # A cold prefix cache each run, as llama.cpp's runner resets its context: every
            # run repeats its prompt, which a warm cache would not prefill at all.
            gen.engine.prefix_cache = PrefixCache(gen.engine.prefix_cache.max_bytes)
        config = runtime.GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        (out,) = gen.generate(texts[prompt], config)
        return out.token_ids

    return run


def llama_cpp_runner(gguf: Path, threads: int, prompts: list[list[int]], new_tokens: int):
    from llama_cpp import Llama

    context = max(len(p) for p in prompts) + new_tokens + 8
    model = Llama(
        model_path=str(gguf),
        n_ctx=context,
        n_batch=context,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )

    def run(prompt: int, new_tokens: int) -> list[int]:
        model.reset()  # no reuse of the previous run's cache for the same prompt
        out = []
        for token in model.generate(prompts[prompt], top_k=1, temp=0.0, reset=True):
            out.append(token)  # greedy; generate() itself never stops at EOS
            if len(out) == new_tokens:
                return out
        raise RuntimeError("llama.cpp stopped early")

    return run


def hf_runner(model, prompts: list[list[int]]):
    import torch

    def run(prompt: int, new_tokens: int) -> list[int]:
        input_ids = torch.tensor([prompts[prompt]])
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=model.config.eos_token_id,
            )
        return out[0, input_ids.shape[1] :].tolist()

    return run


def ct2_runner(model_dir: Path, precision: str, threads: int, prompts: list[list[int]]):
    model = ct2_peer.generator(model_dir, precision, threads)
    tokens = ct2_peer.vocabulary(model_dir)

    def run(prompt: int, new_tokens: int) -> list[int]:
        (out,) = ct2_peer.generate_ids(model, tokens, np.array([prompts[prompt]]), new_tokens)
        return out

    return run


def venv_peer_runner(engine: str, model_dir: Path, args, prompts: list[list[int]]):
    """A `VENV_PEERS` engine in its child process, asked for exactly `new_tokens` greedy tokens
    (the time measured includes one JSON request and reply over a pipe); the runner's `versions`
    are the child's packages."""
    peer = VENV_PEERS[engine]
    venv = venv_peers.venv_dir(args.work)
    child = venv_peers.PeerProcess(venv, peer.MODULE, model_dir, args.threads)

    def run(prompt: int, new_tokens: int) -> list[int]:
        return child.call("generate", ids=prompts[prompt], new_tokens=new_tokens)

    run.versions = child.call("versions")
    return run


def runners(args, paths: dict[str, Path], texts, prompts) -> dict:
    """(engine, precision) -> run(prompt index, new tokens), for the installed engines."""
    out = {}
    for engine in args.engines:
        if engine == "scriptorium":
            precision = bundle_precision(args.bundle)
            out[(engine, precision)] = scriptorium_runner(args.bundle, args.threads, texts)
            out[(engine, f"{precision}, no spinning")] = scriptorium_runner(
                args.bundle, args.threads, texts, spinning=False
            )
            if args.faithful_bundle:
                out[(engine, "faithful (Chat's default)")] = scriptorium_runner(
                    args.faithful_bundle, args.threads, texts
                )
        elif engine == "llama.cpp":
            out[(engine, gguf_type(args.gguf))] = llama_cpp_runner(
                args.gguf, args.threads, prompts, args.new_tokens
            )
        elif engine == "transformers":
            from transformers import AutoModelForCausalLM

            common.set_torch_threads(args.threads)
            model = AutoModelForCausalLM.from_pretrained(
                paths["checkpoint"], attn_implementation="eager"
            ).eval()
            out[(engine, "fp32")] = hf_runner(model, prompts)
        elif engine == "optimum-onnx":
            from optimum.onnxruntime import ORTModelForCausalLM

            model = ORTModelForCausalLM.from_pretrained(
                paths["optimum"],
                use_cache=True,
                provider="CPUExecutionProvider",
                session_options=session_options(args.threads),
            )
            out[(engine, "fp32")] = hf_runner(model, prompts)
        elif engine == "ctranslate2":
            for precision in CT2_PRECISIONS:
                model_dir = paths[f"ctranslate2-{precision}"]
                out[(engine, precision)] = ct2_runner(model_dir, precision, args.threads, prompts)
        elif engine in VENV_PEERS:
            precision = VENV_PEERS[engine].PRECISION
            out[(engine, precision)] = venv_peer_runner(engine, paths[engine], args, prompts)
    return out


# ---- roofline --------------------------------------------------------------------------------


def read_bandwidth(threads: int, nbytes: int = BANDWIDTH_BYTES, repeats: int = 7) -> float:
    """Bytes per second that `threads` threads stream from memory: each takes the maximum of its
    own slice of an `nbytes` float32 buffer (numpy releases the GIL); median of `repeats`."""
    buffer = np.ones(nbytes // 4, dtype=np.float32)  # (nbytes / 4,)
    slices = np.array_split(buffer, threads)
    seconds = []
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.max, slices))  # touch every page once before timing
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(np.max, slices))
            seconds.append(time.perf_counter() - start)
    return buffer.nbytes / statistics.median(seconds)


def _tensor_bytes(tensor) -> int:
    import onnx

    count = int(np.prod(tensor.dims)) if len(tensor.dims) else 1
    if tensor.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
        return (count + 1) // 2
    return count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for subgraph in [attribute.g, *attribute.graphs]:
                yield from _all_nodes(subgraph)


def bundle_bytes_per_token(bundle: Path) -> dict:
    """{"weights": bytes read per decode token from the decoder graph's initializers,
    "kv_per_position": cache bytes read per token per position already in the cache}.

    An initializer used only as a Gather's table costs one row per token (batch 1); any other
    initializer is read whole. The cache holds keys and values per layer, `num_heads` (the
    key/value heads) × `head_size` each, in the graph's past input type.
    """
    import onnx

    from runtime.bundle import read_manifest

    manifest = read_manifest(bundle, verify=False)
    graph = onnx.load(bundle / manifest.graphs["decoder"].file, load_external_data=False)
    uses: dict[str, set] = {}
    for node in _all_nodes(graph.graph):
        for index, name in enumerate(node.input):
            uses.setdefault(name, set()).add((node.op_type, index))
    weights = 0
    for tensor in graph.graph.initializer:
        size = _tensor_bytes(tensor)
        if uses.get(tensor.name) == {("Gather", 0)} and tensor.dims:
            size //= tensor.dims[0]
        weights += size
    past = [i for i in graph.graph.input if i.name.startswith("past_key_values")]
    itemsize = 4
    if past:
        elem = past[0].type.tensor_type.elem_type
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(elem).itemsize
    kv = 2 * manifest.num_layers * manifest.num_heads * manifest.head_size * itemsize
    return {"weights": weights, "kv_per_position": kv}


def gguf_bytes_per_token(gguf: Path) -> dict:
    """The same count for llama.cpp on the GGUF: every tensor once, except the token embedding
    (one row) unless it doubles as the output matrix (no `output.weight`: tied). llama.cpp keeps
    its cache in float16."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf)
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    rows = {t.name: int(t.shape[-1]) for t in reader.tensors}
    weights = sum(sizes.values())
    if "output.weight" in sizes:
        weights -= (
            sizes["token_embd.weight"] - sizes["token_embd.weight"] // rows["token_embd.weight"]
        )

    def field(key):
        for name, value in reader.fields.items():
            if name.endswith(key):
                return int(value.parts[value.data[0]][0])
        raise KeyError(key)

    layers, heads = field(".block_count"), field(".attention.head_count_kv")
    head_size = field(".embedding_length") // field(".attention.head_count")
    return {"weights": weights, "kv_per_position": 2 * layers * heads * head_size * 2}


def gguf_type(gguf: Path) -> str:
    """The GGUF's quantization as llama.cpp names it (e.g. "Q4_1"), from its file type."""
    from gguf import GGUFReader, LlamaFileType

    field = GGUFReader(gguf).fields.get("general.file_type")
    if field is None:
        return "gguf"
    return LlamaFileType(int(field.parts[field.data[0]][0])).name.removeprefix("MOSTLY_")


def bundle_precision(bundle: Path) -> str:
    from runtime.bundle import read_manifest

    return read_manifest(bundle, verify=False).precision or "fp32"


# ---- main --------------------------------------------------------------------------------------


def check_and_convert(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse fewer than 2 `--new-tokens`; fill in `args.gguf` (the flagship's by default,
    convert/fetch.py), `args.bundle` (that GGUF converted once, from the per-user cache) and,
    for the flagship, `args.faithful_bundle` (its faithful conversion, Chat's default)."""
    if args.new_tokens < 2:
        parser.error(f"`--new-tokens` must be at least 2, got {args.new_tokens}")
    from convert import flagship
    from convert.fetch import FLAGSHIP, FetchError, fetch_gguf

    try:
        args.gguf = args.gguf or fetch_gguf()
    except FetchError as error:
        parser.error(f"no GGUF: {error}; or pass --gguf FILE")
    flagship_default = args.bundle is None and sha256_of(args.gguf) == FLAGSHIP.sha256
    args.bundle = args.bundle or flagship.ensure_bundle(args.gguf)
    args.faithful_bundle = flagship.faithful_flagship_bundle() if flagship_default else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked and completed by `check_and_convert`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gguf",
        type=Path,
        default=None,
        help="default: the flagship's GGUF (convert/fetch.py)",
    )
    parser.add_argument("--bundle", type=Path, default=None, help="default: the GGUF converted")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, nargs="+", default=[16, 256])
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--bandwidth-mb", type=int, default=BANDWIDTH_BYTES >> 20)
    parser.add_argument("--work", type=Path, default=common.DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "llm.json")
    parser.add_argument(
        "--loads",
        nargs="+",
        choices=LOADS,
        default=["quiet"],
        help="competing work (bench/load.py)",
    )
    parser.add_argument(
        "--contended",
        action="store_true",
        help="measure under every load: --loads " + " ".join(LOADS),
    )
    args = parser.parse_args(argv)
    if args.contended:
        args.loads = list(LOADS)
    check_and_convert(parser, args)
    return args


def skip_unavailable(args: argparse.Namespace) -> dict[str, str]:
    """Drop from `args.engines` the peers that are missing or crash; returns engine -> why."""
    skipped = {}
    for engine in args.engines:
        venv = venv_peers.venv_dir(args.work)
        if reason := unavailable_peer(engine, args.gguf, args.threads, venv):
            skipped[engine] = reason
            print(f"skipped {engine}: {reason}")
    args.engines = [e for e in args.engines if e not in skipped]
    return skipped


def measure(args: argparse.Namespace, runs: dict, prompts: int) -> dict:
    """Time every runner on every prompt, generating 1 and `--new-tokens` tokens, under each
    load; returns load -> engine -> its first 8 greedy tokens and, per prompt length, TTFT, total
    time and decode speed."""
    timed = {
        (*key, prompt, new): (lambda run=run, prompt=prompt, new=new: run(prompt, new))
        for key, run in runs.items()
        for prompt in range(prompts)
        for new in (1, args.new_tokens)
    }
    seconds = {}
    for load in args.loads:
        with competing(load):
            seconds[load] = common.interleaved_medians(timed, repeats=args.repeats)
    first_tokens = {key: run(0, 8) for key, run in runs.items()}  # greedy agreement, 8 tokens

    results = {load: {} for load in args.loads}
    for load, key in ((load, key) for load in args.loads for key in runs):
        engine = "/".join(key)
        results[load][engine] = {"greedy_first_8": first_tokens[key]}
        for prompt, n in enumerate(args.prompt_tokens):
            t1 = seconds[load][(*key, prompt, 1)]
            tn = seconds[load][(*key, prompt, args.new_tokens)]
            results[load][engine][f"prompt_{n}"] = {
                "ttft_s": t1,
                "total_s": tn,
                # None when noise swamps a tiny run (T_N not above T_1)
                "decode_tok_per_s": (args.new_tokens - 1) / (tn - t1) if tn > t1 else None,
            }
    return results


def roofline_of(args: argparse.Namespace, runs: dict) -> tuple[dict, dict]:
    """Measure the read bandwidth and count each engine's bytes per token; returns (the
    roofline: bandwidth, method and per engine its bytes and tok/s per prompt length, the
    byte counts)."""
    bandwidth = read_bandwidth(args.threads, args.bandwidth_mb << 20)
    context = {n: n + args.new_tokens / 2 for n in args.prompt_tokens}  # mean cache length
    counts = {"scriptorium": bundle_bytes_per_token(args.bundle)}
    if any(key[0] == "llama.cpp" for key in runs):
        counts["llama.cpp"] = gguf_bytes_per_token(args.gguf)
    method = " ".join(__doc__.split("Roofline: ")[1].split())
    roofline = {"bandwidth_gb_per_s": bandwidth / 1e9, "method": method}
    for engine, count in counts.items():
        roofline[engine] = {
            "weight_bytes_per_token": count["weights"],
            "kv_bytes_per_token_per_position": count["kv_per_position"],
        }
        for n in args.prompt_tokens:
            per_token = count["weights"] + count["kv_per_position"] * context[n]
            roofline[engine][f"prompt_{n}_tok_per_s"] = bandwidth / per_token
    return roofline, counts


def results_table(args: argparse.Namespace, runs: dict, results: dict, roofline: dict) -> str:
    """One row a load and engine: per prompt length its decode speed, how much faster ours is,
    TTFT, how much faster our TTFT is, and its share of the roofline."""
    ours = next(("/".join(k) for k in runs if k[0] == "scriptorium"), None)
    header = ["load", "engine", "precision"]
    for n in args.prompt_tokens:
        header += [
            f"decode tok/s ({n})",
            f"ours faster ({n})",
            f"TTFT ms ({n})",
            f"ours TTFT faster ({n})",
            f"of roofline ({n})",
        ]
    rows = []
    for load, key in ((load, key) for load in args.loads for key in runs):
        engine, row = "/".join(key), [load, *key]
        for n in args.prompt_tokens:
            cell = results[load][engine][f"prompt_{n}"]
            mine = ours and results[load][ours][f"prompt_{n}"]
            speed, ceiling = cell["decode_tok_per_s"], roofline.get(key[0], {})
            ceiling = ceiling.get(f"prompt_{n}_tok_per_s")
            row += [
                speed or "n/a",
                f"{mine['decode_tok_per_s'] / speed:.2f}×"
                if mine and mine["decode_tok_per_s"] and speed
                else "",
                cell["ttft_s"] * 1000,
                f"{cell['ttft_s'] / mine['ttft_s']:.2f}×" if mine else "",
                f"{speed / ceiling:.0%}" if ceiling and speed else "",
            ]
        rows.append(row)
    return common.markdown_table(header, rows)


def print_roofline(args: argparse.Namespace, roofline: dict, counts: dict) -> None:
    """The bandwidth measured and each engine's bytes per token and roofline speed."""
    print(
        f"read bandwidth {roofline['bandwidth_gb_per_s']:.1f} GB/s ({args.threads} threads); "
        "bytes per token:"
    )
    for engine, count in counts.items():
        print(
            f"  {engine}: weights {count['weights'] / 1e6:.1f} MB + KV "
            f"{count['kv_per_position'] / 1e3:.1f} kB × cache length; roofline "
            + ", ".join(
                f"{roofline[engine][f'prompt_{n}_tok_per_s']:.0f} tok/s ({n})"
                for n in args.prompt_tokens
            )
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    skipped = skip_unavailable(args)
    venv = venv_peers.venv_dir(args.work)
    paths = prepare(args.gguf, work_dir(args.work, args.gguf), args.engines, venv)

    import runtime

    gen = runtime.load(args.bundle, threads=args.threads)
    texts, prompts = zip(*(make_prompt(gen, n) for n in args.prompt_tokens))
    runs = runners(args, paths, list(texts), list(prompts))
    results = measure(args, runs, len(prompts))
    roofline, counts = roofline_of(args, runs)
    table = results_table(args, runs, results, roofline)
    print(table)
    print_roofline(args, roofline, counts)
    common.write_results(
        args.out,
        {
            "benchmark": "llm",
            "environment": common.environment(args.threads),
            "gguf": {"file": args.gguf.name, "sha256": sha256_of(args.gguf)},
            "bundle": str(args.bundle),
            "prompt_tokens": args.prompt_tokens,
            "new_tokens": args.new_tokens,
            "repeats": args.repeats,
            "smoke": args.repeats < 5,  # fewer rounds than a measurement: proves the harness
            "load_average": list(os.getloadavg()),  # 1, 5, 15 minutes, when the run ended
            "loads": args.loads,
            "skipped": skipped,
            "peer_versions": {
                "/".join(key): run.versions for key, run in runs.items() if hasattr(run, "versions")
            },
            "results": results,
            "roofline": roofline,
            "table": table,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
