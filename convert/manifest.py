"""What exporters put in a bundle's manifest, sealing it, and the README.md model card
(docs/bundle.md is the contract; runtime/manifest.py's `Manifest` is the manifest itself).

Covers reading model facts from a checkpoint's config.json / generation_config.json, the
optional `scriptorium_controls.json` and `scriptorium_card.json` beside it, validating control
tokens against the tokenizer, the graphs' input/output names, file checksums (`seal` writes
manifest.json with them), and rendering the model card from the manifest. It does not run models.
"""

from __future__ import annotations

import dataclasses
import json
import re
import string
from pathlib import Path

from runtime.bundle import longrope_context, sha256_of
from runtime.config import GenerationConfig
from runtime.manifest import FileEntry, Graph, Manifest, Parity

PRECISIONS = ("fp32", "int8", "int4")
CONTROLS_FILE = "scriptorium_controls.json"
CARD_FILE = "scriptorium_card.json"
CONTROL_KINDS = ("choice", "numeric")
# transformers GenerationConfig fields that the runtime's GenerationConfig also has: all of its
# fields but the two that are ours.
GENERATION_FIELDS = tuple(
    field.name
    for field in dataclasses.fields(GenerationConfig)
    if field.name not in ("seed", "stop")
)
TRANSFORMERS_TOP_K = 50  # transformers' default top_k when sampling


def _first(*values):
    """The first value that is not None; a list (several EOS ids) gives its first element."""
    for value in values:
        if value is not None:
            return value[0] if isinstance(value, list) and value else value
    return None


def config_value(config: dict, *names, default=None):
    """The value of the first of `names` that `config` sets (architectures name things apart)."""
    return _first(*(config.get(name) for name in names), default)


def model_shape(config: dict, task: str) -> dict:
    """num_layers, num_heads (KV cache), head_size, hidden_size, vocab_size, context_length."""
    hidden = config_value(config, "hidden_size", "n_embd", "d_model")
    if task == "seq2seq":
        layers = config_value(config, "decoder_layers", "num_decoder_layers", "num_layers")
        heads = config_value(config, "decoder_attention_heads", "num_heads", "num_attention_heads")
        query_heads = heads
        vocab = config_value(config, "decoder_vocab_size", "vocab_size")
        context = config_value(config, "max_position_embeddings", "n_positions", default=512)
    else:
        layers = config_value(config, "num_hidden_layers", "n_layer", "num_layers")
        query_heads = config_value(config, "num_attention_heads", "n_head", "num_heads")
        heads = config_value(
            config,
            "num_key_value_heads",
            "num_kv_heads",
            "multi_query_group_num",
            default=query_heads,
        )
        # Falcon (and GPTBigCode) with `multi_query` share one KV head unless Falcon's
        # `new_decoder_architecture` says `num_kv_heads`; transformers' Falcon default is true.
        if config.get("multi_query") and not config.get("new_decoder_architecture"):
            heads = 1
        vocab = config.get("vocab_size")
        context = longrope_context(config) or config_value(
            config, "max_position_embeddings", "n_positions", "n_ctx", "seq_length"
        )
    head_size = config_value(config, "d_kv", "head_dim", default=hidden // query_heads)
    return {
        "num_layers": int(layers),
        "num_heads": int(heads),
        "head_size": int(head_size),
        "hidden_size": int(hidden),
        "vocab_size": int(vocab),
        "context_length": int(context or 2048),
    }


def special_tokens(config: dict, generation: dict, tokenizer) -> dict:
    """bos/eos/pad/decoder-start ids: generation_config.json first, then config.json, tokenizer."""

    def pick(key: str):
        return _first(generation.get(key), config.get(key), getattr(tokenizer, key, None))

    tokens = {key: pick(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")}
    start = _first(generation.get("decoder_start_token_id"), config.get("decoder_start_token_id"))
    if config.get("is_encoder_decoder") and start is None:
        start = tokens["pad_token_id"]
    tokens["decoder_start_token_id"] = start
    return {key: None if value is None else int(value) for key, value in tokens.items()}


def generation_defaults(generation: dict) -> dict:
    """The generation_config.json fields the runtime understands, with transformers' semantics.

    transformers samples with top_k = 50 unless told otherwise; the runtime's default is 0 (off),
    so a checkpoint that samples without naming top_k gets 50 written out. `bad_words_ids` of
    single tokens (Marian forbids its pad token) become `suppress_tokens`.
    """
    defaults = {k: generation[k] for k in GENERATION_FIELDS if generation.get(k) is not None}
    if defaults.get("do_sample") and "top_k" not in defaults:
        defaults["top_k"] = TRANSFORMERS_TOP_K
    single_bad = [ids[0] for ids in generation.get("bad_words_ids") or [] if len(ids) == 1]
    if single_bad:
        defaults["suppress_tokens"] = sorted(set(defaults.get("suppress_tokens", []) + single_bad))
    return defaults


def add_bos_token(hf_tokenizer, tokenizer, bos_token_id: int | None) -> bool:
    """Whether the checkpoint's tokenizer puts BOS in front of a prompt that plain encoding lacks.

    `tokenizer` is the bundle's `tokenizers.Tokenizer`; the runtime encodes causal-LM prompts
    without special tokens and prepends BOS when the manifest says so.
    """
    if bos_token_id is None:
        return False
    text = "In the beginning"
    theirs = list(hf_tokenizer(text)["input_ids"])
    ours = tokenizer.encode(text, add_special_tokens=False).ids
    return theirs[:1] == [bos_token_id] and ours[:1] != [bos_token_id]


def load_json(path: Path, what: str) -> dict:
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({what}): {error}") from error
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object ({what}), got {type(value).__name__}")
    return value


def check_controls(controls: dict, tokenizer) -> dict:
    """Validate controls (docs/bundle.md): each value maps to one special token of the tokenizer."""
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    for name, spec in controls.items():
        if not isinstance(spec, dict):
            raise ValueError(f"control `{name}` must be an object, got {spec!r}")
        if spec.get("kind") not in CONTROL_KINDS:
            raise ValueError(
                f"control `{name}`: `kind` must be one of {', '.join(CONTROL_KINDS)}, "
                f"got {spec.get('kind')!r}"
            )
        values = spec.get("values")
        if not isinstance(values, dict) or not values:
            raise ValueError(
                f"control `{name}`: `values` must be a non-empty object, got {values!r}"
            )
        for value, token in values.items():
            if spec["kind"] == "numeric":
                try:
                    float(value)
                except ValueError:
                    raise ValueError(
                        f"control `{name}`: numeric values must be numbers, got {value!r}"
                    ) from None
            if token not in special:
                raise ValueError(
                    f"control `{name}`: value {value!r} maps to {token!r}, which the tokenizer "
                    "does not know as a special token"
                )
    return controls


def graph_entry(file: str, path: Path) -> Graph:
    """{file, inputs, outputs} with the names read from the ONNX graph, `kv_cache`:
    "shared-buffer" when its attention is GroupQueryAttention, whose past and present may be one
    preallocated buffer (the runtime then appends to the cache in place), else "separate"; and
    `one_row_steps` when such a graph has 4-bit MatMulNBits with float activations (accuracy
    level 0), whose one-row kernel is fast and sums apart from the many-row one."""
    import onnx

    from runtime.models import SHARED_BUFFER

    model = onnx.load(str(path), load_external_data=False)
    shared = any(node.op_type == "GroupQueryAttention" for node in model.graph.node)
    return Graph(
        file=file,
        inputs=tuple(node.name for node in model.graph.input),
        outputs=tuple(node.name for node in model.graph.output),
        kv_cache=SHARED_BUFFER if shared else "separate",
        one_row_steps=True if shared and any(map(_float_4bit, model.graph.node)) else None,
    )


def _float_4bit(node) -> bool:
    """Whether `node` is a 4-bit MatMulNBits at accuracy level 0 (both the op's defaults)."""
    if node.op_type != "MatMulNBits":
        return False
    attributes = {a.name: a.i for a in node.attribute if a.name in ("bits", "accuracy_level")}
    return attributes.get("bits", 4) == 4 and attributes.get("accuracy_level", 0) == 0


def file_entries(directory: Path) -> dict[str, FileEntry]:
    """sha256 and size of every file in `directory` except manifest.json."""
    return {
        path.name: FileEntry(sha256=sha256_of(path), size=path.stat().st_size)
        for path in sorted(directory.iterdir())
        if path.is_file() and path.name != "manifest.json"
    }


def seal(
    bundle_dir: Path, manifest: Manifest | None = None, *, ensure_ascii: bool = True
) -> Manifest:
    """Record the sha256 and size of every file of `bundle_dir` in the manifest's `files` and
    write manifest.json (`Manifest.write`); return the sealed manifest. The bundle's own
    manifest.json is read when `manifest` is None. Call it last: the runtime refuses a bundle
    whose files changed after sealing. `ensure_ascii=False` writes non-ASCII characters as they
    are (the manifests written by train/ and export/ngram_index.py), True escapes them."""
    path = Path(bundle_dir) / "manifest.json"
    if manifest is None:
        manifest = Manifest.read(path)
    elif not isinstance(manifest, Manifest):
        raise ValueError(f"`manifest` must be a Manifest, got {type(manifest).__name__}")
    sealed = dataclasses.replace(manifest, files=file_entries(Path(bundle_dir)))
    return sealed.write(path, ensure_ascii=ensure_ascii)


def write_bundle_metadata(directory: Path, manifest: Manifest) -> Manifest:
    """Write README.md from `manifest`, then seal the bundle (manifest.json with checksums)."""
    (directory / "README.md").write_text(model_card(manifest))
    return seal(directory, manifest)


def _fmt(value) -> str:
    """A card table cell: floats to 4 significant digits, a dict as `key: value; …` (a nested
    dict in parentheses), a list comma-separated, and `|` escaped so the cell stays one cell.

    >>> print(_fmt({"run": "a|b", "data": {"loss": 0.123456, "books": ["Mark", "John"]}}))
    run: a\\|b; data: (loss: 0.1235; books: Mark, John)
    """
    return re.sub(r"(?<!\\)\|", r"\\|", _plain(value))  # a pipe `card_text` escaped stays as it is


def _plain(value, nested: bool = False) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        text = "; ".join(f"{key}: {_plain(item, nested=True)}" for key, item in value.items())
        return f"({text})" if nested else text
    if isinstance(value, list | tuple):
        return ", ".join(_plain(item, nested=True) for item in value)
    return str(value)


# Characters card text keeps as they are: punctuation that no Markdown or HTML construct starts.
_CARD_PLAIN = set(",;'\"/?@%$^")


def _one_line(value) -> str:
    """`value` as a string with every character that is not printable (a line break, a tab, a
    control character) written as its `\\xNN` / `\\uNNNN` escape: block markup starts at a
    line's start, so card text from outside stays on its line."""
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in str(value)
    )


def card_text(value) -> str:
    """`value` (text from outside: a GGUF's metadata, a file's name) as Markdown that shows it as
    it is, on one line: every punctuation character that Markdown or HTML could read is
    backslash-escaped, `<` and `&` become entities (a backslash before `<` would still leave
    some renderers a tag).

    >>> print(card_text('<img src=x style="position:fixed"> [Log in](http://a) | # *x*'))
    &lt;img src\\=x style\\="position\\:fixed"\\> \\[Log in\\]\\(http\\://a\\) \\| \\# \\*x\\*
    """
    out = []
    for char in _one_line(value):
        if char == "<":
            out.append("&lt;")
        elif char == "&":
            out.append("&amp;")
        elif char in string.punctuation and char not in _CARD_PLAIN:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def card_code(value) -> str:
    """`value` (text from outside, e.g. a token's string) as one Markdown code span, on one line:
    fenced by more backticks than any run inside it, so nothing in it ends the span.

    >>> card_code("<|im_end|>"), card_code("a`b")
    ('`<|im_end|>`', '`` a`b ``')
    """
    text = _one_line(value)
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {text} " if longest or text.startswith(" ") or text.endswith(" ") else text
    return f"{fence}{padded}{fence}"


def card_table(rows: list[tuple[str, object]]) -> list[str]:
    """A two-column Markdown table of (key, value) rows for a model card."""
    lines = ["| | |", "|---|---|"]
    lines += [f"| {key} | {_fmt(value)} |" for key, value in rows]
    return lines


def model_card(manifest: Manifest) -> str:
    """README.md: the model card, rendered from the manifest only."""
    export = manifest.export
    lines = [f"# {manifest.name}", ""]
    if export.description:
        lines += [export.description, ""]
    lines += card_table(
        [
            ("task", manifest.task),
            ("architecture", manifest.architecture),
            ("parameters", f"{export.parameters or 0:,}"),
            ("precision", manifest.precision),
            (
                "layers × heads × head size",
                f"{manifest.num_layers} × {manifest.num_heads} × {manifest.head_size}",
            ),
            ("vocabulary", manifest.vocab_size),
            ("context length", manifest.context_length),
            ("licence", manifest.license or "not stated"),
        ]
    )
    lines += ["", "## Files", ""]
    lines += [f"- `{role}`: `{graph.file}`" for role, graph in manifest.graphs.items()]
    lines += ["- `tokenizer.json`, `manifest.json` (checksums of every file)"]
    lines += [
        "",
        f"Optimized with onnxruntime's transformer optimizer: {export.optimizer_summary or 'no'}.",
    ]
    if manifest.precision != "fp32":
        lines += [f"Quantization: {export.quantization_report.summary or ''}."]
    parity = manifest.parity
    lines += ["", f"## Parity with {_reference_name(parity)}", ""] + _parity_lines(parity)
    lines += ["", "## Controls", ""]
    if manifest.controls:
        for name, spec in manifest.controls.items():
            values = ", ".join(f"`{v}` → `{t}`" for v, t in spec.values.items())
            about = f" — {spec.description}" if spec.description else ""
            lines += [f"- **{name}** ({spec.kind}){about}: {values}"]
    else:
        lines += ["None: the model takes plain text."]
    return "\n".join(lines + card_closing(manifest))


def card_closing(manifest: Manifest) -> list[str]:
    """The last sections of every model card: evaluation, training data, licence."""
    metrics, data = manifest.metrics, manifest.training_data
    return [
        "",
        "## Evaluation",
        "",
        *(card_table(list(metrics.items())) if metrics else ["No evaluation metrics recorded."]),
        "",
        "## Training data",
        "",
        *(card_table(list(data.items())) if data else ["Not recorded."]),
        "",
        "## Licence",
        "",
        manifest.license or "Not stated.",
        "",
    ]


def _reference_name(parity: Parity) -> str:
    """PyTorch (an export's report), or the fp32 graph (export/requantize.py's)."""
    fp32 = parity.perplexity is not None and parity.perplexity.fp32 is not None
    return "the fp32 graph" if fp32 else "PyTorch"


def _parity_lines(parity: Parity) -> list[str]:
    if not parity:
        return ["Not measured."]
    logits, greedy, ppl = parity.logits, parity.greedy, parity.perplexity
    reference = ppl.fp32 if ppl.fp32 is not None else ppl.pytorch
    label = "perplexity fp32 → this graph" if ppl.fp32 is not None else "perplexity PyTorch → ONNX"
    return [
        f"Reference: {parity.reference}.",
        "",
        *card_table(
            [
                ("max abs Δlogit, prefill", logits.prefill_max_abs_diff),
                ("max abs Δlogit, cached step", logits.cached_step_max_abs_diff),
                ("largest abs logit (scale)", logits.max_abs_logit),
                ("argmax agreement", logits.argmax_agreement),
                (
                    f"greedy: identical sequences of {greedy.new_tokens} tokens",
                    f"{greedy.identical_sequences} / {greedy.prompts}",
                ),
                ("greedy: token agreement", greedy.token_agreement),
                (label, f"{reference:.4g} → {ppl.onnx:.4g}"),
                ("perplexity change", f"{ppl.relative_change_pct:+.3f} %"),
            ]
        ),
    ]
