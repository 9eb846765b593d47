"""runtime/engine.py: continuous batching never changes a result.

Each request runs alone (unbatched, and alone in the engine) and beside random batch-mates
(other prompts, lengths, settings, seeds, stop strings, samples per prompt) that join and leave
the batch at different steps; its tokens and log-probabilities must be the same, bit for bit.
Covered: every shipped causal-LM family, greedy and seeded sampling: the shipped bible-lm
bundles, fp32 and int8 (weight-only 8-bit MatMulNBits), a tiny GPT-2 exported as a Scriptorium
bundle (the lean graph, cache in shared in-place buffers) and a tiny Llama converted from a GGUF
(the flagship's path: 4-bit MatMulNBits, GroupQueryAttention, rows keeping their cache slots).
A dynamic int8 graph (per-tensor activation quantization) is refused; the app and Serve batch
by default.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import runtime
from runtime.manifest import Manifest
from tests.tiny_models import PROMPTS, make_checkpoint

MODELS = Path(__file__).resolve().parents[1] / "models"
BIBLE_LM = MODELS / "bible-lm" / "fp32"
BIBLE_PROMPTS = [
    "In the beginning",
    "And God said,",
    "The LORD is my shepherd; I shall not want. He makes me lie down",
    "Blessed are",
    "Jesus wept.",
    "Now the serpent was more subtle than any animal of the field which",
    "Then",
]
CONFIGS = {
    "greedy": runtime.GenerationConfig(max_new_tokens=24),
    "sampled": runtime.GenerationConfig(max_new_tokens=24, do_sample=True, top_k=50, seed=11),
    "sampled-n2": runtime.GenerationConfig(
        max_new_tokens=20,
        do_sample=True,
        top_p=0.9,
        temperature=1.3,
        seed=4,
        num_return_sequences=2,
        repetition_penalty=1.2,
    ),
}


def _family(name: str, root: Path) -> tuple[Path, list[str]]:
    """(bundle, prompts) of one causal-LM family."""
    if name.startswith("bible-lm"):
        return MODELS / "bible-lm" / name.removeprefix("bible-lm-"), BIBLE_PROMPTS
    if name == "tiny-lean-gpt2":
        from export import export_bundle

        export_bundle(make_checkpoint("gpt2", root / "checkpoint"), root / "bundle", progress=False)
        return root / "bundle", PROMPTS[:7]
    from convert.gguf import export_gguf
    from tests.gguf_models import CORPUS, write_tiny_gguf

    export_gguf(write_tiny_gguf(root / "model.gguf", "llama", "Q4_1"), root / "bundle")
    return root / "bundle", [text[: 8 + 9 * i] for i, text in enumerate(CORPUS * 2)][:7]


@pytest.fixture(
    scope="module", params=["bible-lm-fp32", "bible-lm-int8", "tiny-lean-gpt2", "tiny-llama-gguf"]
)
def generators(request, tmp_path_factory):
    """(unbatched generator, batching generator, prompts) over the same bundle."""
    path, prompts = _family(request.param, tmp_path_factory.mktemp(request.param))
    plain = runtime.load(path, threads=1, batching=False)
    batched = runtime.load(path, threads=1)  # the default: batch-invariant bundles batch
    assert plain.engine is None and batched.engine is not None
    assert batched.manifest.batch_invariant is True
    if request.param == "tiny-lean-gpt2":
        assert batched.model.shared_cache
    return plain, batched, prompts


def _random_mates(rng: np.random.Generator, prompts: list[str], count: int):
    """`count` random (prompt, config) batch-mates."""
    mates = []
    for _ in range(count):
        sample = bool(rng.integers(2))
        config = runtime.GenerationConfig(
            max_new_tokens=int(rng.integers(1, 30)),
            do_sample=sample,
            temperature=float(rng.uniform(0.5, 1.5)),
            top_k=int(rng.integers(0, 40)),
            seed=int(rng.integers(1000)),
            num_return_sequences=int(rng.integers(1, 3)) if sample else 1,
            stop=[" the"] if rng.integers(3) == 0 else [],
        )
        mates.append((prompts[int(rng.integers(len(prompts)))], config))
    return mates


def _concurrently(gen, jobs: list[tuple[str, runtime.GenerationConfig]]) -> list:
    """Every job's outputs, all submitted to `gen` at once from their own threads."""
    results: list = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def run(index: int) -> None:
        prompt, config = jobs[index]
        barrier.wait(timeout=60)
        results[index] = gen.generate(prompt, config)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert all(r is not None for r in results)
    return results


@pytest.mark.parametrize("mode", list(CONFIGS))
def test_a_result_never_depends_on_its_batch_mates(generators, mode):
    plain, batched, prompts = generators
    config = CONFIGS[mode]
    rng = np.random.default_rng(len(mode))
    for prompt in prompts[:4]:
        alone = plain.generate(prompt, config)
        assert _same_tokens(batched.generate(prompt, config), alone)
        rows_before = batched.engine.rows_stepped
        steps_before = batched.engine.steps
        jobs = [(prompt, config), *_random_mates(rng, prompts, 5)]
        beside = _concurrently(batched, jobs)[0]
        assert _same_tokens(beside, alone)
        # The batch really held several rows per step.
        assert batched.engine.rows_stepped - rows_before > batched.engine.steps - steps_before


def _same_tokens(outputs, expected) -> bool:
    """Same tokens, text, finish reasons and log-probabilities, bit for bit: a row joins longer
    rows padded by whole vector lanes (runtime/engine.py), so not even rounding changes."""
    assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]
    assert [o.text for o in outputs] == [e.text for e in expected]
    assert [o.finish_reason for o in outputs] == [e.finish_reason for e in expected]
    for out, exp in zip(outputs, expected):
        assert out.logprobs == exp.logprobs
    return True


def test_each_prompt_of_a_call_gets_what_it_gets_alone(generators):
    plain, batched, prompts = generators
    config = CONFIGS["sampled-n2"]
    together = batched.generate(prompts[:3], config)
    alone = [out for p in prompts[:3] for out in plain.generate(p, config)]
    _same_tokens(together, alone)
    assert [o.prompt_index for o in together] == [0, 0, 1, 1, 2, 2]


def _same_length_prompts(gen, prompts: list[str], count: int) -> list[str]:
    """`count` different prompts (prefixes of `prompts`) that encode to the same length."""
    by_length: dict[int, set[str]] = {}
    for prompt in prompts:
        words = prompt.split()
        for end in range(1, len(words) + 1):
            text = " ".join(words[:end])
            by_length.setdefault(len(gen.encode_prompt(text)), set()).add(text)
    group = max(by_length.values(), key=len)
    assert len(group) >= count
    return sorted(group)[:count]


def test_prompts_of_one_length_prefill_together_and_get_what_they_get_alone(generators):
    plain, batched, prompts = generators
    same = _same_length_prompts(plain, prompts, 3)
    for config in CONFIGS.values():
        prefills = batched.engine.prefills
        together = batched.generate(same, config)  # admitted at once: one prefill call
        assert batched.engine.prefills == prefills + 1
        _same_tokens(together, [out for p in same for out in plain.generate(p, config)])


def test_a_burst_of_prompts_joins_a_pool_one_prefill_at_a_time(generators, monkeypatch):
    """Prompts admitted at once prefill in several calls (one per length, and at most
    `prefill_tokens` tokens each): where the batch is a pool, each call's rows join it as the
    call ends, so the burst never holds more than one call's cache besides the batch (64 chat
    turns arriving together held 1 GB of them); other caches join together, by one copy."""
    plain, batched, prompts = generators
    distinct = list({len(plain.encode_prompt(p)): p for p in prompts}.values())[:4]
    admitted = []  # prefilled caches per `admit` call
    admit = type(batched.model).admit
    monkeypatch.setattr(
        type(batched.model),
        "admit",
        lambda self, state, new, *a: admitted.append(len(new)) or admit(self, state, new, *a),
    )
    monkeypatch.setattr(batched.engine, "prefill_tokens", 1)  # one prompt a call
    config = runtime.GenerationConfig(max_new_tokens=4)
    together = batched.generate(distinct + distinct[:1], config)  # admitted at once
    _same_tokens(
        together, [out for p in distinct + distinct[:1] for out in plain.generate(p, config)]
    )
    if batched.model.pools_rows:
        assert admitted == [1] * 5
    else:  # prompts out of phase with the batch's width wait a step or three (`Engine._admit`)
        assert sum(admitted) == 5 and len(admitted) < 5


@pytest.mark.parametrize("bad", [0, -5, 1.5, "512", True])
def test_a_prefill_cap_that_is_not_a_positive_integer_is_refused(bad):
    from runtime.engine import Engine

    with pytest.raises(ValueError, match=r"`prefill_tokens` must be an integer >= 1, got"):
        Engine(None, prefill_tokens=bad)


def test_a_request_joining_a_running_batch_gets_what_it_gets_alone(generators, monkeypatch):
    plain, batched, prompts = generators
    first, second = prompts[2], prompts[0]
    long = runtime.GenerationConfig(max_new_tokens=28, do_sample=True, top_k=40, seed=3)
    short = runtime.GenerationConfig(max_new_tokens=6, do_sample=True, seed=8)
    joins = []
    join = type(batched.model).join
    monkeypatch.setattr(
        type(batched.model), "join", lambda self, *a, **k: joins.append(1) or join(self, *a, **k)
    )
    stream = batched.stream(first, long)
    head = [next(stream) for _ in range(3)]  # the first request is in the batch now
    _same_tokens(batched.generate(second, short), plain.generate(second, short))
    events = head + list(stream)
    assert [e.token_id for e in events] == plain.generate(first, long)[0].token_ids
    if batched.model.feeds_seqlens and batched.model.shared_cache:
        # rows keeping their slots in a pool: the second request was copied in, nothing else
        assert len(joins) == 1  # the first request's own admission only


def test_caches_that_grow_while_requests_join_and_leave_change_nothing(generators, monkeypatch):
    import runtime.models

    plain, batched, prompts = generators
    monkeypatch.setattr(runtime.models, "_CACHE_HEADROOM", 3)  # shared buffers grow often
    pooled = []  # per batch that rows left: whether its cache was a pool (kept rows move in place)
    retain = runtime.models.CausalLM.retain

    def spied(model, state, *args):
        pooled.append(model._pooled(state))
        return retain(model, state, *args)

    monkeypatch.setattr(runtime.models.CausalLM, "retain", spied)
    rng = np.random.default_rng(7)
    jobs = _random_mates(rng, prompts, 8)
    for (prompt, config), outputs in zip(jobs, _concurrently(batched, jobs)):
        _same_tokens(outputs, plain.generate(prompt, config))
    if batched.model.feeds_seqlens and batched.model.shared_cache:
        # a pool grows into a pool, so rows that leave never copy the batch out and back in
        assert pooled and all(pooled)


@pytest.mark.skipif(sys.platform != "linux", reason="pages backed on write: Linux")
def test_a_pool_that_grows_gives_its_old_memory_back(generators):
    from runtime.models import _cache_zeros

    _, batched, _ = generators
    model = batched.model
    if not model.shared_cache:
        pytest.skip("the model's cache is not in shared buffers")
    shape = (8, model.num_heads, 256, model.head_size)  # (R, H, C, D): a pool of 8 rows
    pool = tuple(_cache_zeros(shape, model.dtype) for _ in model.past_names)
    for layer, array in enumerate(pool):
        array[:4, :, :200] = layer + 1  # 4 rows in use, 200 slots written
    grown = model._grown(model._shared(tuple(a[:4] for a in pool), pool), valid=200)
    assert grown.capacity == 512 and len(grown.pool[0]) == 8
    for layer, (old, new) in enumerate(zip(pool, grown.pool)):
        assert (new[:4, :, :200] == layer + 1).all() and not new[:4, :, 200:].any()
        # handed back to the kernel (it reads as zeros): two copies of the batch never live
        # at once while the batch grows
        assert not old.any()


@pytest.mark.skipif(sys.platform != "linux", reason="pages backed on write: Linux")
def test_a_row_that_leaves_is_filled_by_the_last_and_its_slots_go_back(generators):
    import mmap

    from runtime.models import CausalState, _cache_zeros

    _, batched, _ = generators
    model = batched.model
    if not (model.shared_cache and model.feeds_seqlens):
        pytest.skip("the model's rows do not keep their slots in a pool")
    shape = (8, model.num_heads, 256, model.head_size)  # (R, H, C, D): a pool of 8 rows
    pool = tuple(_cache_zeros(shape, model.dtype) for _ in model.past_names)
    used = [200, 250, 120, 30]  # 4 rows in use
    mask = np.zeros((4, 250), dtype=np.int64)  # (N, T)
    for row, slots in enumerate(used):
        mask[row, :slots] = 1
        for array in pool:
            array[row, :, :slots] = row + 1
    state = CausalState(model._shared(tuple(a[:4] for a in pool), pool), mask, np.array(used))
    retained = model.retain(state, np.array([0, 3, 2]))  # row 1 left; row 3 takes its place
    assert retained.attention_mask.tolist() == mask[[0, 3, 2], :200].tolist()
    page = mmap.PAGESIZE // (model.head_size * pool[0].itemsize)  # slots in a page
    for array in pool:
        assert (array[0, :, :200] == 1).all() and (array[2, :, :120] == 3).all()
        assert (array[1, :, :30] == 4).all()
        # what row 1's former occupant wrote past the newcomer's 30 slots went back to the
        # kernel (it reads as zeros), whole pages of it; row 3 is free and went back too
        assert not array[1, :, 30 + page : 250 - page].any()
        assert not array[3:].any()


@pytest.mark.parametrize("seed", range(20))
def test_a_row_layout_moves_rows_in_place_as_a_select_would(seed):
    """`row_layout`'s rows, moved in place one new row at a time as `CausalLM.retain` does,
    give what selecting them into new memory gives: no row is overwritten before it is read."""
    from runtime.engine import row_layout

    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 4 if seed % 2 else 2, size=int(rng.integers(2, 12)))  # (R,)
    starts = np.cumsum([0, *sizes[:-1]])
    stays = rng.random(len(sizes)) < 0.6
    stays[rng.integers(len(sizes))] = True
    kept_starts = [int(s) for s, keep in zip(starts, stays) if keep]
    kept_sizes = [int(n) for n, keep in zip(sizes, stays) if keep]
    order, rows = row_layout(kept_starts, kept_sizes)
    assert sorted(order) == list(range(len(kept_sizes)))
    expected = np.concatenate(
        [np.arange(kept_starts[i], kept_starts[i] + kept_sizes[i]) for i in order]
    )
    assert rows.tolist() == expected.tolist()  # each request's rows together, in their order
    batch = np.arange(int(sizes.sum()))
    for target, source in enumerate(rows):
        batch[target] = batch[source]
    assert batch[: len(rows)].tolist() == rows.tolist()
    if all(n == 1 for n in kept_sizes):  # rows that fit in the smaller batch never move
        assert all(source == target for target, source in enumerate(rows) if source < len(rows))


def test_the_loop_hands_freed_memory_back_when_its_batch_empties(generators):
    _, batched, prompts = generators
    engine = batched.engine
    trims = engine.heap.trims
    batched.generate(prompts[0], runtime.GenerationConfig(max_new_tokens=4))
    deadline = time.monotonic() + 10  # the loop empties its batch after the caller returns
    while engine.heap.trims == trims and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.heap.trims > trims  # glibc here: the batch emptied, its memory was returned


def test_a_trim_gives_back_what_was_freed_in_the_middle_of_the_heap():
    """64 KiB blocks come from the heap (below glibc's mmap threshold); with one still held at
    the end, freeing the rest leaves them resident until `trim`."""
    import psutil

    from runtime import heap

    process = psutil.Process()
    blocks = [np.ones(8192) for _ in range(3000)]  # 3000 × 64 KiB ≈ 197 MB, written
    last = blocks.pop()
    resident = process.memory_info().rss
    del blocks
    assert heap.trim()
    assert process.memory_info().rss < resident - 100 * 2**20
    del last


def _spins(gen) -> str:
    """ "1" when the model's session spins during a call (and stops when it returns), else "0";
    an adaptive session spins while the process has its cores (tests/test_spinning.py)."""
    session = gen.model.runner.session
    options = getattr(session, "spinning", session).get_session_options()
    spinning = options.get_session_config_entry("session.intra_op.allow_spinning")
    assert options.get_session_config_entry("session.force_spinning_stop") == spinning
    return spinning


def test_the_loop_spins_and_a_loop_per_request_does_not(generators):
    plain, batched, _ = generators
    assert (_spins(batched), _spins(plain)) == ("1", "0")
    path = batched.directory
    assert _spins(runtime.load(path, threads=1, spinning=False)) == "0"
    assert _spins(runtime.load(path, threads=1, batching=False, spinning=True)) == "1"


def test_stop_strings_streams_and_cancel(generators):
    plain, batched, prompts = generators
    config = runtime.GenerationConfig(max_new_tokens=30, stop=[" the", "."], do_sample=True, seed=2)
    for prompt in prompts[:3]:
        _same_tokens(batched.generate(prompt, config), plain.generate(prompt, config))
        streamed = list(batched.stream(prompt, config))
        expected = list(plain.stream(prompt, config))
        assert [(e.text, e.token_id, e.finish_reason) for e in streamed] == [
            (e.text, e.token_id, e.finish_reason) for e in expected
        ]
        assert [len(e.alternatives) for e in streamed] == [5] * len(streamed)
    # A reader that stops early cancels its request; the loop goes on serving others.
    long = runtime.GenerationConfig(max_new_tokens=60, min_new_tokens=60)
    events = batched.stream(prompts[0], long)
    first = [next(events) for _ in range(3)]
    events.close()
    assert len(first) == 3
    _same_tokens(batched.generate(prompts[1], long), plain.generate(prompts[1], long))


def test_beam_search_runs_beside_the_loop_unchanged(generators):
    plain, batched, prompts = generators
    config = runtime.GenerationConfig(max_new_tokens=10, num_beams=3, num_return_sequences=2)
    assert [o.token_ids for o in batched.generate(prompts[0], config)] == [
        o.token_ids for o in plain.generate(prompts[0], config)
    ]


def test_app_and_serve_batch_by_default_and_take_no_batching():
    from serve.cli import batching_specs, model_specs
    from ui.registry import ModelRegistry

    specs = batching_specs(model_specs([MODELS / "bible-lm"], max_ongoing=16))
    assert sorted(s.model_id for s in specs) == ["fp32", "int8"]
    for spec in specs:  # every request a replica accepts joins its engine's batch
        assert spec.concurrency == 16
        assert spec.loader(spec.path, threads=1).engine is not None
    for spec in batching_specs(model_specs([MODELS / "bible-lm"]), batching=False):
        assert spec.concurrency == 4 and spec.loader(spec.path, threads=1).engine is None
    registry = ModelRegistry.discover([MODELS / "bible-lm"])
    assert all(registry.get(name).engine is not None for name in ("fp32", "int8"))
    assert _spins(registry.get("int8")) == "1"
    assert ModelRegistry.discover([MODELS / "bible-lm"], batching=False).get("int8").engine is None
    still = ModelRegistry.discover([MODELS / "bible-lm"], spinning=False).get(
        "int8"
    )  # --no-spinning
    assert still.engine is not None and _spins(still) == "0"


def test_dynamic_int8_is_refused_for_batching(tmp_path):
    from convert import manifest as bundle_manifest
    from convert.quantize import quantize_graph

    bundle = shutil.copytree(BIBLE_LM, tmp_path / "dynamic")
    report = quantize_graph(BIBLE_LM / "model.onnx", bundle / "model.onnx", "int8", False)
    assert report["ops"]["DynamicQuantizeLinear"] > 0 and report["batch_invariant"] is False
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest.update(precision="int8", batch_invariant=report["batch_invariant"])
    bundle_manifest.seal(bundle, Manifest.from_json(manifest))
    with pytest.raises(ValueError, match="`batching` must be None or False for 'bible-lm'"):
        runtime.load(bundle, batching=True)
    assert runtime.load(bundle).engine is None  # the default leaves it unbatched
    del manifest["batch_invariant"]  # a bundle from before the flag: unbatched too
    bundle_manifest.seal(bundle, Manifest.from_json(manifest))
    assert runtime.load(bundle).engine is None
    with pytest.raises(ValueError, match="`batching` must be None, True or False, got 'yes'"):
        runtime.load(bundle, batching="yes")
    # The weight-only int8 of the same graph computes each row alone: it batches.
    report = quantize_graph(BIBLE_LM / "model.onnx", tmp_path / "nbits.onnx", "int8", False, True)
    assert report["ops"]["MatMulNBits"] == 17 and report["batch_invariant"] is True


def test_chat_goes_through_the_loop_and_ends_at_end_of_turn(tmp_path):
    from optimum.exporters.onnx import main_export

    from tests.tiny_models import make_chat_checkpoint

    checkpoint = make_chat_checkpoint(tmp_path / "checkpoint")
    main_export(
        str(checkpoint),
        output=tmp_path / "onnx",
        task="text-generation-with-past",
        do_validation=False,
    )
    plain = runtime.load(tmp_path / "onnx", threads=1, batching=False)
    batched = runtime.load(tmp_path / "onnx", threads=1)  # optimum's fp32 export batches
    messages = [{"role": "user", "content": "Where are you going?"}]
    config = runtime.GenerationConfig(max_new_tokens=16, do_sample=True, seed=5)
    steps = batched.engine.steps
    expected = plain.chat(messages, config)
    _same_tokens(batched.chat(messages, config), expected)
    assert batched.engine.steps > steps  # the loop ran it
    streamed = "".join(e.text for e in batched.stream_chat(messages, config))
    assert streamed == expected[0].text


def test_a_converted_gguf_says_it_is_batch_invariant(tmp_path, monkeypatch):
    from convert.flagship import ensure_bundle
    from tests.gguf_models import write_tiny_gguf

    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    gguf = write_tiny_gguf(tmp_path / "model.gguf", "llama", "Q8_0")
    bundle = ensure_bundle(gguf)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["batch_invariant"] is True  # 8-bit MatMulNBits: rows computed alone
    assert runtime.load(bundle, threads=1).engine is not None
