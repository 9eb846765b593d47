"""Sampling kernels: temperature, top-k, top-p, min-p and typical-p filters; a sampler; top-k.

Covers the logits warpers transformers applies when sampling, in its order and with its kept sets
(Temperature → TopK → TopP → MinP → Typical), a `Sampler` that draws one token per row from exactly
the distribution the filtered logits define, `greedy` (argmax), and `top_k_values`. Does not cover
the processors that depend on the generated tokens (repetition penalty, no-repeat n-grams, …):
see `runtime.processors`.

Allowed tokens (a JSON Schema's next tokens, runtime/structured.py): `Sampler` and `greedy` take
per row the sorted ids it may choose, and work on those entries alone (gathered, never a masked
copy of the row). That is exactly the row with every other entry -inf: the filters' kept sets
and masses are those of the allowed tokens, and -inf entries weigh nothing.

    >>> import numpy as np
    >>> logits = np.array([[3.0, 1.0, 2.0, 0.0]], dtype=np.float32)
    >>> filter_logits(logits, top_k=2)
    array([[  3., -inf,   2., -inf]], dtype=float32)
    >>> Sampler(top_k=1)(logits, np.random.default_rng(0))
    array([0])

How, without ever sorting the vocabulary (per row: a few linear passes, sorts of at most a few
thousand values, and few numpy calls, which cost ~1-2 µs each here):
- A subsample of S ≈ V/8 evenly spaced positions (whole blocks of 256, at most 4,096) estimates
  where a boundary lies. Estimates only decide how much work follows; every decision is exact.
- top-k: the k-th largest of the subsample is <= the row's k-th largest, so `row >= it` keeps
  every survivor plus ≈ k·V/S others; a partition of those candidates gives the k-th value, and
  every logit >= it survives (ties included, as in transformers). Only the candidates are divided
  by the temperature. This beats onnxruntime's TopK here (~50 µs a call with its session
  overhead, against ~30 µs).
- top-p after top-k: on the few listed survivors (sort, softmax, cumulative sum).
- top-p over a whole row: transformers removes the low tail whose ascending cumulative probability
  is <= 1 - top_p. One pass computes the unnormalised probabilities exp(row - shift) and their
  per-block sums. The sorted subsample estimates the rank where the tail ends, and the standard
  error of that estimate; one more pass collects the band of logits within 3 standard errors of
  it (plus everything above it when that is little) and the exact mass below the band (summed
  from below: tails can be tiny); sorting the band settles each of its tokens exactly. If the
  boundary lies outside the band the band widens, at worst to the whole row. Survivors are then
  "every logit >= τ", never listed.
- Drawing: from listed survivors, by inverse CDF. From "logit >= τ": draw from the whole row via
  the block sums (a block, then a token in it) and redraw the rare token below τ, which leaves
  exactly the survivors' renormalised distribution; if the survivors hold under a quarter of the
  mass, draw from their masked weights instead.
- min-p over a whole row and typical-p are plain full-row passes (typical-p sorts, as transformers
  does); they are not on the fast path.

Exactness: kept sets equal transformers' except (a) where transformers' own float32 rounding
decides (its softmax is accurate to ≈ 1e-6 relative; a token whose cumulative probability is that
close to 1 - top_p may go either way) and (b) ties at the top-p, min-p or min_tokens_to_keep
boundary: every token equal to the last survivor survives here, transformers keeps an arbitrary
subset of them (top-k ties survive in both). Rows need a finite maximum (no NaN, no +inf); -inf
entries are fine (already removed). Any finite logits work at any temperature: every quantity
computed from them stays finite (masses are taken relative to a shift near the row's maximum).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np

_SUBSAMPLE = 4096  # at most this many positions per row are read to estimate boundaries
_BLOCK = 256  # tokens per block of the two-level sampler
_MIN_ACCEPTANCE = 0.25  # below this survivor mass fraction, draw from the survivors directly
_MAX_REDRAWS = 64  # then draw from the survivors directly (odds of getting there: < 0.75**64)
_FEW = 1024  # top-p: at most this many tokens above the band are taken into it


# --- Parameters -------------------------------------------------------------------------------


def _reject(name: str, rule: str, value) -> None:
    raise ValueError(f"`{name}` must be {rule}, got {value}")


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _validate(temperature, top_k, top_p, min_p, typical_p, min_tokens_to_keep) -> None:
    if not (_is_real(temperature) and 0 < temperature < math.inf):
        _reject("temperature", "> 0 and finite", temperature)
    if not (_is_int(top_k) and top_k >= 0):
        _reject("top_k", "an int >= 0", top_k)
    if not (_is_real(top_p) and 0 < top_p <= 1):
        _reject("top_p", "in (0, 1]", top_p)
    if not (_is_real(min_p) and 0 <= min_p <= 1):
        _reject("min_p", "in [0, 1]", min_p)
    if not (_is_real(typical_p) and 0 < typical_p <= 1):
        _reject("typical_p", "in (0, 1]", typical_p)
    if not (_is_int(min_tokens_to_keep) and min_tokens_to_keep >= 1):
        _reject("min_tokens_to_keep", "an int >= 1", min_tokens_to_keep)


def _as_matrix(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] == 0:
        _reject(name, "2-D [batch, vocab] with vocab >= 1", f"shape {x.shape}")
    return x


def _as_logits(logits) -> np.ndarray:
    logits = _as_matrix(logits, "logits")
    return logits if logits.dtype == np.float32 else logits.astype(np.float32)


# --- Public API -------------------------------------------------------------------------------


def filter_logits(
    logits: np.ndarray,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    typical_p: float = 1.0,
    min_tokens_to_keep: int = 1,
) -> np.ndarray:
    """Apply transformers' sampling warpers to float32 logits (B, V); returns new logits (B, V).

    In order: logits / temperature (1.0 = off) → top-k: keep every logit >= the k-th largest, with
    k = max(top_k, min_tokens_to_keep) (0 = off) → top-p: sort ascending, remove tokens whose
    cumulative probability is <= 1 - top_p, always keeping the min_tokens_to_keep most likely
    (1.0 = off) → min-p: remove tokens whose probability is < min_p × the top probability, on the
    distribution left by the previous steps (0.0 = off) → typical-p: keep the tokens whose
    -log p is closest to the entropy until their mass reaches typical_p (1.0 = off). Removed
    entries are -inf, kept entries are logits / temperature (where that overflows float32, which
    takes |logit| > 3.4e38 × temperature, (logits - row max) / temperature: the same
    distribution); other real dtypes are converted to float32, and the input is never mutated.
    Tokens equal to the last survivor of top-p, min-p or min_tokens_to_keep survive too
    (transformers keeps an arbitrary subset of such ties).
    """
    return Sampler(temperature, top_k, top_p, min_p, typical_p, min_tokens_to_keep).filter(logits)


def top_k_values(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest entries of each row of x (B, V): values (B, k), sorted descending, and indices.

    Equal values come in increasing index order. Any real dtype; values keep it. No full sort.
    """
    x = _as_matrix(x, "x")
    if not (_is_int(k) and 1 <= k <= x.shape[1]):
        _reject("k", f"an int in [1, {x.shape[1]}]", k)
    values = np.empty((x.shape[0], k), dtype=x.dtype)  # (B, k)
    indices = np.empty((x.shape[0], k), dtype=np.int64)  # (B, k)
    for b, row in enumerate(x):
        ids, vals = _top_k_candidates(row, k)
        order = np.argsort(-vals, kind="stable")[:k]  # candidates are in increasing index order
        values[b], indices[b] = vals[order], ids[order]
    return values, indices


class Sampler:
    """Filters logits exactly like `filter_logits` and draws one token per row.

    Parameters are validated once, here (same meanings and "off" values as `filter_logits`).
    `sampler(logits, rng)` takes float32 logits (B, V) and an `np.random.Generator` and returns
    int64 tokens (B,) drawn from softmax(filter_logits(logits, ...)); the same generator state
    gives the same tokens. `allowed` (per row: sorted token ids, or None for no constraint)
    draws as if every other entry were -inf.
    """

    def __init__(
        self,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        typical_p: float = 1.0,
        min_tokens_to_keep: int = 1,
    ):
        _validate(temperature, top_k, top_p, min_p, typical_p, min_tokens_to_keep)
        self.temperature = float(temperature)
        self.top_k = int(top_k)
        self.top_p = float(top_p)
        self.min_p = float(min_p)
        self.typical_p = float(typical_p)
        self.min_tokens_to_keep = int(min_tokens_to_keep)
        # Top-p removes a token when float32(cumulative probability) <= float32(1 - top_p), that
        # is when the exact cumulative probability is <= the midpoint to the next float32.
        removable = np.float32(1.0 - self.top_p)
        self._removable_cut = (float(removable) + float(np.nextafter(removable, np.inf))) / 2

    def filter(self, logits: np.ndarray) -> np.ndarray:
        """Filtered logits (B, V): kept entries are logits / temperature, removed ones -inf."""
        logits = _as_logits(logits)
        out = np.full(logits.shape, -np.inf, dtype=np.float32)  # (B, V)
        for b, raw in enumerate(logits):
            row = _Row(raw, self.temperature)
            kept = self._survivors(row)
            if isinstance(kept, _Listed):
                out[b, kept.indices] = kept.values
            else:
                np.copyto(out[b], row.values, where=row.values >= kept.threshold)
        return out

    def __call__(
        self, logits: np.ndarray, rng: np.random.Generator, allowed: list | None = None
    ) -> np.ndarray:
        logits = _as_logits(logits)
        tokens = np.empty(logits.shape[0], dtype=np.int64)  # (B,)
        for b, raw in enumerate(logits):
            ids = None if allowed is None else _allowed_ids(allowed[b], raw)
            row = _Row(raw if ids is None else raw.take(ids), self.temperature)  # (V,) or (n,)
            drawn = _draw(row, self._survivors(row), rng)
            tokens[b] = drawn if ids is None else ids[drawn]
        return tokens

    def _survivors(self, row: _Row) -> _Listed | _AtLeast:
        """What survives every filter in one row."""
        vocab = row.raw.shape[0]
        keep_min = min(self.min_tokens_to_keep, vocab)
        k = min(max(self.top_k, keep_min), vocab) if self.top_k else vocab
        kept = _top_k_listed(row, k) if k < vocab else _AtLeast(-np.inf, None)
        if self.top_p < 1.0:
            if isinstance(kept, _Listed):
                kept = _top_p_listed(kept, self._removable_cut, keep_min)
            else:
                kept = _top_p_row(row, self._removable_cut, keep_min)
        if self.min_p > 0.0:
            if isinstance(kept, _Listed):
                kept = _min_p_listed(kept, self.min_p, keep_min)
            else:
                kept = _min_p_row(row, kept, self.min_p, keep_min)
        if self.typical_p < 1.0:
            kept = _typical(row, kept, self.typical_p, keep_min)
        return kept


def greedy(logits: np.ndarray, allowed: list | None = None) -> np.ndarray:
    """The most likely token of each row of logits (B, V), int64 (B,); the first on ties.
    `allowed` (per row: sorted token ids, or None) picks among those tokens only.

    >>> greedy(np.array([[0.0, 3.0, 1.0, 2.0]]), [np.array([0, 2, 3])])
    array([3])
    """
    logits = _as_matrix(logits, "logits")
    if allowed is None:
        return np.argmax(logits, axis=1)
    tokens = np.empty(logits.shape[0], dtype=np.int64)  # (B,)
    for b, raw in enumerate(logits):
        ids = _allowed_ids(allowed[b], raw)
        best = int(np.argmax(raw))
        # The row's first maximum, when allowed, is the first among the allowed: no gather
        # (inside a JSON string most tokens are allowed, and gathering them costs 10x more).
        if ids is None or _contains(ids, best):
            tokens[b] = best
        else:
            tokens[b] = ids[np.argmax(raw.take(ids))]
    return tokens


def _contains(sorted_ids: np.ndarray, token: int) -> bool:
    at = int(sorted_ids.searchsorted(token))
    return at < sorted_ids.shape[0] and sorted_ids[at] == token


def _allowed_ids(ids: np.ndarray | None, raw: np.ndarray) -> np.ndarray | None:
    """A row's allowed token ids, checked: non-empty and within the row (sorted by contract)."""
    if ids is None:
        return None
    if not len(ids) or ids[0] < 0 or ids[-1] >= raw.shape[0]:
        _reject("allowed", f"non-empty sorted token ids in [0, {raw.shape[0]})", ids)
    return ids


# --- Survivor sets ----------------------------------------------------------------------------


@dataclass
class _Listed:
    """Survivors listed explicitly, in no particular order (after top-k or typical-p)."""

    indices: np.ndarray  # (n,) int64 token ids
    values: np.ndarray  # (n,) float32 scaled logits

    def at_least(self, threshold: float) -> _Listed:
        keep = (self.values >= threshold).nonzero()[0]  # nonzero + take beats a boolean index
        return _Listed(self.indices.take(keep), self.values.take(keep))


@dataclass
class _AtLeast:
    """Survivors given implicitly: every token whose scaled logit is >= threshold."""

    threshold: float
    mass: float | None  # their unnormalised mass in the units of `_RowMass`; None = whole row


class _Row:
    """One row of logits (V,) (only read) and, computed on first use, its scaled logits and mass.

    Top-k divides only its candidates by the temperature; everything else needs the whole row.
    """

    def __init__(self, raw: np.ndarray, temperature: float):
        self.raw = raw
        self.temperature = temperature

    @functools.cached_property
    def values(self) -> np.ndarray:
        """logits / temperature (V,), or (logits - their max) / temperature if that overflows.

        Only a temperature below 1 can overflow float32 (|logit| > 3.4e38 × temperature); the
        shifted row defines the same distribution, with a finite maximum of 0.
        """
        if self.temperature == 1.0:
            return self.raw
        temperature = np.float32(self.temperature)
        if self.temperature >= 1.0:
            return self.raw / temperature
        top = self.raw.max()
        if not np.isfinite(top):
            _reject("logits", "rows with a finite maximum (no NaN or +inf)", top)
        # The lowest logits may reach -inf: they stay removed. A temperature that is 0 in float32
        # (< 1.4e-45) is the greedy limit: the maximum's 0 / 0 is taken as 0.
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if np.isfinite(top / temperature):
                return self.raw / temperature
            shifted = self.raw - top
            return np.where(shifted == 0.0, np.float32(0.0), shifted / temperature)

    @functools.cached_property
    def sample(self) -> np.ndarray:
        """A copy of the scaled logits at the subsample's positions (S,)."""
        return _subsample(self.values)

    @functools.cached_property
    def mass(self) -> _RowMass:
        return _RowMass(self.values, float(self.sample.max()))


class _RowMass:
    """exp(row - shift) over a whole row, padded with zeros to whole blocks, and its block sums.

    `near_max` (the subsample's max) stands in for the row's max, which is no smaller: the shift is
    near_max, or 0 while that is moderate, which saves the subtraction: exp(row) then neither
    underflows where it matters (a token that does weighs < e^-47 of the top one) nor, unless the
    row's max is far above near_max, overflows. If the sum gets too large for float32 (or meets
    NaN), the row's own max is used instead.
    """

    def __init__(self, values: np.ndarray, near_max: float):
        vocab = values.shape[0]
        self.padded = np.empty(-(-vocab // _BLOCK) * _BLOCK, dtype=np.float32)  # (blocks*BLOCK,)
        self.padded[vocab:] = 0.0
        self.exp = self.padded[:vocab]  # (V,) view
        self._fill(values, 0.0 if -40.0 <= near_max <= 60.0 else near_max)
        if not self.total < 1e38:  # float32 sums of it could overflow (or NaN is about)
            top = values.max()
            if not np.isfinite(top):
                _reject("logits", "rows with a finite maximum (no NaN or +inf)", top)
            self._fill(values, top)

    def _fill(self, values: np.ndarray, shift: float) -> None:
        self.shift = np.float32(shift)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.shift:
                np.exp(np.subtract(values, self.shift, out=self.exp), out=self.exp)
            else:
                np.exp(values, out=self.exp)
        block_sums = self.padded.reshape(-1, _BLOCK) @ _ones_block()  # (blocks,)
        self.block_cdf = np.add.accumulate(block_sums, dtype=np.float64)  # (blocks,)
        self.total = float(self.block_cdf[-1])

    def mass_where(self, mask: np.ndarray) -> float:
        return float(np.dot(self.exp, mask))

    def of(self, logits: np.ndarray) -> np.ndarray:
        """The masses of some of the row's (scaled) logits, in the same units."""
        return np.exp(logits - self.shift) if self.shift else np.exp(logits)


@functools.cache
def _ones_block() -> np.ndarray:
    return np.ones(_BLOCK, dtype=np.float32)


def _subsample(values: np.ndarray) -> np.ndarray:
    """A copy of every (V // size)-th value, `size` of them, or of the whole row if it is small.

    Evenly spaced positions keep the sample unbiased when logits trend with the token id (ids are
    often in frequency order); only speed depends on the choice, never results.
    """
    size = _subsample_size(values.shape[0])
    if not size:
        return values.copy()
    return values[:: values.shape[0] // size][:size].copy()


def _subsample_size(vocab: int) -> int:
    """About V / 8 positions, in whole blocks, at most _SUBSAMPLE; 0 = the row is small."""
    return min(_SUBSAMPLE, vocab // 8 // _BLOCK * _BLOCK)


# --- Top-k ------------------------------------------------------------------------------------


def _candidates_above_sample(values: np.ndarray, k: int) -> tuple[np.float32, np.ndarray]:
    """The subsample's k-th largest value, and the tokens >= it, in index order.

    The k-th largest of a subset is <= the k-th largest of the row, so >= k tokens pass.
    """
    sample = _subsample(values)
    sample.partition(sample.shape[0] - k)
    floor = sample[sample.shape[0] - k]
    return floor, (values >= floor).nonzero()[0]


def _top_k_candidates(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every token whose value is >= the row's k-th largest (ties included), in index order."""
    if 4 * k <= _subsample_size(values.shape[0]):
        indices = _candidates_above_sample(values, k)[1]
        candidates = values.take(indices)
        if candidates.shape[0] > k:
            kth = np.partition(candidates, candidates.shape[0] - k)[candidates.shape[0] - k]
            keep = (candidates >= kth).nonzero()[0]
            indices, candidates = indices.take(keep), candidates.take(keep)
    else:
        kth = np.partition(values, values.shape[0] - k)[values.shape[0] - k]
        indices = (values >= kth).nonzero()[0]
        candidates = values.take(indices)
    if candidates.shape[0] < k:  # only NaN compares false against everything
        _reject("logits", "free of NaN", "NaN")
    return indices, candidates


def _top_k_listed(row: _Row, k: int) -> _Listed:
    """Top-k of the scaled row, dividing only candidates by the temperature when that is exact.

    Dividing is monotone, so the scaled k-th largest is the k-th largest candidate divided; but
    it can round neighbouring logits together, so a token below the candidates' floor could tie
    with it. When floor / temperature stays strictly below it, none can; otherwise scale it all.
    """
    kept = None
    if row.temperature != 1.0 and 4 * k <= _subsample_size(row.raw.shape[0]):
        floor, indices = _candidates_above_sample(row.raw, k)
        if indices.shape[0] >= k:  # else NaN: reported below
            # Overflow (or a temperature that is 0 in float32): the whole row is shifted instead.
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                scaled = row.raw.take(indices) / np.float32(row.temperature)
                floor = floor / np.float32(row.temperature)
            kth = np.partition(scaled, scaled.shape[0] - k)[scaled.shape[0] - k]
            if floor < kth and np.isfinite(scaled.max()):
                kept = _Listed(indices, scaled).at_least(kth)
    if kept is None:
        kept = _Listed(*_top_k_candidates(row.values, k))
    top = kept.values.max()
    if not np.isfinite(top):
        _reject("logits", "rows with a finite maximum (no NaN or +inf)", top)
    return kept


def _kth_largest(values: np.ndarray, k: int) -> float:
    return float(_top_k_candidates(values, k)[1].min())


# --- Top-p ------------------------------------------------------------------------------------


def _top_p_listed(kept: _Listed, cut: float, keep_min: int) -> _Listed:
    ascending = np.sort(kept.values)  # (n,)
    ascending_mass = np.exp(ascending - ascending[-1])  # (n,) float32
    total = float(np.add.reduce(ascending_mass, dtype=np.float64))
    removed = min(_prefix_within(ascending_mass, cut * total), ascending.shape[0] - keep_min)
    return kept.at_least(ascending[removed])  # ties with the smallest survivor survive


def _top_p_row(row: _Row, cut: float, keep_min: int) -> _AtLeast:
    """Top-p over a whole row without sorting it: see the module docstring."""
    values, mass = row.values, row.mass
    removable = cut * mass.total  # a token goes when the mass at or below it is <= this
    # Estimate from the sorted subsample how many of its tokens the removed tail holds.
    sample = row.sample
    sample.sort()  # (S,) ascending
    sample_mass = mass.of(sample)  # (S,)
    scale = values.shape[0] / sample.shape[0]
    guess = _prefix_within(sample_mass, removable / scale)
    # Its standard error in ranks: the estimated tail mass varies with the sampled tokens' masses
    # (no error when the subsample is the whole row). It is computed relative to the boundary's
    # mass, which is >= every tail mass: each ratio is in [0, 1], so the sum of squares stays
    # <= S whatever the logits' offset or scale (squared masses overflow float32 from e^44).
    boundary_mass = sample_mass[min(guess, sample.shape[0] - 1)]
    spread = 2.0
    if scale > 1.0 and guess and boundary_mass > 0.0:
        tail = sample_mass[:guess] / boundary_mass  # (guess,) in [0, 1]
        spread += 3.0 * math.sqrt(float(np.dot(tail, tail)) * (1.0 - 1.0 / scale))
    while True:
        low_rank, high_rank = guess - int(spread), guess + int(spread)
        low = sample[low_rank] if low_rank >= 0 else -np.inf
        # With few tokens above the band, take them into it rather than leave them above it.
        few_above = (sample.shape[0] - high_rank) * scale < _FEW
        high = np.inf if few_above else sample[high_rank]
        # The band [low, high] is closed at both ends, so equal logits stay together.
        at_least_low = values >= low if low > -np.inf else None  # (V,)
        in_band = at_least_low
        if high < np.inf:
            in_band = values <= high if in_band is None else in_band & (values <= high)
        band = values.copy() if in_band is None else values.compress(in_band)  # (n,)
        band.sort()  # ascending
        band_mass = mass.of(band)  # (n,)
        # Summed from below, not as total minus the rest: tails this small would cancel out.
        mass_below_low = 0.0 if at_least_low is None else mass.mass_where(~at_least_low)
        removed = _prefix_within(band_mass, removable - mass_below_low)
        lower = mass_below_low > removable  # the token just below the band survives
        higher = removed == band.shape[0] and high < np.inf  # the whole band goes
        if not (lower or higher):
            break
        spread = 4.0 * spread + 16.0  # the boundary is outside: widen (at worst to the row)
    if removed < band.shape[0]:
        threshold = float(band[removed])  # the smallest survivor; ties with it survive too
        first = int(band.searchsorted(threshold))
        kept_mass = mass.total - mass_below_low - float(np.add.reduce(band_mass[:first]))
    else:  # nothing passes the mass rule: only min_tokens_to_keep survive
        threshold, kept_mass = np.inf, 0.0
    if band.shape[0] - removed < keep_min and np.count_nonzero(values >= threshold) < keep_min:
        threshold = _kth_largest(values, keep_min)
        kept_mass = mass.mass_where(values >= threshold)
    return _AtLeast(threshold, kept_mass)


def _prefix_within(weights: np.ndarray, budget: float) -> int:
    """How many leading weights have a running sum <= budget.

    Sums whole blocks first (a cumulative sum costs ~4 ns per element here, a block sum ~0.1).
    """
    whole = weights.shape[0] // _BLOCK * _BLOCK if weights.shape[0] >= 4 * _BLOCK else 0
    passed = 0.0
    if whole:
        block_sums = weights[:whole].reshape(-1, _BLOCK) @ _ones_block()  # (whole / BLOCK,)
        block_cdf = np.add.accumulate(block_sums, dtype=np.float64)
        block = int(block_cdf.searchsorted(budget, side="right"))  # blocks wholly within budget
        if block < block_cdf.shape[0]:
            start, passed = block * _BLOCK, (float(block_cdf[block - 1]) if block else 0.0)
            inner = np.add.accumulate(weights[start : start + _BLOCK], dtype=np.float64)
            return start + int(inner.searchsorted(budget - passed, side="right"))
        passed = float(block_cdf[-1])
    rest = np.add.accumulate(weights[whole:], dtype=np.float64)
    return whole + int(rest.searchsorted(budget - passed, side="right"))


# --- Min-p ------------------------------------------------------------------------------------


def _min_p_listed(kept: _Listed, min_p: float, keep_min: int) -> _Listed:
    weights = np.exp(kept.values - kept.values.max())  # (n,) float32
    probs = weights / np.float32(np.add.reduce(weights, dtype=np.float64))
    passing = probs >= np.float32(min_p) * probs.max()  # an up-set of the logits
    threshold = kept.values[passing].min()
    if np.count_nonzero(passing) < keep_min:
        threshold = min(threshold, _kth_largest(kept.values, keep_min))
    return kept.at_least(threshold)


def _min_p_row(row: _Row, kept: _AtLeast, min_p: float, keep_min: int) -> _AtLeast:
    values, mass = row.values, row.mass
    kept_mass = mass.total if kept.mass is None else kept.mass
    survivors = values >= kept.threshold  # (V,)
    probs = mass.exp / np.float32(kept_mass)  # (V,) survivors' probabilities (others unused)
    passing = survivors & (probs >= np.float32(min_p) * probs.max())  # an up-set of the logits
    threshold = float(np.where(passing, values, np.inf).min())
    if np.count_nonzero(passing) < keep_min:
        threshold = min(threshold, _kth_largest(values, keep_min))
    return _AtLeast(threshold, mass.mass_where(values >= threshold))


# --- Typical-p (sorts the row, like transformers) ---------------------------------------------


def _typical(row: _Row, kept: _Listed | _AtLeast, typical_p: float, keep_min: int) -> _Listed:
    scores = np.full(row.raw.shape, -np.inf, dtype=np.float32)  # (V,)
    if isinstance(kept, _Listed):
        scores[kept.indices] = kept.values
    else:
        np.copyto(scores, row.values, where=row.values >= kept.threshold)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted = scores - scores.max()
        log_probs = shifted - np.float32(np.log(np.exp(shifted).sum(dtype=np.float64)))
        probs = np.exp(log_probs)
        entropy = -np.nansum(log_probs * probs)
        surprise_gap = np.abs(-log_probs - entropy)  # (V,) inf for removed tokens
    order = np.argsort(surprise_gap, kind="stable")  # (V,)
    gaps = surprise_gap[order]
    cumulative = np.cumsum(probs[order], dtype=np.float64).astype(np.float32)
    last = min(int(np.count_nonzero(cumulative < np.float32(typical_p))), scores.shape[0] - 1)
    keep_sorted = gaps <= gaps[last]
    keep_sorted[:keep_min] = True
    keep = np.zeros(scores.shape, dtype=bool)
    keep[order] = keep_sorted
    indices = np.flatnonzero(keep & (scores > -np.inf))
    return _Listed(indices, scores[indices])


# --- Drawing ----------------------------------------------------------------------------------


def _inverse_cdf(cumulative: np.ndarray, u: float) -> int:
    """Index of the first entry whose cumulative weight exceeds u (never a zero-weight tail)."""
    index = int(cumulative.searchsorted(u, side="right"))
    if index < cumulative.shape[0]:
        return index
    return int(cumulative.searchsorted(cumulative[-1]))  # u rounded up to the total


def _draw_blocks(padded: np.ndarray, block_cdf: np.ndarray, rng: np.random.Generator) -> int:
    """One index drawn with probability proportional to `padded`: a block, then a token in it."""
    block = _inverse_cdf(block_cdf, rng.random() * block_cdf[-1])
    token_cdf = np.add.accumulate(padded[block * _BLOCK : (block + 1) * _BLOCK], dtype=np.float64)
    return block * _BLOCK + _inverse_cdf(token_cdf, rng.random() * token_cdf[-1])


def _draw(row: _Row, kept: _Listed | _AtLeast, rng: np.random.Generator) -> int:
    if isinstance(kept, _Listed):
        cdf = np.add.accumulate(np.exp(kept.values - kept.values.max()), dtype=np.float64)
        return int(kept.indices[_inverse_cdf(cdf, rng.random() * cdf[-1])])
    mass = row.mass
    if kept.mass is None or kept.mass >= _MIN_ACCEPTANCE * mass.total:
        # Draw from the whole row until the token survives: exactly the survivors' distribution.
        for _ in range(_MAX_REDRAWS):
            token = _draw_blocks(mass.padded, mass.block_cdf, rng)
            if row.values[token] >= kept.threshold:
                return token
    weights = np.zeros_like(mass.padded)  # (blocks * BLOCK,)
    np.copyto(weights[: row.values.shape[0]], mass.exp, where=row.values >= kept.threshold)
    block_sums = weights.reshape(-1, _BLOCK) @ _ones_block()  # (blocks,)
    return _draw_blocks(weights, np.add.accumulate(block_sums, dtype=np.float64), rng)
