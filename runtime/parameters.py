"""The decoding parameters, declared once: what each one is, its ranges, and how it travels.

Each `Parameter` gives a `GenerationConfig` field (runtime/config.py) its type, default and
one-line meaning; the range where the runtime's maths is defined (`valid`, which
`GenerationConfig.validate` checks through `Parameter.check`); the narrower range the front
ends allow one request (`allowed`: the app checks it, ui/checks.py); which decoding modes read
it (`modes`: the values of `GenerationConfig.mode`); its field in the OpenAI-compatible request
(`request_field`; `request_fields` and `from_request` map a config to a request and back); and
how the app offers it (`app`: label, row, step, first value; None for a parameter the app does
not show). The app's widgets, its endpoints' decoding parameters and their checks, and the
remote backend's requests (ui/widgets.py, ui/checks.py, ui/remote.py) are derived from it.
`PRESETS` names the settings the app offers as choices (Compare's columns, the arena's players).

Why the valid ranges are what they are: a repetition penalty of 1e-300 is 0 in float32, and
dividing a logit by it gives +inf, which no sampler can draw from; a temperature of 1e300 is +inf
in float32 and turns -inf logits into NaN; `length ** length_penalty` overflows a float for a
penalty of 1e300. So the real-valued settings are bounded where the maths holds for any finite
float32 logits (100 keeps logits * penalty finite for any logit below 3e36; a temperature of
0.001 is already greedy-like, 100 already near-uniform; length ** 10 stays finite for any
context length). Counts need only a lower bound (the maths holds for any int; the memory they
cost is capped by the front ends' sequence cap, runtime/budget.py, and the engine's KV-cache
budget, runtime/engine.py).

One parameter is not a number: `json_schema`, the JSON Schema (as JSON text) the output must
match, which travels as OpenAI's `response_format` object (`response_format_of` and
`schema_of_response_format` map one onto the other; runtime/structured.py compiles and enforces
it, and checks it for `GenerationConfig.validate`).

Not declared here: the settings a model's manifest fixes rather than a request tunes (stop
strings, forced and suppressed tokens; runtime/config.py checks those). This module imports
nothing of ours and runs no model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

MODES = ("greedy", "sample", "beam", "beam_sample")  # the values of `GenerationConfig.mode`
SAMPLING = ("sample", "beam_sample")
BEAMS = ("beam", "beam_sample")
CHAT_MODES = ("greedy", "sample")  # a chat reply is never searched with beams (runtime/chat.py)
GREEDY_TEMPERATURE = 0  # in a request, temperature 0 asks for no sampling (OpenAI's convention)
JSON_OBJECT = '{"type": "object"}'  # the schema of OpenAI's `{"type": "json_object"}`


@dataclass(frozen=True)
class Range:
    """[low, high], or (low, high] with `low_open`; None leaves that end unbounded."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def __contains__(self, value) -> bool:
        above = self.low is None or (self.low < value if self.low_open else self.low <= value)
        return above and (self.high is None or value <= self.high)


@dataclass(frozen=True)
class InApp:
    """How the app offers a parameter (ui/widgets.py draws it, ui/checks.py checks it)."""

    label: str
    row: int  # its row among the decoding settings: 0 beside the mode; PENALTY_ROW in Penalties
    step: float | None = 1  # the slider's step; None: a number field
    value: object = None  # its first value, where not the runtime's default
    name: str = ""  # the endpoints' name for it, where not the field's
    shown_in: tuple[str, ...] = ()  # the modes that show it, where not the modes that read it
    from_model: bool = True  # a model's generation_defaults set it when the visitor picks one
    opens: bool = False  # a first value other than the default opens its row's accordion


PENALTY_ROW = 4  # the app's rows from here on sit in a "Penalties" accordion


@dataclass(frozen=True)
class Parameter:
    name: str  # the GenerationConfig field
    type: type  # int, float, bool or str; object for a fixed set of `choices`
    default: object
    help: str  # one line: what it does and which value is off
    valid: Range = Range()  # where the runtime's maths is defined
    allowed: Range | None = None  # the front ends' narrower range; None: `valid`
    optional: bool = False  # None is a value too
    choices: tuple = ()
    modes: tuple[str, ...] = MODES  # the decoding modes whose output it changes
    request_field: str | None = None  # its field in the OpenAI-compatible request
    app: InApp | None = None  # None: the app does not show it

    @property
    def limits(self) -> Range:
        """The range a front end checks: `allowed`, else `valid`."""
        return self.allowed or self.valid

    def check(self, value) -> None:
        """Raise ValueError unless `value` is one the runtime can decode with (`valid`)."""
        if self.optional and value is None:
            return
        if self.choices:
            ok = value in self.choices
        elif self.type in (bool, str):
            ok = isinstance(value, self.type)
        elif self.type is int:
            ok = is_int(value) and value in self.valid
        else:
            ok = is_finite(value) and value in self.valid
        if not ok:
            raise ValueError(f"`{self.name}` must be {self.rule()}, got {value!r}")

    def rule(self) -> str:
        """What `check` requires, as its message says it.

        >>> NAMED["top_p"].rule(), NAMED["seed"].rule()
        ('in (0, 1]', 'a non-negative int or None')
        """
        if self.choices:
            *first, last = self.choices
            return f"{', '.join(map(repr, first))} or {last!r}"
        if self.type is bool:
            return "a bool"
        if self.type is str:
            return "a string or None" if self.optional else "a string"
        low, high = self.valid.low, self.valid.high
        if self.type is int:
            if self.optional:  # only the seed: a count of draws has no other meaning
                return "a non-negative int or None"
            return f"an int >= {low}" if high is None else f"an int in [{low}, {high}]"
        return f"in {'(' if self.valid.low_open else '['}{low:g}, {high:g}]"


def is_finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# In `GenerationConfig`'s field order; the app offers its parameters in this order too (which
# is the order of its endpoints' decoding parameters, after "mode").
PARAMETERS = (
    Parameter(
        "max_new_tokens",
        int,
        64,
        "tokens to generate at most (excluding the prompt)",
        Range(1),
        Range(1, 256),
        request_field="max_tokens",
        app=InApp("Max new tokens", row=0),
    ),
    Parameter(
        "min_new_tokens",
        int,
        0,
        "EOS is forbidden until this many tokens exist",
        Range(0),
        request_field="min_tokens",
    ),
    Parameter(
        "do_sample",
        bool,
        False,
        "False: greedy (num_beams=1) or beam search; True: sampling",
    ),  # in a request: any temperature but GREEDY_TEMPERATURE; in the app: its mode
    Parameter(
        "temperature",
        float,
        1.0,
        "logits / temperature before filtering; 1.0 = unchanged",
        Range(1e-3, 100.0),
        Range(0, 2.0, low_open=True),
        modes=SAMPLING,
        request_field="temperature",
        app=InApp("Temperature", row=1, step=0.05, value=0.8),
    ),
    Parameter(
        "top_k",
        int,
        0,
        "keep the k most likely tokens (ties at the k-th survive); 0 = off",
        Range(0),
        Range(0, 1000),  # 000's largest k
        modes=SAMPLING,
        request_field="top_k",
        app=InApp("Top-k (0 = off)", row=2),
    ),
    Parameter(
        "top_p",
        float,
        1.0,
        "keep the smallest top set with mass >= top_p; 1.0 = off",
        Range(0, 1, low_open=True),
        modes=SAMPLING,
        request_field="top_p",
        app=InApp("Top-p", row=1, step=0.01, value=0.95),
    ),
    Parameter(
        "min_p",
        float,
        0.0,
        "drop tokens with prob < min_p * max prob; 0.0 = off",
        Range(0, 1),
        modes=SAMPLING,
        request_field="min_p",
        app=InApp("Min-p (0 = off)", row=2, step=0.01),
    ),
    Parameter(
        "typical_p",
        float,
        1.0,
        "locally typical sampling mass; 1.0 = off",
        Range(0, 1, low_open=True),
        modes=SAMPLING,
        request_field="typical_p",
    ),
    Parameter(
        "repetition_penalty",
        float,
        1.0,
        "divide (>0) / multiply (<0) scores of seen tokens; 1.0 = off",
        Range(0.01, 100.0),
        Range(0.5, 3.0),
        request_field="repetition_penalty",
        app=InApp("Repetition penalty (1 = off)", row=PENALTY_ROW, step=0.05),
    ),
    Parameter(
        "no_repeat_ngram_size",
        int,
        0,
        "forbid repeating any n-gram of this size; 0 = off",
        Range(0),
        Range(0, 10),
        request_field="no_repeat_ngram_size",
        app=InApp("No-repeat n-gram size (0 = off)", row=PENALTY_ROW, opens=True),
    ),
    Parameter(
        "num_beams",
        int,
        1,
        "beam width; 1 = no beam search",
        Range(1),
        Range(2, 8),  # the app reads it only when it searches with beams, which 1 is not
        modes=BEAMS,
        request_field="num_beams",
        app=InApp("Beams", row=3, value=5, from_model=False),
    ),
    Parameter(
        "length_penalty",
        float,
        1.0,
        "beam score = sum logprob / length**length_penalty",
        Range(-10.0, 10.0),
        modes=BEAMS,
        request_field="length_penalty",
    ),
    Parameter(
        "early_stopping",
        object,
        False,
        'beam stopping rule: True, False or "never" (as transformers)',
        choices=(True, False, "never"),
        modes=BEAMS,
        request_field="early_stopping",
    ),
    Parameter(
        "num_return_sequences",
        int,
        1,
        "sequences returned per prompt (<= num_beams for beam search)",
        Range(1),
        Range(1, 8),
        request_field="n",
        app=InApp(
            "Samples (or best beams)",
            row=3,
            name="samples",
            shown_in=("sample", "beam"),  # greedy gives one sequence
            from_model=False,
        ),
    ),
    Parameter(
        "seed",
        int,
        None,
        "seeds the sampler; None = fresh entropy each call",
        Range(0),
        Range(0, 2**32 - 1),
        optional=True,
        modes=SAMPLING,
        request_field="seed",
        app=InApp("Seed", row=3, step=None, value=0, shown_in=MODES, from_model=False),
    ),
    Parameter(
        "json_schema",
        str,
        None,
        "a JSON Schema (JSON text) the output must match; None = free text",
        optional=True,
        modes=CHAT_MODES,  # a grammar constrains each row's next token, never a beam's
        request_field="response_format",
    ),  # the Chat tab's "JSON schema" box (ui/chat_tab.py), not a decoding widget
)
NAMED = {parameter.name: parameter for parameter in PARAMETERS}


ADAPTER_PRESET = "top-p 0.95, temperature 0.9, repetition penalty 1.1"
# Named decoding settings the app offers (the Compare tab's columns, the arena's players):
# GenerationConfig fields. "samples" become num_return_sequences where the
# preset can return several sequences (sampling; beam search up to its width).
PRESETS = {
    "greedy": {},
    "greedy, no repeat 2-gram": {"no_repeat_ngram_size": 2},
    "beam 5": {"num_beams": 5},
    "beam 5, no repeat 2-gram": {"num_beams": 5, "no_repeat_ngram_size": 2},
    "sampling, temperature 1.0": {"do_sample": True},
    "sampling, temperature 0.7": {"do_sample": True, "temperature": 0.7},
    "top-k 5": {"do_sample": True, "top_k": 5},
    "top-k 50": {"do_sample": True, "top_k": 50},
    "top-k 1000": {"do_sample": True, "top_k": 1000},
    "top-p 0.95": {"do_sample": True, "top_p": 0.95},
    "top-p 0.8": {"do_sample": True, "top_p": 0.8},
    "min-p 0.1": {"do_sample": True, "min_p": 0.1},
    # The SmolLM2 adapters' own defaults, and greedy with the penalty that keeps them out of
    # loops (docs/APP.md, "Adapter defaults": bench/adapter_penalties.py).
    ADAPTER_PRESET: {
        "do_sample": True,
        "temperature": 0.9,
        "top_p": 0.95,
        "repetition_penalty": 1.1,
    },
    "greedy, repetition penalty 1.2": {"repetition_penalty": 1.2},
}


def request_fields(config, chat: bool = False) -> dict:
    """The OpenAI-compatible request fields that ask for `config` (a GenerationConfig): each
    parameter's `request_field`, with temperature `GREEDY_TEMPERATURE` when it does not sample.
    A chat request carries only the fields a chat reply reads, and refuses beam search.

    >>> from runtime.config import GenerationConfig
    >>> fields = request_fields(GenerationConfig(max_new_tokens=8, num_beams=2))
    >>> fields["max_tokens"], fields["temperature"], fields["num_beams"]
    (8, 0, 2)
    """
    if chat and config.mode not in CHAT_MODES:
        raise ValueError(f"`num_beams` must be 1 for chat, got {config.num_beams}")
    fields = {
        parameter.request_field: getattr(config, parameter.name)
        for parameter in PARAMETERS
        if parameter.request_field and (not chat or set(parameter.modes) & set(CHAT_MODES))
    }
    if not config.do_sample:
        fields[NAMED["temperature"].request_field] = GREEDY_TEMPERATURE
    schema_field = NAMED["json_schema"].request_field
    if schema_field in fields:
        fields[schema_field] = response_format_of(config.json_schema)
    return fields


def from_request(fields: dict) -> dict:
    """GenerationConfig keyword arguments for the decoding fields of a request (those present
    and not None); the inverse of `request_fields`, and what a server's defaults complete.

    >>> from_request({"max_tokens": 8, "temperature": 0, "n": 1, "seed": None})
    {'max_new_tokens': 8, 'do_sample': False, 'num_return_sequences': 1}
    """
    settings = {}
    for parameter in PARAMETERS:
        value = fields.get(parameter.request_field) if parameter.request_field else None
        if value is None:
            continue
        if parameter.name == "temperature":
            settings["do_sample"] = value != GREEDY_TEMPERATURE
            if value == GREEDY_TEMPERATURE:
                continue
        if parameter.name == "json_schema":
            value = schema_of_response_format(value)
        settings[parameter.name] = value
    return settings


def response_format_of(schema: str | None) -> dict | None:
    """OpenAI's `response_format` asking for output that matches `schema` (JSON text; None:
    free text, null in a request).

    >>> response_format_of(JSON_OBJECT)
    {'type': 'json_object'}
    >>> response_format_of('{"type": "integer"}')["json_schema"]
    {'name': 'schema', 'schema': {'type': 'integer'}}
    """
    if schema is None:
        return None
    if schema == JSON_OBJECT:
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "schema", "schema": json.loads(schema)}}


def schema_of_response_format(response_format: dict) -> str | None:
    """The JSON Schema text an OpenAI `response_format` asks for: None for `{"type": "text"}`,
    `JSON_OBJECT` for `{"type": "json_object"}`, the `json_schema.schema` of a
    `{"type": "json_schema", …}` (`{}`, any JSON, when it has none). ValueError for another
    shape (serve/protocol.py checks a request's shape first, with its own message).

    >>> schema_of_response_format({"type": "json_schema", "json_schema": {"name": "n",
    ...     "schema": {"type": "array"}}})
    '{"type": "array"}'
    """
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    spec = response_format.get("json_schema") if kind == "json_schema" else None
    if not isinstance(spec, dict):
        raise ValueError(
            '`response_format` must be {"type": "text"}, {"type": "json_object"} or '
            f'{{"type": "json_schema", "json_schema": {{"name": …, "schema": …}}}}, '
            f"got {response_format!r:.80}"
        )
    return json.dumps(spec.get("schema", {}), ensure_ascii=False)
