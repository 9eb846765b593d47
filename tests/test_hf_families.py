"""The families that GGUF import gained, through the Hugging Face checkpoint path: `scriptorium
export` (export_bundle, optimum-onnx's graph) of a tiny random transformers checkpoint of each
(tests/gguf_convert.py's make_checkpoint, with the fields tests/test_gguf_families.py gives the
family) gives transformers' greedy tokens: the export's own parity check runs the bundle through
`runtime.load` and transformers' `generate` on 4 prompts, 32 new tokens each, fp32, and refuses
the export (ParityError) unless every sequence is identical.

The context is 256 positions (the parity prompts and their continuations reach 70): with 64,
the runtime stops where transformers goes on past `max_position_embeddings`. Phi-3's LongRoPE
switches to its long factors in transformers once a sequence passes the original context, which
an exported graph does not follow: the original context here (256) holds every sequence.
"""

from __future__ import annotations

import pytest

from export.exporter import export_bundle
from tests.gguf_convert import make_checkpoint
from tests.test_gguf_families import FAMILIES

pytest.importorskip("optimum.exporters.onnx")

NEW = ("gemma3", "phi3", "granite", "olmo2", "smollm3")


@pytest.mark.parametrize("family", NEW)
def test_checkpoint_exports_with_transformers_greedy_tokens(tmp_path, family):
    model_type, fields = FAMILIES[family]
    fields = {**fields, "max_position_embeddings": 256}
    if family == "phi3":
        fields.update(max_position_embeddings=512, original_max_position_embeddings=256)
    checkpoint = make_checkpoint(tmp_path / "checkpoint", model_type, **fields)
    manifest = export_bundle(
        checkpoint, tmp_path / "bundle", "fp32", optimize=False, progress=False
    )
    greedy = manifest.parity.greedy
    assert greedy.identical_sequences == greedy.prompts == 4
    assert greedy.token_agreement == 1.0
