"""Time to first token on a long conversation's third turn, with and without prefix caching.

    python -m bench prefix-cache [--history 1000] [--rounds 5] [--threads 2] [--out FILE]

The flagship (SmolLM2-135M-Instruct, convert.flagship) chats three turns: a system prompt,
two long user messages (pasted text, together about `--history` tokens with the replies) each
answered greedily with 64 tokens, then a short third question. The third turn's prompt starts
with the second's, which the engine prefilled a turn ago; with the cache
(runtime/prefix_cache.py) only the second reply and the third question are prefilled. Each
round times the third turn's first token (request sent → first streamed event) with the cache
(after the first two turns filled it) and without (the engine's cache off), interleaved, and
checks that both give the same reply. Medians over `--rounds`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import runtime

from . import common

RESULTS = Path(__file__).resolve().parent / "results" / "prefix_cache.json"
SYSTEM = "You are a helpful assistant. Answer in one or two sentences, in English."
PARAGRAPH = (
    "The river rises in the hills to the north, where the rain of three seasons gathers in "
    "narrow valleys before it turns south across the plain. Farmers along its banks plant "
    "barley in the spring and lentils after the harvest, and the town at the ford has held a "
    "market every week for four hundred years. Its bridge was rebuilt twice, once after a "
    "flood and once after a fire, and the stones of the older bridge can still be seen when "
    "the water is low in late summer."
)


def pasted_text(gen, tokens: int, part: int) -> str:
    """About `tokens` tokens of numbered paragraphs (part `part` of the conversation)."""
    paragraphs, count = [], 0
    while count < tokens:
        paragraph = f"Note {part}.{len(paragraphs) + 1}: {PARAGRAPH}"
        paragraphs.append(paragraph)
        count += len(gen.tokenizer.encode(paragraph).ids)
    return "\n\n".join(paragraphs)


def third_turn(gen, history: int) -> list[dict]:
    """The messages of the third turn: two long user turns answered by the model, then a
    question; their first two turns are run here (filling the engine's prefix cache)."""
    greedy = runtime.GenerationConfig(max_new_tokens=64, min_new_tokens=64)
    messages = [{"role": "system", "content": SYSTEM}]
    for part, question in ((1, "Summarise these notes."), (2, "What changed in the second?")):
        text = pasted_text(gen, (history - 2 * 64 - 60) // 2, part)  # replies: 64 each
        messages.append({"role": "user", "content": f"{text}\n\n{question}"})
        reply = gen.chat(messages, greedy)[0].text
        messages.append({"role": "assistant", "content": reply})
    messages.append({"role": "user", "content": "How old is the market?"})
    return messages


def first_token(gen, messages: list[dict]) -> tuple[float, list[int]]:
    """Seconds from the request to its first streamed token, and the reply's tokens."""
    config = runtime.GenerationConfig(max_new_tokens=16)
    start = time.perf_counter()
    first, tokens = None, []
    for event in gen.stream_chat(messages, config):
        first = first if first is not None else time.perf_counter() - start
        tokens.append(event.token_id)
    return first, tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=1000, help="tokens before the 3rd turn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from convert import flagship
    from runtime.prefix_cache import PrefixCache

    gen = runtime.load(flagship.ensure_bundle(), threads=args.threads)  # its defaults
    engine = gen.engine
    cached, uncached = [], []
    for round_ in range(args.rounds):
        engine.prefix_cache = PrefixCache()
        messages = third_turn(gen, args.history)
        prompt_tokens = len(gen.encode_chat(messages))
        reused = engine.prefix_cache.reused_positions
        seconds, with_cache = first_token(gen, messages)
        reused = engine.prefix_cache.reused_positions - reused
        cached.append(seconds)
        engine.prefix_cache = None
        seconds, without = first_token(gen, messages)
        uncached.append(seconds)
        if with_cache != without:
            raise SystemExit("the cached and uncached third turns differ: prefix caching is wrong")
        print(
            f"round {round_ + 1}: prompt {prompt_tokens} tokens, {reused} reused; first token "
            f"{cached[-1] * 1e3:.0f} ms cached, {uncached[-1] * 1e3:.0f} ms without"
        )
    result = {
        "model": gen.name,
        "threads": args.threads,
        "prompt_tokens": prompt_tokens,
        "reused_positions": reused,
        "ttft_cached_ms": [round(s * 1e3, 1) for s in cached],
        "ttft_uncached_ms": [round(s * 1e3, 1) for s in uncached],
        "median_cached_ms": round(statistics.median(cached) * 1e3, 1),
        "median_uncached_ms": round(statistics.median(uncached) * 1e3, 1),
        "speedup": round(statistics.median(uncached) / statistics.median(cached), 2),
        "environment": common.environment(args.threads),
    }
    print(
        f"median first token: {result['median_cached_ms']} ms cached, "
        f"{result['median_uncached_ms']} ms without ({result['speedup']}x)"
    )
    common.write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
