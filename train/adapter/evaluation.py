"""Measuring a fine-tune against its base and against the from-scratch Bible LM (issue 23).

Covers, all through the runtime (so the numbers are the shipped bundles'):
- `bits_per_character`: held-out verses scored with `gen.score` (the text's tokens given a
  context), summed and divided by the verse's characters, so models with different tokenizers
  compare. Each model sees the context it was trained with: none for the base, the metadata
  fields then `[s:text]` for the adapter (also with no field), the section token for `bible-lm`.
- `conditioning`: seed 000's check. Samples generated from each control value (fixed seeds,
  top-p 0.95) are labelled by a classifier trained on real training text
  (train/evaluate.section_classifier: TF-IDF + logistic regression); the accuracy is the share
  labelled as requested. For sections the classifier is `bible-lm`'s (WEB training verses), so
  the two models' accuracies compare; for translations it learns KJV against WEB from the same
  training verses in both.

Does not cover: training (train/adapter/finetune.py), shipping (train/adapter/ship.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from train import evaluate

SAMPLE_SEED = 1000  # sample i of value j uses seed SAMPLE_SEED + j (as train/lm.py)


def held_out_verses(rows: list[dict], split: str = "test", count: int = 300, seed: int = 0):
    """A fixed sample of `count` verses of one held-out split that have WEB and KJV text."""
    candidates = [r for r in rows if r["split"] == split and r["web"] and r["kjv"]]
    return random.Random(seed).sample(candidates, min(count, len(candidates)))


def bits_per_character(gen, texts: Sequence[str], controls=None) -> float:
    """Total bits of `texts` under `gen` per character of `texts`. `controls` is one dict for
    every text, or a list with one dict (or None) per text."""
    if not isinstance(controls, list):
        controls = [controls] * len(texts)
    nats = sum(-gen.score(text, controls=c).total for text, c in zip(texts, controls))
    return nats / math.log(2) / sum(len(text) for text in texts)


def generate_samples(gen, requests: dict[str, dict], samples: int, new_tokens: int, stop=()):
    """`samples` texts per request name (its controls), sampled with top-p 0.95 from an empty
    prompt (as `num_return_sequences`: one seeded generator draws them all), seeded per
    request."""
    import runtime

    out = {}
    for index, (name, controls) in enumerate(requests.items()):
        config = runtime.GenerationConfig(
            max_new_tokens=new_tokens,
            do_sample=True,
            top_p=0.95,
            top_k=0,
            temperature=1.0,
            seed=SAMPLE_SEED + index,
            stop=tuple(stop),
            num_return_sequences=samples,
        )
        outs = gen.generate("", config, controls)
        out[name] = [o.text.strip() for o in outs]
    return out


def classify(samples: dict[str, list[str]], classifier) -> dict:
    """Seed 000's accuracy table of `classifier` on generated `samples` (requested → texts)."""
    classes = list(samples)
    requested = [name for name in classes for _ in samples[name]]
    texts = [text for name in classes for text in samples[name]]
    predicted = list(classifier.predict(texts)) if texts else []
    return evaluate.accuracy_table(predicted, requested, classes)


def section_classifier(rows: list[dict], section_key: Callable[[str], str], seed: int = 0):
    """`bible-lm`'s section classifier: WEB training verses labelled with their section key."""
    train = [r for r in rows if r["split"] == "train" and r["web"]]
    return evaluate.section_classifier(
        [r["web"] for r in train], [section_key(r["section"]) for r in train], seed=seed
    )


def translation_classifier(rows: list[dict], seed: int = 0):
    """KJV against WEB, from the same training verses in both translations."""
    train = [r for r in rows if r["split"] == "train" and r["web"] and r["kjv"]]
    texts = [r["web"] for r in train] + [r["kjv"] for r in train]
    labels = ["WEB"] * len(train) + ["KJV"] * len(train)
    return evaluate.section_classifier(texts, labels, seed=seed)


def real_accuracy(classifier, texts: Sequence[str], labels: Sequence[str]) -> float:
    """The classifier's accuracy on real held-out text (its ceiling on generated samples)."""
    return evaluate.accuracy_table(list(classifier.predict(list(texts))), list(labels),
                                   sorted(set(labels)))["overall"]["accuracy"]  # fmt: skip
