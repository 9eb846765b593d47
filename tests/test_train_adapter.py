"""The LoRA fine-tuning recipe (train/adapter/finetune.py): seed 000's metadata format and feature
dropout, the two corpora, and a real (tiny) LoRA training run through train/common.py's loop."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from export.corpus import load_verses
from train import data
from train.adapter import finetune as adapter

FIXTURES = Path(__file__).parent / "fixtures"


def test_format_passage_orders_fields_and_closes_the_text():
    passage = adapter.Passage({"translation": "KJV", "book": "Psalms", "section": "wisdom"}, "Hi.")
    assert adapter.format_passage(passage) == (
        "[s:translation]KJV[e:translation] [s:book]Psalms[e:book] [s:section]wisdom[e:section] "
        "[s:text]Hi.[e:text]"
    )
    assert adapter.format_passage(passage, kept=set()) == "[s:text]Hi.[e:text]"
    assert adapter.format_passage(passage, kept={"section", "translation"}).startswith(
        "[s:translation]KJV[e:translation] [s:section]"
    )


def test_feature_dropout_rates_follow_seed_000():
    rng = random.Random(0)
    names = ("translation", "book", "section")
    draws = [adapter.dropped_fields(names, rng) for _ in range(20_000)]
    none_kept = sum(not kept for kept in draws) / len(draws)
    # all dropped: 0.25, plus the rare case where each of the three is dropped alone (0.75 · 0.1³)
    assert none_kept == pytest.approx(0.25 + 0.75 * 0.001, abs=0.01)
    per_field = Counter(name for kept in draws for name in kept)
    for name in names:  # kept when not all dropped (0.75) and not dropped alone (0.9)
        assert per_field[name] / len(draws) == pytest.approx(0.75 * 0.9, abs=0.01)


def test_bible_passages_keep_chapters_and_translations_apart():
    rows = load_verses(data.FIXTURE)
    passages = adapter.bible_passages(rows, "train", max_words=40)
    assert passages
    assert {p.fields["translation"] for p in passages} == {"WEB", "KJV"}
    train_books = {r["book"] for r in rows if r["split"] == "train"}
    assert {p.fields["book"] for p in passages} <= train_books
    assert set(adapter.SECTION_KEYS.values()) >= {p.fields["section"] for p in passages}
    verses = {r[c] for r in rows for c in ("web", "kjv")}
    for p in passages:  # a passage goes over the limit only when it is one long verse
        assert len(p.text.split()) <= 40 or p.text in verses
    web = " ".join(p.text for p in passages if p.fields["translation"] == "WEB")
    first_web = next(r["web"] for r in rows if r["split"] == "train" and r["web"])
    assert first_web in web
    held_out = {r["book"] for r in rows if r["split"] != "train"}
    assert not held_out & {p.fields["book"] for p in passages}


def test_treasury_paragraphs_name_their_writers():
    lines = (FIXTURES / "tdavid.imp").read_text(encoding="utf-8").splitlines()
    paragraphs = adapter.treasury_paragraphs(lines)
    authors = Counter(author for _, author, _ in paragraphs)
    assert authors["C. H. Spurgeon"] >= 3  # the exposition, and a note signed "C. H. S."
    assert "Martin Luther" in authors and "Stephen Charnock" in authors
    luther = next(text for _, author, text in paragraphs if author == "Martin Luther")
    assert luther.startswith('Verse 8. "Salvation is of the Lord')
    assert "Martin Luther" not in luther and "<" not in luther  # the signature and tags are cut
    assert not any("HINTS" in text or "(1)" in text for _, _, text in paragraphs)


def test_treasury_passages_hold_out_psalms():
    lines = (FIXTURES / "tdavid.imp").read_text(encoding="utf-8").splitlines()
    passages = adapter.treasury_passages(lines, {"validation": {71}, "test": set()}, max_words=30)
    assert {p.fields["psalm"] for p in passages["train"]} == {"3"}
    assert {p.fields["psalm"] for p in passages["validation"]} == {"71"}
    assert all(set(p.fields) == {"author", "psalm"} for p in passages["train"])


def test_a_tiny_lora_trains_resumes_and_saves(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from train import common

    rows = load_verses(data.FIXTURE)
    passages = adapter.bible_passages(rows, "train")
    texts = [adapter.format_passage(p) for p in passages]
    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=raw.get_vocab_size(), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    model = adapter.with_lora(LlamaForCausalLM(config), adapter.LoRASettings(rank=2, alpha=4))
    frozen = {n: p.clone() for n, p in model.named_parameters() if not p.requires_grad}
    task = adapter.AdapterTask(tokenizer, passages, passages[:4], batch_size=4, max_tokens=48)
    settings = common.TrainConfig(steps=4, lr=1e-2, warmup=0, weight_decay=0.0, log_every=2,
                                  eval_every=2, checkpoint_every=2)  # fmt: skip
    first = common.train(model, task, settings, tmp_path, max_steps=2, progress=False, threads=1)
    assert first["step"] == 2 and not first["finished"]
    second = common.train(model, task, settings, tmp_path, resume=True, progress=False, threads=1)
    assert second["finished"]
    losses = [float(row["val_loss"]) for row in common.LossLog(tmp_path / "loss.csv").rows()]
    assert losses[-1] < losses[0]  # the adapter learned something
    for name, param in model.named_parameters():
        if name in frozen:
            assert torch.equal(param, frozen[name])  # the base never moves
    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size > 0
