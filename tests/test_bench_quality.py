"""bench.quality: perplexity of export/'s int8 and int4 quantizations of a trained LM bundle."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench import quality

REPO = Path(__file__).resolve().parents[1]


def test_perplexity_of_a_known_distribution():
    vocab, rng = 7, np.random.default_rng(0)
    ids = rng.integers(0, vocab, (5, 6))  # (N, T)
    # Every position puts probability 1/2 on token 0 and spreads the rest evenly.
    logits = np.full(vocab, math.log(0.5 / (vocab - 1)), dtype=np.float32)
    logits[0] = math.log(0.5)
    expected = math.exp(
        -np.mean(np.where(ids[:, 1:] == 0, math.log(0.5), math.log(0.5 / (vocab - 1))))
    )
    got = quality.perplexity(lambda batch: np.broadcast_to(logits, (*batch.shape, vocab)), ids)
    assert got == pytest.approx(expected, rel=1e-6)


def test_windows_drop_the_tail_and_respect_the_budget():
    assert quality.windows(list(range(10)), 4, 100).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert quality.windows(list(range(10)), 4, 5).tolist() == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="at least one window of 4 tokens, got 3"):
        quality.windows([1, 2, 3], 4, 100)


def test_quality_of_the_shipped_bible_lm_on_the_fixture_slice(tmp_path):
    out = tmp_path / "quality.json"
    argv = ["--verses", str(quality.FIXTURE), "--work", str(tmp_path), "--out", str(out)]
    assert quality.main([*argv, "--tokens", "1024"]) == 0
    result = json.loads(out.read_text())
    ppl, change = result["perplexity"], result["change_pct"]
    assert change["fp32"] == 0.0
    # A trained model predicts held-out verses far better than chance (vocabulary 8,000), and
    # its quantized graphs stay close to it.
    assert 5 < ppl["fp32"] < 500
    assert abs(change["int8"]) < 1.0 and abs(change["int4"]) < 5.0
    assert ppl["int8"] != ppl["fp32"] and ppl["int4"] != ppl["fp32"]  # really quantized
    assert result["tokens_scored"] == 1024 // 128 * 127  # 8 windows of the 128-token context


def test_quality_rejects_a_bundle_that_is_not_fp32(tmp_path):
    with pytest.raises(ValueError, match="causal-lm bundle in fp32, got causal-lm in int8"):
        quality.graphs(REPO / "models" / "bible-lm" / "int8", tmp_path)


def test_missing_verses_file_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m train.data"):
        quality.held_out_ids(tmp_path / "none.tsv", "test", Path("unused"))
