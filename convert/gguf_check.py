"""Bounds and consistency checks on a GGUF file, before and after `gguf.GGUFReader` reads it.

`prescan(path)` walks the header, the metadata and the tensor table with `struct` before the
reader sees the file, because the reader trusts every count: an array claiming 2^40 entries
makes it loop past the end of the file without end, and it keeps about 1.3 KB of Python objects
per array entry (1.7 GB for the largest metadata the caps below allow). Every count and length
must fit in the bytes left in the file and within the caps; every tensor's type, shape and offset
must describe exactly the bytes up to the next tensor (a changed type byte changes its size).

`check_hyperparameters`, `check_tensors` and `check_tokenizer_fields` check what the reader
returned, for the importer (convert/gguf_read.py): integer hyper-parameters in range, every
tensor the graph reads present with the shape they imply and a float type for norms and biases,
the tokenizer fields of the right types, special token ids inside the vocabulary and the
vocabulary no larger than the embedding table.

Every failure raises `GGUFError` (a ValueError) with one line naming the field or tensor and what
was expected. Limits are documented in docs/GGUF.md, "Limits". This module reads no tensor data.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

MAX_VOCAB = 1 << 18  # tokens (and token types, scores): above Llama 3's 128,256 and Qwen2's 151,936
MAX_MERGES = 1 << 19  # BPE merges: above Llama 3's 280,147 and Qwen2's 151,387
MAX_ARRAY_ENTRIES = 3 * MAX_VOCAB + MAX_MERGES  # all metadata arrays together (the reader's cost)
MAX_STRING = 1 << 24  # bytes of one metadata string (chat templates are a few KB)
MAX_KEYS = 1 << 12  # metadata keys
MAX_TENSORS = 1 << 16
MAX_NAME = 1 << 10  # bytes of a key or tensor name
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
MAX_CONTEXT = 1 << 20  # context length: the rotary tables are context × head size / 2 floats
MAX_LAYERS = 1 << 12
MAX_WIDTH = 1 << 20  # embedding, feed-forward and head sizes; head counts
VERSIONS = (2, 3)  # what gguf's reader reads
STRING, ARRAY = 8, 9  # GGUF metadata value types
# struct formats of the scalar metadata types: uint8, int8, uint16, int16, uint32, int32, float32,
# bool, uint64, int64, float64
SCALAR_FORMATS = dict(zip((0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12), "BbHhIif?Qqd"))
MERGES = "tokenizer.ggml.merges"
FLOAT_TYPES = ("F32", "F16", "BF16")
SPECIAL_IDS = [
    f"tokenizer.ggml.{name}_token_id"
    for name in ("bos", "eos", "eot", "eom", "unknown", "padding", "seperator", "cls", "mask")
]


class GGUFError(ValueError):
    """A GGUF file that is malformed, over a limit, or inconsistent with itself."""


def _bad(path: Path, detail: str) -> GGUFError:
    return GGUFError(f"{path} is not a readable GGUF file: {detail}")


class _Cursor:
    """A position in the mapped file that never moves past its end."""

    def __init__(self, path: Path, data, order: str):
        self.path, self.data, self.order, self.at = path, data, order, 0
        self.entries = 0  # array entries seen so far, against MAX_ARRAY_ENTRIES

    def take(self, size: int, what: str) -> int:
        start = self.at
        if size > len(self.data) - start:
            raise _bad(
                self.path,
                f"{what} needs {size} bytes at offset {start}, past the end of the "
                f"file ({len(self.data)} bytes)",
            )
        self.at += size
        return start

    def number(self, fmt: str, what: str):
        start = self.take(struct.calcsize(fmt), what)
        return struct.unpack_from(self.order + fmt, self.data, start)[0]

    def string(self, what: str, limit: int = MAX_STRING) -> bytes:
        size = self.number("Q", f"the length of {what}")
        if size > limit:
            raise _bad(self.path, f"{what} must be at most {limit} bytes, got {size}")
        start = self.take(size, what)
        return bytes(self.data[start : start + size])

    def name(self, what: str) -> str:
        raw = self.string(what, MAX_NAME)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(self.path, f"{what} must be UTF-8, got {raw[:40]!r}") from None


def _scan_value(cur: _Cursor, key: str, kind: int):
    """Skip one metadata value of type `kind`; returns it when it is a scalar."""
    if kind in SCALAR_FORMATS:
        return cur.number(SCALAR_FORMATS[kind], f"`{key}`")
    if kind == STRING:
        cur.string(f"`{key}`")
        return None
    if kind != ARRAY:
        raise _bad(cur.path, f"`{key}` has unknown value type {kind}")
    item = cur.number("I", f"the item type of `{key}`")
    count = cur.number("Q", f"the length of `{key}`")
    if item not in SCALAR_FORMATS and item != STRING:
        raise _bad(cur.path, f"`{key}` must be an array of numbers or strings, got type {item}")
    limit = MAX_MERGES if key == MERGES else MAX_VOCAB
    cur.entries += count
    if count > limit or cur.entries > MAX_ARRAY_ENTRIES:
        raise _bad(
            cur.path,
            f"`{key}` claims {count} entries; a GGUF file may have at most {limit} "
            f"({MAX_ARRAY_ENTRIES} in all its metadata arrays)",
        )
    least = 8 if item == STRING else struct.calcsize(SCALAR_FORMATS[item])
    if count * least > len(cur.data) - cur.at:
        raise _bad(
            cur.path,
            f"`{key}` claims {count} entries, which need at least {count * least} "
            f"bytes, but {len(cur.data) - cur.at} are left in the file",
        )
    if item == STRING:
        for index in range(count):
            cur.string(f"`{key}` entry {index}")
    else:
        cur.take(count * least, f"`{key}`")
    return None


def _tensor_table(cur: _Cursor, count: int, alignment: int) -> list[tuple]:
    """(name, type name, dims, offset, bytes) of every tensor, checked on its own."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    tensors, names = [], set()
    for index in range(count):
        name = cur.name(f"the name of tensor {index}")
        if name in names:
            raise _bad(cur.path, f"tensor {name!r} appears twice")
        names.add(name)
        n_dims = cur.number("I", f"the rank of tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise _bad(
                cur.path, f"tensor {name!r} must have 1 to {MAX_DIMS} dimensions, got {n_dims}"
            )
        dims = [cur.number("Q", f"the shape of tensor {name!r}") for _ in range(n_dims)]
        raw_type = cur.number("I", f"the type of tensor {name!r}")
        offset = cur.number("Q", f"the offset of tensor {name!r}")
        try:
            kind = GGMLQuantizationType(raw_type)
        except ValueError:
            raise _bad(cur.path, f"tensor {name!r} has unknown type {raw_type}") from None
        block, size = GGML_QUANT_SIZES[kind]
        if min(dims) < 1 or dims[0] % block:
            raise _bad(
                cur.path,
                f"tensor {name!r} of type {kind.name} must have dimensions ≥ 1, the "
                f"first a multiple of {block}, got {dims}",
            )
        if offset % alignment:
            raise _bad(
                cur.path, f"tensor {name!r} must start at a multiple of {alignment}, got {offset}"
            )
        elements = 1
        for dim in dims:
            elements *= dim
        tensors.append((name, kind.name, dims, offset, elements // block * size))
    return tensors


def _check_extents(path: Path, tensors: list[tuple], start: int, size: int, alignment: int):
    """Tensors lie in order, each exactly its type's bytes apart (up to the padding)."""
    ordered = sorted(tensors, key=lambda t: t[3])
    for i, (name, kind, dims, offset, nbytes) in enumerate(ordered):
        end = start + offset + nbytes
        if end > size:
            raise _bad(
                path,
                f"tensor {name!r} ({kind}, shape {dims}) needs {nbytes} bytes from offset "
                f"{start + offset}, past the end of the file ({size} bytes)",
            )
        following = start + ordered[i + 1][3] if i + 1 < len(ordered) else size
        padded = -(-(offset + nbytes) // alignment) * alignment + start
        if not end <= following <= padded:
            raise _bad(
                path,
                f"tensor {name!r} of type {kind} and shape {dims} takes {nbytes} bytes, "
                f"but {following - start - offset} lie before the next tensor or the end of the "
                "file: its type or shape does not match its data",
            )


def prescan(path: str | Path) -> None:
    """Check the header, metadata and tensor table of `path` against its size and the caps;
    raises GGUFError naming the first count, length or tensor that does not fit."""
    path = Path(path)
    with open(path, "rb") as handle:
        size = path.stat().st_size
        if size < 24:
            raise _bad(path, f"{size} bytes, shorter than a GGUF header")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _scan(path, data, size)


def _scan(path: Path, data, size: int) -> None:
    if data[:4] != b"GGUF":
        raise _bad(path, "it does not start with 'GGUF'")
    (version,) = struct.unpack_from("<I", data, 4)
    order = ">" if version & 0xFFFF == 0 else "<"  # a big-endian file
    cur = _Cursor(path, data, order)
    cur.at = 4
    version = cur.number("I", "the version")
    if version not in VERSIONS:
        raise _bad(path, f"GGUF version must be one of {list(VERSIONS)}, got {version}")
    n_tensors = cur.number("Q", "the tensor count")
    n_keys = cur.number("Q", "the metadata count")
    if n_tensors > MAX_TENSORS or n_keys > MAX_KEYS:
        raise _bad(
            path,
            f"a GGUF file may have at most {MAX_TENSORS} tensors and {MAX_KEYS} metadata "
            f"keys, got {n_tensors} and {n_keys}",
        )
    alignment = 32  # GGUF's default
    for index in range(n_keys):
        key = cur.name(f"metadata key {index}")
        kind = cur.number("I", f"the type of `{key}`")
        value = _scan_value(cur, key, kind)
        if key == "general.alignment":
            if kind != 4 or not value or value & (value - 1):
                raise _bad(path, f"`general.alignment` must be a power of 2, got {value}")
            alignment = value
    tensors = _tensor_table(cur, n_tensors, alignment)
    start = -(-cur.at // alignment) * alignment
    _check_extents(path, tensors, start, size, alignment)


def _lacks(fields: dict, key: str, default) -> None:
    if key not in fields and default is None:
        raise GGUFError(f"the file lacks the metadata key '{key}'")


def _integer(fields: dict, key: str, low: int, high: int, default=None) -> int:
    _lacks(fields, key, default)
    value = fields.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise GGUFError(f"`{key}` must be an integer in [{low}, {high}], got {value!r}")
    return value


def check_positive(fields: dict, key: str, default=None) -> float:
    """`key`'s value, which must be a finite number > 0."""
    _lacks(fields, key, default)
    value = fields.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not 0 < value < float("inf"):
        raise GGUFError(f"`{key}` must be a finite number > 0, got {value!r}")
    return float(value)


def check_hyperparameters(fields: dict, arch: str) -> dict:
    """The integer and float hyper-parameters of `arch`, each checked: {name: value}."""
    p = f"{arch}."
    hidden = _integer(fields, p + "embedding_length", 1, MAX_WIDTH)
    heads = _integer(fields, p + "attention.head_count", 1, MAX_WIDTH)
    kv_heads = _integer(fields, p + "attention.head_count_kv", 1, heads, heads)
    if heads % kv_heads:
        raise GGUFError(
            f"`{p}attention.head_count` ({heads}) must be a multiple of "
            f"`{p}attention.head_count_kv`, got {kv_heads}"
        )
    head_size = _integer(fields, p + "attention.key_length", 2, MAX_WIDTH, hidden // heads)
    rotary = fields.get(p + "rope.dimension_count", head_size)
    # a partial rotary (phi3) as GroupQueryAttention takes it: half of it a multiple of 8
    partial = isinstance(rotary, int) and 0 < rotary < head_size and rotary % 16 == 0
    if head_size % 2 or not (rotary == head_size or partial):
        raise GGUFError(
            f"`{p}rope.dimension_count` must equal the head size {head_size} (an even number) or "
            f"be a smaller multiple of 16, got {rotary!r}"
        )
    return {
        "layers": _integer(fields, p + "block_count", 1, MAX_LAYERS),
        "hidden": hidden,
        "intermediate": _integer(fields, p + "feed_forward_length", 1, MAX_WIDTH),
        "heads": heads,
        "kv_heads": kv_heads,
        "head_size": head_size,
        "rotary_dim": rotary,
        "context": _integer(fields, p + "context_length", 1, MAX_CONTEXT),
        "rms_eps": check_positive(fields, p + "attention.layer_norm_rms_epsilon"),
        "rope_base": check_positive(fields, p + "rope.freq_base", 10000.0),
    }


def check_tensors(tensors: dict, arch: str, hp: dict, block_count_key: str) -> None:
    """Every tensor the graph reads is present, with the (K, N) shape the hyper-parameters give
    and, for norms and biases, a float type."""
    d, q, kv = hp["hidden"], hp["heads"] * hp["head_size"], hp["kv_heads"] * hp["head_size"]
    ff = hp["intermediate"]
    vocab = tensors["token_embd.weight"].shape
    layer = {
        "attn_norm.weight": [d],
        "attn_q.weight": [d, q],
        "attn_k.weight": [d, kv],
        "attn_v.weight": [d, kv],
        "attn_output.weight": [q, d],
        "ffn_norm.weight": [d],
        "ffn_gate.weight": [d, ff],
        "ffn_up.weight": [d, ff],
        "ffn_down.weight": [ff, d],
    }
    if arch in ("qwen3", "gemma3"):  # RMS norms over each head's query and key, before rotary
        layer.update(
            {"attn_q_norm.weight": [hp["head_size"]], "attn_k_norm.weight": [hp["head_size"]]}
        )
    if arch in ("gemma2", "gemma3", "olmo2"):  # RMSNorms of the attention's and MLP's outputs
        layer.update({"post_attention_norm.weight": [d], "post_ffw_norm.weight": [d]})
    if arch == "olmo2":  # no norms before attention and MLP; q and k normed across heads
        del layer["attn_norm.weight"], layer["ffn_norm.weight"]
        layer.update({"attn_q_norm.weight": [q], "attn_k_norm.weight": [kv]})
    if arch == "phi3":  # q|k|v and gate|up stored fused
        for name in ("attn_q", "attn_k", "attn_v", "ffn_gate"):
            del layer[f"{name}.weight"]
        layer.update({"attn_qkv.weight": [d, q + 2 * kv], "ffn_up.weight": [d, 2 * ff]})
    optional = {"attn_q.bias": [q], "attn_k.bias": [kv], "attn_v.bias": [kv]}
    rows = int(vocab[1]) if len(vocab) == 2 else None
    expected = {"token_embd.weight": [d, rows], "output_norm.weight": [d]}
    if "output.weight" in tensors:
        expected["output.weight"] = [d, rows]
    for name in ("rope_freqs", "rope_factors_long", "rope_factors_short"):
        if f"{name}.weight" in tensors:
            expected[f"{name}.weight"] = [hp["rotary_dim"] // 2]
    for i in range(hp["layers"]):
        for name, shape in layer.items():
            if f"blk.{i}.{name}" not in tensors:
                raise GGUFError(
                    f"`{block_count_key}` is {hp['layers']} but the file lacks the tensor "
                    f"'blk.{i}.{name}'"
                )
            expected[f"blk.{i}.{name}"] = shape
        expected.update(
            {f"blk.{i}.{n}": s for n, s in optional.items() if f"blk.{i}.{n}" in tensors}
        )
    for name, shape in expected.items():
        if name not in tensors:
            raise GGUFError(f"the file lacks the tensor {name!r}")
        tensor = tensors[name]
        actual = [int(x) for x in tensor.shape]
        if actual != shape:
            raise GGUFError(f"tensor {name!r} must have shape {shape}, got {actual}")
        kind = tensor.tensor_type.name
        if len(shape) == 1 and kind not in FLOAT_TYPES:
            raise GGUFError(
                f"tensor {name!r} must be of a float type ({', '.join(FLOAT_TYPES)}), got {kind}"
            )


def check_tokenizer_fields(fields: dict, rows: int) -> None:
    """Types and lengths of the tokenizer fields; special ids inside the vocabulary; no more
    tokens than the embedding table's `rows`."""
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        return  # build_tokenizer says there is no tokenizer to build
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise GGUFError("`tokenizer.ggml.tokens` must be an array of strings")
    if len(tokens) > rows:
        raise GGUFError(
            f"`tokenizer.ggml.tokens` has {len(tokens)} tokens but 'token_embd.weight' has "
            f"{rows} rows: every token needs an embedding"
        )
    for key, kinds in (("tokenizer.ggml.token_type", int), ("tokenizer.ggml.scores", float)):
        value = fields.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, kinds) for v in value):
            raise GGUFError(f"`{key}` must be an array of {kinds.__name__}s")
        if len(value) != len(tokens):
            raise GGUFError(
                f"`{key}` must have one entry per token ({len(tokens)}), got {len(value)}"
            )
    merges = fields.get(MERGES)
    if merges is not None:
        vocab = set(tokens)
        if not isinstance(merges, list):
            raise GGUFError(f"`{MERGES}` must be an array of strings, got {type(merges).__name__}")
        for index, merge in enumerate(merges):
            parts = merge.split(" ", 1) if isinstance(merge, str) else []
            if len(parts) != 2 or not {parts[0], parts[1], parts[0] + parts[1]} <= vocab:
                raise GGUFError(
                    f"`{MERGES}` entry {index} must be two tokens of the vocabulary separated by "
                    f"a space, which together make a token too, got {merge!r}"
                )
    for key in SPECIAL_IDS:
        value = fields.get(key)
        if value is not None:
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value < len(tokens)
            ):
                raise GGUFError(f"`{key}` must be a token id in [0, {len(tokens)}), got {value!r}")
    for key in ("tokenizer.chat_template", "tokenizer.ggml.model", "tokenizer.ggml.pre"):
        value = fields.get(key)
        if value is not None and not isinstance(value, str):
            raise GGUFError(f"`{key}` must be a string, got {value!r}")
