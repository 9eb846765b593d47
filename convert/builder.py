"""Building ONNX graphs by hand from weights: the shared part of the lean graphs.

`GraphBuilder` collects nodes, initializers named after the PyTorch parameters they hold, and the
value types that onnx's shape inference cannot work out for onnxruntime's contrib ops;
`save_model` writes the result as one self-contained file. The graphs themselves are in
export/lean/gpt2.py, export/lean/bart.py and convert/graph.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MICROSOFT = "com.microsoft"  # onnxruntime's contrib-op domain
CONTRIB_OPS = (
    "BiasGelu",
    "FastGelu",
    "GroupQueryAttention",
    "MatMulNBits",
    "MultiHeadAttention",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
)
_MAX_PROTO_BYTES = 2**31 - 1


class GraphBuilder:
    """Collects nodes and initializers; names weights after their PyTorch parameters."""

    def __init__(self, state: dict):
        self.state = state  # the model's state_dict
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []

    def weight(self, name: str, transpose: bool = False, scale: float = 1.0) -> str:
        """The float32 parameter `name` (transposed, or multiplied by `scale`) as an initializer;
        returns its name, or `name*scale` when scaled (the plain one may be needed as well)."""
        array = self.state[name].detach().to("cpu").float().numpy()
        if transpose:
            array = array.T
        if scale != 1.0:
            array, name = array * np.float32(scale), f"{name}*{scale:g}"
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, name: str, value, dtype) -> str:
        self.initializers.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def node(
        self, op: str, inputs: list[str], outputs: list[str], width: int | None = None, **attrs
    ) -> list[str]:
        """Add a node; `width` declares its float outputs as (batch, seq, width) activations.

        onnx's shape inference does not know contrib ops, and quantize_dynamic needs the type of
        every MatMul input, so the graph states them itself.
        """
        domain = MICROSOFT if op in CONTRIB_OPS else ""
        name = f"{op}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, outputs, name, domain=domain, **attrs))
        if width is not None:
            self.value_info += [
                helper.make_tensor_value_info(
                    output, TensorProto.FLOAT, ["batch_size", "sequence_length", width]
                )
                for output in outputs
                if output and output != "logits" and not output.startswith("present.")
            ]
        return outputs

    def save(self, path: Path, name: str, inputs: list, outputs: list, opset: int) -> None:
        """Write the graph to `path` as one self-contained file (weights embedded)."""
        graph = helper.make_graph(
            self.nodes, name, inputs, outputs, self.initializers, value_info=self.value_info
        )
        opsets = [helper.make_opsetid("", opset), helper.make_opsetid(MICROSOFT, 1)]
        model = helper.make_model(
            graph,
            opset_imports=opsets,
            producer_name=f"scriptorium.export.{name}",
            # The oldest IR version that has these opsets: newer onnx writes IRs onnxruntime
            # rejects.
            ir_version=helper.find_min_ir_version_for(opsets, ignore_unknown=True),
        )
        if model.ByteSize() > _MAX_PROTO_BYTES:
            raise ValueError(
                f"the model must fit in one 2 GB protobuf, got {model.ByteSize()} bytes"
            )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path))
