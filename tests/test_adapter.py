"""Adapter bundles (LoRA, export/adapter.py + runtime/adapters.py) against peft.

Tiny random Llama and Qwen2 GGUFs (tests/gguf_models.py) are loaded by transformers, given a peft
LoRA with random non-zero factors on all seven projections (r 4, alpha 8), saved, exported as
adapter bundles and run by the runtime on the base converted into a cache under tmp_path:
logits and greedy continuations against peft's merged model; the base's slot graph without an
adapter against the plain graph; two adapters sharing one base session; the errors (missing or
wrong base, corrupted adapter, bad controls); metadata controls and `prompt_prefix`; the
memorisation index; discovery by the app's registry.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import runtime
from convert import flagship
from export.adapter import export_adapter
from export.cli import main
from runtime.bundle import BundleError, ChecksumError, read_manifest
from runtime.models import CausalLM
from runtime.sessions import shared_session
from tests.gguf_models import write_tiny_gguf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPTS = ["In the beginning God created the heaven", "The capital of France is"]
NEW_TOKENS = 8
CONTROLS = {
    "translation": {
        "kind": "choice",
        "values": {
            "KJV": "[s:translation]KJV[e:translation] ",
            "WEB": "[s:translation]WEB[e:translation] ",
        },
    },
    "book": {"kind": "choice", "values": {"Psalms": "[s:book]Psalms[e:book] "}},
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """$SCRIPTORIUM_CACHE in a temporary folder for the whole module."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SCRIPTORIUM_CACHE", str(folder))
        yield folder


def reference(gguf: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    ).eval()


def write_peft(gguf: Path, out: Path, seed: int) -> Path:
    """A peft LoRA (r 4, alpha 8, all seven modules) with random non-zero A and B, saved."""
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=MODULES, init_lora_weights=False)
    model = peft.get_peft_model(reference(gguf), config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    model.save_pretrained(str(out))
    return out


def merged(gguf: Path, peft_dir: Path):
    return peft.PeftModel.from_pretrained(reference(gguf), str(peft_dir)).merge_and_unload().eval()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, cache):
    """(architecture, quant, seed) -> (gguf, peft dir, adapter bundle), made once."""
    made = {}

    def make(architecture: str, quant: str, seed: int = 0):
        key = (architecture, quant, seed)
        if key not in made:
            root = tmp_path_factory.mktemp(f"{architecture}-{quant}-{seed}")
            gguf = root.parent / f"{architecture}-{quant}.gguf"
            if not gguf.exists() and quant == "mixed":  # q|k|v and gate|up not fusable
                overrides = {"attn_v": "Q8_0", "ffn_up": "Q8_0"}
                write_tiny_gguf(gguf, architecture, "F32", overrides=overrides)
            elif not gguf.exists():
                write_tiny_gguf(gguf, architecture, quant)
            peft_dir = write_peft(gguf, root / "peft", seed)
            export_adapter(peft_dir, gguf, root / "adapter", name=f"tiny-{seed}", parity=False)
            made[key] = gguf, peft_dir, root / "adapter"
        return made[key]

    return make


def _logits(model: CausalLM, ids: list[int]) -> np.ndarray:
    return model.all_logits(np.array([ids], dtype=np.int64), np.ones((1, len(ids)), np.int64))[0]


@pytest.mark.parametrize(
    ("architecture", "quant"),
    [("llama", "F32"), ("qwen2", "F32"), ("llama", "Q4_1"), ("qwen2", "Q4_0"), ("llama", "mixed")],
)
def test_adapter_matches_peft_merged_model(tiny, architecture, quant):
    gguf, peft_dir, bundle = tiny(architecture, quant)
    gen = runtime.load(bundle, threads=1)
    slots = gen.manifest.adapter.base.lora_slots
    fused = "lora.0.q_proj+k_proj+v_proj" in slots
    assert fused == (quant != "mixed") and ("lora.0.k_proj" in slots) == (not fused)
    reference_model = merged(gguf, peft_dir)
    config = runtime.GenerationConfig(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
    )
    for prompt in PROMPTS:
        ids = gen.encode_prompt(prompt)
        with torch.no_grad():
            expected = reference_model(torch.tensor([ids])).logits[0].numpy()
            tokens = reference_model.generate(
                torch.tensor([ids]),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=0,
            )[0, len(ids) :].tolist()
        ours = _logits(gen.model, ids)
        scale = float(np.abs(expected).max())
        if quant == "F32":
            assert np.abs(ours - expected).max() < 1e-4 * scale
            assert gen.generate(prompt, config)[0].token_ids == tokens
        else:  # int8 activations (accuracy level 4), as the base's own parity (test_gguf.py)
            assert np.abs(ours - expected).max() < 0.1 * scale
            top5 = np.argsort(-expected, axis=-1)[:, :5]  # (T, 5)
            assert all(pick in row for pick, row in zip(ours.argmax(-1), top5))


@pytest.mark.parametrize(("architecture", "quant"), [("llama", "F32"), ("qwen2", "Q4_0")])
def test_empty_slots_are_the_plain_base(tiny, architecture, quant):
    """The slot graph without an adapter gives the plain graph's logits exactly; with the
    adapter they differ (the adapter does something)."""
    _, _, bundle = tiny(architecture, quant)
    gen = runtime.load(bundle, threads=1)
    base = runtime.load(gen.directory, threads=1)
    assert base.manifest.graphs["decoder"].file == "model.onnx"
    slots = CausalLM(gen.model.runner.session, base.manifest)
    ids = base.encode_prompt(PROMPTS[0])
    plain = _logits(base.model, ids)
    np.testing.assert_array_equal(_logits(slots, ids), plain)
    assert np.abs(_logits(gen.model, ids) - plain).max() > 0.1


def test_two_adapters_share_one_base_session(tiny):
    gguf, first_peft, first = tiny("llama", "F32", seed=0)
    _, second_peft, second = tiny("llama", "F32", seed=1)
    one, two = runtime.load(first, threads=1), runtime.load(second, threads=1)
    assert one.directory == two.directory
    assert one.model.runner.session is two.model.runner.session
    # Both adapters' loops may call the shared session at once: it does not spin.
    options = one.model.runner.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    ids = one.encode_prompt(PROMPTS[1])
    for gen, peft_dir in ((one, first_peft), (two, second_peft)):
        with torch.no_grad():
            expected = merged(gguf, peft_dir)(torch.tensor([ids])).logits[0].numpy()
        assert np.abs(_logits(gen.model, ids) - expected).max() < 1e-4 * np.abs(expected).max()
    assert np.abs(_logits(one.model, ids) - _logits(two.model, ids)).max() > 0.1
    # The batching engine runs the adapter too: the same tokens as the plain loop.
    config = runtime.GenerationConfig(max_new_tokens=6, min_new_tokens=6, do_sample=False)
    batched = runtime.load(second, threads=1, batching=True)
    assert batched.model.runner.session is two.model.runner.session
    for prompt in PROMPTS:
        expected = two.generate(prompt, config)[0].token_ids
        assert batched.generate(prompt, config)[0].token_ids == expected


def test_cli_writes_an_adapter_with_its_parity_report(tiny, tmp_path, capsys):
    gguf, peft_dir, _ = tiny("qwen2", "F32")
    out = tmp_path / "cli-adapter"
    assert main(["adapter", str(peft_dir), str(out), "--base", str(gguf), "--name", "cli"]) == 0
    assert "wrote cli (adapter on qwen2-F32)" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == {"adapter.onnx_adapter", "README.md"}
    spec = manifest["adapter"]
    assert spec["base"]["sha256"] == runtime.bundle.sha256_of(gguf)
    assert (spec["rank"], spec["alpha"], spec["scaling"], spec["targets"]) == (4, 8, 2.0, MODULES)
    parity = manifest["parity"]
    assert parity["max_abs_logit_diff"] < 1e-4 * parity["max_abs_logit"]
    assert parity["greedy_identical"] == "4 / 4" and parity["top1_agreement"] == 1.0
    assert spec["base"]["sha256"] in (out / "README.md").read_text()


def test_missing_base_names_it_and_the_command(tiny, monkeypatch, tmp_path):
    gguf, _, bundle = tiny("llama", "F32")
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "empty"))
    sha = runtime.bundle.sha256_of(gguf)
    with pytest.raises(BundleError, match=f"'llama-F32'.*{sha}.*python -m convert.flagship"):
        runtime.load(bundle)
    # The app lists it with the reason instead of failing.
    from ui.registry import ModelRegistry

    registry = ModelRegistry.discover([bundle.parent])
    assert "adapter" in registry.problems and sha in registry.problems["adapter"]
    # A base converted beside the adapter (a Space's models/) is found there.
    models = tmp_path / "models"
    models.mkdir()
    from convert.gguf import export_gguf

    export_gguf(gguf, models / "base", parity=False)
    shutil.copytree(bundle, models / "adapter")
    gen = runtime.load(models / "adapter", threads=1)
    assert gen.directory == models / "base"


def test_wrong_base_and_corrupted_adapter(tiny, tmp_path):
    _, _, bundle = tiny("llama", "F32")
    other = write_tiny_gguf(tmp_path / "other.gguf", "llama", "F32", seed=5)
    with pytest.raises(BundleError, match="was trained on 'llama-F32'.*converted from a GGUF"):
        runtime.load(bundle, base=flagship.ensure_bundle(other))
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for path in bundle.iterdir():
        (damaged / path.name).write_bytes(path.read_bytes())
    data = bytearray((damaged / "adapter.onnx_adapter").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (damaged / "adapter.onnx_adapter").write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="adapter.onnx_adapter"):
        runtime.load(damaged)


def test_a_base_cached_without_slots_is_rebuilt(tiny, tmp_path, monkeypatch):
    gguf, _, bundle = tiny("qwen2", "Q4_0")
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "old-cache"))
    from convert.gguf import export_gguf

    old = flagship.cache_root() / runtime.bundle.sha256_of(gguf) / gguf.stem
    export_gguf(gguf, old, parity=False, lora_slots=False)  # as converted before adapters
    with pytest.raises(BundleError, match="no LoRA slot graph"):
        runtime.load(bundle)
    assert not flagship.is_complete(old)
    assert flagship.ensure_bundle(gguf) == old and flagship.is_complete(old)
    assert runtime.load(bundle, threads=1).generate(
        "In", runtime.GenerationConfig(max_new_tokens=2)
    )


def test_metadata_controls_and_prompt_prefix(tiny, tmp_path):
    gguf, peft_dir, _ = tiny("llama", "F32")
    out = tmp_path / "controlled"
    training = ["and the earth was without form and void and darkness was upon the face"]
    export_adapter(
        peft_dir,
        gguf,
        out,
        name="metadata",
        controls=CONTROLS,
        prompt_prefix="[s:text]",
        generation_defaults={"temperature": 0.7, "do_sample": True},
        training_texts=training,
        corpus="a test sentence",
        parity=False,
    )
    gen = runtime.load(out, threads=1)
    assert gen.name == "metadata" and gen.controls == {
        "translation": ["KJV", "WEB"],
        "book": ["Psalms"],
    }
    assert gen.manifest.chat.template  # the base's keys stay
    assert gen.defaults.temperature == 0.7
    encode = gen.tokenizer.encode
    expected = "[s:translation]KJV[e:translation] [s:book]Psalms[e:book] [s:text]In the"
    chosen = {"book": "Psalms", "translation": "KJV"}
    assert gen.encode_prompt("In the", chosen) == encode(expected, add_special_tokens=False).ids
    plain = encode("[s:text]In the", add_special_tokens=False).ids
    assert gen.encode_prompt("In the") == plain
    with pytest.raises(ValueError, match=r"`translation` must be one of \['KJV', 'WEB'\]"):
        gen.generate("In the", controls={"translation": "NIV"})
    # The memorisation meter reads the adapter's own index.
    assert gen.memorised(training[0]).share == 1.0
    assert gen.memorised("nothing here was in the training text at all, not one word").share == 0
    base = runtime.load(gen.directory, threads=1)
    with pytest.raises(ValueError, match="training n-gram index"):
        base.memorised(training[0])
    # The app's registry lists it as a causal LM and chat model with its controls as pickers.
    from ui.registry import ModelRegistry

    registry = ModelRegistry.discover([tmp_path])
    assert "controlled" in registry.causal_lms() and "controlled" in registry.chat_models()
    controls = registry.controls_of("controlled")
    assert {name: control.to_json() for name, control in controls.items()} == CONTROLS


@pytest.mark.parametrize(
    ("controls", "message"),
    [
        ({"translation": {"kind": "choice", "values": {"KJV": 3}}}, "must map to a non-empty str"),
        ({"translation": {"kind": "slider", "values": {"KJV": "x"}}}, "`kind` must be one of"),
        ({"translation": {"kind": "choice", "values": {}}}, "non-empty object"),
        ({"ratio": {"kind": "numeric", "values": {"half": "x"}}}, "must be numbers"),
    ],
)
def test_bad_controls_are_refused(tiny, tmp_path, controls, message):
    gguf, peft_dir, _ = tiny("llama", "F32")
    with pytest.raises(ValueError, match=message):
        export_adapter(peft_dir, gguf, tmp_path / "bad", controls=controls, parity=False)
    assert not (tmp_path / "bad").exists()


def test_shared_sessions_are_per_graph_and_settings(tiny):
    _, _, bundle = tiny("llama", "F32")
    manifest = read_manifest(bundle)
    base = runtime.bundle.adapter_base(bundle, manifest)
    graph = base / manifest.graphs["decoder"].file
    assert shared_session(graph, threads=1) is shared_session(graph, threads=1)
    assert shared_session(graph, threads=1) is not shared_session(graph, threads=2)
    assert os.path.basename(graph) == "model_lora.onnx"


def test_every_run_path_feeds_the_adapter(tiny):
    """In-place KV buffers (IO binding, factors bound once), IO binding per call (factors bound
    each call) and plain `session.run` (the adapter active in the run options) agree."""
    _, _, bundle = tiny("qwen2", "F32")
    gen = runtime.load(bundle, threads=1)
    assert gen.model.shared_cache
    bound = runtime.load(bundle, threads=1, io_binding=True).model
    assert not bound.shared_cache and bound.runner.io_binding
    decoder = dataclasses.replace(gen.manifest.graphs["decoder"], kv_cache="separate")
    separate = dataclasses.replace(gen.manifest, graphs={"decoder": decoder})
    plain = CausalLM(gen.model.runner.session, separate, False, gen.model.adapter)
    assert not plain.shared_cache and not plain.runner.io_binding
    ids = gen.encode_prompt(PROMPTS[0])
    expected = _logits(gen.model, ids)
    for model in (bound, plain):
        np.testing.assert_allclose(_logits(model, ids), expected, atol=1e-5)
        logits, state = model.start(np.array([ids]), np.ones((1, len(ids)), np.int64))
        step, _ = model.step(np.array([int(logits[0].argmax())]), state)
        reference, state = gen.model.start(np.array([ids]), np.ones((1, len(ids)), np.int64))
        reference_step, _ = gen.model.step(np.array([int(reference[0].argmax())]), state)
        np.testing.assert_allclose(step, reference_step, atol=1e-5)
