"""Same seed, same text on the real flagship: a request's tokens and log-probabilities do not
depend on its batch-mates, bit for bit, at one thread and at the default threads.

The engine's own tests (tests/test_engine.py) hold this on tiny models; here it is held where
users meet it: SmolLM2-135M-Instruct as converted from its GGUF (fetched the way a user's first
start fetches it, from the PyPI wheel when the Hub cannot be reached), its LoRA adapter, its
chat turns over a warm prefix cache, a lone row forced through the phantom-row path
(`CausalLM.pairs_lone_rows`) whatever this CPU needs, so that path is exercised on every CPU, and
Chat's default, the flagship's faithful conversion, which steps one row per call.
On CPUs where onnxruntime's one-row 4-bit kernel sums in another order (AVX2 without VNNI:
docs/RUNTIME.md, "Batch invariance"), the probe turns that path on by itself.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import runtime
from runtime.models import CausalLM
from tests.test_engine import _concurrently, _same_tokens

MODELS = Path(__file__).resolve().parents[1] / "models"
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a short poem about the sea."}],
    [
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": "Why is the sky blue?"},
    ],
    [{"role": "user", "content": "List three fruits."}],
]
GREEDY = runtime.GenerationConfig(max_new_tokens=24)
SAMPLED = runtime.GenerationConfig(
    max_new_tokens=24, do_sample=True, temperature=0.9, top_k=40, top_p=0.95, seed=0
)


@pytest.fixture(scope="module")
def flagship_bundle() -> Path:
    from convert.flagship import flagship_bundle

    try:
        return flagship_bundle()
    except Exception as error:  # no GGUF here and no registry: nothing to test against
        pytest.skip(f"the flagship is not converted ({error})")


@pytest.fixture(scope="module")
def faithful_bundle(flagship_bundle) -> Path:
    from convert.flagship import faithful_flagship_bundle

    return faithful_flagship_bundle()


def _prompts(gen) -> list[str]:
    return [gen.apply_chat_template(chat) for chat in CHATS]


def _mates(rng: np.random.Generator, prompts: list[str], count: int) -> list:
    """`count` random (prompt, config) batch-mates of the flagship."""
    mates = []
    for _ in range(count):
        sample = bool(rng.integers(2))
        config = runtime.GenerationConfig(
            max_new_tokens=int(rng.integers(1, 28)),
            do_sample=sample,
            temperature=float(rng.uniform(0.5, 1.3)),
            top_k=int(rng.integers(0, 50)),
            seed=int(rng.integers(1000)),
        )
        mates.append((prompts[int(rng.integers(len(prompts)))], config))
    return mates


def _check_alone_and_beside_mates(plain, batched, prompts, rng) -> None:
    """Each prompt, greedy and seeded-sampled: unbatched, alone in the engine, and beside 1-15
    random batch-mates, the same tokens and log-probabilities."""
    for index, prompt in enumerate(prompts[:2]):
        for config in (GREEDY, SAMPLED):
            alone = plain.generate(prompt, config)
            assert _same_tokens(batched.generate(prompt, config), alone)
            mates = _mates(rng, prompts, int(rng.integers(1, 16)) if index else 15)
            assert _same_tokens(_concurrently(batched, [(prompt, config), *mates])[0], alone)


@pytest.mark.parametrize("threads", [1, None], ids=["1-thread", "default-threads"])
def test_flagship_text_does_not_depend_on_batch_mates(flagship_bundle, threads):
    plain = runtime.load(flagship_bundle, threads=threads, batching=False)
    batched = runtime.load(flagship_bundle, threads=threads)
    assert batched.engine is not None and batched.manifest.batch_invariant
    # Both sessions probed this CPU alike, so the unbatched loop pairs lone rows exactly when
    # the engine does.
    assert plain.model.pairs_lone_rows == batched.model.pairs_lone_rows
    rng = np.random.default_rng(threads or os.cpu_count())
    _check_alone_and_beside_mates(plain, batched, _prompts(plain), rng)


def test_the_faithful_flagship_text_does_not_depend_on_batch_mates(faithful_bundle):
    """Chat's default: float activations, whose one-row kernel is its own on every CPU, so each
    decode step runs one row per call (`one_row_steps`)."""
    plain = runtime.load(faithful_bundle, batching=False)
    batched = runtime.load(faithful_bundle)
    assert batched.engine is not None and batched.model.one_row_steps
    _check_alone_and_beside_mates(plain, batched, _prompts(plain), np.random.default_rng(11))


def test_a_lone_row_beside_its_phantom_equals_itself_in_a_batch(flagship_bundle):
    gen = runtime.load(flagship_bundle, batching=False)
    model = CausalLM(gen.model.runner.session, gen.manifest, pair_lone_rows=True)
    prompt = np.random.default_rng(5).integers(0, model.vocab_size, (3, 6))  # (3, 6)
    logits, state = model.start(prompt, np.ones_like(prompt))
    tokens = logits.argmax(axis=-1)  # (3,)
    batch, _ = model.step(tokens, state)
    for row in range(3):
        lone, after = model.step(tokens[row : row + 1], model.select(state, np.array([row])))
        assert np.array_equal(lone[0], batch[row])
        # and the phantom left the row's own cache as a batched step leaves it
        again, _ = model.step(lone.argmax(axis=-1), after)
        assert np.isfinite(again).all()
    # a lone one-token prompt (a prefill of one row and one position) pairs too
    one, _ = model.start(prompt[:1, :1], np.ones((1, 1), dtype=np.int64))
    two, _ = model.start(np.repeat(prompt[:1, :1], 2, axis=0), np.ones((2, 1), dtype=np.int64))
    assert np.array_equal(one[0], two[0])


def test_a_graph_whose_single_row_kernel_differs_is_paired_by_the_probe(flagship_bundle):
    """Forced off, the probe's own comparison is what it reports; the flag follows it."""
    gen = runtime.load(flagship_bundle, batching=False)
    unpaired = CausalLM(gen.model.runner.session, gen.manifest, pair_lone_rows=False)
    assert unpaired.lone_row_differs() == gen.model.pairs_lone_rows
    paired = CausalLM(gen.model.runner.session, gen.manifest, pair_lone_rows=True)
    assert not paired.lone_row_differs()


def test_the_flagship_adapter_does_not_depend_on_batch_mates(flagship_bundle):
    adapter = MODELS / "smollm2-bible"
    plain = runtime.load(adapter, base=flagship_bundle, batching=False)
    batched = runtime.load(adapter, base=flagship_bundle)
    assert batched.engine is not None
    prompts = ["In the beginning", "Blessed are the", "And Jesus said to them,"]
    _check_alone_and_beside_mates(plain, batched, prompts, np.random.default_rng(3))


@pytest.mark.parametrize("conversion", ["shipped", "faithful"])
def test_flagship_chat_turns_over_a_warm_prefix_cache_equal_cold_ones(request, conversion):
    bundle = request.getfixturevalue(
        f"{'flagship' if conversion == 'shipped' else conversion}_bundle"
    )
    plain = runtime.load(bundle, batching=False)
    batched = runtime.load(bundle)
    system = {"role": "system", "content": "You are a careful assistant. " * 20}
    first = [system, {"role": "user", "content": "Name a river."}]
    reply = batched.chat(first, GREEDY)[0]
    assert _same_tokens([reply], plain.chat(first, GREEDY))
    second = [*first, {"role": "assistant", "content": reply.text}]
    second.append({"role": "user", "content": "And a mountain?"})
    hits = batched.engine.prefix_cache.hits
    prompts = [plain.apply_chat_template(c) for c in (second, first)]
    for config in (GREEDY, SAMPLED):
        warm = _concurrently(batched, [(p, config) for p in prompts])[0]
        assert _same_tokens(warm, plain.generate(prompts[0], config))
    assert batched.engine.prefix_cache.hits > hits


def test_a_compare_link_replays_its_columns_while_others_generate(flagship_bundle):
    """The Compare tab's four columns, two of them the same adapter with the same preset and
    seed, give the texts each gets alone, replayed while other visitors' requests run."""
    from ui.compare_tab import preset_config, run_columns
    from ui.registry import ModelRegistry

    registry = ModelRegistry(
        {"SmolLM2": flagship_bundle, "smollm2-bible": MODELS / "smollm2-bible"}
    )
    columns = [
        ("SmolLM2", "greedy"),
        ("smollm2-bible", "top-p 0.95"),
        ("SmolLM2", "top-k 5"),
        ("smollm2-bible", "top-p 0.95"),
    ]
    prompt, tokens, samples, seed = "In the beginning", 20, 1, 0

    def compare() -> list[tuple]:
        *_, (_, _, collectors) = run_columns(registry, prompt, {}, columns, tokens, samples, seed)
        return [(c.token_ids, c.logprobs) for c in collectors]

    alone = [
        registry.get(model).generate(prompt, preset_config(preset, tokens, samples, seed))[0]
        for model, preset in columns
    ]
    first = compare()
    assert first == [([a.token_ids], [a.logprobs]) for a in alone]
    assert first[1] == first[3]
    stop = threading.Event()

    def visitor(model: str, seed: int) -> None:
        gen, rng = registry.get(model), np.random.default_rng(seed)
        while not stop.is_set():
            config = runtime.GenerationConfig(
                max_new_tokens=int(rng.integers(2, 12)), do_sample=True, seed=int(rng.integers(99))
            )
            gen.generate(CHATS[int(rng.integers(len(CHATS)))][-1]["content"], config)

    engines = [registry.get(model).engine for model in registry.paths]
    before = [(engine.rows_stepped, engine.steps) for engine in engines]
    visitors = [threading.Thread(target=visitor, args=(m, i)) for i, m in enumerate(registry.paths)]
    for thread in visitors:
        thread.start()
    try:
        replayed = compare()
    finally:
        stop.set()
        for thread in visitors:
            thread.join(timeout=60)
    assert replayed == first
    # Visitors really ran beside the replay: both engines' steps averaged more than one row.
    for engine, (rows, steps) in zip(engines, before):
        assert engine.rows_stepped - rows > engine.steps - steps


@pytest.fixture(scope="module")
def flagship_shaped(tmp_path_factory) -> Path:
    """A random Q4_1 model in the flagship's layer shapes (width 576, MLP 1536, 9 query and 3
    key-value heads; 2 layers and a tiny vocabulary), converted with float activations (level 0),
    whose one-row kernel differs from the batch kernel on every CPU measured (docs/RUNTIME.md)."""
    from convert.gguf import export_gguf
    from tests import gguf_models

    root = tmp_path_factory.mktemp("flagship-shaped")
    shape = (gguf_models.WIDTH, gguf_models.INNER, gguf_models.HEADS, gguf_models.KV_HEADS)
    gguf_models.WIDTH, gguf_models.INNER, gguf_models.HEADS, gguf_models.KV_HEADS = 576, 1536, 9, 3
    try:
        path = gguf_models.write_tiny_gguf(root / "model.gguf", "llama", "Q4_1")
    finally:
        gguf_models.WIDTH, gguf_models.INNER, gguf_models.HEADS, gguf_models.KV_HEADS = shape
    export_gguf(path, root / "bundle", accuracy_level=0, parity=False, lora_slots=False)
    return root / "bundle"


def test_a_graph_whose_one_row_kernel_differs_steps_one_row_at_a_time(flagship_shaped):
    plain = runtime.load(flagship_shaped, batching=False)
    # level 0's one-row kernel: the manifest says so, and only one-token prompts are paired
    assert plain.manifest.graphs["decoder"].one_row_steps
    assert plain.model.one_row_steps and plain.model.pairs_lone_rows
    decoder = replace(plain.manifest.graphs["decoder"], one_row_steps=None)
    batched_steps = replace(plain.manifest, graphs={"decoder": decoder})
    unpaired = CausalLM(plain.model.runner.session, batched_steps, pair_lone_rows=False)
    assert unpaired.lone_row_differs()  # why: stepped as one batch, a lone row differs
    batched = runtime.load(flagship_shaped)
    prompts = ["In the beginning God created", "The", "And he said to them"]
    _check_alone_and_beside_mates(plain, batched, prompts, np.random.default_rng(7))
