"""bench.attention: the two in-place attention kernels it times compute the same attention."""

from __future__ import annotations

import numpy as np
import pytest

from bench import attention


@pytest.mark.parametrize("positions", [1, 5])
def test_both_kernels_give_the_same_attention(positions):
    outputs = {
        kernel: attention.AttentionStep(kernel, positions, 1, heads=2, head_size=8, layers=2)()
        for kernel in attention.KERNELS
    }
    first, second = outputs.values()
    assert len(first) == 2 and first[0].shape == (1, 1, 16)
    for ours, theirs in zip(first, second):
        np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    assert np.ptp(first[0]) > 0.1  # not a constant output


def test_reference_attention_matches():
    """One head, against attention computed in numpy over the cache plus the new token."""
    step = attention.AttentionStep("GroupQueryAttention", 3, 1, heads=1, head_size=8, layers=1)
    (out,) = step()
    key, value = (cache for cache, _ in step.caches)  # (1, 1, 4, 8): 3 cached + the new one
    q, k, v = (step.feeds[name][0, 0] for name in "qkv")
    keys = np.concatenate([key[0, 0, :3], k[None]])  # (4, 8)
    values = np.concatenate([value[0, 0, :3], v[None]])
    scores = keys @ q / np.sqrt(8)  # scaled by 1 / sqrt(head_size)
    weights = np.exp(scores - scores.max())
    np.testing.assert_allclose(out[0, 0], weights / weights.sum() @ values, atol=1e-5)
