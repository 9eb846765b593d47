"""runtime.sampling against transformers' warpers: kept sets, draws, validation, top_k_values."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from runtime import sampling

torch.set_num_threads(1)  # a shared machine; the references are small
# transformers' float32 softmax is accurate to ≈ 1e-6 relative (measured ≤ 6e-6 per probability,
# ≤ 2e-6 on sums), so a token whose cumulative probability is that close to a cut-off may go either
# way. Relative: near a cut-off of 1e-6, so is transformers' precision.
ROUNDING = 1e-5


def make_logits(kind: str, rows: int, vocab: int, seed: int) -> np.ndarray:
    """Float32 logits (rows, vocab) of one shape of distribution."""
    rng = np.random.default_rng(seed)
    if kind == "normal":  # flat-ish: top-p keeps most of the vocabulary
        x = rng.standard_normal((rows, vocab)) * rng.uniform(0.5, 4.0, (rows, 1))
    elif kind == "zipf":  # like a trained LM: probability ∝ rank^-a, shuffled over the vocabulary
        a = rng.uniform(0.8, 2.5, (rows, 1))
        x = -a * np.log(np.arange(1, vocab + 1)) + 0.3 * rng.standard_normal((rows, vocab))
        x = rng.permuted(x, axis=1)
    elif kind == "peaked":  # one token holds almost all the mass
        x = rng.standard_normal((rows, vocab))
        x[np.arange(rows), rng.integers(0, vocab, rows)] += rng.uniform(8.0, 25.0, rows)
    elif kind == "ties":  # few distinct values: ties at every boundary
        x = rng.integers(-4, 5, (rows, vocab)) * 0.5
    elif kind == "masked":  # earlier processors already removed some tokens
        x = rng.standard_normal((rows, vocab)) * 2.0
        x[rng.random((rows, vocab)) < 0.4] = -np.inf
        x[:, 0] = np.maximum(x[:, 0], 0.0)
    else:
        raise ValueError(kind)
    return x.astype(np.float32)


def reference_stages(logits: np.ndarray, settings: dict) -> list[tuple[object, torch.Tensor]]:
    """transformers' warpers in generate()'s order, each added only when generate() adds it,
    paired with the scores each one receives."""
    keep = settings.get("min_tokens_to_keep", 1)
    warpers = []
    if settings.get("temperature", 1.0) != 1.0:
        warpers.append(TemperatureLogitsWarper(settings["temperature"]))
    if settings.get("top_k", 0):
        warpers.append(TopKLogitsWarper(settings["top_k"], min_tokens_to_keep=keep))
    if settings.get("top_p", 1.0) < 1.0:
        warpers.append(TopPLogitsWarper(settings["top_p"], min_tokens_to_keep=keep))
    if settings.get("min_p", 0.0):
        warpers.append(MinPLogitsWarper(settings["min_p"], min_tokens_to_keep=keep))
    if settings.get("typical_p", 1.0) < 1.0:
        warpers.append(TypicalLogitsWarper(settings["typical_p"], min_tokens_to_keep=keep))
    scores, stages = torch.from_numpy(logits), []
    for warper in warpers:
        stages.append((warper, scores))
        scores = warper(None, scores)
    stages.append((None, scores))
    return stages


def ascending_cumulative(scores: torch.Tensor) -> np.ndarray:
    """Each token's cumulative probability over the tokens at or below it, as TopP computes it."""
    sorted_scores, order = torch.sort(scores, descending=False)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    return torch.empty_like(cumulative).scatter_(1, order, cumulative).numpy()


def either_way(stages) -> np.ndarray:
    """(B, V) tokens whose fate transformers decides by float rounding or by tie order."""
    (_, first), *_ = stages
    out = np.zeros(first.shape, dtype=bool)
    for (warper, scores), (_, result) in zip(stages, stages[1:]):
        s, kept = scores.numpy(), np.isfinite(result.numpy())
        if isinstance(warper, (TopPLogitsWarper, MinPLogitsWarper, TypicalLogitsWarper)):
            smallest_kept = np.where(kept, s, np.inf).min(axis=1, keepdims=True)
            out |= s == smallest_kept  # equal to the last survivor: transformers keeps some
        if isinstance(warper, TopPLogitsWarper):
            cut = np.float32(1 - warper.top_p)
            out |= np.abs(ascending_cumulative(scores) - cut) <= ROUNDING * cut
        elif isinstance(warper, MinPLogitsWarper):
            probs = scores.softmax(dim=-1).numpy()
            cut = warper.min_p * probs.max(axis=1, keepdims=True)
            out |= np.abs(probs - cut) <= ROUNDING * cut
        elif isinstance(warper, TypicalLogitsWarper):
            log_probs = torch.log_softmax(scores, dim=-1)
            entropy = -(log_probs * log_probs.exp()).nansum(-1, keepdim=True)
            gap = (-log_probs - entropy).abs()
            sorted_gap, order = torch.sort(gap)
            cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
            last = (cumulative < warper.mass).sum(dim=1).clamp(max=gap.shape[1] - 1)
            boundary = sorted_gap.gather(1, last[:, None]).numpy()
            near = np.abs(cumulative.numpy() - warper.mass) <= ROUNDING * warper.mass
            near_rank = np.zeros_like(near)
            near_rank[:, 1:] = near[:, :-1]  # the token after a near-boundary cumulative
            unsorted = np.zeros_like(near)
            np.put_along_axis(unsorted, order.numpy(), near_rank | near, axis=1)
            out |= unsorted | (np.abs(gap.numpy() - boundary) <= 1e-5 * np.maximum(boundary, 1))
    return out


SETTINGS = [
    dict(temperature=0.8, top_k=50, top_p=0.95),
    dict(top_p=0.95),
    dict(top_p=0.5),
    dict(top_p=1e-6),
    dict(top_p=0.999999),
    dict(top_k=1),
    dict(top_k=7),
    dict(temperature=1e-3, top_p=0.9),
    dict(temperature=100.0, top_p=0.9),
    dict(temperature=100.0, top_k=10, top_p=0.8),
    dict(min_p=0.05),
    dict(temperature=0.7, top_p=0.9, min_p=0.1),
    dict(top_k=20, min_p=0.2),
    dict(typical_p=0.9),
    dict(temperature=1.5, typical_p=0.4),
    dict(top_k=3, top_p=0.8, min_tokens_to_keep=5),
    dict(top_p=0.2, min_tokens_to_keep=3),
    dict(min_p=0.6, min_tokens_to_keep=4),
]
KINDS = ["normal", "zipf", "peaked", "ties", "masked"]
# (vocab, rows per case): many rows on small vocabularies, a few on GPT-2's.
SIZES = [(2, 30), (7, 40), (100, 30), (2_000, 4), (50_257, 1)]


def assert_same_kept(logits: np.ndarray, settings: dict) -> None:
    ours = sampling.filter_logits(logits, **settings)
    stages = reference_stages(logits, settings)
    theirs = stages[-1][1].numpy()
    ours_kept, theirs_kept = np.isfinite(ours), np.isfinite(theirs)
    differ = ours_kept != theirs_kept
    unexplained = differ & ~either_way(stages) if differ.any() else differ
    rows, cols = np.nonzero(unexplained)
    assert not unexplained.any(), (
        f"{len(rows)} tokens kept differently, e.g. row {rows[:3]} token {cols[:3]}: "
        f"ours {ours_kept[rows[:3], cols[:3]]}, transformers {theirs_kept[rows[:3], cols[:3]]}"
    )
    both = ours_kept & theirs_kept
    np.testing.assert_allclose(ours[both], theirs[both], rtol=1e-6)


def settings_id(settings: dict) -> str:
    return ",".join(f"{name}={value}" for name, value in settings.items()) or "off"


@pytest.mark.parametrize("settings", SETTINGS, ids=settings_id)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("vocab,rows", SIZES, ids=[f"V{v}" for v, _ in SIZES])
def test_filter_keeps_what_transformers_keeps(vocab, rows, kind, settings):
    if vocab >= 50_000 and kind in ("ties", "masked") and "typical_p" in settings:
        pytest.skip("covered at V=2000; transformers' typical-p on 50k ties is slow")
    seed = zlib.crc32(repr((vocab, kind, settings)).encode())
    assert_same_kept(make_logits(kind, rows, vocab, seed), settings)


def test_poor_boundary_estimates_fall_back_to_exact_answers(monkeypatch):
    # A 64-position subsample misjudges where the top-k and top-p boundaries lie, so the band
    # search must widen (up to the whole row) and still land on transformers' kept set.
    monkeypatch.setattr(sampling, "_SUBSAMPLE", 64)
    for kind in ("normal", "zipf", "peaked"):
        logits = make_logits(kind, 8, 5_000, seed=len(kind))
        for settings in (dict(top_p=0.95), dict(top_p=0.3), dict(top_k=12, top_p=0.9)):
            assert_same_kept(logits, settings)


@pytest.mark.parametrize("temperature", [1.5, 3.0, 100.0])
def test_temperature_rounding_ties_at_the_top_k_boundary(temperature):
    # Consecutive float32 logits in [1.5, 2): dividing by the temperature rounds some of them
    # together, so ties at the k-th value appear only after scaling. Top-k divides only its
    # candidates; putting the largest logits where the subsample reads (every `stride`-th token)
    # makes the candidates' floor the k-th value itself, so a tie just below it must be caught.
    vocab = 50_257
    stride = vocab // sampling._subsample_size(vocab)
    read = np.arange(0, vocab, stride)
    order = np.concatenate([read, np.setdiff1d(np.arange(vocab), read)])  # largest first
    logits = np.empty((1, vocab), dtype=np.float32)
    logits[0, order] = np.float32(2.0) - np.arange(1, vocab + 1) * np.float32(2**-23)
    shuffled = np.random.default_rng(0).permuted(np.repeat(logits, 3, axis=0), axis=1)
    for k in (1, 50, 333):
        assert_same_kept(logits, dict(temperature=temperature, top_k=k))
        assert_same_kept(shuffled, dict(temperature=temperature, top_k=k))


def test_filter_never_mutates_its_input():
    logits = make_logits("zipf", 3, 1_000, seed=1)
    before = logits.copy()
    sampling.filter_logits(logits, temperature=0.5, top_k=40, top_p=0.9, min_p=0.05)
    sampling.Sampler(top_p=0.9)(logits, np.random.default_rng(0))
    np.testing.assert_array_equal(logits, before)


def _spread_logits() -> np.ndarray:
    """1,000 tokens: 12 likely ones spread over several sampler blocks, the rest unlikely."""
    logits = np.full((1, 1_000), -6.0, dtype=np.float32)
    likely = [3, 200, 255, 256, 257, 511, 600, 700, 768, 900, 998, 999]
    logits[0, likely] = np.linspace(2.0, 0.0, len(likely))
    return logits


DRAW_CASES = {
    "off": (np.log([[0.3, 0.25, 0.2, 0.1, 0.08, 0.05, 0.02]]), {}),
    "top_k": (np.log([[0.3, 0.25, 0.2, 0.1, 0.08, 0.05, 0.02]]), dict(top_k=3)),
    "temperature+top_p": (
        np.log([[0.3, 0.25, 0.2, 0.1, 0.08, 0.05, 0.02]]),
        dict(temperature=0.7, top_p=0.8),
    ),
    "min_p": (np.log([[0.3, 0.25, 0.2, 0.1, 0.08, 0.05, 0.02]]), dict(min_p=0.3)),
    "typical_p": (np.log([[0.3, 0.25, 0.2, 0.1, 0.08, 0.05, 0.02]]), dict(typical_p=0.6)),
    "top_p over blocks": (_spread_logits(), dict(top_p=0.9)),
    "top_p holding little mass": (_spread_logits() * 0.2, dict(top_p=0.05)),
}


@pytest.mark.parametrize("case", DRAW_CASES)
def test_draws_follow_the_filtered_distribution(case):
    logits, settings = DRAW_CASES[case]
    logits = logits.astype(np.float32)
    filtered = sampling.filter_logits(logits, **settings)[0].astype(np.float64)
    probs = np.exp(filtered - filtered.max())
    probs /= probs.sum()
    draws = 4_000
    batch = np.repeat(logits, draws, axis=0)  # (draws, V): one draw per row
    tokens = sampling.Sampler(**settings)(batch, np.random.default_rng(7))
    counts = np.bincount(tokens, minlength=logits.shape[1])
    assert counts[probs == 0].sum() == 0, "drew a filtered-out token"
    kept = probs > 0
    expected = draws * probs[kept]
    result = stats.chisquare(counts[kept], expected)
    assert result.pvalue > 1e-3, (counts[kept], expected)


def test_same_seed_same_tokens_different_seed_different_tokens():
    logits = make_logits("normal", 64, 3_000, seed=3)
    for settings in (dict(top_p=0.95), dict(temperature=0.8, top_k=50, top_p=0.95), {}):
        sampler = sampling.Sampler(**settings)
        first = sampler(logits, np.random.default_rng(11))
        again = sampler(logits, np.random.default_rng(11))
        other = sampler(logits, np.random.default_rng(12))
        assert first.dtype == np.int64 and first.shape == (64,)
        np.testing.assert_array_equal(first, again)
        assert (first != other).any()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(top_p=1.5), "`top_p` must be in (0, 1], got 1.5"),
        (dict(top_p=0.0), "`top_p` must be in (0, 1], got 0.0"),
        (dict(top_p=float("nan")), "`top_p` must be in (0, 1], got nan"),
        (dict(temperature=0.0), "`temperature` must be > 0 and finite, got 0.0"),
        (dict(temperature=float("inf")), "`temperature` must be > 0 and finite, got inf"),
        (dict(top_k=-1), "`top_k` must be an int >= 0, got -1"),
        (dict(top_k=2.5), "`top_k` must be an int >= 0, got 2.5"),
        (dict(top_k=True), "`top_k` must be an int >= 0, got True"),
        (dict(min_p=-0.1), "`min_p` must be in [0, 1], got -0.1"),
        (dict(min_p=1.5), "`min_p` must be in [0, 1], got 1.5"),
        (dict(typical_p=0.0), "`typical_p` must be in (0, 1], got 0.0"),
        (dict(typical_p=1.1), "`typical_p` must be in (0, 1], got 1.1"),
        (dict(min_tokens_to_keep=0), "`min_tokens_to_keep` must be an int >= 1, got 0"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        sampling.Sampler(**kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        sampling.filter_logits(np.zeros((1, 4), np.float32), **kwargs)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (2, 0)])
def test_logits_must_be_a_2d_batch(shape):
    logits = np.zeros(shape, dtype=np.float32)
    message = f"`logits` must be 2-D [batch, vocab] with vocab >= 1, got shape {shape}"
    with pytest.raises(ValueError, match=re.escape(message)):
        sampling.filter_logits(logits, top_p=0.9)
    with pytest.raises(ValueError, match=re.escape(message)):
        sampling.Sampler()(logits, np.random.default_rng(0))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("settings", [{}, dict(top_k=5), dict(top_p=0.9)], ids=settings_id)
def test_rows_without_a_finite_maximum_are_rejected(bad, settings):
    logits = np.zeros((2, 3_000), dtype=np.float32)
    logits[1] = -np.inf
    logits[1, 7] = bad  # NaN / +inf anywhere, or a row with nothing but -inf
    with pytest.raises(ValueError, match="`logits` must be"):
        sampling.Sampler(**settings)(logits, np.random.default_rng(0))


@pytest.mark.parametrize("vocab,k", [(50_257, 5), (50_257, 50), (50_257, 2_000), (7, 7), (300, 1)])
@pytest.mark.parametrize("kind", ["normal", "ties"])
def test_top_k_values_match_a_full_sort(vocab, k, kind):
    x = make_logits(kind, 3, vocab, seed=vocab + k)
    values, indices = sampling.top_k_values(x, k)
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]  # (B, k) ties by increasing index
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))
    assert values.dtype == x.dtype and indices.dtype == np.int64


def test_top_k_values_rejects_bad_k():
    with pytest.raises(ValueError, match=re.escape("`k` must be an int in [1, 4], got 5")):
        sampling.top_k_values(np.zeros((1, 4), np.float32), 5)


# --- Any finite logits at any temperature (issue 14) ------------------------------------------

# Logits ~ N(offset, scale²) in float32 that crashed the top-p band estimate: its standard error
# squared masses (e^50 and more) in float32 and reached inf, or inf × 0 = NaN on small rows.
CRASH_CASES = [  # vocab, offset, scale, settings
    (8_000, 0.0, 0.9, dict(temperature=0.05, top_p=0.9)),
    (8_000, 0.0, 0.9, dict(temperature=0.05, top_p=0.3)),
    (37, 50.0, 3.0, dict(top_p=0.9, min_p=0.1)),
    (37, 50.0, 30.0, dict(temperature=2.0, top_k=42, top_p=0.9)),
    (50_257, 50.0, 0.3, dict(top_k=50_262, top_p=0.01, min_p=0.1)),
    (8_000, -80.0, 30.0, dict(temperature=0.5, top_p=0.01)),
    (50_257, -80.0, 30.0, dict(temperature=0.5, top_p=0.01)),
]


@pytest.mark.parametrize("vocab,offset,scale,settings", CRASH_CASES)
def test_logits_far_from_zero_keep_what_transformers_keeps(vocab, offset, scale, settings):
    for seed in range(3):
        rng = np.random.default_rng(seed)
        logits = rng.normal(offset, scale, (3, vocab)).astype(np.float32)
        assert_same_kept(logits, settings)
        tokens = sampling.Sampler(**settings)(logits, rng)
        kept = np.isfinite(sampling.filter_logits(logits, **settings))
        assert kept[np.arange(3), tokens].all()


@pytest.mark.parametrize("settings", [dict(temperature=1e-3), dict(temperature=5e-3, top_k=3)])
@pytest.mark.parametrize("extra", [dict(), dict(top_p=0.5), dict(min_p=0.2)], ids=settings_id)
def test_logits_that_overflow_when_divided_by_the_temperature(settings, extra):
    # 3e36 / 5e-3 overflows float32; the row is shifted by its max first (same distribution).
    settings = settings | extra
    logits = np.array([[3e36, 2.9e36, -3e38, 1.0, 2.95e36]], dtype=np.float32)
    with np.errstate(over="ignore"):
        shifted = (logits - logits.max()) / np.float32(settings["temperature"])
    ours = sampling.filter_logits(logits, **settings)
    theirs = reference_stages(logits - logits.max(), settings)[-1][1].numpy()
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(theirs))
    np.testing.assert_array_equal(ours[np.isfinite(ours)], shifted[np.isfinite(ours)])
    tokens = sampling.Sampler(**settings)(np.repeat(logits, 20, axis=0), np.random.default_rng(0))
    assert set(tokens.tolist()) <= set(np.flatnonzero(np.isfinite(ours[0])).tolist())


@pytest.mark.parametrize("temperature", [1e-30, 1e-40, 1e-46, 1e-300])
@pytest.mark.parametrize("extra", [dict(), dict(top_k=2), dict(top_p=0.5), dict(min_p=0.2)])
def test_tiny_temperatures_are_greedy(temperature, extra):
    # Every gap between logits becomes huge: any filter keeps only the (tied) maximum, and
    # sampling draws only it. 1e-46 and 1e-300 are 0 in float32: the limit, maxima at 0.
    rng = np.random.default_rng(0)
    logits = rng.normal(-80.0, 30.0, (2, 8_000)).astype(np.float32)
    logits[:, [5, 7_000]] = logits.max(axis=1, keepdims=True) + 1.0  # a tie for the maximum
    settings = dict(temperature=temperature) | extra
    ours = sampling.filter_logits(logits, **settings)
    if extra or np.float32(temperature) == 0:
        for row in ours:
            assert np.flatnonzero(np.isfinite(row)).tolist() == [5, 7_000]
    if np.float32(temperature) == 0:
        assert (ours[np.isfinite(ours)] == 0).all()
    tokens = sampling.Sampler(**settings)(np.repeat(logits, 10, axis=0), rng)
    assert set(tokens.tolist()) == {5, 7_000}


@st.composite
def logits_and_settings(draw) -> tuple[np.ndarray, dict]:
    """Float32 logits offset + scale × z (z normal, Zipf-shaped or few-valued: ties) and a
    setting of the warpers transformers' generate() adds for sampling."""
    vocab = draw(st.sampled_from([1, 2, 3, 7, 37, 256, 1_000, 2_049, 8_000, 50_257]))
    rows = draw(st.integers(1, 3 if vocab < 10_000 else 1))
    offset = draw(st.sampled_from([0.0, -80.0, 50.0]) | st.floats(-1e4, 1e4))
    scale = draw(st.sampled_from([0.3, 0.9, 3.0, 30.0]) | st.floats(1e-3, 100.0))
    shape = draw(st.sampled_from(["normal", "zipf", "ties"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if shape == "normal":
        z = rng.standard_normal((rows, vocab))
    elif shape == "zipf":
        z = rng.permuted(-np.log(np.arange(1, vocab + 1)) * np.ones((rows, 1)), axis=1)
    else:
        z = rng.integers(-3, 4, (rows, vocab)).astype(np.float64)
    logits = (offset + scale * z).astype(np.float32)
    settings = {}
    temperature = draw(st.sampled_from([1.0, 0.05, 0.5, 2.0]) | st.floats(1e-3, 1e3))
    if temperature != 1.0:
        settings["temperature"] = temperature
    if draw(st.booleans()):
        settings["top_k"] = draw(st.integers(1, vocab + 5))
    if draw(st.booleans()):
        settings["top_p"] = draw(st.sampled_from([0.01, 0.9, 0.95]) | st.floats(1e-4, 0.9999))
    if draw(st.booleans()):
        settings["min_p"] = draw(st.floats(0.01, 1.0))
    if draw(st.integers(0, 3)) == 0:
        settings["min_tokens_to_keep"] = draw(st.integers(2, 5))
    return logits, settings


@given(logits_and_settings())
def test_filter_keeps_what_transformers_keeps_for_any_logits(case):
    logits, settings = case
    assert_same_kept(logits, settings)


@given(logits_and_settings(), st.integers(0, 2**32 - 1))
def test_sampler_draws_only_what_transformers_keeps(case, seed):
    logits, settings = case
    tokens = sampling.Sampler(**settings)(logits, np.random.default_rng(seed))
    stages = reference_stages(logits, settings)
    allowed = np.isfinite(stages[-1][1].numpy()) | either_way(stages)
    assert allowed[np.arange(logits.shape[0]), tokens].all(), (tokens, settings)
