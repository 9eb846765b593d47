"""Applying an adapter bundle (LoRA) to its base at run time: the adapter's factors, checked
against the base's LoRA slots and ready to feed.

An adapter bundle holds `adapter.onnx_adapter`, onnxruntime's adapter format (a flatbuffer that
onnxruntime parses; nothing in it runs). Its parameters are named after the slot inputs of the
base's `model_lora.onnx` (convert/graph.py): `lora.{layer}.{modules}.A` (K, r) and `.B`
(r, N), the scaling already folded into B. `Adapter` loads them once, refuses any that is not
finite float32 or does not fit its slot (`BundleError` naming it), and offers them both ways
onnxruntime takes them: `run_options` with the adapter active (`session.run`), and the
parameters as OrtValues to bind (IO binding, which does not apply active adapters in
onnxruntime 1.32). Every call of a model with an adapter feeds them; the slot graph's own
zero-rank defaults make it the base when no adapter is fed.

The base's slot graph runs in one session per process shared by all its adapters
(`runtime.sessions.shared_session`). Finding the base and merging manifests is
runtime/bundle.py's; this module runs nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .bundle import BundleError
from .manifest import LoraSlot


class Adapter:
    """An adapter's LoRA factors, checked against the slots of its base's graph."""

    def __init__(self, path: Path, slots: Mapping[str, LoraSlot]):
        self.path = Path(path)
        try:
            self.parameters = ort.AdapterFormat.read_adapter(str(self.path)).get_parameters()
            self.lora = ort.LoraAdapter()
            self.lora.Load(str(self.path))
        except Exception as error:  # onnxruntime raises its own error types for a bad file
            raise BundleError(
                f"{self.path} is not a readable onnxruntime adapter: {error}"
            ) from error
        _check_parameters(self.path, self.parameters, slots)
        self.run_options = ort.RunOptions()
        self.run_options.add_active_adapter(self.lora)


def _check_parameters(path: Path, parameters: dict, slots: Mapping[str, LoraSlot]) -> None:
    """Every parameter fills one side of a slot with the slot's width, A and B of one rank, as
    finite float32 (the slot inputs' type; NaN would make every generation junk)."""
    sides = {
        factor: (name, side)
        for name, slot in slots.items()
        for side, factor in (("A", slot.A), ("B", slot.B))
    }
    for param, value in parameters.items():
        if param not in sides:
            raise BundleError(f"{path}: parameter {param!r} is not a LoRA slot of the base graph")
        if value.data_type() != "tensor(float)":
            dtype = value.data_type().removeprefix("tensor(").removesuffix(")")
            raise BundleError(f"{path}: {param!r} must be float32, got {dtype}")
        if not np.isfinite(value.numpy()).all():
            raise BundleError(f"{path}: {param!r} holds non-finite values (NaN or infinity)")
        name, side = sides[param]
        slot, shape = slots[name], value.shape()
        width = slot.k if side == "A" else sum(rows for _, rows in slot.parts)
        other = parameters.get(slot.B if side == "A" else slot.A)
        if other is None:
            raise BundleError(f"{path}: slot {name!r} has {side} but not its other factor")
        rank = other.shape()[0 if side == "A" else 1]
        expected = [width, rank] if side == "A" else [rank, width]
        if list(shape) != expected:
            raise BundleError(f"{path}: {param!r} must have shape {expected}, got {list(shape)}")
