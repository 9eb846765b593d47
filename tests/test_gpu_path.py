"""The GPU path (docs/GPU.md): execution providers are checked once, `--device` reaches every
loaded model, and the device-bound KV cache (IO binding, OrtValues fed back step to step) gives
the same tokens as the default path. On CPU the device path runs with CPUExecutionProvider and
`io_binding=True`; the CUDA tests run only where onnxruntime offers CUDAExecutionProvider."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import runtime
from runtime.models import SHARED_BUFFER
from tests.tiny_models import PROMPTS
from ui.registry import ModelRegistry

MODELS = Path(__file__).resolve().parent.parent / "models"
CUDA = "CUDAExecutionProvider" in ort.get_available_providers()
needs_cuda = pytest.mark.skipif(
    not CUDA, reason="onnxruntime offers no CUDAExecutionProvider here (needs .[gpu] and a GPU)"
)
CONFIGS = [
    runtime.GenerationConfig(max_new_tokens=10),
    runtime.GenerationConfig(max_new_tokens=10, num_beams=3, num_return_sequences=2),
    runtime.GenerationConfig(max_new_tokens=10, do_sample=True, top_p=0.9, seed=1),
]


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint, tmp_path_factory):
    """A tiny GPT-2 bundle from export/, whose lean decoder shares one cache buffer per layer."""
    from export import export_bundle

    out = tmp_path_factory.mktemp("gpu") / "tiny-lm"
    manifest = export_bundle(tiny_checkpoint("gpt2"), out, progress=False)
    assert manifest.graphs["decoder"].kv_cache == SHARED_BUFFER
    return out


def _tokens(gen, config):
    return [o.token_ids for o in gen.generate(PROMPTS[:4], config)]


def test_device_bound_cache_on_cpu_gives_the_default_paths_tokens(bundle):
    default = runtime.load(bundle, threads=1)
    bound = runtime.load(bundle, providers=["CPUExecutionProvider"], threads=1, io_binding=True)
    assert default.model.shared_cache and not bound.model.shared_cache
    _, state = bound.model.start(*bound._batch(PROMPTS[:2], None)[1:])
    assert all(isinstance(v, ort.OrtValue) and v.device_name() == "cpu" for v in state.past)
    for config in CONFIGS:
        assert _tokens(bound, config) == _tokens(default, config)


def test_unknown_provider_raises_naming_the_available_ones(bundle):
    with pytest.raises(ValueError, match="got 'NopeExecutionProvider'") as error:
        runtime.load(bundle, providers=["NopeExecutionProvider"])
    assert "CPUExecutionProvider" in str(error.value)
    with pytest.raises(ValueError, match="non-empty list"):
        runtime.load(bundle, providers="CPUExecutionProvider")


def test_devices_map_to_providers():
    assert runtime.providers_for("cpu") == ["CPUExecutionProvider"]
    first = "CUDAExecutionProvider" if CUDA else "CPUExecutionProvider"
    assert runtime.providers_for(None)[0] == first
    with pytest.raises(ValueError, match="`device` must be one of \\['cpu', 'cuda'\\], got 'tpu'"):
        runtime.providers_for("tpu")
    if not CUDA:
        with pytest.raises(ValueError, match="got 'CUDAExecutionProvider'"):
            runtime.providers_for("cuda")


@pytest.mark.parametrize("name", ["paraphraser", "masked-lm-base"])
def test_every_task_checks_and_uses_its_providers(name):
    """The hierarchical and fill-mask classes take `providers` as `Generator` does."""
    path = MODELS / name
    if not path.exists():
        pytest.skip(f"{name} is not shipped")
    with pytest.raises(ValueError, match="got 'NopeExecutionProvider'"):
        runtime.load(path, providers=["NopeExecutionProvider"])
    for providers in (None, ["CPUExecutionProvider"]):
        model = runtime.load(path, providers=providers, threads=1)
        sessions = getattr(model, "sessions", None) or {"model": model.session}
        expected = runtime.providers_for(None) if providers is None else providers
        assert model.providers == expected
        assert all(s.get_providers() == expected for s in sessions.values())


def test_registry_loads_every_model_with_its_providers(bundle):
    registry = ModelRegistry.discover([bundle.parent], providers=["CPUExecutionProvider"])
    (name,) = registry.names
    assert registry.get(name).providers == ["CPUExecutionProvider"]


def test_app_rejects_a_device_it_cannot_use(capsys):
    import app

    with pytest.raises(SystemExit):
        app.main(["--device", "tpu"])
    assert "`device` must be one of" in capsys.readouterr().err


@needs_cuda
def test_cuda_keeps_the_cache_on_the_device_and_matches_cpu_tokens(bundle):
    cpu = runtime.load(bundle, providers=runtime.providers_for("cpu"), threads=1)
    cuda = runtime.load(bundle, providers=runtime.providers_for("cuda"))
    assert cuda.model.runner.io_binding and not cuda.model.shared_cache
    _, state = cuda.model.start(*cuda._batch(PROMPTS[:2], None)[1:])
    assert all(v.device_name() == "cuda" for v in state.past)
    greedy = CONFIGS[0]
    assert _tokens(cuda, greedy) == _tokens(cpu, greedy)


@needs_cuda
def test_cuda_logits_come_back_to_the_host(bundle):
    cuda = runtime.load(bundle, providers=runtime.providers_for("cuda"))
    logits, _ = cuda.model.start(*cuda._batch(PROMPTS[:2], None)[1:])
    assert isinstance(logits, np.ndarray) and logits.shape[0] == 2
