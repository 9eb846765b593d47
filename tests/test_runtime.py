"""The runtime's own behaviour: sampling reproducibility, streaming, stop strings, controls,
bundle checks, bad input, and that it runs without torch or transformers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from optimum.exporters.onnx import main_export
from tokenizers import Tokenizer

import runtime
from runtime.bundle import read_manifest, sha256_of
from runtime.manifest import Manifest
from runtime.text import IncrementalDecoder
from tests.tiny_models import PROMPTS, make_checkpoint

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "models"
SAMPLE = runtime.GenerationConfig(max_new_tokens=12, do_sample=True, top_k=50, top_p=0.95, seed=3)
# Control values mapped to ordinary tokens of the tiny tokenizer, so the model knows their ids.
CONTROLS = {
    "section": {"kind": "choice", "values": {"law": "Hello", "gospels": "Why"}},
    "length_ratio": {"kind": "numeric", "values": {"0.5": "The", "1.0": "Let"}},
}


def write_bundle(source: Path, out: Path, controls: dict) -> Path:
    """A bundle per docs/bundle.md from a plain optimum export: manifest with checksums."""
    shutil.copytree(source, out)
    manifest = read_manifest(out).to_json()
    manifest.pop("inferred")
    manifest["controls"] = controls
    manifest["files"] = {
        path.name: {"sha256": sha256_of(path), "size": path.stat().st_size}
        for path in sorted(out.iterdir())
        if path.suffix in (".onnx", ".json") and path.name != "manifest.json"
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gpt2")
    make_checkpoint("gpt2", root / "checkpoint")
    main_export(
        str(root / "checkpoint"),
        output=root / "onnx",
        task="text-generation-with-past",
        do_validation=False,
    )
    return root / "onnx"


@pytest.fixture(scope="module")
def bundle(exported, tmp_path_factory) -> Path:
    return write_bundle(exported, tmp_path_factory.mktemp("bundle") / "tiny", CONTROLS)


@pytest.fixture(scope="module")
def gen(bundle):
    return runtime.load(bundle, threads=1)


def test_same_seed_same_text_and_different_seed_differs(gen):
    first = gen.generate(PROMPTS[0], SAMPLE)[0]
    assert gen.generate(PROMPTS[0], SAMPLE)[0].token_ids == first.token_ids
    others = {
        tuple(gen.generate(PROMPTS[0], SAMPLE.replace(seed=s))[0].token_ids) for s in range(6)
    }
    assert len(others) > 1


def test_num_return_sequences_are_prompt_major(gen):
    config = SAMPLE.replace(num_return_sequences=3)
    outs = gen.generate(PROMPTS[:2], config)
    assert [o.prompt_index for o in outs] == [0, 0, 0, 1, 1, 1]
    assert all(o.finish_reason in ("eos", "length") for o in outs)
    assert all(len(o.logprobs) == len(o.token_ids) for o in outs)
    assert all(lp <= 0 for o in outs for lp in o.logprobs)


def test_stream_matches_generate_and_reports_alternatives(gen):
    config = runtime.GenerationConfig(max_new_tokens=12)
    events = list(gen.stream(PROMPTS[2], config))
    out = gen.generate(PROMPTS[2], config)[0]
    assert "".join(e.text for e in events) == out.text
    assert [e.token_id for e in events] == out.token_ids
    assert events[-1].finish_reason == out.finish_reason
    for event in events:
        probs = [p for _, p in event.alternatives]
        assert len(probs) == 5 and probs == sorted(probs, reverse=True)
        # greedy picks the most likely token, whose probability is the first alternative's
        assert np.isclose(np.exp(event.logprob), probs[0], rtol=1e-4)


@pytest.mark.parametrize("batching", [False, True])
def test_stopping_the_stream_stops_the_work(bundle, batching, monkeypatch):
    import time

    gen = runtime.load(bundle, threads=1, batching=batching)
    assert (gen.engine is not None) == batching
    calls = []
    original = gen.model.step
    monkeypatch.setattr(gen.model, "step", lambda *a: calls.append(1) or original(*a))
    stream = gen.stream(PROMPTS[0], runtime.GenerationConfig(max_new_tokens=50, min_new_tokens=50))
    for count, _ in enumerate(stream, 1):
        if count == 3:
            break
    stream.close()
    if not batching:
        assert len(calls) == 2  # two steps after the prefill, nothing after the consumer left
        return
    time.sleep(0.5)  # the engine's loop notices at its next step that nobody reads
    stopped_at = len(calls)
    time.sleep(0.5)
    assert len(calls) == stopped_at < 49  # it stopped early, and stays stopped


@pytest.mark.parametrize("source", ["tiny byte-level BPE", "translator", "rewriter"])
@pytest.mark.parametrize(
    "text",
    [
        "Señor, ¿dónde está el café? 😀 naïve ½",
        "In the beginning God created the heaven and the earth.  Two  spaces, 'quotes' isn't.",
        "😀😀 ½½ ¿¿",
    ],
)
def test_incremental_decoder_releases_the_full_decoding_in_whole_characters(exported, source, text):
    path = exported if source == "tiny byte-level BPE" else MODELS / source / "int8"
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    ids = tokenizer.encode(text, add_special_tokens=False).ids * 3  # a long-ish generation
    decoder = IncrementalDecoder(tokenizer)
    pieces = [decoder.add(i) for i in ids] + [decoder.flush()]
    assert "".join(pieces) == decoder.text == tokenizer.decode(ids, skip_special_tokens=True)
    assert not any("\ufffd" in piece for piece in pieces)
    assert len(decoder.ids[decoder.prefix :]) < 10  # each step decodes a short window


def test_stop_string_cuts_text_in_generate_and_stream(gen):
    config = runtime.GenerationConfig(max_new_tokens=16)
    full = gen.generate(PROMPTS[4], config)[0].text
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip(), "the tiny model's output should contain a usable stop string"
    out = gen.generate(PROMPTS[4], config.replace(stop=(stop,)))[0]
    assert out.finish_reason == "stop"
    assert out.text == full[: full.index(stop)]
    streamed = "".join(e.text for e in gen.stream(PROMPTS[4], config.replace(stop=(stop,))))
    assert streamed == out.text


def test_controls_are_prefixed_as_in_training(gen):
    assert gen.controls == {"section": ["law", "gospels"], "length_ratio": [0.5, 1.0]}
    config = runtime.GenerationConfig(max_new_tokens=8)
    with_control = gen.generate(" is", config, controls={"section": "law"})[0]
    spelled_out = gen.generate("Hello is", config)[0]
    assert with_control.token_ids == spelled_out.token_ids
    # manifest order (section, then length_ratio), nearest numeric value (0.8 -> "1.0")
    assert gen.encode_prompt("x", {"length_ratio": 0.8, "section": "gospels"}) == (
        gen.tokenizer.encode("WhyLetx", add_special_tokens=False).ids
    )


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(top_p=1.5, do_sample=True), r"`top_p` must be in \(0, 1\], got 1.5"),
        (dict(top_p=0.0, do_sample=True), r"`top_p` must be in \(0, 1\], got 0.0"),
        (dict(top_k=-1), r"`top_k` must be an int >= 0, got -1"),
        (
            dict(temperature=0.0, do_sample=True),
            r"`temperature` must be in \[0.001, 100\], got 0.0",
        ),
        (
            dict(num_beams=2, num_return_sequences=3),
            r"`num_return_sequences` must be <= `num_beams`",
        ),
        (dict(max_new_tokens=0), r"`max_new_tokens` must be an int >= 1, got 0"),
        (dict(repetition_penalty=0.0), r"`repetition_penalty` must be in \[0.01, 100\], got 0.0"),
        (dict(early_stopping="sometimes"), r"`early_stopping` must be True, False or 'never'"),
    ],
)
def test_bad_settings_raise_clear_errors(gen, settings, message):
    with pytest.raises(ValueError, match=message):
        gen.generate(PROMPTS[0], runtime.GenerationConfig(**settings))


def test_bad_prompts_and_controls_raise_clear_errors(gen):
    config = runtime.GenerationConfig(max_new_tokens=4)
    with pytest.raises(ValueError, match="`prompt` must not be empty"):
        gen.generate("", config)
    with pytest.raises(ValueError, match=r"`prompt` is \d+ tokens; the model's context is 128"):
        gen.generate("word " * 200, config)
    with pytest.raises(ValueError, match="unknown control 'genre'"):
        gen.generate("x", config, controls={"genre": "metal"})
    with pytest.raises(ValueError, match=r"`section` must be one of \['gospels', 'law'\]"):
        gen.generate("x", config, controls={"section": "poetry"})


def test_context_limit_ends_generation_with_reason_context(gen):
    prompt = "the"
    while len(gen.encode_prompt(prompt + " the")) < 100:
        prompt += " the"
    length = len(gen.encode_prompt(prompt))
    out = gen.generate(prompt, runtime.GenerationConfig(max_new_tokens=100, min_new_tokens=100))[0]
    assert len(out.token_ids) == 128 - length
    assert out.finish_reason == "context"


@pytest.mark.parametrize("spinning", [False, True])
def test_spinning_is_off_unless_asked_and_does_not_change_outputs(gen, bundle, spinning):
    spun = runtime.load(bundle, threads=2, spinning=spinning)
    options = spun.model.runner.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == str(int(spinning))
    config = SAMPLE.replace(seed=3)
    assert (
        spun.generate(PROMPTS[0], config)[0].token_ids
        == gen.generate(PROMPTS[0], config)[0].token_ids
    )


def test_corrupted_file_fails_checksum_before_any_session(bundle, tmp_path):
    broken = shutil.copytree(bundle, tmp_path / "broken")
    data = bytearray((broken / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (broken / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(runtime.ChecksumError, match="checksum mismatch for .*model.onnx"):
        runtime.load(broken)


def test_missing_graph_and_missing_directory(bundle, exported, tmp_path):
    missing = shutil.copytree(bundle, tmp_path / "missing")
    (missing / "model.onnx").unlink()
    with pytest.raises(FileNotFoundError, match="bundle file missing: .*model.onnx"):
        runtime.load(missing)
    plain = shutil.copytree(exported, tmp_path / "plain")
    (plain / "model.onnx").unlink()
    with pytest.raises(FileNotFoundError, match="graph missing: .*model.onnx"):
        runtime.load(plain)
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        runtime.load(tmp_path / "nowhere")


def test_precision_directory_picks_a_bundle(bundle, tmp_path):
    shutil.copytree(bundle, tmp_path / "family" / "fp32")
    manifest = json.loads((tmp_path / "family" / "fp32" / "manifest.json").read_text())
    assert runtime.load(tmp_path / "family").manifest.to_json()["files"] == manifest["files"]
    with pytest.raises(ValueError, match=r"`precision` must be one of \['fp32'\]"):
        runtime.load(tmp_path / "family", precision="int4")


BLOCK_TORCH = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "optimum"):
            raise ImportError(f"blocked: {name}")

sys.meta_path.insert(0, Block())
"""


def test_runtime_runs_without_torch_or_transformers(bundle):
    script = BLOCK_TORCH + textwrap.dedent(
        f"""
        import runtime
        gen = runtime.load({str(bundle)!r})
        out = gen.generate("In the beginning", runtime.GenerationConfig(
            max_new_tokens=5, do_sample=True, top_k=20, top_p=0.9, seed=0))
        assert len(out[0].token_ids) >= 1
        assert not any(m.split(".")[0] in ("torch", "transformers") for m in sys.modules)
        print("torch-free ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "torch-free ok" in result.stdout


def test_gguf_conversion_runs_without_torch_or_transformers(tmp_path):
    """The flagship's path: a GGUF converted into the cache (convert/flagship.py,
    convert/gguf.py) and generated from, with torch, transformers and optimum unimportable."""
    pytest.importorskip("convert.gguf", reason="convert/gguf.py (the importer) missing")
    from tests.llm_fixtures import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "tiny.Q4_1.gguf", "Q4_1")
    script = BLOCK_TORCH + textwrap.dedent(
        f"""
        import runtime
        from convert.flagship import ensure_bundle
        gen = runtime.load(ensure_bundle({str(gguf)!r}))
        out = gen.generate("In the beginning", runtime.GenerationConfig(
            max_new_tokens=5, min_new_tokens=5))
        assert len(out[0].token_ids) == 5
        assert not any(m.split(".")[0] in ("torch", "transformers") for m in sys.modules)
        print("torch-free conversion ok")
        """
    )
    env = {**os.environ, "SCRIPTORIUM_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "torch-free conversion ok" in result.stdout


def test_a_manifests_own_stop_strings_end_every_generation(tmp_path):
    from convert.manifest import seal

    bundle = shutil.copytree(
        Path(__file__).parent.parent / "models" / "bible-lm" / "int8", tmp_path / "lm"
    )
    config = runtime.GenerationConfig(max_new_tokens=30)
    full = runtime.load(bundle, threads=1).generate("In the beginning", config)[0].text
    word = full.split()[len(full.split()) // 2]
    manifest = json.loads((bundle / "manifest.json").read_text())
    seal(bundle, Manifest.from_json({**manifest, "stop": [word]}))
    gen = runtime.load(bundle, threads=1)
    cut = gen.generate("In the beginning", config)[0]
    assert cut.text == full[: full.index(word)] and cut.finish_reason == "stop"
    assert gen.generate("In the beginning", config.replace(stop=("zzz",)))[0].text == cut.text
