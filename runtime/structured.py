"""Structured outputs: text constrained to a JSON Schema, token by token, with llguidance.

A `GenerationConfig.json_schema` (JSON text; OpenAI's `{"type": "json_object"}` is the schema
`{"type": "object"}`, runtime/parameters.py) is checked once when generation starts
(`check_schema`) and compiled once per tokenizer and schema text (`compiled`). A search's
`JsonRows` holds one llguidance matcher per row: `allowed(active)` gives each active row's
allowed next tokens (sorted token ids), `advance(tokens, active)` feeds the chosen ones.
A row whose document is complete is allowed only its ending ids (EOS, or a chat's end of turn);
a row whose document may go on or end (a bare number) gets both.

A schema is a client's input, so no schema can take this process down:
- its shape and cost are checked first, in milliseconds (runtime/schema_limits.py: size, nesting,
  `$ref`s and their depth, finite documents, pattern repetitions);
- then llguidance compiles it in a sandbox process (runtime/schema_sandbox.py, run by
  runtime/template_pool.py, whose slow lane keeps slow schemas from holding up others) under a
  `SCHEMA_SECONDS` deadline and an address-space cap, so that a schema past the limits that
  still crashes llguidance or runs away costs only that process; only a schema that compiled
  there is compiled here, from the grammar the sandbox returned;
- compiled matchers are cached by their size, `CACHE_BYTES` in all: the growth of the sandbox's
  resident memory while it built the same matcher and its first mask (llguidance's lexer grows
  later, while decoding, up to `schema_sandbox.LIMITS` states: about 40 MB a schema);
- every refusal is a `ValueError` naming `json_schema`: a problem found by the limits, one that
  llguidance names, a compile past the deadline or a sandbox that died; a schema llguidance
  cannot follow while decoding (its limits) fails that request with one, too.

Documents are compact but readable, as Python's `json.dumps` writes them: `", "` between items,
`": "` after keys, no other whitespace. Free whitespace would let a weak model pad a document
with newlines until `max_new_tokens`; this way every token of the document carries content.

Not covered here: applying the allowed tokens to scores (runtime/sampling.py: `Sampler` and
`greedy` take them, so no masked copy of a row is made) and where a search calls these
(runtime/search.py, `TokenSearch.pick`). This module never reads logits.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict

import llguidance
import llguidance.numpy as llg_numpy
import numpy as np
from tokenizers import Tokenizer

from . import template_pool
from .schema_limits import check_limits
from .schema_sandbox import JSON_OPTIONS, LIMITS, MAX_MEMORY

__all__ = ["CACHE_BYTES", "JSON_OPTIONS", "SCHEMA_SECONDS", "JsonRows", "check_lark"]
__all__ += ["check_schema", "compiled", "grammar_of", "token_table"]

SCHEMA_SECONDS = 5.0  # longest compile of one schema, in the sandbox (killed then)
CACHE_BYTES = 256 * 2**20  # compiled matchers kept per process, by their measured sizes
GRAMMAR_BYTES = 32 * 2**20  # grammars kept per process (schema and grammar text)
TOKENIZERS_CACHED = 8  # llguidance token tables kept per process (~10 MB each for V = 49,152)


class ByteCache:
    """A least-recently-used map bounded by the sizes its entries are charged (thread-safe);
    an entry larger than the whole budget is not kept."""

    def __init__(self, budget: int):
        self.budget, self.used = budget, 0
        self.entries: OrderedDict = OrderedDict()  # key -> (value, size), oldest first
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            if key not in self.entries:
                return None
            self.entries.move_to_end(key)
            return self.entries[key][0]

    def put(self, key, value, size: int) -> None:
        with self.lock:
            if key in self.entries or size > self.budget:
                return
            self.entries[key] = (value, size)
            self.used += size
            while self.used > self.budget:
                _, (_, dropped) = self.entries.popitem(last=False)
                self.used -= dropped


_grammars = ByteCache(GRAMMAR_BYTES)  # (kind, schema or Lark text) -> grammar
_matchers = ByteCache(CACHE_BYTES)  # (tokenizer's key, kind, text) -> pristine matcher
# What a constraint's text is, and the field a refusal of it names.
KINDS = {"schema": "json_schema", "lark": "tool_calls"}


def grammar_of(schema: str) -> str:
    """The llguidance grammar of a JSON Schema's text; ValueError naming what is wrong.

    >>> try:
    ...     grammar_of('{"type": "nothing"}')
    ... except ValueError as error:
    ...     print(str(error)[:69])
    `json_schema` must be a JSON Schema llguidance supports (Invalid type
    """
    return _grammar(schema, "schema")


def _grammar(text: str, kind: str) -> str:
    grammar = _grammars.get((kind, text))
    if grammar is None:
        if kind == "schema":
            check_limits(text)
        grammar = _sandboxed(text, kind=kind)["grammar"]
        _grammars.put((kind, text), grammar, len(text) + len(grammar))
    return grammar


def check_schema(schema: str) -> None:
    """Raise ValueError unless `schema` (JSON text) keeps runtime/schema_limits.py's limits and
    llguidance compiles it (in the sandbox)."""
    grammar_of(schema)


def check_lark(lark: str) -> None:
    """Raise ValueError (naming `tool_calls`) unless llguidance compiles the Lark grammar
    `lark` (in the sandbox). Its `%json` schemas must have passed `check_schema` first:
    runtime/tools.py builds such grammars around one."""
    _grammar(lark, "lark")


def _refusal(rule: str, text: str, kind: str = "schema") -> ValueError:
    shown = text if len(text) <= 60 else f"{text[:60]}… ({len(text)} characters)"
    what = "a JSON Schema" if kind == "schema" else "a grammar"
    return ValueError(f"`{KINDS[kind]}` must be {what} {rule}, got {shown!r}")


def _sandboxed(text: str, tokenizer: Tokenizer | None = None, kind: str = "schema") -> dict:
    """The sandbox's compile of `text`, a JSON Schema or (`kind` "lark") a Lark grammar
    ({"grammar", "bytes"}; over `tokenizer`'s tokens when given); ValueError when llguidance
    refuses it, runs past the deadline or dies on it."""
    request = {kind: text, "seconds": SCHEMA_SECONDS}
    if tokenizer is not None:
        request["tokenizer"] = _tokenizer_key(tokenizer)
    workers = template_pool.pool(template_pool.SCHEMA_SANDBOX)
    try:
        reply = workers.ask(request, SCHEMA_SECONDS)
        if reply.get("unknown_tokenizer"):  # a worker that has not seen it: once more, with it
            request["tokenizer_json"] = tokenizer.to_str()
            reply = workers.ask(request, SCHEMA_SECONDS)
    except TimeoutError:
        raise _refusal(f"llguidance compiles within {SCHEMA_SECONDS:g} s", text, kind) from None
    except template_pool.WorkerLost as error:
        rule = (
            f"llguidance compiles without crashing or passing "
            f"{MAX_MEMORY // 2**20} MiB (its sandbox process failed: {error})"
        )
        raise _refusal(rule, text, kind) from None
    if "error" in reply:
        raise _refusal(f"llguidance supports ({reply['error']})", text, kind)
    return reply


@functools.lru_cache(maxsize=TOKENIZERS_CACHED)
def _tokenizer_key(tokenizer: Tokenizer) -> str:
    """A tokenizer's name for the sandbox: the SHA-256 of its JSON."""
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=TOKENIZERS_CACHED)
def token_table(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of a tokenizer (every token's bytes, in a trie), built once."""
    return llguidance.LLTokenizer(tokenizer.to_str())


def compiled(tokenizer: Tokenizer, text: str, kind: str = "schema") -> llguidance.LLMatcher:
    """A fresh matcher of `text` (a JSON Schema, or a Lark grammar for `kind` "lark") over
    `tokenizer`'s tokens, never advanced: rows take copies (`deep_copy` shares the compiled
    lexer and grammar). Compiled in the sandbox first, which measures its size; then here, from
    the sandbox's grammar."""
    key = (_tokenizer_key(tokenizer), kind, text)
    matcher = _matchers.get(key)
    if matcher is None:
        if kind == "schema":
            check_limits(text)
        reply = _sandboxed(text, tokenizer, kind)
        limits = llguidance.LLParserLimits(**LIMITS)
        matcher = llguidance.LLMatcher(
            token_table(tokenizer), reply["grammar"], log_level=0, limits=limits
        )
        if matcher.is_error():
            raise _refusal(f"llguidance supports ({_first_line(matcher)})", text, kind)
        _matchers.put(key, matcher, reply["bytes"])
    return matcher


class JsonRows:
    """The JSON documents of N rows (or, for `kind` "lark", replies to a grammar with JSON
    inside: runtime/tools.py's tool calls), each row's matcher advanced by the tokens it chose."""

    def __init__(
        self, text: str, tokenizer: Tokenizer, ends: tuple[int, ...], rows: int, kind="schema"
    ):
        if not ends:
            raise ValueError(
                f"`{KINDS[kind]}` must be None for a model without an EOS token (a finished "
                "reply must end its row), got one"
            )
        self.field = KINDS[kind]
        pristine = compiled(tokenizer, text, kind)
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
                # The rows choose among allowed tokens only: llguidance stopped (its limits).
                raise ValueError(
                    f"`{self.field}` must be one llguidance can follow to the end of a "
                    f"reply, got one it stopped on at row {row}: {_first_line(matcher)}"
                )


def _first_line(matcher: llguidance.LLMatcher) -> str:
    """llguidance's error, its first line only (the rest dumps its parser's state)."""
    return matcher.get_error().strip().splitlines()[0] if matcher.get_error() else "no reason"
