"""The WDN option of seed 003's hierarchical model (`--noise S`, modeling.hierarchical.perturb):
training-time Gaussian noise on each layer's sentence vector, std S × that vector's RMS, off by
default and never in evaluation."""

from __future__ import annotations

import json

import pytest
import torch

from modeling import hierarchical as model_definition
from runtime import hierarchical_text as ht
from train.hierarchical import cli as hierarchical_cli


def test_perturb_scales_noise_by_each_vectors_rms_and_passes_gradients():
    torch.manual_seed(0)
    scales = torch.tensor([0.1, 1.0, 10.0, 100.0]).view(4, 1, 1)
    vectors = (torch.randn(4, 2, 4096) * scales).requires_grad_()
    noisy = model_definition.perturb(vectors, 0.5)
    rms = vectors.detach().pow(2).mean(-1).sqrt()  # [4, 2]
    ratio = (noisy - vectors).detach().std(-1) / rms
    assert torch.allclose(ratio, torch.full_like(ratio, 0.5), atol=0.03)
    noisy.sum().backward()
    assert torch.equal(vectors.grad, torch.ones_like(vectors))  # the scale is a constant
    assert torch.equal(model_definition.perturb(vectors, 0.0), vectors)


@torch.no_grad()
def _loss(model, batch, seed):
    torch.manual_seed(seed)
    return float(
        model(batch["source"], batch["source_mask"], batch["target"], batch["target_mask"])[0]
    )


def test_noise_changes_training_loss_only():
    charset = list("abcdefghijklmnopqrstuvwxyz .")
    config = model_definition.HierarchicalConfig(kind="sarah", charset=charset, dropout=0.0)
    model = model_definition.HierarchicalLM(config)
    vocab = ht.CharVocab(charset)
    pair = (ht.split_words("the cat sat."), ht.split_words("a dog ran."))
    batch = model_definition.collate(vocab, [pair, pair], config.word_chars)
    model.train()
    clean = _loss(model, batch, 0)
    model.config.sentence_noise = 1.0
    assert _loss(model, batch, 0) == _loss(model, batch, 0) != clean  # seeded, and perturbed
    assert _loss(model, batch, 1) != _loss(model, batch, 0)
    model.eval()
    assert _loss(model, batch, 0) == _loss(model, batch, 1)
    model.config.sentence_noise = 0.0
    assert _loss(model, batch, 0) == _loss(model, batch, 1)


def test_noise_flag_trains_and_is_saved_with_the_run(tmp_path):
    lm, ae = tmp_path / "lm", tmp_path / "ae"
    tiny = ["--tiny", "--quiet", "--steps", "3"]
    hierarchical_cli.main(["lm", *tiny, "--noise", "1.0", "--out", str(lm)])
    assert json.loads((lm / "result.json").read_text())["sentence_noise"] == 1.0
    assert model_definition.load_config(lm).sentence_noise == 1.0
    hierarchical_cli.main(["autoencoder", *tiny, "--init", str(lm), "--out", str(ae)])
    assert model_definition.load_config(ae).sentence_noise == 0.0  # off unless asked
    with pytest.raises(ValueError, match="`noise` must be >= 0, got -0.5"):
        hierarchical_cli.main(["lm", *tiny, "--noise", "-0.5", "--out", str(tmp_path / "bad")])
