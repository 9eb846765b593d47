"""Fidelity of the flagship (SmolLM2-135M-Instruct, Q4_1) against transformers on the same GGUF:
ours as shipped, llama.cpp, and graph variants that isolate each candidate source of divergence,
each with its decode speed.

    python -m bench fidelity [--gguf FILE] [--bundle DIR] [--threads 2] [--new-tokens 64]
                             [--variants NAME …] [--speed-tokens 128] [--repeats 3]
                             [--speed-only]

The reference is transformers loading the GGUF (`from_pretrained(dir, gguf_file=…)`: the weights
dequantized to float32, saved once as a checkpoint by bench/llm.py's `prepare`), eager attention.
`CHATS` are 24 fixed conversations (facts, lists, code, poems, multi-turn), rendered by the
flagship's chat template into the same token ids for every engine. Per engine and chat:

    greedy reply      up to `--new-tokens` tokens, ending at the first end-of-turn token (kept,
                      so that stopping early or late counts as a divergence)
    common-prefix share   the reply's common prefix with transformers' reply, over the length of
                      transformers' reply (1 = identical); averaged over the chats
    teacher-forced top-1  fed the prompt and transformers' reply in one pass, how often the
                      engine's most likely next token is transformers' (at each reply position)
    max |Δlogit|      the largest logit difference at those positions

Engines: ours as shipped (`runtime.load` of the converted bundle; its teacher-forced pass on an
onnxruntime session of the same graph), llama.cpp (llama-cpp-python on the GGUF, its logits with
`logits_all`; skipped with a line when missing or when it dies in bench/llm.py's probe),
onnxruntime-genai and OpenVINO through optimum-intel (`SCORED_PEERS`: their int4 models of the
dequantized checkpoint, in child processes of the peers' virtual environment, bench/venv_peers.py;
skipped with a line when that environment lacks them; no decode speed here: bench/llm.py times
them), and the variants of bench/fidelity_graphs.py. The replies and logits are computed on one
thread per engine (`FIDELITY_THREADS`): on a shared machine two spinning threads per engine slowed
these passes several-fold. Decode speed, with `--threads` threads: bench/llm.py's runners and prompt
(16 tokens), `--speed-tokens` greedy tokens, (N − 1) / (T_N − T_1), medians of `--repeats` rounds
interleaved over every engine, so ratios to the shipped graph hold on a shared machine. Last,
`node_errors` compares each graph's embedding, rotary caches, attention outputs and logits with
transformers' on the first chat (where an error starts, not only where it ends).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from runtime.bundle import sha256_of

from . import common, llm, venv_peers
from .fidelity_graphs import VARIANTS, build_variant, node_errors, transformers_nodes

DEFAULT_VARIANTS = list(VARIANTS)
FIDELITY_THREADS = 1  # threads of every engine's replies and logits (not of the speed runs)
# the peers of bench/llm.py's VENV_PEERS that expose logits (OpenVINO GenAI's pipeline does not)
SCORED_PEERS = [name for name, peer in llm.VENV_PEERS.items() if hasattr(peer.Engine, "logits")]
CHATS: list[list[dict]] = [
    [{"role": "user", "content": text}]
    for text in (
        "What is the capital of France?",
        "How many legs does a spider have?",
        "Who wrote the play Romeo and Juliet?",
        "Why is the sky blue? Answer in two sentences.",
        "What is photosynthesis?",
        "Explain what a black hole is to a ten-year-old.",
        "List five fruits that are red.",
        "Give me three tips for sleeping better.",
        "Name the planets of the solar system in order.",
        "List the steps to make a cup of tea.",
        "Write a Python function that returns the factorial of n.",
        "Write a Python function that checks whether a string is a palindrome.",
        "How do I reverse a list in JavaScript?",
        "Write a SQL query that counts the rows of a table named users.",
        "Write a short poem about the sea.",
        "Write a haiku about autumn leaves.",
        "Write a limerick about a cat who loves cheese.",
        "Translate 'Good morning, how are you?' into French.",
        "Summarise the story of Cinderella in three sentences.",
        "What is 12 times 7?",
    )
] + [
    [
        {"role": "user", "content": "Hi! My name is Anna."},
        {"role": "assistant", "content": "Hello Anna! How can I help you today?"},
        {"role": "user", "content": "What is my name, and what is a good name for a dog?"},
    ],
    [
        {"role": "user", "content": "What is the largest ocean on Earth?"},
        {"role": "assistant", "content": "The Pacific Ocean is the largest ocean on Earth."},
        {"role": "user", "content": "And the smallest?"},
    ],
    [
        {"role": "system", "content": "You are a pirate. Always answer like a pirate."},
        {"role": "user", "content": "Where is the treasure buried?"},
    ],
    [
        {"role": "user", "content": "Write a Python function that adds two numbers."},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
        {"role": "user", "content": "Now make it add three numbers."},
    ],
]


# ---- the metrics -----------------------------------------------------------------------------


def reply_tokens(ids: list[int], end_ids: tuple[int, ...], limit: int) -> list[int]:
    """The reply in `ids` as compared: at most `limit` tokens, ending with the first end-of-turn
    token if one comes (written as `end_ids[0]`, so that engines stopping on different end ids
    of one model agree)."""
    reply = []
    for token in ids[:limit]:
        if token in end_ids:
            return [*reply, end_ids[0]]
        reply.append(int(token))
    return reply


def common_prefix_share(reply: list[int], reference: list[int]) -> float:
    """How much of `reference` `reply` reproduces before the first difference: the length of
    their common prefix over the length of `reference` (1.0 = `reply` starts with all of it)."""
    if not reference:
        raise ValueError("`reference` must hold at least one token, got none")
    same = 0
    for mine, theirs in zip(reply, reference):
        if mine != theirs:
            break
        same += 1
    return same / len(reference)


def top1_agreement(logits: np.ndarray, reference_logits: np.ndarray) -> float:
    """Share of positions where the two (T, V) logit arrays have the same most likely token."""
    if logits.shape[0] != reference_logits.shape[0] or not logits.shape[0]:
        raise ValueError(
            f"`logits` must have the reference's positions ({reference_logits.shape[0]}, at "
            f"least 1), got {logits.shape[0]}"
        )
    return float((logits.argmax(-1) == reference_logits.argmax(-1)).mean())


# ---- engines: greedy(messages, prompt ids) -> token ids; logits(ids) -> (T, V) ------------------


class Transformers:
    """The reference: transformers' model of the dequantized GGUF."""

    def __init__(self, model, end_ids: tuple[int, ...], new_tokens: int):
        self.model, self.end_ids, self.new_tokens = model, end_ids, new_tokens

    def greedy(self, messages: list[dict], prompt: list[int]) -> list[int]:
        import torch

        input_ids = torch.tensor([prompt])
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=self.new_tokens,
                do_sample=False,
                eos_token_id=list(self.end_ids),
                pad_token_id=self.end_ids[0],
            )
        return out[0, len(prompt) :].tolist()

    def logits(self, ids: list[int]) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.model(torch.tensor([ids])).logits[0].numpy()  # (T, V)


class Bundle:
    """Ours: `runtime.load` of a bundle for greedy chat replies; a plain session of its graph for
    the teacher-forced pass."""

    def __init__(self, bundle: Path, gguf_model, threads: int, new_tokens: int):
        import runtime
        from convert.bundle import parity_session

        self.gen = runtime.load(bundle, threads=threads)
        self.session = parity_session(bundle / "model.onnx", threads)
        self.gguf_model = gguf_model
        self.config = runtime.GenerationConfig(max_new_tokens=new_tokens, do_sample=False)

    def greedy(self, messages: list[dict], prompt: list[int]) -> list[int]:
        (out,) = self.gen.chat(messages, self.config)
        ended = out.finish_reason == "stop"  # on an end-of-turn token, which the reply omits
        return out.token_ids + ([self.gen.end_of_turn_token_ids[0]] if ended else [])

    def logits(self, ids: list[int]) -> np.ndarray:
        from convert.bundle import full_logits

        return full_logits(self.session, self.gguf_model, ids)


class VenvPeer:
    """A peer of bench/venv_peers.py in its child process: greedy to the first end-of-turn
    token, and its logits of every position in one pass."""

    def __init__(self, child, end_ids: tuple[int, ...], new_tokens: int):
        self.child, self.end_ids, self.new_tokens = child, end_ids, new_tokens

    def greedy(self, messages: list[dict], prompt: list[int]) -> list[int]:
        stop_ids = list(self.end_ids)
        return self.child.call(
            "greedy", ids=prompt, max_new_tokens=self.new_tokens, stop_ids=stop_ids
        )

    def logits(self, ids: list[int]) -> np.ndarray:
        return self.child.call("logits", ids=ids)  # (T, V)


class LlamaCpp:
    """llama.cpp on the GGUF itself, greedy, with every position's logits kept."""

    def __init__(self, gguf: Path, threads: int, context: int, end_ids, new_tokens: int):
        from llama_cpp import Llama

        self.model = Llama(
            model_path=str(gguf),
            n_ctx=context,
            n_batch=context,
            n_threads=threads,
            n_threads_batch=threads,
            logits_all=True,
            verbose=False,
        )
        self.end_ids, self.new_tokens = end_ids, new_tokens

    def greedy(self, messages: list[dict], prompt: list[int]) -> list[int]:
        self.model.reset()
        out = []
        sampled = self.model.generate(
            prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True
        )
        for token in sampled:
            out.append(int(token))
            if token in self.end_ids or len(out) == self.new_tokens:
                return out
        return out

    def logits(self, ids: list[int]) -> np.ndarray:
        self.model.reset()
        self.model.eval(ids)
        return np.array(self.model.scores[: len(ids)], dtype=np.float32)  # (T, V)


# ---- the study -------------------------------------------------------------------------------


def reference_replies(reference: Transformers, chats, prompts, end_ids, limit: int):
    """transformers' replies to `chats` (their `prompts`: token ids) and, teacher-forced on
    them, its logits at the reply positions."""
    replies, logits = [], []
    for messages, prompt in tqdm(list(zip(chats, prompts)), desc="transformers"):
        reply = reply_tokens(reference.greedy(messages, prompt), end_ids, limit)
        replies.append(reply)
        logits.append(reference.logits(prompt + reply)[len(prompt) - 1 : -1])  # (len(reply), V)
    return replies, logits


def score_engine(
    name: str, engine, chats, prompts, replies, reference_logits, end_ids, limit
) -> dict:
    """The engine's metrics against transformers' `replies` and their logits, per chat and mean."""
    scored = []
    for messages, prompt, reply, theirs in tqdm(
        list(zip(chats, prompts, replies, reference_logits)), desc=name
    ):
        mine = reply_tokens(engine.greedy(messages, prompt), end_ids, limit)
        forced = engine.logits(prompt + reply)[len(prompt) - 1 : -1]  # (len(reply), V)
        scored.append(
            {
                "common_prefix_share": common_prefix_share(mine, reply),
                "identical": mine == reply,
                "top1": top1_agreement(forced, theirs),
                "max_abs_logit_diff": float(np.abs(forced - theirs).max()),
                "reply_tokens": len(mine),
            }
        )
    positions = [len(r) for r in replies]
    return {
        "mean_common_prefix_share": float(np.mean([c["common_prefix_share"] for c in scored])),
        # over every teacher-forced position of every chat
        "top1": float(np.average([c["top1"] for c in scored], weights=positions)),
        "identical": sum(c["identical"] for c in scored),
        "max_abs_logit_diff": max(c["max_abs_logit_diff"] for c in scored),
        "chats": scored,
    }


def decode_speeds(args, bundles: dict[str, Path], llama_cpp: bool) -> dict[str, float]:
    """Decode tok/s of every bundle (and llama.cpp) on bench/llm.py's 16-token prompt, interleaved
    medians of `--repeats` rounds."""
    import runtime

    text, ids = llm.make_prompt(runtime.load(bundles["shipped"], threads=args.threads), 16)
    runs = {
        name: llm.scriptorium_runner(path, args.threads, [text]) for name, path in bundles.items()
    }
    if llama_cpp:
        runs["llama.cpp"] = llm.llama_cpp_runner(args.gguf, args.threads, [ids], args.speed_tokens)
    timed = {
        (name, new): (lambda run=run, new=new: run(0, new))
        for name, run in runs.items()
        for new in (1, args.speed_tokens)
    }
    seconds = common.interleaved_medians(timed, repeats=args.repeats)
    return {
        name: (args.speed_tokens - 1) / (seconds[name, args.speed_tokens] - seconds[name, 1])
        for name in runs
    }


def results_table(scores: dict, speeds: dict, chats: int) -> str:
    """One row an engine: max |Δlogit|, teacher-forced top-1, mean common-prefix share, greedy
    identical, decode tok/s and its ratio to the shipped graph's."""
    header = [
        "engine",
        "max |Δlogit|",
        "teacher-forced top-1",
        "mean common-prefix share",
        "greedy identical",
        "decode tok/s",
        "speed vs shipped",
    ]
    rows = []
    for name, score in scores.items():
        speed = speeds.get(name)
        rows.append(
            [
                name,
                f"{score['max_abs_logit_diff']:.3g}",
                f"{score['top1']:.3f}",
                f"{score['mean_common_prefix_share']:.3f}",
                f"{score['identical']} / {chats}",
                f"{speed:.1f}" if speed else "",
                f"{speed / speeds['shipped']:.2f}×" if speed and speeds.get("shipped") else "",
            ]
        )
    return common.markdown_table(header, rows)


def nodes_table(errors: dict) -> str:
    """Max |Δ| against transformers per node (rows) and graph (columns), with the node's scale."""
    graphs = list(errors)
    layers = sum(name.startswith("attention.") for name in errors[graphs[0]])
    attention = dict.fromkeys(f"attention.{i}" for i in (0, layers // 2, layers - 1))
    nodes = ["embedding", "cos", "sin", *attention, "logits"]
    header = ["node", "scale", *graphs]
    rows = [
        [node, f"{errors[graphs[0]][node]['scale']:.3g}"]
        + [f"{errors[g][node]['max_abs_diff']:.2g}" for g in graphs]
        for node in nodes
    ]
    return common.markdown_table(header, rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="default: the flagship's GGUF")
    parser.add_argument("--bundle", type=Path, default=None, help="default: the GGUF converted")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chats", type=int, default=len(CHATS), help="the first N of CHATS")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=DEFAULT_VARIANTS)
    parser.add_argument("--speed-tokens", type=int, default=128)
    parser.add_argument(
        "--speed-only",
        action="store_true",
        help="only the variants' and llama.cpp's decode speed (no transformers, no replies)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=common.DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "fidelity.json")
    args = parser.parse_args(argv)
    if not 1 <= args.chats <= len(CHATS):
        parser.error(f"`--chats` must be in [1, {len(CHATS)}], got {args.chats}")
    if args.new_tokens < 1:
        parser.error(f"`--new-tokens` must be at least 1, got {args.new_tokens}")
    if args.speed_tokens < 2:
        parser.error(f"`--speed-tokens` must be at least 2, got {args.speed_tokens}")
    if "shipped" not in args.variants:
        args.variants.insert(0, "shipped")  # the speed ratios' baseline
    args.engines = ["llama.cpp"] if args.speed_only else ["llama.cpp", *SCORED_PEERS]
    llm.check_and_convert(parser, args)  # fills in --gguf and --bundle
    return args


def speed_only(args) -> int:
    """`--speed-only`: the variants' and llama.cpp's decode tok/s, written to `--out`."""
    llama_cpp = "llama.cpp" in args.engines and not llm.skip_unavailable(args)
    with tempfile.TemporaryDirectory() as scratch:
        bundles = {
            name: build_variant(name, args.gguf, args.bundle, Path(scratch))
            for name in tqdm(args.variants, desc="variant graphs")
        }
        speeds = decode_speeds(args, bundles, llama_cpp)
    for name, speed in speeds.items():
        print(f"{name}: {speed:.1f} tok/s ({speed / speeds['shipped']:.2f}x shipped)")
    common.write_results(
        args.out,
        {
            "benchmark": "fidelity --speed-only",
            "environment": common.environment(args.threads),
            "speed_tokens": args.speed_tokens,
            "repeats": args.repeats,
            "decode_tok_per_s": speeds,
        },
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.speed_only:
        return speed_only(args)
    from transformers import AutoModelForCausalLM

    import runtime
    from convert.gguf_read import read_gguf

    skipped = llm.skip_unavailable(args)
    peers = [engine for engine in args.engines if engine in llm.VENV_PEERS]
    venv = venv_peers.venv_dir(args.work)
    work = llm.work_dir(args.work, args.gguf)
    checkpoint = llm.prepare(args.gguf, work, ["transformers", *peers], venv)
    common.set_torch_threads(FIDELITY_THREADS)
    hf_model = AutoModelForCausalLM.from_pretrained(
        checkpoint["checkpoint"], attn_implementation="eager"
    ).eval()
    shipped = runtime.load(args.bundle, threads=FIDELITY_THREADS)
    end_ids = shipped.end_of_turn_token_ids
    chats = CHATS[: args.chats]
    prompts = [shipped.encode_chat(messages) for messages in chats]
    gguf_model = read_gguf(args.gguf)
    reference = Transformers(hf_model, end_ids, args.new_tokens)
    replies, reference_logits = reference_replies(
        reference, chats, prompts, end_ids, args.new_tokens
    )
    with tempfile.TemporaryDirectory() as scratch:
        bundles = {
            name: build_variant(name, args.gguf, args.bundle, Path(scratch))
            for name in tqdm(args.variants, desc="variant graphs")
        }
        engines = {}
        if "llama.cpp" in args.engines:
            context = max(map(len, prompts)) + args.new_tokens + 8
            engines["llama.cpp"] = lambda: LlamaCpp(
                args.gguf, FIDELITY_THREADS, context, end_ids, args.new_tokens
            )
        for name in peers:
            module = llm.VENV_PEERS[name].MODULE
            engines[name] = lambda name=name, module=module: VenvPeer(
                venv_peers.PeerProcess(venv, module, checkpoint[name], FIDELITY_THREADS),
                end_ids,
                args.new_tokens,
            )
        for name, path in bundles.items():
            engines[name] = lambda path=path: Bundle(
                path, gguf_model, FIDELITY_THREADS, args.new_tokens
            )
        scores = {
            name: score_engine(
                name, make(), chats, prompts, replies, reference_logits, end_ids, args.new_tokens
            )
            for name, make in engines.items()
        }
        speeds = decode_speeds(args, bundles, "llama.cpp" in args.engines)
        probe = transformers_nodes(hf_model, prompts[0])
        errors = {
            name: node_errors(path, gguf_model, probe, prompts[0], Path(scratch))
            for name, path in bundles.items()
        }
    table, nodes = results_table(scores, speeds, len(chats)), nodes_table(errors)
    print(table)
    print(nodes)
    common.write_results(
        args.out,
        {
            "benchmark": "fidelity",
            "environment": common.environment(args.threads),
            "fidelity_threads": FIDELITY_THREADS,
            "gguf": {"file": args.gguf.name, "sha256": sha256_of(args.gguf)},
            "bundle": str(args.bundle),
            "reference": "transformers, the GGUF dequantized to float32, eager attention",
            "chats": len(chats),
            "new_tokens": args.new_tokens,
            "speed_tokens": args.speed_tokens,
            "repeats": args.repeats,
            # fewer chats or rounds than the study's: proves the harness, measures nothing
            "smoke": args.chats < len(CHATS) or args.repeats < 3,
            "load_average": list(os.getloadavg()),  # 1, 5, 15 minutes, when the run ended
            "skipped": skipped,
            "variants": {name: VARIANTS[name] for name in args.variants},
            "results": {
                name: {**score, "decode_tok_per_s": speeds.get(name)}
                for name, score in scores.items()
            },
            "node_errors": errors,
            "table": table,
            "nodes_table": nodes,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
