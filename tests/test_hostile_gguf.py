"""Hostile GGUF files and adapter weights (issue 37, items 3, 6 and 7): each is refused at import
or load with one line naming the field, tensor or path and what was expected, and by
`scriptorium export gguf` with exit code 2 (1 for a failing disk), never a traceback, an endless
read or a bundle that fails later.

Every file is a tiny model (tests/gguf_models.py) with one thing broken: a metadata value set
over the usual one, a tensor left out, or bytes patched after writing (an array length, a tensor
type). The 2^40-entry array is also read in a child process whose address space is capped at
2 GB, so a regression fails instead of eating the machine.
"""

from __future__ import annotations

import errno
import json
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFValueType
from markdown_it import MarkdownIt

from convert import gguf as gguf_export
from convert.gguf import export_gguf
from convert.gguf_check import MAX_VOCAB, prescan
from export.cli import main
from runtime.manifest import LoraSlot
from tests.gguf_models import tiny_vocabulary, write_tiny_gguf

U32, U64 = GGUFValueType.UINT32, GGUFValueType.UINT64
TOKENS, MERGES, TYPES = tiny_vocabulary()


def _key(name: str) -> bytes:
    """A GGUF string as written: uint64 length, then the bytes."""
    return struct.pack("<Q", len(name)) + name.encode()


def patch_array_length(path: Path, key: str, length: int) -> Path:
    """Set the entry count of the metadata array `key` (uint32 type, uint32 item type, uint64
    count follow the key) without touching its entries; zero bytes are appended so that the
    rest of the file is whole 4-byte entries, as in the file that made gguf's reader loop
    without end (with a partial entry at the end it fails instead)."""
    data = bytearray(path.read_bytes())
    at = data.index(_key(key)) + len(_key(key)) + 8
    data[at : at + 8] = struct.pack("<Q", length)
    data += bytes(-(len(data) - at - 8) % 4)
    path.write_bytes(bytes(data))
    return path


def patch_tensor(path: Path, name: str, kind: GGMLQuantizationType | None = None, dim0=None):
    """Change a tensor's declared type (the uint32 after its dimensions) or first dimension."""
    data = bytearray(path.read_bytes())
    at = data.index(_key(name)) + len(_key(name))
    (n_dims,) = struct.unpack_from("<I", data, at)
    if dim0 is not None:
        data[at + 4 : at + 12] = struct.pack("<Q", dim0)
    if kind is not None:
        type_at = at + 4 + 8 * n_dims
        data[type_at : type_at + 4] = struct.pack("<I", int(kind))
    path.write_bytes(bytes(data))
    return path


def _tiny(tmp_path: Path, quant: str = "Q4_1", **kwargs) -> Path:
    return write_tiny_gguf(tmp_path / "hostile.gguf", "llama", quant, **kwargs)


def _token_type_2_40(tmp_path):
    return patch_array_length(_tiny(tmp_path), "tokenizer.ggml.token_type", 2**40)


def _tokens_2_40(tmp_path):
    return patch_array_length(_tiny(tmp_path), "tokenizer.ggml.tokens", 2**40)


def _vocabulary_over_cap(tmp_path):
    types = TYPES + [1] * (MAX_VOCAB + 1 - len(TYPES))
    return _tiny(tmp_path, "F32", metadata={"tokenizer.ggml.token_type": types})


def _tensor_past_the_end(tmp_path):
    return patch_tensor(_tiny(tmp_path), "output_norm.weight", dim0=2**40)


def _tensor_type_changed(tmp_path):
    return patch_tensor(_tiny(tmp_path), "blk.0.attn_q.weight", GGMLQuantizationType.Q4_0)


def _norm_of_integers(tmp_path):  # same size as F32: only the type family tells
    return patch_tensor(_tiny(tmp_path, "F32"), "blk.1.ffn_norm.weight", GGMLQuantizationType.I32)


def _tokens_beyond_embeddings(tmp_path):
    extra = [f"<extra_{i}>" for i in range(5)]
    return _tiny(
        tmp_path,
        metadata={
            "tokenizer.ggml.tokens": TOKENS + extra,
            "tokenizer.ggml.token_type": TYPES + [1] * 5,
        },
    )


CASES = {
    # item 3: counts against the file's size and the caps
    "token_type claims 2^40 entries": (
        _token_type_2_40,
        r"`tokenizer.ggml.token_type` claims 1099511627776 entries.*at most 262144",
    ),
    "tokens claim 2^40 entries": (_tokens_2_40, r"`tokenizer.ggml.tokens` claims 1099511627776"),
    "vocabulary over the cap": (
        _vocabulary_over_cap,
        rf"`tokenizer.ggml.token_type` claims {MAX_VOCAB + 1} entries.*at most {MAX_VOCAB}",
    ),
    "tensor past the end of the file": (
        _tensor_past_the_end,
        r"tensor 'output_norm.weight' .* past the end of the file",
    ),
    # item 6: hyper-parameters, tensors and tokenizer fields
    "0 heads": (
        lambda p: _tiny(p, metadata={"llama.attention.head_count": (0, U32)}),
        r"`llama.attention.head_count` must be an integer in \[1, .*\], got 0",
    ),
    "0 KV heads": (
        lambda p: _tiny(p, metadata={"llama.attention.head_count_kv": (0, U32)}),
        r"`llama.attention.head_count_kv` must be an integer in \[1, .*\], got 0",
    ),
    "missing tensor": (
        lambda p: _tiny(p, drop=("blk.1.ffn_up.weight",)),
        r"lacks the tensor 'blk.1.ffn_up.weight'",
    ),
    "block_count 2^32-1": (
        lambda p: _tiny(p, metadata={"llama.block_count": (2**32 - 1, U32)}),
        r"`llama.block_count` must be an integer in \[1, 4096\], got 4294967295",
    ),
    "block_count beyond the tensors": (
        lambda p: _tiny(p, metadata={"llama.block_count": (3, U32)}),
        r"`llama.block_count` is 3 but the file lacks the tensor 'blk.2.attn_norm.weight'",
    ),
    "non-string chat template": (
        lambda p: _tiny(p, metadata={"tokenizer.chat_template": (5, U32)}),
        r"`tokenizer.chat_template` must be a string, got 5",
    ),
    "merge of unknown tokens": (
        lambda p: _tiny(p, metadata={"tokenizer.ggml.merges": MERGES[:5] + ["nosuch token"]}),
        r"`tokenizer.ggml.merges` entry 5 must be two tokens of the vocabulary separated by "
        r"a space, which together make a token too, got 'nosuch token'",
    ),
    "merge making no token": (  # both sides are tokens, their concatenation is not
        lambda p: _tiny(
            p, metadata={"tokenizer.ggml.merges": MERGES + ["<|im_start|> <|im_end|>"]}
        ),
        rf"`tokenizer.ggml.merges` entry {len(MERGES)} .*, got '<\|im_start\|> <\|im_end\|>'",
    ),
    "merge without a space": (
        lambda p: _tiny(p, metadata={"tokenizer.ggml.merges": ["Ġt"] + MERGES}),
        r"`tokenizer.ggml.merges` entry 0 must be two tokens .*, got 'Ġt'",
    ),
    "unknown-token id out of range": (
        lambda p: _tiny(p, metadata={"tokenizer.ggml.unknown_token_id": (10**6, U32)}),
        rf"`tokenizer.ggml.unknown_token_id` must be a token id in \[0, {len(TOKENS)}\), "
        r"got 1000000",
    ),
    "eos id out of range": (
        lambda p: _tiny(p, metadata={"tokenizer.ggml.eos_token_id": (2**32 - 1, U32)}),
        r"`tokenizer.ggml.eos_token_id` must be a token id",
    ),
    "context length 2^63": (
        lambda p: _tiny(p, metadata={"llama.context_length": (2**63, U64)}),
        r"`llama.context_length` must be an integer in \[1, 1048576\], got 9223372036854775808",
    ),
    "head size of the wrong shape": (
        lambda p: _tiny(p, metadata={"llama.attention.head_count": (8, U32)}),
        r"`llama.rope.dimension_count`|'blk.0.attn_q.weight' must have shape",
    ),
    # item 7: a vocabulary larger than the embedding table, changed tensor types
    "more tokens than embedding rows": (
        _tokens_beyond_embeddings,
        rf"`tokenizer.ggml.tokens` has {len(TOKENS) + 5} tokens but 'token_embd.weight' has "
        rf"{len(TOKENS)} rows",
    ),
    "tensor type byte changed": (
        _tensor_type_changed,
        r"tensor 'blk.0.attn_q.weight' of type Q4_0 .* does not match its data",
    ),
    "norm of integers": (
        _norm_of_integers,
        r"tensor 'blk.1.ffn_norm.weight' must be of a float type \(F32, F16, BF16\), got I32",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_gguf_is_refused_in_one_line(tmp_path, capsys, case):
    build, message = CASES[case]
    path = build(tmp_path)
    with pytest.raises(ValueError, match=message):
        export_gguf(path, tmp_path / "bundle", parity=False)
    assert not (tmp_path / "bundle").exists()
    assert main(["gguf", str(path), str(tmp_path / "bundle"), "--no-parity"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("scriptorium export gguf: error: "), err


def test_a_vocabulary_at_the_cap_passes_the_scan(tmp_path):
    # 2^18 is above every llama / qwen2 vocabulary (Llama 3 128,256, Qwen2 151,936 rows).
    path = _tiny(tmp_path, "F32", metadata={"tokenizer.ggml.token_type": [1] * MAX_VOCAB})
    prescan(path)


CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from export.cli import main
sys.exit(main(["gguf", sys.argv[1], sys.argv[2], "--no-parity"]))
"""


def test_2_40_entry_array_is_refused_with_bounded_memory(tmp_path):
    path = _token_type_2_40(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(tmp_path / "bundle")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "`tokenizer.ggml.token_type` claims 1099511627776 entries" in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (errno.ENOSPC, "No space left on device"),
        (errno.EROFS, "Read-only file system"),
        (errno.EACCES, "Permission denied"),
    ],
)
def test_a_failing_disk_is_one_line(tmp_path, capsys, monkeypatch, code, text):
    path = _tiny(tmp_path, "F32")
    target = tmp_path / "bundle" / "model.onnx"

    def failing(*args, **kwargs):
        raise OSError(code, text, str(target))

    monkeypatch.setattr(gguf_export, "build_llama_graph", failing)
    assert main(["gguf", str(path), str(tmp_path / "bundle"), "--no-parity"]) == 1
    err = capsys.readouterr().err
    assert err == f"scriptorium export gguf: error: {target}: {text}\n"


def test_an_out_dir_under_a_file_is_one_line(tmp_path, capsys):
    path = _tiny(tmp_path, "F32")
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "bundle"
    assert main(["gguf", str(path), str(out), "--no-parity"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"`out_dir` must be a directory we can create, got {out}" in err


# ---- adapters (item 7): dtypes and finiteness, at export from peft and at load


def _slots() -> dict:
    return {"lora.0.o_proj": LoraSlot(A="lora.0.o_proj.A", B="lora.0.o_proj.B", k=8,
                                      parts=(("o_proj", 6),))}  # fmt: skip


@pytest.mark.parametrize(
    ("a", "message"),
    [
        (np.full((8, 2), 0.1, np.float16), r"'lora.0.o_proj.A' must be float32, got float16"),
        (np.full((8, 2), np.nan, np.float32), r"'lora.0.o_proj.A' holds non-finite values"),
        (np.full((8, 2), np.inf, np.float32), r"'lora.0.o_proj.A' holds non-finite values"),
    ],
)
def test_bad_adapter_weights_are_refused_at_load(tmp_path, a, message):
    from export.adapter import write_adapter_file
    from runtime.adapters import Adapter
    from runtime.bundle import BundleError

    path = tmp_path / "adapter.onnx_adapter"
    b = np.full((2, 6), 0.1, np.float32)
    write_adapter_file({"lora.0.o_proj.A": a, "lora.0.o_proj.B": b}, path)
    with pytest.raises(BundleError, match=message):
        Adapter(path, _slots())
    write_adapter_file(
        {"lora.0.o_proj.A": np.full((8, 2), 0.1, np.float32), "lora.0.o_proj.B": b}, path
    )
    assert Adapter(path, _slots()).parameters  # the same file with good weights loads


def test_non_finite_peft_weights_are_refused_at_export(tmp_path):
    from safetensors.numpy import save_file

    from export.adapter import read_peft

    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 4}))
    key = "base_model.model.model.layers.0.self_attn.o_proj.lora_{}.weight"
    weights = {key.format("A"): np.full((2, 8), np.nan, np.float32)}
    weights[key.format("B")] = np.zeros((6, 2), np.float32)
    save_file(weights, str(tmp_path / "adapter_model.safetensors"))
    with pytest.raises(ValueError, match=r"adapter weight .*lora_A.weight' holds non-finite"):
        read_peft(tmp_path)


# ---- metadata written into the model card as text (issue 44, item 3) --------------------------

ATTACKER = "http://127.0.0.1:9"
HOSTILE_LICENCE = (
    f'<img src={ATTACKER}/x.png style="position:fixed;width:100vw;height:100vh"> '
    f"[Log in]({ATTACKER}/login)\n\n"
    '<div style="position:fixed;inset:0;z-index:9999">covered</div>\n# | `pwned`'
)
HOSTILE_STEM = '<img src=x onerror="alert(1)">[Log in](javascript:alert(1))`'


class _Rendered(HTMLParser):
    """The tags, attributes and text of rendered HTML."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_gguf_metadata_is_written_into_the_card_as_text(tmp_path):
    path = write_tiny_gguf(
        tmp_path / f"{HOSTILE_STEM}.gguf",
        "llama",
        "Q4_1",
        metadata={"general.license": HOSTILE_LICENCE},
    )
    export_gguf(path, tmp_path / "bundle", parity=False)
    card = (tmp_path / "bundle" / "README.md").read_text()
    rendered = _Rendered()
    rendered.feed(MarkdownIt("commonmark").enable("table").render(card))
    # only the card's own structure: headings, its tables, paragraphs, lists, code spans
    assert {tag for tag, _ in rendered.tags} <= {
        "h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "code",
    }  # fmt: skip
    assert not any(attrs for _, attrs in rendered.tags)
    text = "".join(rendered.text)
    one_line = HOSTILE_LICENCE.replace("\n", "\\n")
    assert text.count(one_line) == 2  # the table's licence row and the Licence section, verbatim
    assert text.count(HOSTILE_STEM) == 2  # the heading and the origin line
    assert [tag for tag, _ in rendered.tags].count("h1") == 1  # the `# |` stayed in its line
