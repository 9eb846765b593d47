"""Reading a GGUF file with numpy only: the model's hyper-parameters, and its weights in the form
onnxruntime's `MatMulNBits` kernel takes, carried over from llama.cpp's blocks without
re-quantizing.

`read_gguf(path)` returns a `GGUFModel`: the metadata of interest, the tokenizer fields and one
`Linear` per projection. A `Linear` is either a float matrix or blocks of 32 input weights with
one scale each, `w = scale · (q − zero) + offset`, where `q` holds `bits`-bit unsigned integers,
`zero` is MatMulNBits' default zero point (8 for 4 bits, 128 for 8 bits) and `offset` is absent
(symmetric types) or a per-block float:

    Q4_0   w = d·(q − 8)                          4 bits, no offset
    Q4_1   w = d·q + m = d·(q − 8) + (8d + m)      4 bits, offset 8d + m (exact)
    Q4_K   256-weight super-blocks whose 6-bit sub-block scales and minimums expand to the
           per-32 (d, m) of Q4_1, then as Q4_1
    Q8_0   w = d·q, q int8 = d·((q + 128) − 128)   8 bits, no offset
    F32 / F16 / BF16                              float, as is
    others (Q5_*, Q6_K, IQ*, …)                   dequantized with `gguf.quants` and
                                                  re-quantized to Q8_0 (noted per tensor)

A float zero point would make Q4_1 exact too, but onnxruntime runs that case on a slow path
(docs/GGUF.md, "Quantization: carried over"); the offset is instead applied by the graph as
per-block sums of the input times a small [K/32, N] matrix (convert/graph.py).

Covers the architectures in `ARCHITECTURES` (anything else raises `ValueError` naming them and
docs/GGUF.md's table), reading what llama.cpp reads for each, with llama.cpp's defaults for what
its converter leaves out of the file (gemma3's sliding pattern, smollm3's layers without
rotary). It does not build graphs or tokenizers (convert/graph.py,
convert/gguf_tokenizer.py).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .gguf_check import (
    GGUFError,
    check_hyperparameters,
    check_positive,
    check_tensors,
    check_tokenizer_fields,
    prescan,
)

# docs/GGUF.md, "Supported architectures"; `serve --models` and the Models tab list them
ARCHITECTURES = (
    "llama",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3",
    "phi3",
    "granite",
    "olmo2",
    "smollm3",
)
GEMMA3_PATTERN = 6  # llama.cpp's default: every 6th layer global, the others sliding
SMOLLM3_NO_ROPE_STEP = 4  # llama.cpp's (and transformers' default): every 4th layer without rotary
BLOCK = 32  # weights per MatMulNBits block (and per GGUF block of the carried-over types)
CARRIED = ("Q4_0", "Q4_1", "Q4_K", "Q8_0")  # quantized types mapped onto MatMulNBits as they are
FLOATS = ("F32", "F16", "BF16")
SUPPORTED_DOC = 'docs/GGUF.md, "Supported architectures"'


def supported_gguf() -> str:
    """One line naming the architectures and weight types the importer loads, from the tables
    above (the refusals, `serve --models`' help and the Models tab all show it)."""
    return (
        f"GGUF architectures {', '.join(ARCHITECTURES)}; weights {', '.join(CARRIED)} carried "
        f"over, {', '.join(FLOATS)} as float, other types the gguf package reads (Q5_*, Q6_K, "
        f"IQ*, …) re-quantized to Q8_0 ({SUPPORTED_DOC})"
    )


DEFAULT_ZERO = {4: 8, 8: 128}  # MatMulNBits' zero point when none is given


@dataclass
class Linear:
    """One projection y = x · Wᵀ with W of shape (N, K): float, or `bits`-bit blocks of 32."""

    n: int  # output features
    k: int  # input features
    source: str  # the GGUF type it came from (e.g. "Q4_1")
    weight: np.ndarray | None = None  # (N, K) float32, float projections only
    bits: int | None = None  # 4 or 8
    packed: np.ndarray | None = None  # (N, K/32, 32·bits/8) uint8, MatMulNBits' B
    scales: np.ndarray | None = None  # (N, K/32) float32
    offsets: np.ndarray | None = None  # (N, K/32) float32 added to every weight of a block
    note: str | None = None  # set when the weights were re-quantized

    @property
    def quantized(self) -> bool:
        return self.bits is not None

    def codes(self) -> np.ndarray:
        """The unsigned integer codes q, (N, K/32, 32) uint8."""
        if self.bits == 8:
            return self.packed
        low, high = self.packed & 0x0F, self.packed >> 4  # (N, K/32, 16) each
        return np.stack([low, high], axis=-1).reshape(self.n, self.k // BLOCK, BLOCK)

    def dequantized(self) -> np.ndarray:
        """W as float32 (N, K), exactly as the blocks define it."""
        if not self.quantized:
            return self.weight
        q = self.codes().astype(np.float32) - DEFAULT_ZERO[self.bits]  # (N, K/32, 32)
        w = q * self.scales[:, :, None]
        if self.offsets is not None:
            w = w + self.offsets[:, :, None]
        return w.reshape(self.n, self.k).astype(np.float32)


def concat(parts: list[Linear]) -> Linear | None:
    """The projections stacked along N (one MatMulNBits for q|k|v or gate|up), or None when they
    are not stored alike (float and blocks, or different bit widths). Blocks run along K, so
    stacking rows is exact."""
    first = parts[0]
    if any(p.k != first.k or p.bits != first.bits for p in parts):
        return None
    n = sum(p.n for p in parts)
    source = "+".join(dict.fromkeys(p.source for p in parts))
    if not first.quantized:
        return Linear(n, first.k, source, weight=np.concatenate([p.weight for p in parts]))
    offsets = None
    if any(p.offsets is not None for p in parts):
        offsets = np.concatenate(
            [p.offsets if p.offsets is not None else np.zeros_like(p.scales) for p in parts]
        )
    notes = [p.note for p in parts if p.note]
    return Linear(
        n,
        first.k,
        source,
        bits=first.bits,
        packed=np.concatenate([p.packed for p in parts]),
        scales=np.concatenate([p.scales for p in parts]),
        offsets=offsets,
        note="; ".join(notes) or None,
    )


def _pack4(q: np.ndarray) -> np.ndarray:
    """(..., 32) 4-bit codes in element order → (..., 16) bytes, element 2i in the low nibble."""
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The float16 at byte `start` of every block, as float32 (…,)."""
    return blocks[..., start : start + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _q4_halves(qs: np.ndarray) -> np.ndarray:
    """ggml's 4-bit layout, 16 bytes → 32 codes: low nibbles are elements 0-15, high 16-31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _k4_scales(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 packed bytes → 8 six-bit sub-block scales and 8 minimums, (…, 8) each."""
    raw = raw.astype(np.uint8)
    low, mid, high = raw[..., 0:4], raw[..., 4:8], raw[..., 8:12]
    scales = np.concatenate([low & 63, (high & 0x0F) | ((low >> 6) << 4)], axis=-1)
    mins = np.concatenate([mid & 63, (high >> 4) | ((mid >> 6) << 4)], axis=-1)
    return scales.astype(np.float32), mins.astype(np.float32)


def linear_from_blocks(kind: str, data: np.ndarray, n: int, k: int) -> Linear:
    """A carried-over projection from GGUF's raw bytes `data` (N, bytes per row) of type `kind`."""
    if k % BLOCK:
        raise ValueError(f"input width must be a multiple of {BLOCK}, got {k}")
    if kind == "Q4_K":
        supers = data.reshape(n, k // 256, 144)  # d, dmin (f16), 12 scale bytes, 128 code bytes
        d, dmin = _f16(supers, 0)[..., None], _f16(supers, 2)[..., None]  # (N, K/256, 1)
        sub_scales, sub_mins = _k4_scales(supers[..., 4:16])  # (N, K/256, 8)
        qs = supers[..., 16:].reshape(n, k // 256, 4, 32)  # (N, K/256, 4 chunks, 32 bytes)
        # Each 64-weight chunk: low nibbles are its first sub-block, high nibbles the second.
        q = np.stack([qs & 0x0F, qs >> 4], axis=3).reshape(n, k // BLOCK, BLOCK)
        scale = (d * sub_scales).reshape(n, k // BLOCK)
        minimum = (-dmin * sub_mins).reshape(n, k // BLOCK)
        return Linear(
            n, k, kind, bits=4, packed=_pack4(q), scales=scale, offsets=8 * scale + minimum
        )
    size = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[kind]
    blocks = data.reshape(n, k // BLOCK, size)  # (N, K/32, bytes per block)
    d = _f16(blocks, 0)
    if kind == "Q8_0":
        q = (blocks[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return Linear(n, k, kind, bits=8, packed=np.ascontiguousarray(q), scales=d)
    if kind == "Q4_0":
        return Linear(n, k, kind, bits=4, packed=_pack4(_q4_halves(blocks[..., 2:])), scales=d)
    m = _f16(blocks, 2)
    q = _q4_halves(blocks[..., 4:])
    return Linear(n, k, kind, bits=4, packed=_pack4(q), scales=d, offsets=8 * d + m)


def linear_from_tensor(tensor, fp32: bool = False) -> Linear:
    """A projection from a `gguf.ReaderTensor` of GGUF shape (K, N): carried over when its type
    maps onto MatMulNBits, float as is, anything else re-quantized to Q8_0 with a note; with
    `fp32`, always the float32 dequantization of the same weights."""
    from gguf import GGMLQuantizationType, quants

    k, n = (int(x) for x in tensor.shape)
    kind = tensor.tensor_type.name
    if kind in FLOATS or fp32:
        weight = quants.dequantize(tensor.data, tensor.tensor_type).reshape(n, k)
        return Linear(n, k, kind, weight=weight.astype(np.float32))
    if kind in CARRIED:
        return linear_from_blocks(kind, np.asarray(tensor.data), n, k)
    try:
        weight = quants.dequantize(tensor.data, tensor.tensor_type).reshape(n, k)
    except NotImplementedError:
        raise ValueError(
            f"tensor {tensor.name!r} has GGUF type {kind}, which the gguf package cannot "
            f"dequantize; supported: {supported_gguf()}"
        ) from None
    blocks = quants.quantize(weight.astype(np.float32), GGMLQuantizationType.Q8_0)
    linear = linear_from_blocks("Q8_0", blocks, n, k)
    linear.source, linear.note = kind, f"{kind} dequantized and re-quantized to Q8_0"
    return linear


@dataclass
class GGUFModel:
    """What the importer needs from one GGUF file."""

    path: Path
    architecture: str  # one of ARCHITECTURES
    metadata: dict  # scalar metadata (no tokenizer arrays), JSON-serialisable
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_size: int
    vocab: int
    context: int
    rms_eps: float
    rope_base: float
    rope_scale: float  # linear position scaling (1 = none)
    rope_factors: np.ndarray | None  # llama3-style per-frequency divisors (`rope_freqs.weight`)
    tokenizer: dict  # tokenizer.ggml.* fields and the chat template
    tensors: dict = field(repr=False)  # name -> gguf.ReaderTensor
    attention_softcap: float = 0.0  # attention scores c·tanh(s / c) (gemma2; 0 = none)
    final_softcap: float = 0.0  # logits c·tanh(l / c) (gemma2, gemma3; 0 = none)
    sliding_window: int = 0  # keys each query of a sliding layer sees, itself included (0 = all)
    sliding_layers: tuple = ()  # per layer: whether it slides (gemma2, gemma3)
    rope_base_local: float = 0.0  # the sliding layers' rotary base (gemma3; 0 = rope_base)
    rope_layers: tuple = ()  # per layer: whether it rotates (smollm3; () = every layer)
    rotary_dim: int = 0  # rotated dimensions of each head (phi3's partial rotary; 0 = all)
    rope_attn_factor: float = 1.0  # cos and sin times this (phi3's LongRoPE)
    embedding_scale: float = 0.0  # embeddings times this (gemma: sqrt(hidden); granite; 0 = none)
    residual_scale: float = 0.0  # attention and MLP outputs times this (granite; 0 = none)
    attention_scale: float = 0.0  # scores times this (granite, gemma3 27B; 0 = 1/sqrt(head))
    logit_scale: float = 0.0  # logits divided by this (granite; 0 = none)

    def slides(self, layer: int) -> bool:
        return bool(self.sliding_layers) and self.sliding_layers[layer]

    def rotates(self, layer: int) -> bool:
        return not self.rope_layers or self.rope_layers[layer]

    def norm(self, name: str) -> np.ndarray:
        from gguf import quants

        tensor = self.tensors[name]
        return quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(-1)

    def linear(self, name: str, fp32: bool = False) -> Linear:
        return linear_from_tensor(self.tensors[name], fp32)

    def release(self, name: str) -> None:
        """Drop the mapped pages of tensor `name` from this process once it has been read (they
        stay in the page cache and are read again if touched), so that the importer's resident
        memory does not grow with the file (docs/GGUF.md, "Converter memory")."""
        tensor = self.tensors[name]
        mapping = getattr(tensor, "data", None)
        while mapping is not None and not isinstance(mapping, mmap.mmap):
            mapping = getattr(mapping, "base", None)
        if mapping is None or not hasattr(mmap, "MADV_DONTNEED"):
            return  # not a mapped GGUF tensor (a checkpoint's array), or no madvise here
        start = tensor.data_offset - tensor.data_offset % mmap.PAGESIZE
        mapping.madvise(mmap.MADV_DONTNEED, start, tensor.data_offset + tensor.n_bytes - start)

    def bias(self, name: str) -> np.ndarray | None:
        return self.norm(name) if name in self.tensors else None


def _field_value(reader_field):
    value = reader_field.contents()
    return value.item() if isinstance(value, np.generic) else value


def read_gguf(path: str | Path) -> GGUFModel:
    """Parse `path` (never executed). Raises GGUFError (a ValueError) naming the field or tensor
    for a file that is not a readable GGUF, is over a limit (convert/gguf_check.py), has an
    architecture other than ARCHITECTURES, or whose hyper-parameters, tensors and tokenizer
    fields do not agree."""
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    prescan(path)  # before the reader, which trusts every count in the file
    try:
        reader = GGUFReader(str(path))
        fields = {name: _field_value(f) for name, f in reader.fields.items()}
    except (ValueError, IndexError, KeyError, TypeError, OSError) as error:
        raise GGUFError(f"{path} is not a readable GGUF file: {error}") from error
    arch = fields.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise GGUFError(
            f"GGUF architecture must be one of {', '.join(ARCHITECTURES)} ({SUPPORTED_DOC}), "
            f"got {arch!r}"
        )
    tensors = {t.name: t for t in reader.tensors}
    try:
        return _model(path, arch, fields, tensors)
    except GGUFError as error:
        raise GGUFError(f"{path}: {error}") from None


def _model(path: Path, arch: str, fields: dict, tensors: dict) -> GGUFModel:
    if "token_embd.weight" not in tensors:
        raise GGUFError("the file lacks the tensor 'token_embd.weight'")
    hp = check_hyperparameters(fields, arch)
    check_tensors(tensors, arch, hp, f"{arch}.block_count")
    vocab = int(tensors["token_embd.weight"].shape[1])
    check_tokenizer_fields(fields, vocab)
    scaling = fields.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise GGUFError(f"`{arch}.rope.scaling.type` must be 'none' or 'linear', got {scaling!r}")
    rope_scale = 1.0
    if scaling == "linear":
        rope_scale = check_positive(fields, f"{arch}.rope.scaling.factor", 1.0)
    factors = None
    # llama3's per-frequency divisors, or phi3's LongRoPE short factors (see _family)
    for name in ("rope_freqs.weight", "rope_factors_short.weight"):
        if name in tensors:
            factors = np.asarray(tensors[name].data, dtype=np.float32).reshape(-1)
    metadata = {
        name: value
        for name, value in fields.items()
        if not name.startswith("tokenizer.") and not isinstance(value, list)
    }
    tokenizer = {
        name: value
        for name, value in fields.items()
        if name.startswith("tokenizer.") and name != "tokenizer.chat_template"
    }
    tokenizer["chat_template"] = fields.get("tokenizer.chat_template")
    return GGUFModel(
        path=path,
        architecture=arch,
        metadata=metadata,
        vocab=vocab,
        rope_scale=rope_scale,
        rope_factors=factors,
        tokenizer=tokenizer,
        tensors=tensors,
        **{**hp, **_family(arch, fields, tensors, hp)},
    )


def _family(arch: str, fields: dict, tensors: dict, hp: dict) -> dict:
    """The fields of GGUFModel that only some architectures set, as llama.cpp reads them, and
    those of `hp` they change (context, rotary_dim)."""
    p, layers = f"{arch}.", hp["layers"]
    extra = {}
    if arch in ("gemma", "gemma2", "gemma3"):  # rounded to float32 as transformers does
        extra["embedding_scale"] = float(np.float32(np.sqrt(hp["hidden"])))
    if arch == "gemma2":  # soft-capping everywhere; even layers see a sliding window of keys
        extra.update(
            attention_softcap=check_positive(fields, p + "attn_logit_softcapping"),
            final_softcap=check_positive(fields, p + "final_logit_softcapping"),
            sliding_window=int(check_positive(fields, p + "attention.sliding_window")),
            sliding_layers=tuple(i % 2 == 0 for i in range(layers)),
        )
    if arch == "gemma3":
        if fields.get(p + "final_logit_softcapping") is not None:
            extra["final_softcap"] = check_positive(fields, p + "final_logit_softcapping")
        window = fields.get(p + "attention.sliding_window", 0)
        if window:  # sliding layers, with their own rotary base, but every 6th layer
            extra.update(
                sliding_window=int(check_positive(fields, p + "attention.sliding_window")),
                sliding_layers=tuple(
                    i % GEMMA3_PATTERN < GEMMA3_PATTERN - 1 for i in range(layers)
                ),
                rope_base_local=check_positive(fields, p + "rope.freq_base_swa", 10000.0),
            )
        if layers == 62:  # Gemma 3 27B scales queries by the width per head (as llama.cpp)
            extra["attention_scale"] = float(1 / np.sqrt(hp["hidden"] / hp["heads"]))
    if arch == "smollm3":
        extra["rope_layers"] = tuple((i + 1) % SMOLLM3_NO_ROPE_STEP != 0 for i in range(layers))
    if arch == "granite":
        extra.update(
            embedding_scale=check_positive(fields, p + "embedding_scale", 1.0),
            residual_scale=check_positive(fields, p + "residual_scale", 1.0),
            attention_scale=check_positive(fields, p + "attention.scale", hp["head_size"] ** -0.5),
            logit_scale=check_positive(fields, p + "logit_scale", 1.0),
        )
    if arch == "phi3" and "rope_factors_short.weight" in tensors:
        # LongRoPE: the short factors, which transformers uses while a sequence fits the
        # original context (the long ones past it), so the bundle's context is that one
        extra["rope_attn_factor"] = check_positive(fields, p + "rope.scaling.attn_factor", 1.0)
        original = fields.get(p + "rope.scaling.original_context_length")
        if isinstance(original, int) and 0 < original < hp["context"]:
            extra["context"] = original
    if hp["rotary_dim"] == hp["head_size"]:
        extra["rotary_dim"] = 0
    return extra
