"""A Hugging Face Llama or Qwen2 checkpoint (safetensors) to the lean Llama bundle, torch-free.

`export_hf_llama(model_dir, out_dir, precision)` reads a `LlamaForCausalLM` / `Qwen2ForCausalLM`
directory — config.json (`model_type` llama or qwen2), one or several *.safetensors files
(model.safetensors.index.json for shards), tokenizer.json, tokenizer_config.json or
chat_template.jinja, generation_config.json — and writes the bundle that the GGUF importer writes
(convert/gguf.py): the lean decoder graph of convert/graph.py, the directory's own
tokenizer.json, manifest.json and README.md. `scriptorium export MODEL_DIR OUT_DIR` and
`export_bundle` route such directories here.

The weights are parsed with safetensors' own `deserialize` (numpy has no bfloat16, which most
published checkpoints use, so `safetensors.numpy` cannot load them); pickled `*.bin` weights are
refused, never unpickled. They are renamed to llama.cpp's tensor names and wrapped as an
`HFModel`, the `GGUFModel` that `build_llama_graph` takes. llama's q and k rows are permuted as
llama.cpp's convert_hf_to_gguf does (each head's two rotary halves interleaved), so the graph runs
GroupQueryAttention's interleaved rotary on them exactly as on a GGUF of the same model; qwen2
keeps HF's layout and the half-split rotary.

Precisions, each projection built as `Linear` blocks of 32 weights (convert/gguf_read.py):
fp32 (float MatMuls; a tied table is one Gemm), int8 (Q8_0 blocks: symmetric 8-bit, one scale per
32 weights, MatMulNBits 8-bit) and int4 (Q4_1 blocks: 4-bit with a scale and a minimum per 32
weights, which the graph applies exactly; the token table and LM head stay 8-bit as in llama.cpp's
own files). Blocks are quantized by the `gguf` package's numpy quantizers.

The manifest's `export.source` is "huggingface" with the directory name, config.json's sha256 and
each weight file's sha256. The parity report compares the bundle with an fp32 graph of the same
weights (torch-free, as for GGUF imports) and, when torch and transformers import, with
transformers' model of the directory itself; the conversion never needs them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from runtime.bundle import sha256_of
from runtime.chat import hf_chat_fields
from runtime.manifest import ChatSection, Manifest, SpecialTokens

from . import manifest as bundle_manifest
from .bundle import (
    PARITY_NEW_TOKENS,
    PARITY_PROMPTS,
    full_logits,
    greedy,
    llama_manifest,
    model_card,
    parity_report,
    parity_session,
    prepare_out_dir,
    reference_greedy,
    write_bundle,
)
from .gguf_read import BLOCK, GGUFModel, Linear, linear_from_blocks
from .graph import ACCURACY_LEVEL, build_llama_graph

ARCHITECTURES = ("llama", "qwen2")
# safetensors dtypes read as float32 (BF16 is widened bit-exactly).
DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": np.uint16}
# Per precision: (GGUF block type of the projections, of the token table and LM head).
BLOCK_TYPES = {"int8": ("Q8_0", "Q8_0"), "int4": ("Q4_1", "Q8_0")}
LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_TENSORS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
TABLES = ("token_embd.weight", "output.weight")


def is_hf_llama(model_dir: str | Path) -> bool:
    """Whether `model_dir`'s config.json names model_type llama or qwen2."""
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("model_type") in ARCHITECTURES
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        return False


@dataclass
class HFModel(GGUFModel):
    """A checkpoint's float32 weights under llama.cpp's tensor names, quantized on demand."""

    precision: str = "fp32"
    keep_lm_head: bool = False  # token table and LM head in float32 when quantizing
    dtypes: dict = field(default_factory=dict, repr=False)  # tensor -> safetensors dtype

    def norm(self, name: str) -> np.ndarray:
        return self.tensors[name].reshape(-1)

    def bias(self, name: str) -> np.ndarray | None:
        return self.tensors[name].reshape(-1) if name in self.tensors else None

    def linear(self, name: str, fp32: bool = False) -> Linear:
        weight = self.tensors[name]
        n, k = weight.shape
        dtype = self.dtypes[name]
        table = name in TABLES
        if fp32 or self.precision == "fp32" or (table and self.keep_lm_head):
            return Linear(n, k, dtype, weight=weight)
        from gguf import GGMLQuantizationType, quants

        kind = BLOCK_TYPES[self.precision][int(table)]
        blocks = quants.quantize(weight, GGMLQuantizationType[kind])
        linear = linear_from_blocks(kind, blocks, n, k)
        linear.source = f"{dtype} -> {kind}"
        return linear


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """q or k rows from HF's half-split rotary layout to llama.cpp's interleaved one."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def weight_files(model_dir: Path) -> list[Path]:
    """The checkpoint's safetensors files; ValueError for pickled or missing weights."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = bundle_manifest.load_json(index, "safetensors index").get("weight_map", {})
        files = [model_dir / name for name in dict.fromkeys(weight_map.values())]
        missing = [path.name for path in files if not path.is_file()]
        if not files or missing:
            raise FileNotFoundError(f"{index} names weight files that are missing: {missing}")
        return files
    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        return files
    if list(model_dir.glob("*.bin")) or list(model_dir.glob("*.pt")):
        raise ValueError(
            f"{model_dir} holds only pickled PyTorch weights (*.bin), which export never "
            "unpickles: save the model with safe_serialization=True (*.safetensors)"
        )
    raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")


def read_safetensors(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (safetensors dtype, float32 array) of one file (parsed, never executed)."""
    from safetensors import SafetensorError, deserialize

    try:
        entries = deserialize(path.read_bytes())
    except SafetensorError as error:
        raise ValueError(f"{path} is not a readable safetensors file: {error}") from error
    tensors = {}
    for name, entry in entries:
        dtype = entry["dtype"]
        if dtype not in DTYPES:
            raise ValueError(f"tensor {name!r} in {path.name} has dtype {dtype}; expected a float")
        array = np.frombuffer(entry["data"], dtype=DTYPES[dtype]).reshape(entry["shape"])
        if dtype == "BF16":  # the high half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = (dtype, np.ascontiguousarray(array, dtype=np.float32))
    return tensors


def _rope(config: dict, head_size: int) -> tuple[float, float, np.ndarray | None]:
    """(theta, linear position scale, llama3 per-frequency divisors or None)."""
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    theta = float(config.get("rope_theta", scaling.get("rope_theta", 10000.0)))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return theta, 1.0, None
    if kind == "linear":
        return theta, float(scaling["factor"]), None
    if kind != "llama3":
        raise ValueError(f"rope scaling must be 'default', 'linear' or 'llama3', got {kind!r}")
    # transformers' _compute_llama3_parameters, as divisors of the default inverse frequencies.
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old = float(scaling["original_max_position_embeddings"])
    exponents = np.arange(0, head_size, 2, dtype=np.int64).astype(np.float32) / head_size
    inv_freq = 1.0 / (np.float32(theta) ** exponents)
    wavelen = 2 * np.pi / inv_freq
    scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    scaled = np.where(medium, smoothed, scaled)
    return theta, 1.0, (inv_freq / scaled).astype(np.float32)


def _check_config(config: dict, path: Path) -> str:
    architecture = config.get("model_type")
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"model_type must be one of {list(ARCHITECTURES)} for the lean Llama export, "
            f"got {architecture!r} ({path})"
        )
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"`hidden_act` must be 'silu', got {config['hidden_act']!r}")
    if architecture == "llama" and (config.get("attention_bias") or config.get("mlp_bias")):
        raise ValueError("llama checkpoints with attention or MLP biases are not supported")
    windowed = config.get("use_sliding_window") or "sliding_attention" in (
        config.get("layer_types") or []
    )
    if windowed:
        raise ValueError("sliding-window attention (`use_sliding_window`) is not supported")
    return architecture


def read_hf_llama(
    model_dir: str | Path, precision: str = "fp32", keep_lm_head: bool = False
) -> HFModel:
    """The checkpoint in `model_dir` as an `HFModel`. Raises FileNotFoundError for missing files
    and ValueError for pickled weights, an unsupported model_type or option, or odd tensors."""
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"config.json missing in {model_dir}: not a Hugging Face checkpoint"
        )
    config = bundle_manifest.load_json(config_path, "model config")
    architecture = _check_config(config, config_path)
    raw: dict[str, tuple[str, np.ndarray]] = {}
    for path in weight_files(model_dir):
        raw.update(read_safetensors(path))
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    hidden = int(config["hidden_size"])
    head_size = int(config.get("head_dim") or hidden // heads)
    names = dict(TOP_TENSORS)
    for i in range(layers):
        names.update(
            {f"model.layers.{i}.{hf}": f"blk.{i}.{ours}" for hf, ours in LAYER_TENSORS.items()}
        )
    tied = bool(config.get("tie_word_embeddings", False))
    unknown = [n for n in raw if n not in names and not n.endswith("rotary_emb.inv_freq")]
    if unknown:
        raise ValueError(f"unexpected tensors in {model_dir}: {sorted(unknown)[:5]}")
    tensors, dtypes = {}, {}
    for hf_name, (dtype, array) in raw.items():
        if hf_name not in names or (tied and hf_name == "lm_head.weight"):
            continue
        name = names[hf_name]
        if architecture == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            array = _permute(array, heads if "attn_q" in name else kv_heads)
        tensors[name], dtypes[name] = array, dtype
    needed = ["token_embd.weight", "output_norm.weight"] + ([] if tied else ["output.weight"])
    for i in range(layers):
        needed += [f"blk.{i}.{ours}" for ours in LAYER_TENSORS.values() if "bias" not in ours]
    missing = [n for n in needed if n not in tensors]
    if missing:
        raise ValueError(f"{model_dir} lacks weights for {missing[:5]}")
    intermediate = int(config["intermediate_size"])
    for width in (hidden, heads * head_size, intermediate):
        if width % BLOCK and precision != "fp32":
            raise ValueError(f"input widths must be multiples of {BLOCK} to quantize, got {width}")
    theta, scale, factors = _rope(config, head_size)
    return HFModel(
        path=model_dir,
        architecture=architecture,
        metadata={k: v for k, v in config.items() if isinstance(v, (str, int, float, bool))},
        layers=layers,
        hidden=hidden,
        intermediate=intermediate,
        heads=heads,
        kv_heads=kv_heads,
        head_size=head_size,
        vocab=int(tensors["token_embd.weight"].shape[0]),
        context=int(config.get("max_position_embeddings", 2048)),
        rms_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_base=theta,
        rope_scale=scale,
        rope_factors=factors,
        tokenizer={},
        tensors=tensors,
        precision=precision,
        keep_lm_head=keep_lm_head,
        dtypes=dtypes,
    )


def _read_json(path: Path) -> dict:
    return bundle_manifest.load_json(path, path.name) if path.is_file() else {}


def special_tokens(model_dir: Path, config: dict, generation: dict, tokenizer) -> dict:
    """bos/eos/pad ids: generation_config.json, then config.json, then tokenizer_config.json's
    token strings looked up in tokenizer.json."""
    fields = _read_json(model_dir / "tokenizer_config.json")

    def token_id(key: str):
        value = fields.get(key)
        value = value.get("content") if isinstance(value, dict) else value  # an AddedToken
        return tokenizer.token_to_id(value) if isinstance(value, str) else None

    names = SimpleNamespace(
        **{f"{key}_token_id": token_id(f"{key}_token") for key in ("bos", "eos", "pad")}
    )
    return bundle_manifest.special_tokens(config, generation, names)


def adds_bos(model_dir: Path, tokenizer, bos: int | None) -> bool:
    """Whether transformers' tokenizer puts BOS before a prompt (tokenizer.json's post-processor,
    or a Llama tokenizer's `add_bos_token`) that plain encoding lacks: the runtime then adds it."""
    if bos is None:
        return False
    fields = _read_json(model_dir / "tokenizer_config.json")
    text = "In the beginning"
    flagged = fields.get("add_bos_token") is True and str(
        fields.get("tokenizer_class", "")
    ).startswith("Llama")
    added = tokenizer.encode(text).ids[:1] == [bos] or flagged
    return added and tokenizer.encode(text, add_special_tokens=False).ids[:1] != [bos]


def prompt_ids(tokenizer, text: str, bos: int | None) -> list[int]:
    """`text`'s ids as the runtime feeds them (BOS first when `bos` is given)."""
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return ([bos] if bos is not None else []) + ids


def transformers_parity(model_dir: Path, graph: Path, model: HFModel, prompts: list) -> dict:
    """The graph against transformers' model of `model_dir` (float32) on `prompts` (id lists):
    max |Δlogit| teacher-forced on transformers' greedy continuation, top-1 agreement there, and
    whether the runtime's cached greedy decoding gives the same tokens."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # generation-flag advice and load notes
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            results = _against(reference.eval(), parity_session(graph), model, prompts)
    finally:
        hf_logging.set_verbosity(verbosity)
    return results


def _against(reference, session, model: HFModel, prompts: list) -> dict:
    import torch

    diffs, agree, total, identical, scale = [], 0, 0, 0, 0.0
    for ids in prompts:
        theirs_tokens = reference_greedy(reference, ids, PARITY_NEW_TOKENS)
        sequence = ids + theirs_tokens
        with torch.no_grad():
            theirs = reference(torch.tensor([sequence])).logits[0].float().numpy()
        ours = full_logits(session, model, sequence)
        diffs.append(float(np.abs(ours - theirs).max()))
        scale = max(scale, float(np.abs(theirs).max()))
        agree += int((ours.argmax(-1) == theirs.argmax(-1)).sum())
        total += len(sequence)
        identical += greedy(session, model, ids, PARITY_NEW_TOKENS)[0] == theirs_tokens
    return {
        "reference": "transformers AutoModelForCausalLM of the checkpoint, float32",
        "max_abs_logit": scale,
        "max_abs_logit_diff": max(diffs),
        "top1_agreement": agree / total,
        "greedy_identical": f"{identical} / {len(prompts)}",
    }


def _can_compare_with_transformers() -> bool:
    return all(importlib.util.find_spec(name) for name in ("torch", "transformers"))


def _card(manifest: Manifest) -> str:
    """README.md of a bundle exported from a Hugging Face checkpoint, from its manifest."""
    source, quant = manifest.export.huggingface, manifest.export.quantization_report
    return model_card(
        manifest,
        origin=f"Exported from the Hugging Face checkpoint `{source.directory}` (config.json "
        f"sha256 `{source.config_sha256}`) by `scriptorium export`, without torch.",
        query_heads=source.query_heads,
        weights=[
            f"{quant.method}; MatMulNBits accuracy level: {quant.accuracy_level}.",
            "",
            *[f"- {kind}: {how}" for kind, how in (quant.storage or {}).items()],
        ],
        no_chat="The checkpoint has no chat template.",
    )


def _method(precision: str, keep_lm_head: bool) -> str:
    if precision == "fp32":
        return "none (float32 MatMul)"
    blocks, table = BLOCK_TYPES[precision]
    table = "float32" if keep_lm_head else table
    return (
        f"{precision}: projections as {blocks} blocks of {BLOCK} (gguf's quantizer), "
        f"token table and LM head {table}"
    )


def export_hf_llama(
    model_dir: str | Path,
    out_dir: str | Path,
    precision: str = "fp32",
    accuracy_level: int = ACCURACY_LEVEL,
    name: str | None = None,
    keep_lm_head: bool = False,
    parity: bool = True,
) -> Manifest:
    """Write the lean bundle of the Llama / Qwen2 checkpoint in `model_dir` to `out_dir`; return
    its manifest. `precision` is fp32, int8 or int4; `accuracy_level` MatMulNBits' (0 float
    activations, 4 int8); `keep_lm_head` leaves the token table and LM head in float32;
    `parity=False` skips the parity report."""
    from tokenizers import Tokenizer

    if precision not in bundle_manifest.PRECISIONS:
        raise ValueError(
            f"`precision` must be one of {', '.join(bundle_manifest.PRECISIONS)}, got {precision!r}"
        )
    if accuracy_level not in (0, 1, 2, 3, 4):
        raise ValueError(f"`accuracy_level` must be one of 0-4, got {accuracy_level!r}")
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    model = read_hf_llama(model_dir, precision, keep_lm_head)
    if not (model_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"tokenizer.json missing in {model_dir}: save the checkpoint's fast tokenizer first"
        )
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    config = bundle_manifest.load_json(model_dir / "config.json", "model config")
    generation = _read_json(model_dir / "generation_config.json")
    special = special_tokens(model_dir, config, generation, tokenizer)
    special["decoder_start_token_id"] = None
    add_bos = adds_bos(model_dir, tokenizer, special["bos_token_id"])
    prepare_out_dir(out_dir)
    (out_dir / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    graph = build_llama_graph(model, out_dir / "model.onnx", accuracy_level=accuracy_level)
    report = {}
    if parity:
        bos = special["bos_token_id"] if add_bos else None
        prompts = [prompt_ids(tokenizer, text, bos) for text in PARITY_PROMPTS]
        encoder = SimpleNamespace(
            encode=lambda text: SimpleNamespace(ids=prompt_ids(tokenizer, text, bos))
        )
        with tempfile.TemporaryDirectory() as scratch:
            reference = None
            if precision != "fp32":
                reference = Path(scratch) / "reference.onnx"
                build_llama_graph(model, reference, fp32=True)
            report = parity_report(out_dir / "model.onnx", reference, model, encoder)
        if precision != "fp32":
            report["reference"] = "an fp32 graph of the same weights"
        if _can_compare_with_transformers():
            report["transformers"] = transformers_parity(
                model_dir, out_dir / "model.onnx", model, prompts
            )
    storage = {
        kind: how.replace("carried over", "quantized at export")
        for kind, how in graph["storage"].items()
    }
    weights = {path.name: sha256_of(path) for path in weight_files(model_dir)}
    manifest = llama_manifest(
        model,
        out_dir,
        name=name or model_dir.name,
        precision=precision,
        special_tokens=SpecialTokens(**special),
        add_bos_token=add_bos,
        generation_defaults=bundle_manifest.generation_defaults(generation),
        parity=report,
        license=config.get("license") or "",
        chat=ChatSection.from_json(hf_chat_fields(model_dir).get("chat")),
        export={
            "source": "huggingface",
            "description": f"{model.architecture} model exported from a Hugging Face checkpoint",
            "huggingface": {
                "directory": model_dir.name,
                "config_sha256": hashlib.sha256(
                    (model_dir / "config.json").read_bytes()
                ).hexdigest(),
                "weights_sha256": weights,
                "weight_dtypes": sorted(set(model.dtypes.values())),
                "config": model.metadata,
                "query_heads": model.heads,
                "kv_heads": model.kv_heads,
                "qk_rows": "permuted to llama.cpp's interleaved rotary layout"
                if model.architecture == "llama"
                else "as stored (half-split rotary)",
            },
            "quantization": {
                "method": _method(precision, keep_lm_head),
                "accuracy_level": graph["accuracy_level"] if precision != "fp32" else None,
                "storage": storage,
                "tied_embeddings": graph["tied_embeddings"],
                "summary": ", ".join(f"{k}: {v}" for k, v in storage.items()),
            },
            "graph": {"nodes": graph["nodes"], "weight_bytes": graph["weight_bytes"]},
            "versions": _versions(),
        },
    )
    return write_bundle(out_dir, manifest, _card(manifest))


def _versions() -> dict:
    from importlib.metadata import version

    names = ("safetensors", "gguf", "onnx", "onnxruntime", "tokenizers", "numpy")
    return {name: version(name) for name in names}
