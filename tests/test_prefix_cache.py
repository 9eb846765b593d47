"""runtime/prefix_cache.py and its use in runtime/engine.py: a prompt that starts with blocks
prefilled before runs only its new tokens, and gets exactly what it gets without the cache.

Covered: every causal-LM family the engine batches (the shipped bible-lm fp32 and int8, a tiny
lean GPT-2 with shared in-place buffers, a tiny Llama from a GGUF: the flagship's path) and a
LoRA adapter on a GGUF base; greedy and seeded sampling, alone and batched; at the model level
every split of a prompt into a cached prefix and a rest of at least `MIN_SUFFIX` tokens.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import runtime
from runtime.prefix_cache import BLOCK, MIN_SUFFIX, PrefixCache
from tests.test_adapter import cache, tiny  # noqa: F401  (fixtures)
from tests.test_engine import CONFIGS, _concurrently, _same_tokens, generators  # noqa: F401
from tests.tiny_models import PROMPTS


def _layers(length: int, fill: float = 0.0, heads: int = 2, size: int = 4):
    """Fake keys and values of one prompt: 2 cache tensors (H, T, D), position t holding t."""
    base = np.arange(length, dtype=np.float32)[None, :, None] + fill  # (1, T, 1)
    return tuple(np.broadcast_to(base, (heads, length, size)).copy() for _ in range(2))


def test_lookup_finds_whole_blocks_and_leaves_the_last_tokens_to_run():
    blocks = PrefixCache()
    ids = np.arange(3 * BLOCK + 5)
    assert blocks.lookup(ids) is None
    blocks.store(ids, _layers(len(ids)))
    assert len(blocks) == 3  # the partial last block is not kept
    prefix = blocks.lookup(np.concatenate([ids[: 2 * BLOCK], [999, 998, 997]]))
    assert prefix[0].shape == (1, 2, 2 * BLOCK, 4)  # (1, H, L, D)
    assert np.array_equal(prefix[0][0, 0, :, 0], np.arange(2 * BLOCK))
    # A prompt that is exactly cached blocks still runs its last MIN_SUFFIX tokens.
    prefix = blocks.lookup(ids[: 3 * BLOCK])
    assert prefix[1].shape[2] == 3 * BLOCK - MIN_SUFFIX
    # A different first block: nothing, even if later tokens agree (a block names its prefix).
    other = ids.copy()
    other[0] = 12345
    assert blocks.lookup(other) is None
    assert blocks.hits == 2 and blocks.reused_positions == 2 * BLOCK + 3 * BLOCK - MIN_SUFFIX


def test_blocks_are_shared_and_the_budget_drops_continuations_first():
    one_block = 2 * 2 * BLOCK * 4 * 4  # 2 tensors × H 2 × BLOCK × D 4 × 4 bytes
    blocks = PrefixCache(max_bytes=4 * one_block)
    system = np.arange(2 * BLOCK)
    first = np.concatenate([system, 100 + np.arange(BLOCK)])
    second = np.concatenate([system, 200 + np.arange(BLOCK)])
    blocks.store(first, _layers(len(first)))
    blocks.store(second, _layers(len(second), fill=0.5))
    assert len(blocks) == 4 and blocks.bytes == 4 * one_block  # the system prompt's blocks once
    # A fifth block: the least recently used block that nothing continues goes (first's tail);
    # the shared system prompt stays, whatever its age.
    third = np.concatenate([system, 300 + np.arange(BLOCK)])
    blocks.store(third, _layers(len(third), fill=0.25))
    assert len(blocks) == 4 and blocks.bytes <= blocks.max_bytes
    assert blocks.lookup(np.concatenate([first, [1, 2]]))[0].shape[2] == 2 * BLOCK
    assert blocks.lookup(np.concatenate([second, [1, 2]]))[0].shape[2] == 3 * BLOCK
    assert blocks.lookup(np.concatenate([third, [1, 2]]))[0][0, 0, -1, 0] == 3 * BLOCK - 1 + 0.25


@pytest.mark.parametrize("budget", [-1, 1.5, True, "1GB"])
def test_a_bad_budget_is_refused(budget):
    with pytest.raises(ValueError, match=r"`prefix_cache_bytes` must be an integer >= 0, got"):
        PrefixCache(budget)


def _long_prompts(gen, prompts: list[str], limit: int) -> list[str]:
    """A conversation's prompts: each the one before plus more text, within `limit` tokens."""
    turns, text = [], ""
    for prompt in prompts * 4:
        longer = f"{text} {prompt}".strip()
        if len(gen.encode_prompt(longer)) > limit:
            break
        turns.append(longer)
        text = longer
    return turns


def test_a_resumed_prefill_is_the_whole_prefill_bit_for_bit(generators):  # noqa: F811
    _, batched, prompts = generators
    model = batched.model
    ids = np.array([batched.encode_prompt(_long_prompts(batched, prompts, 60)[-1])])  # (1, T)
    length = ids.shape[1]
    assert length > BLOCK + MIN_SUFFIX
    logits, state = model.start(ids, np.ones_like(ids))
    whole = model.prompt_cache(state, 0)
    token = np.array([int(logits.argmax())])
    after, _ = model.step(token, state)
    for split in sorted({1, BLOCK, length // 2, length - MIN_SUFFIX}):
        prefix = tuple(layer[None, :, :split] for layer in whole)  # (1, H, L, D)
        resumed, resumed_state = model.resume(prefix, ids[:, split:])
        assert np.array_equal(resumed, logits), split
        for mine, theirs in zip(model.prompt_cache(resumed_state, 0), whole):
            assert np.array_equal(mine, theirs), split
        assert np.array_equal(model.step(token, resumed_state)[0], after), split


@pytest.mark.parametrize("mode", ["greedy", "sampled-n2"])
def test_cached_turns_get_what_they_get_without_the_cache(generators, mode):  # noqa: F811
    plain, batched, prompts = generators
    config = CONFIGS[mode]
    turns = _long_prompts(batched, prompts, 80)
    assert len(turns) >= 3
    engine = batched.engine
    engine.prefix_cache = PrefixCache()
    expected = {turn: plain.generate(turn, config) for turn in turns}
    for turn in turns:  # a conversation: each turn starts with the one before
        _same_tokens(batched.generate(turn, config), expected[turn])
    # Every turn after one that filled a block starts with that block.
    lengths = [len(batched.encode_prompt(turn)) for turn in turns]
    assert engine.prefix_cache.hits == sum(length >= BLOCK for length in lengths[:-1])
    assert engine.prefix_cache.reused_positions >= BLOCK
    # Again, all at once: every turn hits, and the batch changes nothing either.
    hits = engine.prefix_cache.hits
    together = _concurrently(batched, [(turn, config) for turn in turns])
    for turn, outputs in zip(turns, together):
        _same_tokens(outputs, expected[turn])
    assert engine.prefix_cache.hits - hits == sum(length >= BLOCK for length in lengths)


def test_no_budget_means_no_cache(generators):  # noqa: F811
    _, batched, prompts = generators
    engine = type(batched.engine)(batched, prefix_cache_bytes=0)
    assert engine.prefix_cache is None


def test_each_adapter_keeps_its_own_cache(tiny):  # noqa: F811
    _, _, first = tiny("llama", "F32", seed=0)
    _, _, second = tiny("llama", "F32", seed=1)
    config = runtime.GenerationConfig(max_new_tokens=6, do_sample=True, seed=3)
    one, two = runtime.load(first, threads=1), runtime.load(second, threads=1)
    plain_two = runtime.load(second, threads=1, batching=False)
    assert one.engine.prefix_cache is not two.engine.prefix_cache
    turns = _long_prompts(one, PROMPTS, 60)
    for turn in turns:
        one.generate(turn, config)
    assert one.engine.prefix_cache.hits >= 1 and two.engine.prefix_cache.hits == 0
    for turn in turns:  # the second adapter's prefixes are its own, and change nothing
        _same_tokens(two.generate(turn, config), plain_two.generate(turn, config))
    assert two.engine.prefix_cache.hits >= 1


def test_a_replica_reuses_a_shared_opening():
    """Serve's replica generates through the engine, so two requests that open alike share the
    opening's blocks (its stats count the hit); each answer is what the runtime gives alone."""
    from serve import api
    from serve.deployments import ModelServer
    from tests.test_engine import BIBLE_LM

    server = ModelServer(str(BIBLE_LM), 1, 2)
    plain = runtime.load(BIBLE_LM, threads=1, batching=False)
    opening = "Now the serpent was more subtle than any beast of the field which the LORD God had"
    prompts = [f"{opening} made. And he said", f"{opening} made. Unto the woman"]
    config = runtime.GenerationConfig(max_new_tokens=8)
    for prompt in prompts:
        body = {"model": "m", "prompt": prompt, "max_tokens": 8, "temperature": 0}
        result = asyncio.run(server.complete(api.parse_completion(body)))
        assert result["choices"][0].text == plain.generate(prompt, config)[0].text
    stats = server.stats()
    assert stats["prefix_hits"] == 1 and stats["reused_positions"] >= BLOCK
