"""Structured outputs: text constrained to a JSON Schema, token by token, with llguidance.

A `GenerationConfig.json_schema` (JSON text; OpenAI's `{"type": "json_object"}` is the schema
`{"type": "object"}`, runtime/parameters.py) is checked once when generation starts
(`check_schema`: a ValueError naming the problem for invalid JSON, a bad schema or a keyword
llguidance does not implement) and compiled once per tokenizer and schema text (`compiled`,
bounded caches: a tokenizer's token table takes ~1 s to build, a schema ~1 ms). A search's
`JsonRows` holds one llguidance matcher per row: `allowed(active)` gives each active row's
allowed next tokens (sorted token ids), `advance(tokens, active)` feeds the chosen ones.
A row whose document is complete is allowed only its ending ids (EOS, or a chat's end of turn);
a row whose document may go on or end (a bare number) gets both.

Documents are compact but readable, as Python's `json.dumps` writes them: `", "` between items,
`": "` after keys, no other whitespace. Free whitespace would let a weak model pad a document
with newlines until `max_new_tokens`; this way every token of the document carries content.

Not covered here: applying the allowed tokens to scores (runtime/sampling.py: `Sampler` and
`greedy` take them, so no masked copy of a row is made) and where a search calls these
(runtime/search.py, `TokenSearch.pick`). This module never reads logits.
"""

from __future__ import annotations

import functools
import json

import llguidance
import llguidance.numpy as llg_numpy
import numpy as np
from tokenizers import Tokenizer

# llguidance's JSON compiler options (docs: llguidance's json_schema.md): see the docstring.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
SCHEMAS_CACHED = 64  # compiled schemas kept per process (each a few hundred kB at most)
TOKENIZERS_CACHED = 8  # llguidance token tables kept per process (~10 MB each for V = 49,152)


@functools.lru_cache(maxsize=SCHEMAS_CACHED)
def grammar_of(schema: str) -> str:
    """The llguidance grammar of a JSON Schema's text; ValueError naming what is wrong.

    >>> try:
    ...     grammar_of('{"type": "nothing"}')
    ... except ValueError as error:
    ...     print(str(error)[:69])
    `json_schema` must be a JSON Schema llguidance supports (Invalid type
    """
    try:
        parsed = json.loads(schema)
    except json.JSONDecodeError as error:
        raise _refusal(f"valid JSON ({error})", schema) from None
    if not isinstance(parsed, (dict, bool)):
        raise _refusal("a JSON object (or true / false)", schema)
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    except ValueError as error:
        raise _refusal(f"a JSON Schema llguidance supports ({error})", schema) from None
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem:
        raise _refusal(f"a JSON Schema llguidance supports ({problem})", schema)
    return grammar


def check_schema(schema: str) -> None:
    """Raise ValueError unless llguidance can compile `schema` (JSON text)."""
    grammar_of(schema)


def _refusal(rule: str, schema: str) -> ValueError:
    shown = schema if len(schema) <= 60 else f"{schema[:60]}… ({len(schema)} characters)"
    return ValueError(f"`json_schema` must be {rule}, got {shown!r}")


@functools.lru_cache(maxsize=TOKENIZERS_CACHED)
def token_table(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of a tokenizer (every token's bytes, in a trie), built once."""
    return llguidance.LLTokenizer(tokenizer.to_str())


@functools.lru_cache(maxsize=SCHEMAS_CACHED)
def compiled(tokenizer: Tokenizer, schema: str) -> llguidance.LLMatcher:
    """A fresh matcher of `schema` over `tokenizer`'s tokens, never advanced: rows take copies
    (`deep_copy` shares the compiled lexer and grammar)."""
    matcher = llguidance.LLMatcher(token_table(tokenizer), grammar_of(schema), log_level=0)
    if matcher.is_error():
        raise _refusal(f"a JSON Schema llguidance supports ({matcher.get_error()})", schema)
    return matcher


class JsonRows:
    """The JSON documents of N rows, each row's matcher advanced by the tokens it chose."""

    def __init__(self, schema: str, tokenizer: Tokenizer, ends: tuple[int, ...], rows: int):
        if not ends:
            raise ValueError(
                "`json_schema` must be None for a model without an EOS token (a finished "
                "document must end its row), got a schema"
            )
        pristine = compiled(tokenizer, schema)
        self.matchers = [pristine.deep_copy() for _ in range(rows)]
        self.ends = np.unique(np.asarray(ends, dtype=np.int64))  # (E,) sorted
        table = token_table(tokenizer)
        # llguidance allows its own EOS once a document may end; this search's ends replace it.
        self._own_end = table.eos_token
        self._bitmask = llg_numpy.allocate_token_bitmask(rows, table.vocab_size)  # (N, V/32)

    def allowed(self, active: np.ndarray) -> list[np.ndarray | None]:
        """Per row, the sorted token ids it may choose next (int64); None for inactive rows."""
        out: list[np.ndarray | None] = []
        for row, matcher in enumerate(self.matchers):
            if not active[row]:
                out.append(None)
                continue
            llg_numpy.fill_next_token_bitmask(matcher, self._bitmask, row)
            bits = np.unpackbits(self._bitmask[row].view(np.uint8), bitorder="little")  # (V,)
            if self._own_end not in self.ends:
                bits[self._own_end] = 0
            ids = np.flatnonzero(bits.view(bool))  # a bool view: 4x faster than on uint8
            if matcher.is_accepting():
                ids = np.union1d(ids, self.ends)
            out.append(ids)
        return out

    def advance(self, tokens: np.ndarray, active: np.ndarray) -> None:
        """Feed each active row its chosen token (an end token ends the row: nothing to feed)."""
        for row, matcher in enumerate(self.matchers):
            token = int(tokens[row])
            if not active[row] or token in self.ends:
                continue
            if not matcher.consume_token(token):
                raise RuntimeError(
                    f"row {row} chose token {token}, which its JSON Schema does not allow: "
                    f"{matcher.get_error()}"
                )
